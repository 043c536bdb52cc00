"""Label and annotation keys, gpuctl's own names and the resources it reads."""

from __future__ import annotations

from typing import Final


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
