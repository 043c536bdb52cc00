"""The rules of gpuctl, once: pure functions over Kubernetes and Kueue objects (plain dicts), no I/O.

Every consumer (CLI, REST API, metrics, reconciler, admission webhook) asks these modules and
nothing else what a pod's GPUs are, what state a Workload is in, what a pool is, what a ClusterQueue
means and what a job's status is:

- `objects`   metadata and condition access, "was this made by gpuctl"
- `gpus`      a pod's (and a Workload's) effective GPU request: requests or limits, init containers,
              sidecars
- `workload`  a Kueue Workload's state in Kueue's own order, its pool, priority, reservations,
              queue positions
- `pools`     pool membership of nodes, node readiness, "is this flavor a gpuctl pool", capacity
- `teams`     ClusterQueue and Cohort decoding (a team's quota and usage) and the desired Cohort
- `status`    a gpuctl job's status word from its controller, Workload and pods
- `dryrun`    the one dry-run type

Imports are kept cheap (no pydantic, no HTTP client): the CLI loads these on every command.
"""
