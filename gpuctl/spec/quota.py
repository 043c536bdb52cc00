"""`kind: quota`: per-namespace quotas, per-pool guarantees and the team's LimitRange."""

from __future__ import annotations

from decimal import Decimal
from itertools import pairwise
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from gpuctl.quantity import parse_quantity
from gpuctl.spec.fields import (
    DnsLabel,
    DnsLabelKey,
    KindModel,
    NonNegInt,
    NonNegQuantity,
    PositiveQuantity,
    SpecModel,
    Text,
    aliases,
    fail,
    none_to_empty_dict_values,
)
from gpuctl.spec.idle import IdleSpec


class QuotaMeta(SpecModel):
    """`quota:` — a quota's identity."""

    name: DnsLabel
    description: Text | None = None


def _pool_shorthand(value: Any) -> Any:
    """`pools: {training-pool: 4}` is shorthand for `{training-pool: {gpu: 4}}`."""
    if isinstance(value, dict):
        return {
            k: ({"gpu": v} if isinstance(v, int) and not isinstance(v, bool) else ({} if v is None else v))
            for k, v in value.items()
        }
    return value


class PoolGuarantee(SpecModel):
    """What a team is guaranteed inside one pool (the rest of its quota may land in any pool)."""

    gpu: NonNegInt = 0
    cpu: NonNegQuantity | None = None
    memory: NonNegQuantity | None = None


class LimitRangeResources(SpecModel):
    """CPU and memory amounts of one LimitRange field (`defaultRequest`, `default`, `max`)."""

    cpu: PositiveQuantity | None = None
    memory: PositiveQuantity | None = None

    def as_kubernetes(self) -> dict[str, str]:
        return {k: v for k, v in (("cpu", self.cpu), ("memory", self.memory)) if v is not None}


def _default_request() -> LimitRangeResources:
    """cpu 100m, memory 256Mi. A factory, not a module constant: an instance built at import builds the
    model's validator, which `defer_build` leaves to the first document of its kind (bench/reads.py)."""
    return LimitRangeResources(cpu="100m", memory="256Mi")


def _limit_range_switch(value: Any) -> Any:
    """`limitRange: false` turns the team's LimitRange off; `true` or nothing keeps the defaults."""
    if isinstance(value, bool):
        return {"enabled": value}
    return value


class LimitRange(SpecModel):
    """`limitRange:` — the LimitRange `gpuctl-defaults` of a team namespace (type Container). gpuctl's own
    jobs always set requests = limits; this covers pods made by hand (`kubectl run`), which would
    otherwise request nothing and so cost nothing against the team's quota. Defaults: defaultRequest
    cpu 100m, memory 256Mi; no default limit and no max unless given; `limitRange: false` for none."""

    enabled: bool = True
    default_request: LimitRangeResources = Field(
        default_factory=_default_request,
        validation_alias=aliases("defaultRequest", "default_request", "default-request"),
    )
    default_limit: LimitRangeResources | None = Field(
        None, validation_alias=aliases("default", "defaultLimit", "default_limit", "default-limit")
    )
    max: LimitRangeResources | None = None

    @model_validator(mode="after")
    def _ordered(self) -> LimitRange:
        """Kubernetes refuses defaultRequest > default > max; say so here, naming the field."""
        steps = [("defaultRequest", self.default_request), ("default", self.default_limit), ("max", self.max)]
        for res in ("cpu", "memory"):
            given = [(n, getattr(v, res)) for n, v in steps if v is not None and getattr(v, res) is not None]
            for (lo_name, lo), (hi_name, hi) in pairwise(given):
                if parse_quantity(lo) > parse_quantity(hi):
                    raise fail(
                        "limit_range_order",
                        f"{lo_name}.{res} {lo} is more than {hi_name}.{res} {hi}",
                        f"keep defaultRequest <= default <= max for {res}",
                    )
        return self


class QuotaEntry(SpecModel):
    """One namespace's quota. None means unlimited; `borrowing_limit` caps GPUs borrowed beyond `gpu`
    from idle teams (None = no cap, 0 = the quota is a hard cap)."""

    cpu: NonNegQuantity | None = None
    memory: NonNegQuantity | None = None
    gpu: NonNegInt | None = None
    borrowing_limit: NonNegInt | None = Field(
        None, validation_alias=aliases("borrowingLimit", "borrowing_limit", "borrowing-limit", "borrow")
    )
    pools: Annotated[dict[DnsLabelKey, PoolGuarantee], BeforeValidator(_pool_shorthand)] = {}
    limit_range: Annotated[LimitRange, BeforeValidator(_limit_range_switch)] = Field(
        default_factory=LimitRange, validation_alias=aliases("limitRange", "limit_range", "limit-range")
    )

    @model_validator(mode="after")
    def _pools_fit(self) -> QuotaEntry:
        total_gpu = sum(p.gpu for p in self.pools.values())
        if self.gpu is not None and total_gpu > self.gpu:
            raise fail(
                "pools_exceed",
                f"pool guarantees add up to {total_gpu} GPUs but the quota is gpu: {self.gpu}",
                f"lower the per-pool gpu values or raise `gpu` to at least {total_gpu}",
                at="pools",
            )
        for field in ("cpu", "memory"):
            limit = getattr(self, field)
            parts = [getattr(p, field) for p in self.pools.values() if getattr(p, field) is not None]
            if limit is not None and parts:
                total = sum((parse_quantity(q) for q in parts), Decimal(0))
                if total > parse_quantity(limit):
                    raise fail(
                        "pools_exceed",
                        f"pool guarantees add up to {total.normalize():f} {field} "
                        f"but the quota is {field}: {limit}",
                        f"lower the per-pool {field} values or raise `{field}`",
                        at="pools",
                    )
        return self


class QuotaSpec(KindModel):
    """`kind: quota`: per-namespace quotas. The top-level `default:` block is the quota of namespace
    `default` (as in the earlier gpuctl); `namespace: {default: ...}` is honoured too, but not both."""

    kind: Literal["quota"] = "quota"
    quota: QuotaMeta
    namespace: Annotated[dict[DnsLabelKey, QuotaEntry], BeforeValidator(none_to_empty_dict_values)] = Field(
        {}, validation_alias=aliases("namespace", "namespaces")
    )
    default: QuotaEntry | None = None
    # When its teams' jobs count as idle, in any pool, and what `gpuctl serve --idle` does
    # (docs/utilisation.md); None:
    # the pools' policies apply.
    idle: IdleSpec | None = None

    @field_validator("default")
    @classmethod
    def _one_default(cls, value: QuotaEntry | None, info: ValidationInfo) -> QuotaEntry | None:
        """Checked on `default` (not after the whole model) so it is reported alongside other errors."""
        if value is not None and "default" in (info.data.get("namespace") or {}):
            raise fail(
                "default_twice",
                "namespace default has two quotas: the top-level `default:` block "
                "and `namespace: {default: ...}`",
                "keep only one of them",
            )
        return value

    def entries(self) -> dict[str, QuotaEntry]:
        """Every namespace's quota, with the top-level `default:` block under key "default"."""
        out = dict(self.namespace)
        if self.default is not None:
            out["default"] = self.default
        return out
