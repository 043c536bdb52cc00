"""The team namespaces' webhook rules, one file per group, named after it (Kueue's pkg/webhooks style):
each validator takes the reduced object (admission.work.Work) and what it needs, and returns the
Violations it finds (an empty list when none). admission.rules.review runs them in a fixed order.

| file | rules |
|---|---|
| `queue.py` | `gpu-queue`, `gpu-topology` |
| `placement.py` | `pool-exists`, `pool-placement`, `gpu-fits-node` |
| `labels.py` | `unknown-key`, `job-type`, `priority` |
| `host_paths.py` | `host-path` |
| `priority_class.py` | `priority-class` |
| `device_access.py` | `device-access` |
| `gpu_resources.py` | `gpu-resource` |
| `mig_profiles.py` | `mig-profile` |
| `owner_claim.py` | `owner-claim` |
| `kueue_gate.py` | `kueue-gate` (UPDATE) |
| `orphan_delete.py` | `orphan-delete` (DELETE) |
| `node_pool.py` | `node-pool`, and `unknown-key` on Nodes |
| `gangs.py` | `gang-fits` |
| `set_aside.py` | `set-aside-toleration` |
"""
