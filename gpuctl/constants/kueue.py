"""The Kueue objects gpuctl owns: names, the team budget's resources, topology and pool taints."""

from __future__ import annotations

from typing import Final

from gpuctl.constants.labels import CPU_RESOURCE, GPU_RESOURCE, MEMORY_RESOURCE, Labels

# Kueue objects gpuctl owns.
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta2"
KUEUE_API_VERSION: Final = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
COHORT_NAME: Final = "gpuctl"
LOCAL_QUEUE_NAME: Final = "default"
# The LimitRange gpuctl keeps in each team namespace (defaults from the quota document's limitRange).
LIMIT_RANGE_NAME: Final = "gpuctl-defaults"
BUDGET_FLAVOR: Final = "gpuctl-budget"
# Virtual resources that Kueue derives from every pod's requests (resources.transformations in
# manifests/kueue/configuration.yaml); a team's quota is its nominal quota of these.
# quota-gpu-840ths counts GPU equivalents in 1/GPU_UNITS (840ths of a) GPU, so that slices of GPUs (MIG
# instances, time-slicing replicas) are charged exactly (gpuctl.domain.sharing, docs/sharing.md): a
# whole GPU is 840, a 1g.10gb MIG instance 120. Before shared GPUs (docs/sharing.md) the budget was whole GPUs
# under LEGACY_QUOTA_GPU; a ClusterQueue that still has it is read as such and rewritten on the next apply.
QUOTA_GPU: Final = "runwhere.ai/quota-gpu-840ths"
LEGACY_QUOTA_GPU: Final = "runwhere.ai/quota-gpu"
QUOTA_CPU: Final = "runwhere.ai/quota-cpu"
QUOTA_MEMORY: Final = "runwhere.ai/quota-memory"
QUOTA_RESOURCES: Final = {GPU_RESOURCE: QUOTA_GPU, CPU_RESOURCE: QUOTA_CPU, MEMORY_RESOURCE: QUOTA_MEMORY}
# quota-cpu counts milli-CPUs (Kueue rounds every resource but `cpu` up to whole units, so 500m
# would cost a whole CPU of budget otherwise): the transformation multiplies cpu by 1000.
QUOTA_CPU_PER_CORE: Final = 1000
# Nominal quota used where a quota leaves a resource unlimited.
UNLIMITED: Final = {QUOTA_GPU: "840M", QUOTA_CPU: "1T", QUOTA_MEMORY: "1Ei"}
# Nominal quota of every team in every pool flavor: a pool's capacity is enforced per node by
# Topology Aware Scheduling, not by quota, so a team's job always fits its own quota there and the
# team budget (runwhere.ai/quota-*) alone decides who is within quota (docs/queueing.md). Small
# enough that Kueue's int64 sums over many teams cannot overflow.
POOL_NOMINAL: Final = {CPU_RESOURCE: "100k", MEMORY_RESOURCE: "1Pi", GPU_RESOURCE: "100k"}
# Topology of every pool flavor: one level, the node, so Kueue admits a pod only where one node
# can hold it.
TOPOLOGY_NAME: Final = "gpuctl-nodes"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
# Pod-template annotation asking Kueue for a topology assignment (any node per pod).
TAS_UNCONSTRAINED: Final = "kueue.x-k8s.io/podset-unconstrained-topology"
# Every annotation by which a pod set asks Kueue for Topology Aware Scheduling (Kueue's
# IsExplicitTAS in pkg/util/tas plus the unconstrained one). A pod set with none of them is never
# admitted on gpuctl's TAS-only pool flavors, so the topology MutatingAdmissionPolicy adds
# TAS_UNCONSTRAINED to raw work in team namespaces that carries none (admission/policies/topology.py).
TAS_REQUIRED: Final = "kueue.x-k8s.io/podset-required-topology"
TAS_PREFERRED: Final = "kueue.x-k8s.io/podset-preferred-topology"
TAS_REQUEST_KEYS: Final = (
    TAS_REQUIRED,
    TAS_PREFERRED,
    TAS_UNCONSTRAINED,
    "kueue.x-k8s.io/podset-slice-required-topology",
    "kueue.x-k8s.io/podset-slice-required-topology-constraints",
)

# Node taints that say "not now" (Kubernetes' node lifecycle and conditions, cloud initialisation,
# autoscalers draining a node): a pool never tolerates them, whatever its nodes carry. Any other
# NoSchedule/NoExecute taint on a pool's nodes (nvidia.com/gpu=present from the GPU operator, a
# cloud's GPU taint) is tolerated by the pool's flavor (gpuctl.domain.pools.pool_tolerations).
TRANSIENT_TAINT_PREFIXES: Final = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
TRANSIENT_TAINT_KEYS: Final = frozenset(
    {
        "ToBeDeletedByClusterAutoscaler",
        "DeletionCandidateOfClusterAutoscaler",
        "karpenter.sh/disrupted",
        "karpenter.sh/disruption",
        # SET_ASIDE_TAINT_KEYS (docs/distributed.md, "No starvation"): never tolerated by a pool's flavor
        "runwhere.ai/set-aside",
        "runwhere.ai/set-aside-job",
    }
)
# The taint gpuctl puts on every pool node (docs/adoption.md, the pool taint):
# `runwhere.ai/pool=<pool>:NoSchedule`. The pool's ResourceFlavor tolerates it (pool_tolerations), so Kueue
# adds the toleration to the pods it admits there; everything else stays off pool nodes (admission/ keeps
# anyone else from tolerating it, naming a pool node in nodeName, or selecting a pool with GPUs outside a team
# namespace). NoSchedule, not NoExecute: tainting a live pool must not evict what already runs (gpuctl serve
# reports those pods).
POOL_TAINT_KEY: Final = Labels.POOL
POOL_TAINT_EFFECT: Final = "NoSchedule"
# Kueue accepts at most this many tolerations on a ResourceFlavor.
MAX_FLAVOR_TOLERATIONS: Final = 8
