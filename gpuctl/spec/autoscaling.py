"""`service.autoscaling:` an inference or compute service that Kubernetes' HorizontalPodAutoscaler scales
between `minReplicas` (the floor, inside the team's quota) and `maxReplicas` (the floor plus a burst that
borrows idle GPUs and yields first) on the load per replica (docs/serving.md)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gpuctl.spec.fields import NonNegInt, PositiveInt, SpecModel, aliases, fail, show

METRICS = ("concurrency", "rps")
TARGET_FIX = "use a positive number of requests per replica, e.g. targetConcurrency: 10 (or target: 10)"


def _target(value: Any) -> Any:
    """A positive number with at most 3 decimals (the HPA's quantity is in thousandths)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise fail("autoscaling_target", f"{show(value)} is not a number", TARGET_FIX)
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise fail("autoscaling_target", f"{show(value)} is not a number", TARGET_FIX) from None
    if not number.is_finite() or number <= 0:
        raise fail("autoscaling_target", f"{show(value)} is not a positive number", TARGET_FIX)
    if number != number.quantize(Decimal("0.001")):
        raise fail("autoscaling_target", f"{show(value)} has more than 3 decimals", TARGET_FIX)
    return number


class Autoscaling(SpecModel):
    """`service.autoscaling` — minReplicas, maxReplicas and the per-replica target of the metric.

    `targetConcurrency: T` is `metric: concurrency` with `target: T` (the seed document's words);
    `metric: rps` takes `target:` in requests per second per replica."""

    min_replicas: NonNegInt = Field(
        1, validation_alias=aliases("minReplicas", "min_replicas", "min-replicas")
    )
    max_replicas: PositiveInt = Field(validation_alias=aliases("maxReplicas", "max_replicas", "max-replicas"))
    metric: Literal["concurrency", "rps"] = "concurrency"
    target: Decimal | None = None
    target_concurrency: Decimal | None = Field(
        None, validation_alias=aliases("targetConcurrency", "target_concurrency", "target-concurrency")
    )

    @field_validator("metric", mode="before")
    @classmethod
    def _metric(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in METRICS:
            return value.strip().lower()
        raise fail(
            "autoscaling_metric",
            f"unknown metric {show(value)}",
            "use concurrency (requests in flight per replica) or rps (requests per second per replica)",
        )

    @field_validator("target", "target_concurrency", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return _target(value)

    @model_validator(mode="after")
    def _consistent(self) -> Autoscaling:
        if self.max_replicas <= self.min_replicas:
            raise fail(
                "autoscaling_range",
                f"maxReplicas {self.max_replicas} is not above minReplicas {self.min_replicas}: "
                "nothing to scale",
                "set maxReplicas above minReplicas, or use service.replicas for a fixed-size service",
                at="maxReplicas",
            )
        tc = self.target_concurrency
        if tc is not None and self.metric != "concurrency":
            raise fail(
                "autoscaling_target",
                f"targetConcurrency is a target for metric: concurrency, not {self.metric}",
                f"write the {self.metric} target as target: {tc}",
                at="targetConcurrency",
            )
        if tc is not None and self.target is not None and tc != self.target:
            raise fail(
                "autoscaling_target",
                f"targetConcurrency {tc} and target {self.target} disagree",
                "keep one of them",
                at="target",
            )
        if tc is None and self.target is None:
            raise fail(
                "autoscaling_target",
                f"no target for metric {self.metric}",
                "add targetConcurrency: <requests in flight per replica>, e.g. 10"
                if self.metric == "concurrency"
                else "add target: <requests per second per replica>, e.g. 5",
            )
        return self

    @property
    def per_replica(self) -> Decimal:
        """The target of the metric per replica."""
        value = self.target if self.target is not None else self.target_concurrency
        assert value is not None  # _consistent
        return value

    @property
    def burst_max(self) -> int:
        """Replicas above the floor at most."""
        return self.max_replicas - self.min_replicas

    @property
    def floor_load(self) -> Decimal:
        """The load the floor serves at the target: minReplicas x target (the HPA scales the burst on what
        is above it)."""
        return self.min_replicas * self.per_replica
