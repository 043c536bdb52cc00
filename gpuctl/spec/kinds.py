"""The job kinds: `training`, `inference`, `notebook`, `compute`, each a `job` + `environment` +
`resources` (+ `service`, `storage`)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from gpuctl.constants import BURST_SUFFIX, SERVICE_PREFIX
from gpuctl.spec.fields import KindModel, aliases, fail, show
from gpuctl.spec.job import Environment, JobMeta
from gpuctl.spec.resources import InferenceResources, PlacementConstraints, Resources, TrainingResources
from gpuctl.spec.service import NotebookService, Service, Storage

# A notebook is a StatefulSet: its pods carry `controller-revision-hash: <name>-<10-char hash>`, a label
# value limited to 63 characters, so longer names create a StatefulSet that never gets a pod.
NOTEBOOK_NAME_MAX = 52
# Service kinds also get a Service `svc-<name>`, itself a 63-character DNS label.
SERVICE_NAME_MAX = 63 - len(SERVICE_PREFIX)


class _JobKind(KindModel):
    job: JobMeta
    environment: Environment
    resources: Resources
    placement_constraints: PlacementConstraints = Field(
        default_factory=PlacementConstraints,
        validation_alias=aliases("placementConstraints", "placement_constraints", "placement-constraints"),
    )

    # Longest job.name the objects of this kind allow (see NOTEBOOK_NAME_MAX / SERVICE_NAME_MAX).
    _name_max: ClassVar[int] = 63
    _name_why: ClassVar[str] = ""

    @field_validator("job")
    @classmethod
    def _name_length(cls, job: JobMeta) -> JobMeta:
        if len(job.name) > cls._name_max:
            raise fail(
                "name_length",
                f"{show(job.name)} is {len(job.name)} characters; {cls._name_why}",
                f"shorten job.name to at most {cls._name_max} characters",
                at="name",
            )
        return job

    @model_validator(mode="after")
    def _node_types(self) -> _JobKind:
        """placementConstraints.nodeTypes makes the job one of any pool of those GPU models (its resources
        read it): not with a GPU type (one spelling of the same wish), nor with a topology level of one
        pool unless the pool is named."""
        types = tuple(self.placement_constraints.node_types)
        res = self.resources
        if types and res.gpu_type is not None:
            raise fail(
                "node_types",
                f"resources.gpu-type: {res.gpu_type} and placementConstraints.nodeTypes both choose GPU "
                "models",
                f"keep one: nodeTypes: [{', '.join([*types, res.gpu_type])}] (any pool of those models)",
                at="placementConstraints.nodeTypes",
            )
        if types and getattr(res, "topology", None) is not None and "pool" not in res.model_fields_set:
            raise fail(
                "topology_any_pool",
                f"{res.topology} is a level of one pool's topology; nodeTypes lets this job run in "
                "several pools",
                "name one pool (resources.pool: P) or remove resources.topology",
                at="resources.topology",
            )
        res._node_types = types
        return self


_SERVICE_WHY = f"the Service {SERVICE_PREFIX}<name> allows at most {SERVICE_NAME_MAX}"


def _autoscaled_priority(job: JobMeta, service: Service) -> None:
    """An autoscaled service runs at gpuctl's serving priorities (floor: never preempted inside the team's
    quota; burst: first to yield, docs/serving.md), so a `job.priority` would do nothing: refused."""
    if service.autoscaling is not None and "priority" in job.model_fields_set:
        raise fail(
            "autoscaled_priority",
            f"job.priority {job.priority.value} has no effect on an autoscaled service: its minReplicas run "
            "at the serving floor's priority (never preempted within the team's quota) and the replicas "
            "above them at the burst's (the first to yield)",
            "remove job.priority, or use service.replicas for a fixed-size service at that priority",
            at="job.priority",
        )


class TrainingSpec(_JobKind):
    """`kind: training` → a batch/v1 Job; with `resources.nodes: N` > 1 an Indexed Job of N pods and the
    headless Service svc-<name> through which rank 0 is reached (docs/distributed.md)."""

    kind: Literal["training"] = "training"
    resources: TrainingResources
    storage: Storage = Field(default_factory=Storage)

    @model_validator(mode="after")
    def _gang_name(self) -> TrainingSpec:
        """A multi-node job also gets the Service svc-<name>, a 63-character DNS label."""
        if self.resources.nodes > 1 and len(self.job.name) > SERVICE_NAME_MAX:
            raise fail(
                "name_length",
                f"{show(self.job.name)} is {len(self.job.name)} characters; "
                f"a multi-node job's {_SERVICE_WHY}",
                f"shorten job.name to at most {SERVICE_NAME_MAX} characters",
                at="job.name",
            )
        return self


# Kueue's LeaderWorkerSet integration names each group's Workload after the LeaderWorkerSet and admits
# only names of at most this many characters (Kueue docs, tasks/run/leaderworkerset.md).
LWS_NAME_MAX = 39


class InferenceSpec(_JobKind):
    """`kind: inference` → a Deployment and a NodePort Service; with `resources.nodes: N` > 1 a
    LeaderWorkerSet whose every replica is a group of N pods (gpuctl.builders.inference). `model` is
    accepted and unused."""

    kind: Literal["inference"] = "inference"
    resources: InferenceResources
    service: Service = Field(default_factory=Service)
    storage: Storage = Field(default_factory=Storage)
    model: dict[str, Any] | None = None

    _name_max: ClassVar[int] = SERVICE_NAME_MAX
    _name_why: ClassVar[str] = _SERVICE_WHY

    @model_validator(mode="after")
    def _group_name(self) -> InferenceSpec:
        # An autoscaled one is two LeaderWorkerSets, <name> and <name>-burst: the longer is the limit.
        most = LWS_NAME_MAX - (len(BURST_SUFFIX) if self.service.autoscaling is not None else 0)
        if self.resources.nodes > 1 and len(self.job.name) > most:
            also = f" (and its burst, {show(self.job.name + BURST_SUFFIX)})" if most < LWS_NAME_MAX else ""
            raise fail(
                "name_length",
                f"{show(self.job.name)} is {len(self.job.name)} characters; a service of multi-node "
                f"replicas is a LeaderWorkerSet{also}, whose name Kueue limits to {LWS_NAME_MAX}",
                f"shorten job.name to at most {most} characters",
                at="job.name",
            )
        return self

    @model_validator(mode="after")
    def _autoscaling(self) -> InferenceSpec:
        _autoscaled_priority(self.job, self.service)
        return self


class NotebookSpec(_JobKind):
    """`kind: notebook` → a one-replica StatefulSet and a NodePort Service on the notebook port."""

    kind: Literal["notebook"] = "notebook"
    service: NotebookService = Field(default_factory=NotebookService)
    storage: Storage = Field(default_factory=Storage)

    _name_max: ClassVar[int] = NOTEBOOK_NAME_MAX
    _name_why: ClassVar[str] = f"a notebook's StatefulSet pods break above {NOTEBOOK_NAME_MAX}"


class ComputeSpec(_JobKind):
    """`kind: compute` → a Deployment and a NodePort Service (CPU or GPU services)."""

    kind: Literal["compute"] = "compute"
    service: Service = Field(default_factory=Service)
    storage: Storage = Field(default_factory=Storage)

    _name_max: ClassVar[int] = SERVICE_NAME_MAX
    _name_why: ClassVar[str] = _SERVICE_WHY

    @model_validator(mode="after")
    def _autoscaling(self) -> ComputeSpec:
        _autoscaled_priority(self.job, self.service)
        return self
