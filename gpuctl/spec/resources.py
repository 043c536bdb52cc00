"""`resources:`: what each pod of a job requests and where it may run (pools, GPU type, tolerations);
for `kind: training`, also how many nodes (pods) the job spans and how close they must be placed."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from gpuctl.constants import DEFAULT_POOL, SET_ASIDE_TAINT_KEYS
from gpuctl.spec.fields import (
    DnsLabel,
    LabelValue,
    NonNegInt,
    PositiveInt,
    PositiveQuantity,
    SpecModel,
    Text,
    aliases,
    fail,
    show,
)
from gpuctl.spec.share import SHARE_FIX, GpuShare, parse_share

_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TOLERATION_FIX = (
    "write a toleration as `key=value:Effect` (kubectl taint syntax), "
    "e.g. nvidia.com/gpu=present:NoSchedule, "
    "or as a mapping {key, operator: Equal|Exists, value, effect: NoSchedule|PreferNoSchedule|NoExecute}"
)


class Toleration(SpecModel):
    """One pod toleration, as in Kubernetes (the pool's own taints are tolerated without one)."""

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: Text = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] = ""
    toleration_seconds: int | None = Field(
        None, validation_alias=aliases("tolerationSeconds", "toleration_seconds")
    )

    @model_validator(mode="before")
    @classmethod
    def _taint_syntax(cls, data: Any) -> Any:
        """`key=value:Effect`, `key:Effect`, `key` (any effect, Exists when no value)."""
        if not isinstance(data, str):
            return data
        text, _, effect = data.partition(":")
        key, eq, value = text.partition("=")
        if not key.strip() or (effect and effect not in _TAINT_EFFECTS):
            raise fail("toleration", f"{show(data)} is not a toleration", _TOLERATION_FIX)
        return {"key": key.strip(), "operator": "Equal" if eq else "Exists", "value": value, "effect": effect}

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.key in SET_ASIDE_TAINT_KEYS:
            raise fail(
                "toleration",
                f"{self.key} marks nodes set aside for a waiting multi-node job",
                "remove this toleration; gpuctl gives it to multi-node jobs (resources.nodes) only",
            )
        if self.operator == "Exists" and self.value:
            raise fail("toleration", "operator Exists takes no value", "remove `value` or use operator Equal")
        if not self.key and self.operator != "Exists":
            raise fail("toleration", "a toleration without a key must use operator Exists", _TOLERATION_FIX)
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise fail("toleration", "tolerationSeconds needs effect NoExecute", "set effect: NoExecute")
        return self

    def as_kubernetes(self) -> dict:
        out: dict = {"key": self.key} if self.key else {}
        out["operator"] = self.operator
        if self.operator == "Equal":
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


class Resources(SpecModel):
    """`resources:` — requests (= limits) of the container and where it may run. `tolerations` adds
    pod tolerations beyond the pool's (Kueue adds those of the pool's node taints itself).

    Where: `pool: P` pins the job to pool P; `pool: [P, Q]` lets it run in whichever of them Kueue
    finds room in first (`pools_allowed`); no `pool` with a `gpu-type` lets it run in any pool whose
    nodes have that GPU type; no `pool` and no `gpu-type` is pool `default`, as before (docs/queueing.md,
    "Jobs that may run in any pool")."""

    pool: DnsLabel = DEFAULT_POOL
    # docs/queueing.md, "Jobs that may run in any pool": `pool: [P, Q]`, two or more pools (one is the same as
    # `pool: P`).
    any_of_pools: list[DnsLabel] = []
    gpu: NonNegInt = Field(0, validation_alias=aliases("gpu", "accelerator_count", "accelerator-count"))
    gpu_type: LabelValue | None = Field(None, validation_alias=aliases("gpuType", "gpu_type", "gpu-type"))
    cpu: PositiveQuantity
    memory: PositiveQuantity
    gpu_share: Text | None = Field(None, validation_alias=aliases("gpuShare", "gpu_share", "gpu-share"))
    # Issue 44: GPU memory per pod; the GPUs (or the MIG slice) that hold it are chosen from the pool's
    # nodes when the job is submitted (gpuctl.domain.sizing, docs/serving.md).
    gpu_memory: PositiveQuantity | None = Field(
        None, validation_alias=aliases("gpuMemory", "gpu_memory", "gpu-memory")
    )
    tolerations: list[Toleration] = []
    # The job's placementConstraints.nodeTypes (set by the job document, gpuctl.spec.kinds): GPU models
    # it may run on, any pool of them (docs/serving.md). Not a key of `resources`.
    _node_types: tuple[str, ...] = PrivateAttr(default=())

    # Why `resources.nodes` / `resources.topology` mean nothing for this kind (None: the kind takes them).
    _gang_why: ClassVar[str | None] = (
        "only `kind: training` and `kind: inference` run on several nodes (a pod per node)"
    )

    @field_validator("tolerations", mode="before")
    @classmethod
    def _tolerations(cls, value: Any) -> Any:
        return [value] if isinstance(value, str | dict) else value

    @model_validator(mode="before")
    @classmethod
    def _gang_keys(cls, data: Any) -> Any:
        """`nodes` and `topology` are refused, not ignored, on the kinds that cannot span nodes."""
        if cls._gang_why is None or not isinstance(data, dict):
            return data
        for key in (*GANG_NODES_KEYS, "topology"):
            if key in data:
                raise fail(
                    "training_only",
                    cls._gang_why,
                    "remove it; a compute service scales with service.replicas, each replica its own pod; "
                    "a multi-node job is `kind: training` and a multi-node service `kind: inference`, "
                    "with resources.nodes",
                    at=key,
                )
        return data

    @model_validator(mode="before")
    @classmethod
    def _pool_list(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("pool"), list):
            data = dict(data)
            pools = list(dict.fromkeys(data.pop("pool")))
            if len(pools) == 1:
                data["pool"] = pools[0]
            elif pools:
                data["any_of_pools"] = pools
        return data

    @field_validator("gpu_share", mode="after")
    @classmethod
    def _gpu_share(cls, value: str | None) -> str | None:
        """The grammar (gpuctl.spec.share): a MIG profile or a GPU memory size, refused here otherwise."""
        if value is not None:
            try:
                parse_share(value)
            except ValueError as exc:
                raise fail("gpu_share", str(exc), SHARE_FIX) from None
        return value

    @property
    def share(self) -> GpuShare | None:
        """`gpu-share` read (a MIG profile or memory bytes), None without one."""
        return None if self.gpu_share is None else parse_share(self.gpu_share)

    @model_validator(mode="after")
    def _one_slice(self) -> Resources:
        """`gpu-share` is one slice of one GPU (docs/sharing.md, "`gpu-share`"): with `gpu: 1` or no `gpu`
        (the earlier gpuctl's files say both); more GPUs and a share of one is a contradiction."""
        if self.gpu_share is not None and self.gpu > 1:
            raise fail(
                "gpu_share",
                f"gpu: {self.gpu} with gpu-share: {self.gpu_share} asks for {self.gpu} GPUs and a slice "
                "of one",
                f"for one slice set gpu: 1 (or omit gpu); for {self.gpu} whole GPUs remove gpu-share",
                at="gpu",
            )
        return self

    @model_validator(mode="after")
    def _one_sizing(self) -> Resources:
        """gpu-share names a slice, gpuMemory lets gpuctl choose one (or whole GPUs): one of them."""
        if self.gpu_share is not None and self.gpu_memory is not None:
            raise fail(
                "gpu_memory",
                f"gpu-share: {self.gpu_share} and gpuMemory: {self.gpu_memory} both size the GPU",
                "keep one: gpuMemory (whole GPUs or a MIG slice that holds it, chosen from the pool's "
                "GPUs) or gpu-share (a slice you name)",
                at="gpuMemory",
            )
        return self

    @property
    def node_types(self) -> tuple[str, ...]:
        return self._node_types

    @field_validator("pool", mode="before")
    @classmethod
    def _pool(cls, value: Any) -> Any:
        return DEFAULT_POOL if value == "" else value

    @property
    def any_pool(self) -> bool:
        """The job names no single pool: a list of pools, or none with a GPU type or GPU models
        (placementConstraints.nodeTypes)."""
        unpinned = "pool" not in self.model_fields_set
        return bool(self.any_of_pools) or (unpinned and (self.gpu_type is not None or bool(self._node_types)))

    @property
    def pools_allowed(self) -> list[str] | None:
        """The pools the job may run in: [pool] when pinned, the list, or None for any pool (of its GPU
        type or models: the cluster's nodes decide which)."""
        if self.any_of_pools:
            return list(self.any_of_pools)
        return None if self.any_pool else [self.pool]

    @field_validator("gpu_type", mode="before")
    @classmethod
    def _gpu_type(cls, value: Any) -> Any:
        return None if value == "" else value


# Spellings of `resources.nodes` (Kubeflow Trainer's numNodes too).
GANG_NODES_KEYS = ("nodes", "numNodes", "num_nodes", "num-nodes")
_NODES_FIX = (
    "use resources.nodes: N: N pods, one per node, each with the gpu, cpu and memory above (per node, like "
    "Kubeflow's resourcesPerNode), e.g. nodes: 2 with gpu: 8 for 16 GPUs"
)


class GangResources(Resources):
    """`resources:` of the kinds that span nodes: `nodes: N` runs N pods (one per node, ranks 0..N-1),
    each requesting the block's gpu, cpu and memory: every amount is per node. `topology: rack` (a
    level of the pool's topology, docs/distributed.md) requires the N pods inside one such domain;
    without it Kueue prefers the smallest level that holds them."""

    nodes: PositiveInt = Field(1, validation_alias=aliases(*GANG_NODES_KEYS))
    topology: Text | None = None

    _gang_why: ClassVar[str | None] = None

    @field_validator("topology", mode="before")
    @classmethod
    def _topology(cls, value: Any) -> Any:
        return None if value == "" else value

    @model_validator(mode="after")
    def _gang(self) -> GangResources:
        if self.topology is not None and self.nodes == 1:
            raise fail(
                "topology_one_node",
                f"{self.topology} places the pods of a multi-node job together; this job has one node",
                "remove resources.topology, or set resources.nodes to 2 or more",
                at="topology",
            )
        if self.topology is not None and self.any_pool:
            raise fail(
                "topology_any_pool",
                f"{self.topology} is a level of one pool's topology; this job may run in several pools",
                "name one pool (resources.pool: P) or remove resources.topology",
                at="topology",
            )
        return self


def _refuse_replica_words(data: Any, why: str, fix: str) -> Any:
    """`replicas` (Deployment's word) and `workers` are what users try first: say what to write."""
    if isinstance(data, dict):
        for key in ("replicas", "workers", "world_size", "worldSize"):
            if key in data:
                raise fail("nodes", f"{key} is not a resources field: {why}", fix, at=key)
    return data


class TrainingResources(GangResources):
    """`resources:` of `kind: training`: a multi-node job's pods are its nodes (GangResources)."""

    @model_validator(mode="before")
    @classmethod
    def _replicas(cls, data: Any) -> Any:
        return _refuse_replica_words(data, "a training job's pods are its nodes", _NODES_FIX)


class InferenceResources(GangResources):
    """`resources:` of `kind: inference` (docs/serving.md): `nodes: N` makes each replica of the service a
    group
    of N pods, one per node, rank 0 the leader that serves (a LeaderWorkerSet, gpuctl.builders.inference);
    every amount is per pod."""

    @model_validator(mode="before")
    @classmethod
    def _replicas(cls, data: Any) -> Any:
        return _refuse_replica_words(
            data,
            "a service's replicas are service.replicas (or service.autoscaling)",
            "write service.replicas: R for R replicas, and resources.nodes: N for N pods (nodes) per replica",
        )


# The seed's other placementConstraints words, and what gpuctl writes instead.
_PLACEMENT_ELSEWHERE = {
    "schedulingClass": "the priority is job.priority: high | medium | low",
    "scheduling_class": "the priority is job.priority: high | medium | low",
    "toleratePreemptible": (
        "what may be preempted follows job.priority and, for a service, its floor "
        "(service.autoscaling.minReplicas: never preempted) and burst (docs/serving.md)"
    ),
    "tolerate_preemptible": "what may be preempted follows job.priority (docs/serving.md)",
}


class PlacementConstraints(SpecModel):
    """`placementConstraints:` (the product documents' words, docs/serving.md). `nodeTypes: [a10g, a100]`: the
    job may run in any pool whose GPU model is listed (gpuctl.domain.gpumodels.names_model: a100 is any
    A100, a100-80gb one of 80 GB), through the any-pool machinery (docs/queueing.md)."""

    node_types: list[Text] = Field([], validation_alias=aliases("nodeTypes", "node_types", "node-types"))

    @model_validator(mode="before")
    @classmethod
    def _elsewhere(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, why in _PLACEMENT_ELSEWHERE.items():
                if key in data:
                    raise fail(
                        "placement",
                        f"{key} is not a placement constraint in gpuctl",
                        f"remove it: {why}",
                        at=key,
                    )
        return data

    @field_validator("node_types", mode="before")
    @classmethod
    def _node_types(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("node_types")
    @classmethod
    def _named(cls, value: list[str]) -> list[str]:
        for i, t in enumerate(value):
            if not any(c.isalnum() for c in t):
                raise fail(
                    "node_types",
                    f"{show(t)} names no GPU model",
                    "list GPU models as nodes name them, e.g. nodeTypes: [a10g, a100-80gb, h100]",
                    at=f"[{i}]",
                )
        return list(dict.fromkeys(t.strip() for t in value))
