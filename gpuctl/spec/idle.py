"""`idle:` of `kind: pool` and `kind: quota` (docs/utilisation.md): when a job counts as idle and
what `gpuctl serve --idle` does then. Off without the block; with it, every job kind gets its default
(notebook: stop, inference and compute: floor, training: report) unless the block says otherwise:

```yaml
idle:
  after: 1h          # activity under `floor` this long (default 1h)
  floor: 1%          # activity under this is idle (default 1%; 0.01 is the same)
  dryRun: false      # true: report only, act on nothing
  keepMax: 8h        # `gpuctl keep JOB --for D` holds a job at most this long (default 8h)
  notebook: {action: stop, after: 30m}
  inference: {action: floor}      # or zero, report, none
  training: {action: report}      # or stop (gangs too), none
```
A quota's policy applies to its teams' jobs in every pool, ahead of the pools' own (gpuctl.domain.idle).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from gpuctl.constants import IDLE_ACTIONS, IDLE_AFTER_SECONDS, IDLE_FLOOR, IDLE_KEEP_MAX_SECONDS, Kind
from gpuctl.quantity import parse_duration
from gpuctl.spec.fields import SpecModel, aliases, fail, show

DURATION_FIX = "use a duration such as 30m, 1h, 1h30m or 90s"
FLOOR_FIX = "use a percentage such as 1% or 0.5%, or a ratio such as 0.01 (between 0 and 1)"


def _duration(value: Any) -> int:
    seconds = parse_duration(value)
    if seconds is None or seconds <= 0:
        raise fail("idle_duration", f"{show(value)} is not a positive duration", DURATION_FIX)
    return seconds


def _floor(value: Any) -> float:
    """1% / "0.5%" / 0.01 -> a ratio in (0, 1)."""
    if isinstance(value, bool):
        raise fail("idle_floor", f"{show(value)} is not a floor", FLOOR_FIX)
    try:
        if isinstance(value, str) and value.strip().endswith("%"):
            ratio = float(value.strip()[:-1]) / 100
        else:
            ratio = float(value)
    except (TypeError, ValueError):
        raise fail("idle_floor", f"{show(value)} is not a floor", FLOOR_FIX) from None
    if not 0 < ratio < 1:
        raise fail("idle_floor", f"{show(value)} is not between 0 and 100%", FLOOR_FIX)
    return ratio


IdleDuration = Annotated[int, BeforeValidator(_duration)]
Floor = Annotated[float, BeforeValidator(_floor)]


class IdleKind(SpecModel):
    """One job kind's rule: its action, and its own `after` / `floor` when not the block's."""

    action: str | None = None
    after: IdleDuration | None = None
    floor: Floor | None = None


class IdleSpec(SpecModel):
    """`idle:` (see the module's text)."""

    after: IdleDuration = IDLE_AFTER_SECONDS
    floor: Floor = IDLE_FLOOR
    dry_run: bool = Field(False, validation_alias=aliases("dryRun", "dry_run", "dry-run"))
    keep_max: IdleDuration = Field(
        IDLE_KEEP_MAX_SECONDS, validation_alias=aliases("keepMax", "keep_max", "keep-max")
    )
    notebook: IdleKind | None = None
    inference: IdleKind | None = None
    compute: IdleKind | None = None
    training: IdleKind | None = None

    @model_validator(mode="after")
    def _actions(self) -> IdleSpec:
        for kind, allowed in IDLE_ACTIONS.items():
            rule = getattr(self, kind.value)
            if rule is not None and rule.action is not None and rule.action not in allowed:
                raise fail(
                    "idle_action",
                    f"{kind.value}: action {show(rule.action)} is not one a {kind.value} can take",
                    f"use one of {', '.join(allowed)}",
                    at=f"{kind.value}.action",
                )
        return self

    def kinds(self) -> dict[str, dict[str, Any]]:
        """Per job kind, what the block says of it (gpuctl.domain.idle.policy fills in the rest)."""
        out = {}
        for kind in (Kind.NOTEBOOK, Kind.INFERENCE, Kind.COMPUTE, Kind.TRAINING):
            rule = getattr(self, kind.value)
            if rule is not None:
                out[kind.value] = {k: v for k, v in rule.model_dump().items() if v is not None}
        return out
