"""Every admission rule by the name denials, warnings and metrics show: the team namespaces' (`POST
/validate`) and the isolation rules outside them (`POST /isolation`). admission/validators/ has one file per
group of them, named after it; admission.registry says what each is (check, CEL, fix, one line)."""

from __future__ import annotations

from typing import Final

GPU_QUEUE: Final = "gpu-queue"
GPU_TOPOLOGY: Final = "gpu-topology"
POOL_EXISTS: Final = "pool-exists"
POOL_PLACEMENT: Final = "pool-placement"
PRIORITY: Final = "priority"
JOB_TYPE: Final = "job-type"
UNKNOWN_KEY: Final = "unknown-key"
GPU_FITS_NODE: Final = "gpu-fits-node"
HOST_PATH: Final = "host-path"
NODE_POOL: Final = "node-pool"
# What a tenant may not do in its own team namespace (docs/security.md, 3).
PRIORITY_CLASS_RULE: Final = "priority-class"
DEVICE_ACCESS: Final = "device-access"
OWNER_CLAIM: Final = "owner-claim"
ORPHAN_DELETE: Final = "orphan-delete"
KUEUE_GATE: Final = "kueue-gate"
# GPU-like resources Kueue does not charge (docs/sharing.md).
GPU_RESOURCE_RULE: Final = "gpu-resource"
# A MIG profile the pool's GPUs do not have (docs/sharing.md).
MIG_PROFILE: Final = "mig-profile"
# Multi-node jobs (docs/distributed.md): a gang that can never fit; a toleration of the set-aside taint
# outside a gang.
GANG_FITS: Final = "gang-fits"
SET_ASIDE_TOLERATION: Final = "set-aside-toleration"
# Nothing holds a GPU or another accelerator Kueue does not charge, longer than a documented bound
# (docs/security.md, "Nothing holds an accelerator Kueue does not charge").
EXTENDED_RESOURCE: Final = "extended-resource"
TERMINATION_GRACE: Final = "termination-grace"
DELETE_GRACE: Final = "delete-grace"
# Autoscaled services (docs/serving.md): an HPA may scale only GPU work Kueue queues (replicas past the
# team's quota then wait at the gate instead of running unaccounted).
HPA_QUEUED: Final = "hpa-queued"
# Outside team namespaces (docs/security.md, 2): pool nodes run only Kueue-admitted work.
POOL_TOLERATION: Final = "pool-toleration"
POOL_SELECTION: Final = "pool-selection"
POOL_NODE_NAME: Final = "pool-node-name"
# Rules whose verdict depends on what the cache has seen: a denial by these alone may be watch lag (a pool
# created a millisecond before its nodes are labelled), so the server re-checks it once the cache moves.
CACHE_RULES: Final = frozenset(
    {
        GPU_QUEUE,
        GPU_TOPOLOGY,
        POOL_EXISTS,
        POOL_PLACEMENT,
        GPU_FITS_NODE,
        NODE_POOL,
        MIG_PROFILE,
        GANG_FITS,
        HPA_QUEUED,
    }
)
