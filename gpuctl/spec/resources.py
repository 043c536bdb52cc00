"""`resources:`: what each pod of a job requests and where it may run (pools, GPU type, tolerations)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gpuctl.constants import DEFAULT_POOL
from gpuctl.spec.fields import (
    DnsLabel,
    LabelValue,
    NonNegInt,
    PositiveQuantity,
    SpecModel,
    Text,
    aliases,
    fail,
    show,
)

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
    # sched-b (issue 23): `pool: [P, Q]`, two or more pools (one is the same as `pool: P`).
    any_of_pools: list[DnsLabel] = []
    gpu: NonNegInt = Field(0, validation_alias=aliases("gpu", "accelerator_count", "accelerator-count"))
    gpu_type: LabelValue | None = Field(None, validation_alias=aliases("gpuType", "gpu_type", "gpu-type"))
    cpu: PositiveQuantity
    memory: PositiveQuantity
    gpu_share: Text | None = Field(None, validation_alias=aliases("gpuShare", "gpu_share", "gpu-share"))
    tolerations: list[Toleration] = []

    @field_validator("tolerations", mode="before")
    @classmethod
    def _tolerations(cls, value: Any) -> Any:
        return [value] if isinstance(value, str | dict) else value

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

    @model_validator(mode="after")
    def _one_slice(self) -> Resources:
        """`gpu-share` is one slice of one GPU (issue 32, docs/sharing.md): with `gpu: 1` or no `gpu`
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

    @field_validator("pool", mode="before")
    @classmethod
    def _pool(cls, value: Any) -> Any:
        return DEFAULT_POOL if value == "" else value

    @property
    def any_pool(self) -> bool:
        """The job names no single pool: a list of pools, or none with a GPU type."""
        return bool(self.any_of_pools) or ("pool" not in self.model_fields_set and self.gpu_type is not None)

    @property
    def pools_allowed(self) -> list[str] | None:
        """The pools the job may run in: [pool] when pinned, the list, or None for any pool (of its GPU
        type)."""
        if self.any_of_pools:
            return list(self.any_of_pools)
        return None if self.any_pool else [self.pool]

    @field_validator("gpu_type", mode="before")
    @classmethod
    def _gpu_type(cls, value: Any) -> Any:
        return None if value == "" else value
