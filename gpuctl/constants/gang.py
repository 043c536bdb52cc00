"""Multi-node training: gangs, their topology and set-aside nodes (docs/distributed.md)."""

from __future__ import annotations

from typing import Final

from gpuctl.constants.kueue import HOSTNAME_LABEL, TAS_PREFERRED

# -------------------------------------------------------------------------------- gang (docs/distributed.md)
# Multi-node training (docs/distributed.md; gpuctl.builders.gang, gpuctl.domain.gang). A `kind: training`
# with resources.nodes: N > 1 is an Indexed Job of N pods (one Kueue Workload counting N: quota for all or
# none), a headless Service svc-<job> and the launcher environment below in every container.
# The Job controller's annotation (and env JOB_COMPLETION_INDEX) holding a pod's index: its rank.
JOB_COMPLETION_INDEX_ANNOTATION: Final = "batch.kubernetes.io/job-completion-index"
# torchrun's default rendezvous port (Kubeflow Trainer's torch plugin uses it too).
GANG_MASTER_PORT: Final = 29500
GANG_PORT_NAME: Final = "rendezvous"
# The launcher environment, name -> meaning (docs/distributed.md prints this table; a user's own `env`
# entry of the same name wins). torchrun reads the PET_* form of its flags; DeepSpeed, Lightning and
# accelerate the plain ones.
GANG_ENV: Final = {
    "PET_NNODES": "number of pods (nodes), N",
    "PET_NPROC_PER_NODE": "processes per pod: resources.gpu (1 for a CPU-only job)",
    "PET_NODE_RANK": "this pod's rank, 0..N-1 (its completion index)",
    "PET_MASTER_ADDR": "rank 0's host name, <job>-0.svc-<job>",
    "PET_MASTER_PORT": f"rank 0's rendezvous port, {GANG_MASTER_PORT}",
    "MASTER_ADDR": "same as PET_MASTER_ADDR",
    "MASTER_PORT": "same as PET_MASTER_PORT",
    "WORLD_SIZE": "number of pods, N (torchrun sets its workers' own WORLD_SIZE = N x nproc)",
    "NODE_RANK": "same as PET_NODE_RANK",
}
# Variables whose value is the pod's rank (a fieldRef on JOB_COMPLETION_INDEX_ANNOTATION).
GANG_RANK_ENV: Final = ("PET_NODE_RANK", "NODE_RANK")
# A pool's network topology (kind: pool `topology`): at most this many node-label levels above the node
# (Kueue's Topology takes 16 levels, the node's hostname being the last one).
MAX_TOPOLOGY_LEVELS: Final = 15
# On a pool's ResourceFlavor: its topology levels above the node, comma-separated, outermost first (the
# flavor's topologyName names the Kueue Topology holding them plus kubernetes.io/hostname).
POOL_TOPOLOGY_ANNOTATION: Final = "runwhere.ai/topology"
# The Kueue Topology of the pools whose levels are `levels` (none: TOPOLOGY_NAME): TOPOLOGY_PREFIX + a
# hash of the levels, so pools with the same levels share one and a Topology (immutable) never changes.
TOPOLOGY_PREFIX: Final = "gpuctl-topology-"
# No starvation (docs/distributed.md, "No starvation"): `gpuctl serve --defrag POOLS` sets whole nodes aside
# for the oldest waiting multi-node job of each pool, with two NoSchedule taints naming that one gang:
# runwhere.ai/set-aside=<its namespace> and runwhere.ai/set-aside-job=<its Job's name> (one gang's nodes,
# no other gang's; taint values are label values, so the two names go in two taints, never
# truncated). Kueue places nothing new there but that gang (only its pods tolerate both,
# gpuctl.domain.gang.set_aside_tolerations); what runs there keeps running (the Kueue configuration turns
# TASReplaceNodeOnNodeTaints off). The node annotations name the gang and when its set-aside began; serve
# removes all of it once the gang holds quota, stops waiting, or its time is up.
SET_ASIDE_TAINT_KEY: Final = "runwhere.ai/set-aside"
SET_ASIDE_JOB_TAINT_KEY: Final = "runwhere.ai/set-aside-job"
SET_ASIDE_TAINT_KEYS: Final = (SET_ASIDE_TAINT_KEY, SET_ASIDE_JOB_TAINT_KEY)
SET_ASIDE_FOR_ANNOTATION: Final = "runwhere.ai/set-aside-for"
SET_ASIDE_SINCE_ANNOTATION: Final = "runwhere.ai/set-aside-since"
# A gang must have waited this long (Kueue had its cycles) before nodes are set aside for it.
SET_ASIDE_SETTLE_SECONDS: Final = 30.0
# A set-aside ends, whatever its gang does, once its nodes have been free of other GPU work this
# long without Kueue admitting the gang (then something else than those nodes keeps it waiting), or once it
# has lasted SET_ASIDE_MAX_SECONDS (the work on its nodes outlasts any fair hold). Its gang then gets no
# set-aside for SET_ASIDE_COOLDOWN_SECONDS (on its Workload: runwhere.ai/set-aside-ended), so the next
# waiting gang and other work get their turn.
SET_ASIDE_IDLE_SECONDS: Final = 120.0
SET_ASIDE_MAX_SECONDS: Final = 7200.0
SET_ASIDE_COOLDOWN_SECONDS: Final = 600.0
SET_ASIDE_ENDED_ANNOTATION: Final = "runwhere.ai/set-aside-ended"
# The Events on a gang's Workload when nodes are set aside for it and when that ends (the audit trail
# records both), and on a Workload requeued because Kueue admitted it onto a node just set aside for a gang
# (gpuctl.domain.setaside.stranded) or because its pods sat on another gang's nodes (squatters).
SET_ASIDE_EVENT_REASON: Final = "GpuctlSetAside"
SET_ASIDE_ENDED_REASON: Final = "GpuctlSetAsideEnded"
SET_ASIDE_REQUEUE_REASON: Final = "GpuctlSetAsideRequeue"
# A bound gpuctl keeps (docs/queueing.md): the start bound a waiting job was first shown,
# RFC 3339, on its Workload; the first shown stays (the promise), `describe job` shows it beside the current
# estimate. From SET_ASIDE_BOUND_LEAD_SECONDS before it, serve sets a node aside for a one-pod Job so shown
# (docs/queueing.md, "A bound gpuctl keeps"): the set-aside of gangs, for any Job.
STARTS_BY_ANNOTATION: Final = "runwhere.ai/starts-by"
SET_ASIDE_BOUND_LEAD_SECONDS: Final = 1800.0
# A gang's placement without a required level: preferred one node, so Kueue's Topology Aware Scheduling tries
# one node, then one domain of each level up (rack, block), then spreads the pods over the pool. Every pool's
# Topology has kubernetes.io/hostname as its lowest level, so this is valid in any pool without knowing its
# levels: gpuctl's builder and the topology MutatingAdmissionPolicy (a raw Indexed Job) write the same.
GANG_PLACEMENT: Final = {TAS_PREFERRED: HOSTNAME_LABEL}
