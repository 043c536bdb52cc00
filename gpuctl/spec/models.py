"""Pydantic models of the YAML files users bring from the earlier gpuctl, one model per `kind`.

The models are permissive about spelling (every documented alias of a field is accepted, because users copy
the docs, which disagree with the earlier code) and strict about meaning (names, quantities, ports and host
paths are checked here so that nothing reaches the cluster that the API server would reject half-way).

Every check that can fail raises a `PydanticCustomError` whose type starts with `gpuctl_` and whose context
carries `message`, `fix` and `at` (a path suffix below the failing field). `gpuctl.spec.loader` turns those
into user-facing SpecIssues; code that validates models directly still gets readable pydantic errors.

The models live in one module per block (`fields`: validators and field types; `job`, `resources`,
`service`: the blocks of a job document; `kinds`: the job kinds; `pool`, `quota`); this module gathers
them, maps each `kind` to its model and is what other packages import.
"""

from __future__ import annotations

from gpuctl.constants import Kind
from gpuctl.spec.fields import HOST_PATH_FIX, NAME_FIX, PORT_FIX, QUANTITY_FIX, KindModel
from gpuctl.spec.job import Environment, EnvVar, JobMeta
from gpuctl.spec.kinds import (
    NOTEBOOK_NAME_MAX,
    SERVICE_NAME_MAX,
    ComputeSpec,
    InferenceSpec,
    NotebookSpec,
    TrainingSpec,
)
from gpuctl.spec.pool import PoolCluster, PoolMeta, PoolNode, PoolSpec
from gpuctl.spec.quota import LimitRange, PoolGuarantee, QuotaEntry, QuotaMeta, QuotaSpec
from gpuctl.spec.resources import InferenceResources, Resources, Toleration, TrainingResources
from gpuctl.spec.service import (
    NotebookService,
    Service,
    Storage,
    Workdir,
    data_roots,
    host_path_refusal,
    normalise_host_path,
    path_denied,
)

__all__ = [
    "HOST_PATH_FIX",
    "KIND_MODELS",
    "NAME_FIX",
    "NOTEBOOK_NAME_MAX",
    "PORT_FIX",
    "QUANTITY_FIX",
    "SERVICE_NAME_MAX",
    "AnySpec",
    "ComputeSpec",
    "EnvVar",
    "Environment",
    "InferenceResources",
    "InferenceSpec",
    "JobMeta",
    "JobSpec",
    "LimitRange",
    "NotebookService",
    "NotebookSpec",
    "PoolCluster",
    "PoolGuarantee",
    "PoolMeta",
    "PoolNode",
    "PoolSpec",
    "QuotaEntry",
    "QuotaMeta",
    "QuotaSpec",
    "Resources",
    "Service",
    "Storage",
    "Toleration",
    "TrainingResources",
    "TrainingSpec",
    "Workdir",
    "data_roots",
    "host_path_refusal",
    "normalise_host_path",
    "path_denied",
    "spec_namespace",
]


JobSpec = TrainingSpec | InferenceSpec | NotebookSpec | ComputeSpec
AnySpec = JobSpec | PoolSpec | QuotaSpec

KIND_MODELS: dict[Kind, type[KindModel]] = {
    Kind.TRAINING: TrainingSpec,
    Kind.INFERENCE: InferenceSpec,
    Kind.NOTEBOOK: NotebookSpec,
    Kind.COMPUTE: ComputeSpec,
    Kind.POOL: PoolSpec,
    Kind.QUOTA: QuotaSpec,
}


def spec_namespace(spec: AnySpec, default_ns: str) -> str:
    """The namespace a job goes to: `job.namespace` from the YAML beats the CLI's `-n` (as the earlier
    gpuctl's create did; we apply it everywhere). Pools and quotas are cluster-scoped: `default_ns`."""
    job = getattr(spec, "job", None)
    if job is not None and job.namespace:
        return job.namespace
    return default_ns
