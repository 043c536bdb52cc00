"""Every label key, object name and magic string gpuctl uses, in one place.

Other modules import from here instead of spelling strings: a renamed label is a one-line change,
and `grep` finds every user of a key.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Kind(StrEnum):
    """The YAML `kind:` values gpuctl accepts (`resource` is the earlier spelling of `pool`)."""

    TRAINING = "training"
    INFERENCE = "inference"
    NOTEBOOK = "notebook"
    COMPUTE = "compute"
    POOL = "pool"
    QUOTA = "quota"


JOB_KINDS: Final = (Kind.TRAINING, Kind.INFERENCE, Kind.NOTEBOOK, Kind.COMPUTE)
KIND_ALIASES: Final = {"resource": Kind.POOL}

# Kubernetes object kind that carries each job kind.
KIND_TO_RESOURCE: Final = {
    Kind.TRAINING: "Job",
    Kind.INFERENCE: "Deployment",
    Kind.COMPUTE: "Deployment",
    Kind.NOTEBOOK: "StatefulSet",
}
# Kinds that also get a NodePort Service named svc-<name>.
SERVICE_KINDS: Final = (Kind.INFERENCE, Kind.COMPUTE, Kind.NOTEBOOK)


class Priority(StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


DEFAULT_PRIORITY: Final = Priority.MEDIUM
# Kueue WorkloadPriorityClass name and value per gpuctl priority. Values match the earlier gpuctl's
# PriorityClasses so that dashboards and habits carry over.
PRIORITY_CLASS: Final = {p: f"gpuctl-{p.value}" for p in Priority}
PRIORITY_VALUE: Final = {Priority.HIGH: 1_000_000, Priority.MEDIUM: 500_000, Priority.LOW: 100}


class Tier(StrEnum):
    """The two halves of an autoscaled service (docs/serving.md): the floor (minReplicas, a Deployment of
    its own) and the burst above it (the Deployment the HorizontalPodAutoscaler scales)."""

    FLOOR = "floor"
    BURST = "burst"


# The WorkloadPriorityClasses of an autoscaled service's pods. Kueue's withinClusterQueue: LowerPriority
# never lets a team's own work preempt the floor (above high), and its candidate order (lower priority
# first, queues/objects.cluster_queue) makes the burst the first replica preempted or reclaimed (below low).
# Another team's reclaim takes from a team only while it is over its quota, so a floor inside the quota
# stays.
SERVING_CLASS: Final = {Tier.FLOOR: "gpuctl-serving-floor", Tier.BURST: "gpuctl-serving-burst"}
SERVING_VALUE: Final = {Tier.FLOOR: 2_000_000, Tier.BURST: 10}
# The burst Deployment of service <name> is <name>-burst; the HPA that scales it is <name>.
BURST_SUFFIX: Final = "-burst"
# The external metrics (manifests/prometheus/adapter-rules.yaml) per `service.autoscaling.metric`, and the
# label keys of the HPA's metric selector that name the service and the floor's load.
AUTOSCALING_METRICS: Final = {"concurrency": "gpuctl_burst_concurrency", "rps": "gpuctl_burst_rps"}
METRIC_JOB_LABEL: Final = "gpuctl_job"
METRIC_FLOOR_LABEL: Final = "floor"

# Work that borrows from other teams may preempt their borrowed work only up to this priority
# (Kueue's borrowWithinCohort.maxPriorityThreshold): medium and low can be taken back, high never.
BORROW_PREEMPT_THRESHOLD: Final = PRIORITY_VALUE[Priority.MEDIUM]


class Labels:
    """Label and annotation keys. `runwhere.ai/*` keys are gpuctl's; the others belong to Kubernetes
    or Kueue and are listed so no module spells them by hand."""

    PREFIX: Final = "runwhere.ai/"
    JOB_TYPE: Final = "runwhere.ai/job-type"
    PRIORITY: Final = "runwhere.ai/priority"
    POOL: Final = "runwhere.ai/pool"
    NAMESPACE: Final = "runwhere.ai/namespace"
    GPU_TYPE: Final = "runwhere.ai/gpu-type"
    # Older spelling of the GPU type key, still found on nodes; read, never written.
    GPU_TYPE_LEGACY: Final = "runwhere.ai/gpuType"
    QUOTA: Final = "runwhere.ai/quota"
    PORT: Final = "runwhere.ai/port"
    DESCRIPTION: Final = "runwhere.ai/description"  # annotation
    # Per-pool guarantees of a quota as written (JSON), kept on the team ClusterQueue for display.
    POOL_GUARANTEES: Final = "runwhere.ai/pool-guarantees"  # annotation
    TEAM: Final = "runwhere.ai/team"
    # floor | burst on an autoscaled service's Deployments and pods (Tier).
    SERVING_TIER: Final = "runwhere.ai/serving-tier"

    APP: Final = "app"
    JOB_NAME: Final = "job-name"  # set on pods by the Job controller
    BATCH_JOB_NAME: Final = "batch.kubernetes.io/job-name"
    MANAGED_BY: Final = "app.kubernetes.io/managed-by"
    NS_NAME: Final = "kubernetes.io/metadata.name"

    KUEUE_QUEUE: Final = "kueue.x-k8s.io/queue-name"
    KUEUE_PRIORITY: Final = "kueue.x-k8s.io/priority-class"
    KUEUE_JOB_UID: Final = "kueue.x-k8s.io/job-uid"
    KUEUE_CQ: Final = "kueue.x-k8s.io/cluster-queue-name"


# gpuctl's keys for a node's GPU model: `gpu-type` is written, `gpuType` (the earlier gpuctl's internal
# key) is read as its alias everywhere (job placement, listings, metrics).
GPU_TYPE_LABEL_KEYS: Final = (Labels.GPU_TYPE, Labels.GPU_TYPE_LEGACY)

# Every runwhere.ai/ key gpuctl knows; the webhook denies others with the nearest of these.
KNOWN_RUNWHERE_KEYS: Final = (
    Labels.JOB_TYPE,
    Labels.PRIORITY,
    Labels.POOL,
    Labels.NAMESPACE,
    Labels.GPU_TYPE,
    Labels.GPU_TYPE_LEGACY,
    Labels.QUOTA,
    Labels.PORT,
    Labels.DESCRIPTION,
    Labels.TEAM,
    Labels.SERVING_TIER,
)

MANAGED_BY_VALUE: Final = "gpuctl"
FIELD_MANAGER: Final = "gpuctl"
# Namespace marker (same key and value as the earlier gpuctl, which the console relies on).
NAMESPACE_MARKER_VALUE: Final = "true"

GPU_RESOURCE: Final = "nvidia.com/gpu"
CPU_RESOURCE: Final = "cpu"
MEMORY_RESOURCE: Final = "memory"

DEFAULT_NAMESPACE: Final = "default"
DEFAULT_POOL: Final = "default"
SERVICE_PREFIX: Final = "svc-"
CONTAINER_NAME: Final = "main"
NOTEBOOK_PORT: Final = 8888
DEFAULT_SERVICE_PORT: Final = 8000

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

# Host paths no team pod mounts and `gpuctl create` refuses in storage.workdirs, whatever the admin's list of
# data roots says: the node's system locations (and below; "/" only itself). Root on the node (CNI plugins
# and kernel modules run as root, /usr and /lib hold what the node runs), other teams' logs and containers.
DENIED_HOST_PATHS: Final = (
    "/",
    "/etc",
    "/proc",
    "/sys",
    "/root",
    "/var/lib/kubelet",
    "/var/run",
    "/run",
    # a node's container runtime and, on a control-plane node a pod tolerates, etcd's data (every Secret)
    "/var/lib/etcd",
    "/var/lib/containerd",
    "/var/lib/docker",
    # what the node runs, and other tenants' logs and container storage
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/bin",
    "/sbin",
    "/boot",
    "/opt/cni",
    "/var/log",
    "/var/lib/containers",
    "/var/lib/cni",
)
# Data roots: a writable hostPath (every storage.workdirs entry; a volume a container mounts without
# readOnly) lies under one of these or one the admin adds (--allowed-host-path, allowedHostPaths). The
# data locations the earlier gpuctl's documents and example YAMLs use as workdirs, so its users' YAML keeps
# running: /data, /datasets, /models, /output, /checkpoints, /cache, /logs and Jupyter's /home/jovyan/work.
# Its service examples' /etc/nginx, /var/lib/mysql, /var/www are not data roots (a system location, or an
# admin's choice to allow).
HOST_PATH_ROOTS: Final = (
    "/data",
    "/datasets",
    "/models",
    "/output",
    "/checkpoints",
    "/cache",
    "/logs",
    "/home/jovyan/work",
)

# Container waiting reasons shown as-is in STATUS (earlier gpuctl's vocabulary).
CONTAINER_WAITING_REASONS: Final = frozenset(
    {
        "ImagePullBackOff",
        "ErrImagePull",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
        "ContainerCreating",
        "InvalidImageName",
        "ImageInspectError",
        "RegistryUnavailable",
        "RunInitContainerError",
    }
)

# Annotation gpuctl writes on the workloads it submits: a hash of the spec, so `apply` can say "unchanged".
SPEC_HASH_ANNOTATION: Final = "runwhere.ai/spec-hash"
# runwhere.ai/ keys gpuctl writes that were added after KNOWN_RUNWHERE_KEYS; the webhook accepts both tuples.
# An autoscaled service that `gpuctl stop` scaled to zero: its floor's replicas before, which `resume`
# restores (docs/serving.md). On the floor Deployment.
SERVICE_STOPPED_ANNOTATION: Final = "runwhere.ai/stopped-replicas"
EXTRA_RUNWHERE_KEYS: Final = (SPEC_HASH_ANNOTATION, SERVICE_STOPPED_ANNOTATION)

# ---- serve: the backstop (gpuctl.domain.coverage, gpuctl.server.backstop; docs/security.md, 4)
# Kueue writes this annotation (the Workload's name) on the pods it admits with Topology Aware Scheduling.
KUEUE_WORKLOAD_ANNOTATION: Final = "kueue.x-k8s.io/workload"
# How long a GPU pod on a pool node may stay uncovered before `gpuctl serve` reports it: longer than the
# healthy windows (watch events of a pod and its Workload arriving out of order; see also the allowance).
UNCOVERED_GRACE_SECONDS: Final = 60.0
# The longest terminationGracePeriodSeconds a pod (or pod template) in a team namespace may ask for
# (admission's termination-grace rule, the webhook's --max-termination-grace, the chart's
# maxTerminationGraceSeconds; `gpuctl create` refuses more). Kueue stops counting a pod once it is
# terminating, so this bounds how long a stopped or deleted job's pods keep GPUs off Kueue's books; serve's
# backstop evicts a terminating pod that still holds uncharged GPUs past it (docs/security.md). 300 s: time
# for a training job to write a checkpoint on SIGTERM; Kubernetes' own default is 30 s.
MAX_TERMINATION_GRACE_SECONDS: Final = 300
# The same bound for gpuctl's own checks (`gpuctl create`, the REST API): the chart sets it from
# maxTerminationGraceSeconds on the API's containers, as the webhook's --max-termination-grace.
GRACE_ENV: Final = "GPUCTL_MAX_TERMINATION_GRACE"
# A pod being deleted is given its termination grace period (until its deletionTimestamp), at most this
# long, before the grace above starts: a deleted Job's or a preempted Workload's pods shut down after Kueue
# stopped counting them. A longer terminationGracePeriodSeconds (one admitted before the cap, or past it)
# buys no more time off Kueue's books: past allowance + grace the backstop ends the termination
# (`gpuctl serve --termination-allowance`; docs/security.md, "The bound"). The cap admission enforces.
UNCOVERED_TERMINATION_ALLOWANCE_SECONDS: Final = float(MAX_TERMINATION_GRACE_SECONDS)
# Extended resources a team pod may request though Kueue does not charge them (admission's
# extended-resource rule, the webhook's --allowed-extended-resource, the chart's allowedExtendedResources):
# devices that are no accelerator. `name` or `prefix*`. RDMA devices (the RDMA shared device plugin's
# rdma/hca_shared_devices_a, ...) go with multi-node training; hugepages-<size> is memory.
DEFAULT_ALLOWED_EXTENDED_RESOURCES: Final = ("rdma/*", "hugepages-*")
# Resources of a container that are neither accelerators nor refused: Kueue charges cpu and memory to the
# team's budget; ephemeral-storage is the node's disk.
PLAIN_RESOURCES: Final = frozenset({"cpu", "memory", "ephemeral-storage"})
# With --evict-uncovered, how long a pod stays uncovered before it is evicted (at least the grace).
UNCOVERED_EVICT_AFTER_SECONDS: Final = 120.0
# The reason of the Kubernetes Events `gpuctl serve` posts on such pods, and the component it names.
UNCOVERED_EVENT_REASON: Final = "GpuctlUncoveredGPUs"
UNCOVERED_EVICTED_REASON: Final = "GpuctlEvictedUncovered"
UNCOVERED_TERMINATION_ENDED_REASON: Final = "GpuctlEndedTermination"
SERVE_COMPONENT: Final = "gpuctl-serve"

# ---------------------------------------------------------------------------- reads (docs/security.md, 1)
# The roles gpuctl ships for callers (manifests/api/rbac.yaml); gpuctl.service.access says which reads
# each grants, and every refused read names the one to bind.
ROLE_USER: Final = "gpuctl-user"  # RoleBinding in a team namespace
ROLE_POOL_VIEWER: Final = "gpuctl-pool-viewer"  # ClusterRoleBinding: pools, quotas, nodes (read)
ROLE_ADMIN: Final = "gpuctl-admin"  # ClusterRoleBinding: everything
VISIBILITY_GROUP: Final = "visibility.kueue.x-k8s.io"  # Kueue's pending-workloads API

# ---------------------------------------------------------------------------------------------------------
# holes (docs/security.md, 3): what a tenant may not do in its own team namespace (admission/validators/,
# admission.md).

# Host paths that hold device nodes: a pod mounting them reaches devices its resource requests never
# asked for (on real hardware /dev/nvidia*), so Kueue would count 0 GPUs for it. Refused by the
# `device-access` rule unless the admin allowed the path (the same --allowed-host-path list as host-path).
DEVICE_HOST_PATHS: Final = ("/dev",)
# Environment variables by which the NVIDIA container runtime hands a container devices: GPUs, MIG
# management, IMEX channels. The device plugin sets them for what a pod requests; set by a user they hand
# out GPUs no quota counted (NVIDIA_VISIBLE_DEVICES=all). NVIDIA_DRIVER_CAPABILITIES is not among them: it
# only chooses which driver libraries the container's own GPUs come with (the earlier gpuctl's notebook
# example sets it), and grants no device.
NVIDIA_DEVICE_ENV: Final = (
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES",
    "NVIDIA_IMEX_CHANNELS",
)
# Linux capabilities a container may add: Pod Security Standards' `baseline` list. Anything else
# (SYS_ADMIN, SYS_RAWIO, ALL, ...) is refused by `device-access` in team namespaces.
BASELINE_CAPABILITIES: Final = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
)
# The WorkloadPriorityClass name Kueue's defaulting (feature WorkloadPriorityClassDefaulting) writes when a
# class of that name exists; allowed in team namespaces beside gpuctl's own classes.
KUEUE_DEFAULT_WORKLOAD_PRIORITY_CLASS: Final = "default"
# Kubernetes PriorityClasses of the earlier gpuctl (same names as the WorkloadPriorityClasses). gpuctl keeps
# them with preemptionPolicy Never so that a pod naming one never preempts through kube-scheduler: Kueue
# alone decides who runs (gpuctl.service.priority_classes; both fields are immutable, so a wrong one is
# deleted and created again).
PRIORITY_CLASS_PREEMPTION: Final = "Never"
# The ServiceAccount of the garbage collector: it removes owner references when an owner is deleted with
# orphaning (admission trusts it to drop a pod's controller reference, as it trusts the controllers).
GC_USER: Final = "system:serviceaccount:kube-system:generic-garbage-collector"

# ---------------------------------------------------------------- stop, resume, estimates (docs/queueing.md)
# Stop, resume, maxRuntime and "when will it run".
# Kueue's label for a job's wall-clock cap (pkg/controller/constants MaxExecTimeSecondsLabel, v0.19.2). Read
# from the labels of the object Kueue builds the Workload from (jobframework.MaximumExecutionTimeSeconds):
# a batch Job's own labels, a pod's for pod-based work (a Deployment's pods, a StatefulSet's pod group), so
# gpuctl writes it on the workload object and, for Deployments and StatefulSets, on the pod template. A
# positive int32 of seconds; immutable while the job runs. Kueue deactivates the Workload (spec.active=false,
# Evicted reason DeactivatedDueToMaximumExecutionTimeExceeded) once admitted that long.
MAX_EXEC_TIME_LABEL: Final = "kueue.x-k8s.io/max-exec-time-seconds"
MAX_RUNTIME_SECONDS: Final = 2**31 - 1  # Kueue parses the label as an int32
# The Evicted condition reasons Kueue writes when it deactivates a Workload itself (evict.go: "Deactivated"
# + "DueTo" + the underlying cause); a user's or kueuectl's stop leaves plain "Deactivated".
DEACTIVATED_MAX_RUNTIME: Final = "DeactivatedDueToMaximumExecutionTimeExceeded"
DEACTIVATED_REQUEUE_LIMIT: Final = "DeactivatedDueToRequeuingLimitExceeded"
# What the "at the latest" bound adds per step of waiting (a holder ends, then the next job is admitted):
# Kueue's deactivation at the deadline, eviction, quota release and the next admission. About 1-3 s on the
# local cluster; the bound keeps a margin (docs/queueing.md, "When will it run: the estimate").
ESTIMATE_STEP_SLACK_SECONDS: Final = 15

# ----------------------------------------------------------------------- defragmentation (docs/queueing.md)
# Defragmentation (gpuctl.domain.defrag, gpuctl.server.defrag; docs/queueing.md "Defragmentation").
# Annotations on a moved Workload: why (what `describe job` shows), when, and the marker that lets the
# leader reactivate it once Kueue evicted it (removed then: a user's later `stop` is never undone).
DEFRAG_MOVED_ANNOTATION: Final = "runwhere.ai/moved-for"
DEFRAG_MOVED_AT_ANNOTATION: Final = "runwhere.ai/moved-at"
DEFRAG_REACTIVATE_ANNOTATION: Final = "runwhere.ai/defrag-reactivate"
DEFRAG_EVENT_REASON: Final = "GpuctlDefragMove"
# Jobs moved per rolling hour at most, all pools together (`gpuctl serve --defrag-moves-per-hour`).
DEFRAG_MOVES_PER_HOUR: Final = 4
# Seconds a job must have waited before a move is planned for it: Kueue had its scheduling cycles
# (admission, its own preemption) and a previous move settled.
DEFRAG_SETTLE_SECONDS: Final = 30.0
DEFRAG_WINDOW_SECONDS: Final = 3600.0
# At most this many jobs moved off one node for one waiter (the search is over combinations).
DEFRAG_MAX_VICTIMS: Final = 6

# ----------------------------------------------------------------------------- multicluster
# Pools in several clusters through Kueue's MultiKueue (docs/multicluster.md; gpuctl.domain.multicluster,
# queues.multicluster, gpuctl.service.multicluster). The manager cluster holds the team queues and the
# MultiKueue objects below; each worker cluster holds its pools' nodes and a copy of the team queues.
KUEUE_NAMESPACE: Final = "kueue-system"
# Kueue's MultiKueue admission check controller (kueue.MultiKueueControllerName, v0.19.2).
MULTIKUEUE_CONTROLLER: Final = "kueue.x-k8s.io/multikueue"
# The one AdmissionCheck every team ClusterQueue of a manager carries: Kueue v0.19.2 accepts one MultiKueue
# check per ClusterQueue and none per flavor (pkg/cache/scheduler/clusterqueue.go: the queue goes inactive,
# MultiKueueAdmissionCheckAppliedPerFlavor), so a team's jobs either all go through MultiKueue or none do.
MULTIKUEUE_CHECK: Final = "gpuctl-multikueue"
# The MultiKueueConfig of that check: every worker cluster some pool is in.
MULTIKUEUE_CONFIG: Final = "gpuctl"
# The Secret (in KUEUE_NAMESPACE) holding a worker's kubeconfig for Kueue, named CLUSTER_SECRET_PREFIX +
# the cluster, under Kueue's key (kueue.MultiKueueConfigSecretKey).
CLUSTER_SECRET_PREFIX: Final = "gpuctl-cluster-"
MULTIKUEUE_SECRET_KEY: Final = "kubeconfig"
# On a pool's ResourceFlavor in the manager: the clusters its nodes are in (comma-separated, sorted).
POOL_CLUSTERS_ANNOTATION: Final = "runwhere.ai/clusters"
# Job kinds a pool in another cluster takes. MultiKueue v0.19.2 has adapters for batch Jobs, pods and
# StatefulSets among gpuctl's kinds, none for Deployments (pkg/controller/jobs/*/*_multikueue_adapter.go):
MULTICLUSTER_KINDS: Final = (Kind.TRAINING,)
MULTICLUSTER_REFUSED_WHY: Final = {
    Kind.INFERENCE: "MultiKueue (Kueue v0.19.2) has no Deployment adapter: each pod would be copied to the "
    "worker as a bare pod, outside its Deployment's rollouts, restarts and Service",
    Kind.COMPUTE: "MultiKueue (Kueue v0.19.2) has no Deployment adapter: each pod would be copied to the "
    "worker as a bare pod, outside its Deployment's rollouts, restarts and Service",
    Kind.NOTEBOOK: "MultiKueue (Kueue v0.19.2) copies a StatefulSet but never its status back (the manager's "
    "StatefulSet controller would overwrite it), nor its Service: the notebook could not be reached",
}
# The Workload's admission check states (kueue.CheckState*), as `describe job` shows them.
CHECK_READY: Final = "Ready"
CHECK_PENDING: Final = "Pending"

# ------------------------------------------------------------------------------------- audit (docs/audit.md)
# The audit trail (gpuctl.domain.history, gpuctl.service.history, gpuctl.server.history; docs/audit.md).
# Who created a job, as the submitting client says (gpuctl create/apply: the caller's SelfSubjectReview;
# the REST API: the authenticated caller). Written on the job's controller (Job, Deployment, StatefulSet).
AUDIT_SUBMITTED_BY_ANNOTATION: Final = "runwhere.ai/submitted-by"
# runwhere.ai/ keys of the audit trail on job objects; the webhook and the policy accept them too.
AUDIT_RUNWHERE_KEYS: Final = (AUDIT_SUBMITTED_BY_ANNOTATION,)
# `gpuctl stop|resume` sends this field manager plus the caller's name ("gpuctl-stop:alice"), so the
# Workload's managedFields say who changed spec.active (kueuectl's and kubectl's only name the tool).
AUDIT_ACTIVE_MANAGER_PREFIX: Final = "gpuctl-"
# Who last changed a Workload's spec.active, written by the API server from the request (the
# gpuctl-active-set-by MutatingAdmissionPolicy, admission/policies/submitted_by.py): the audit trail's
# verified stop/resume actor where the chart's policies run; the field manager above is the fallback.
AUDIT_ACTIVE_SET_BY_ANNOTATION: Final = "runwhere.ai/active-set-by"
# The store: one ConfigMap per team namespace, written by the leader of `gpuctl serve`, read by the team
# (gpuctl-user: get configmaps by this name). Records are JSON lines under HISTORY_DATA_KEY, oldest first.
HISTORY_CONFIGMAP: Final = "gpuctl-history"
HISTORY_DATA_KEY: Final = "records.jsonl"
# The ring's bound: the newest N records, and at most this many bytes of them (a ConfigMap holds 1 MiB).
HISTORY_MAX_RECORDS: Final = 2000
HISTORY_MAX_BYTES: Final = 768 * 1024
# Two records of one Workload and action this close in time are one (an Event and a condition of it).
HISTORY_SAME_SECONDS: Final = 10.0
# How often the leader writes what it gathered (one update per changed namespace per flush).
HISTORY_FLUSH_SECONDS: Final = 2.0
# The actor of what Kueue and gpuctl serve decide themselves.
ACTOR_KUEUE: Final = "kueue"
ACTOR_DEFRAG: Final = "gpuctl-serve (defrag)"
# An autoscaled service's scale (docs/serving.md): the HPA controller, which runs in kube-controller-manager
# and writes the HPA's status under this field manager.
ACTOR_HPA: Final = "horizontal-pod-autoscaler"
HPA_STATUS_MANAGER: Final = "kube-controller-manager"
ACTOR_BACKSTOP: Final = "gpuctl-serve (backstop)"
ACTOR_SET_ASIDE: Final = "gpuctl-serve (set-aside)"

# ----------------------------------------------------------------------------- metrics across clusters
# `gpuctl serve --cluster NAME` adds this label, =NAME, to every series it exports (docs/metrics.md,
# "Several clusters"); without the flag none (one cluster, or Prometheus adds it: external_labels /
# relabeling). The Grafana dashboards filter every query on it (`cluster=~"$cluster"`, All = `.*`, which an
# absent label matches too). docs/metrics.md, "Several clusters".
METRICS_CLUSTER_LABEL: Final = "cluster"

# ----------------------------------------------------------------------------- GPUs and slices of them
# docs/sharing.md. Every extended resource that hands out a GPU or a slice of one, as prefixes
# of the resource name (`gpuctl.domain.gpus.is_gpu_resource` is the one matcher): NVIDIA's whole GPUs,
# time-slicing/MPS replicas (nvidia.com/gpu.shared) and HAMi's nvidia.com/gpumem|gpucores, MIG instances
# (nvidia.com/mig-1g.10gb), AMD and Intel GPUs. The admission webhook and policies treat a pod asking for
# any of them as GPU work; Kueue charges each its GPU equivalent of the team budget (resources.
# transformations in manifests/kueue/configuration.yaml, from gpuctl.domain.sharing.quota_transformations).
GPU_RESOURCE_PREFIXES: Final = ("nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu", "gpu.intel.com/")
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"
# Time-slicing and MPS replicas as the NVIDIA device plugin advertises them with renameByDefault: true.
SHARED_GPU_RESOURCE: Final = "nvidia.com/gpu.shared"
# The suffix renameByDefault gives a time-sliced resource; on a MIG instance too (MIG + time-slicing:
# nvidia.com/mig-1g.10gb.shared, a replica of one 1g.10gb, charged its share / SHARED_REPLICAS_CHARGED).
SHARED_SUFFIX: Final = ".shared"
# Resources each of which is one whole GPU (charged one GPU of budget).
WHOLE_GPU_RESOURCES: Final = (GPU_RESOURCE, "amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe")
# A team's GPU budget is counted in 1/GPU_UNITS GPU: 840 = lcm(1..8), so a MIG instance's share (1/7,
# 1/4, 2/7, 1/2, 4/7) and a replica of a GPU time-sliced 2..8 (or 10, 12, 14) ways are whole units
# (Kueue rounds every resource but cpu up to a whole unit per pod). gpuctl.domain.sharing has the rule.
GPU_UNITS: Final = 840
# What one time-slicing/MPS replica is charged: 1/SHARED_REPLICAS_CHARGED GPU (Kueue charges a resource
# by its name, whatever a node's replicas; the NVIDIA GPU Operator's example uses 4). An admin who slices
# N ways changes nvidia.com/gpu.shared's output in the Kueue configuration to GPU_UNITS/N.
SHARED_REPLICAS_CHARGED: Final = 4
# Slices of GPUs in use per pool, as `gpuctl serve` counts them from every bound pod and writes them on the
# pool's ResourceFlavor (JSON {resource: count}): a team member, who may not list other teams' pods, reads
# per-profile used and free from it (gpuctl.domain.sharing.slices_used, docs/sharing.md).
SLICES_USED_ANNOTATION: Final = "runwhere.ai/slices-used"

# --------------------------------------------------------------------------- YAML limits (docs/security.md)
# What one gpuctl YAML text may be, for `gpuctl create|apply|delete -f` and the REST API alike
# (gpuctl.spec.limits checks both before loading; the API's request models cap yamlContent the same).
# 1 MiB of YAML is thousands of jobs; a file past it is a mistake (the API server refuses objects past
# 3 MiB anyway, by closing the connection: "EOF occurred in violation of protocol").
YAML_MAX_BYTES: Final = 1024 * 1024
# Aliases can make a 1 KB document expand into billions of nodes ("billion laughs"): count the expanded
# size before constructing anything (10 nested levels took 28 s and 2.2 GB before the limit).
YAML_MAX_EXPANDED_NODES: Final = 200_000

# The REST API's logs (GET .../logs and its WebSocket): the largest `tail` and `rank` accepted (a larger
# tail is the API server's 400 from its integer parser; no gang has 100,000 ranks). Beyond: 422 naming it.
LOG_TAIL_MAX: Final = 1_000_000
LOG_RANK_MAX: Final = 100_000

# --------------------------------------------------------------------------------- trust (docs/security.md)
# gpuctl serve's ServiceAccount as the API server names it (manifests/serve/rbac.yaml; the chart rewrites
# gpuctl-system to the release namespace). The workload-edit policy lets it write defragmentation's
# markers on Workloads (admission/workload_edit.py); manifests/serve/*-policy.yaml and confinement.yaml
# name it too.
SERVE_USER: Final = "system:serviceaccount:gpuctl-system:gpuctl-serve"
# Defragmentation cannot be steered by one tenant against another (docs/queueing.md, "Defragmentation"): a job
# is moved at most once per window (its runwhere.ai/moved-at says when it last was), and the waiters of one
# team cause at most DEFRAG_MOVES_PER_TEAM_PER_HOUR moves per window (the team a move was made for is
# runwhere.ai/moved-for-team on the moved Workload), so one team cannot use up the hourly cap of all.
DEFRAG_MOVED_FOR_TEAM_ANNOTATION: Final = "runwhere.ai/moved-for-team"
DEFRAG_MOVES_PER_TEAM_PER_HOUR: Final = 2

# ------------------------------------------------------------------ exempt namespaces (docs/security.md, 2)
# Namespaces (besides the system ones) whose pods may run on pool nodes: the isolation rules outside team
# namespaces (pool-toleration, pool-selection, pool-node-name) skip them. The NVIDIA GPU Operator's default
# namespace: its validator and device plugin, DCGM exporter and NFD must reach every GPU node. An admin sets
# the list (chart value exemptNamespaces, webhook flag --exempt-namespace, generator flag of
# admission.policies.isolation); tenants have no rights there (docs/admission.md, "Exempt namespaces").
EXEMPT_NAMESPACES: Final = ("gpu-operator",)

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
# Issue 45, a bound gpuctl keeps: the start bound a waiting job was shown ("starts by ... at the latest"),
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

# ----------------------------------------------------------------------------- GPU use (docs/utilisation.md)
# docs/utilisation.md. What gpuctl reads of NVIDIA's dcgm-exporter through Prometheus (its real names, in
# its default counters file): the graphics engine's active ratio (0-1, the idle signal), the kernel-time
# percentage where profiling metrics are missing (0-100, coarse: NVIDIA/DCGM#226, dcgm-exporter#341) and
# the framebuffer in use (MiB). gpuctl.domain.utilisation reads them; the series carry the labels of the
# exporter's kubelet pod-resources mapping (namespace, pod, container) and of the device (gpu, UUID,
# Hostname, modelName; MIG's GPU_I_PROFILE and GPU_I_ID).
DCGM_ENGINE_ACTIVE: Final = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DCGM_GPU_UTIL: Final = "DCGM_FI_DEV_GPU_UTIL"
DCGM_FB_USED: Final = "DCGM_FI_DEV_FB_USED"
# Activity under this (a ratio of time the engine was busy) is idle: Red Hat's gpu-pruner's 0.01.
IDLE_FLOOR: Final = 0.01
# `gpuctl top`'s ACTIVITY: the mean over this window (kubectl top's metrics are minute-scale too).
USE_WINDOW_SECONDS: Final = 300
# How far back `gpuctl top` looks for a job's last activity: IDLE FOR is at most this (shown as >1d).
USE_LOOKBACK_SECONDS: Final = 86400
# Points of the per-step peak read over a window (the step is window / this, at least USE_MIN_STEP_SECONDS).
USE_POINTS: Final = 288
USE_MIN_STEP_SECONDS: Final = 1
# Where gpuctl finds Prometheus: `--prometheus-url`, else $GPUCTL_PROMETHEUS_URL, else `prometheusURL:` in
# the config file ($GPUCTL_CONFIG, else ~/.config/gpuctl/config.yaml); gpuctl serve: `--prometheus-url`.
PROMETHEUS_URL_ENV: Final = "GPUCTL_PROMETHEUS_URL"
CONFIG_ENV: Final = "GPUCTL_CONFIG"
DEFAULT_CONFIG_PATH: Final = "~/.config/gpuctl/config.yaml"
PROMETHEUS_TIMEOUT_SECONDS: Final = 10.0

# Idle reclamation (gpuctl serve --idle): the policy an admin sets on a pool (`kind: pool` idle:) or a quota
# (`kind: quota` idle:), kept as JSON on the pool's ResourceFlavor / the team's ClusterQueue under this
# annotation (field manager IDLE_FIELD_MANAGER, so the other writers of those objects never drop it).
IDLE_POLICY_ANNOTATION: Final = "runwhere.ai/idle-policy"
IDLE_FIELD_MANAGER: Final = "gpuctl-idle-policy"
# What each job kind may be given when idle, its default first (gpuctl.domain.idle; the `idle:` fields of
# kind pool and quota, gpuctl.spec.idle): a notebook is stopped, a service scaled to its floor (or zero),
# training and gangs only reported unless the admin opts in.
IDLE_ACTIONS: Final = {
    Kind.NOTEBOOK: ("stop", "report", "none"),
    Kind.INFERENCE: ("floor", "zero", "report", "none"),
    Kind.COMPUTE: ("floor", "zero", "report", "none"),
    Kind.TRAINING: ("report", "stop", "none"),
}
# The policy's defaults: idle for this long before anything happens; a keep lasts at most this long.
IDLE_AFTER_SECONDS: Final = 3600
IDLE_KEEP_MAX_SECONDS: Final = 8 * 3600
# serve's idle reclaimer: how often it looks (seconds), and in how many steps it reads a policy's window (a
# step must be longer than Prometheus' scrape interval of dcgm-exporter: 30 m in 20 steps is 90 s).
IDLE_INTERVAL_SECONDS: Final = 30.0
IDLE_POINTS: Final = 20
# A verdict needs this share of the window's steps measured (an exporter down is no evidence of idleness).
IDLE_MIN_COVERAGE: Final = 0.9
# `gpuctl keep JOB --for 4h`: on the job's controller (Job, StatefulSet, Deployment), the RFC 3339 time
# until which the policy leaves it alone. serve rewrites a value past now + the policy's keepMax to that.
KEEP_UNTIL_ANNOTATION: Final = "runwhere.ai/keep-until"
# On the Workload serve stopped for idleness (as defragmentation's moved-for/moved-at): the evidence and
# when, read by the audit trail (gpuctl.domain.history) and `describe job`.
IDLE_STOPPED_ANNOTATION: Final = "runwhere.ai/idle-stopped"
IDLE_STOPPED_AT_ANNOTATION: Final = "runwhere.ai/idle-stopped-at"
# On a service's Deployment serve scaled down: the replicas it had, which `gpuctl resume` gives back.
IDLE_REPLICAS_ANNOTATION: Final = "runwhere.ai/idle-replicas"
# The Event reasons serve posts on a job's Workload (stopped, scaled down, reported: due but a dry run, a
# report-only action, or kept) and the actor the audit trail names.
IDLE_STOPPED_REASON: Final = "GpuctlIdleStopped"
IDLE_SCALED_REASON: Final = "GpuctlIdleScaled"
IDLE_REPORTED_REASON: Final = "GpuctlIdle"
ACTOR_IDLE: Final = "gpuctl-serve (idle)"
IDLE_RUNWHERE_KEYS: Final = (
    IDLE_POLICY_ANNOTATION,
    KEEP_UNTIL_ANNOTATION,
    IDLE_STOPPED_ANNOTATION,
    IDLE_STOPPED_AT_ANNOTATION,
    IDLE_REPLICAS_ANNOTATION,
)

# Issue 44: a service whose replicas span nodes (`kind: inference` with resources.nodes: N > 1) is a
# LeaderWorkerSet (sigs.k8s.io/lws): each replica a group of N pods, leader (rank 0) and workers, which
# Kueue admits whole (one Workload per group) and places in one topology domain (both templates carry
# the same pod-set group name and placement). LWS labels every pod with its worker index (the rank) and
# injects LWS_LEADER_ADDRESS (the group leader's host name) first in every container's environment.
LWS_GROUP: Final = "leaderworkerset.x-k8s.io"
LWS_API_VERSION: Final = f"{LWS_GROUP}/v1"
LWS_NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
LWS_LEADER_ADDRESS_ENV: Final = "LWS_LEADER_ADDRESS"
LWS_WORKER_INDEX_ENV: Final = "LWS_WORKER_INDEX"
TAS_GROUP_NAME: Final = "kueue.x-k8s.io/podset-group-name"
# Kueue's annotation (a label without its WorkloadIdentifierAnnotations gate, on in v0.19) on a pod of a pod
# group (a LeaderWorkerSet group's pods): the name of the group's Workload.
KUEUE_POD_GROUP_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
# The pod-set group name both templates of a group carry (any name; the same on both).
LWS_TAS_GROUP: Final = "replica"
