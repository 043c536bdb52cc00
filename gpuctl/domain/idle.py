"""Idle reclamation's rules (docs/utilisation.md). Pure: the policy an admin sets on a pool or a
quota, which one a job falls under, whether the job is idle by it (with the measured evidence), whether a
keep holds it, and what is done. gpuctl serve's reclaimer (gpuctl.server.idle) reads the cluster and
Prometheus, and acts.

The policy (`idle:` of `kind: pool` and `kind: quota`, gpuctl.spec.idle), kept as JSON on the pool's
ResourceFlavor / the team's ClusterQueue (constants.IDLE_POLICY_ANNOTATION): cluster-scoped objects only an
admin writes. A job falls under its team's quota's policy when there is one, else its pool's, else none:
off. Per job kind, an action and when it is due (activity under `floor` for `after`):

| kind | actions | default |
|---|---|---|
| notebook | stop (Kueue spec.active=false: volume and Service stay; `gpuctl resume`), report, none | stop |
| inference, compute | floor (scale to the service's floor), zero (scale to 0), report, none | floor |
| training (gangs too) | stop, report, none | report |
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from gpuctl.constants import (
    IDLE_ACTIONS,
    IDLE_AFTER_SECONDS,
    IDLE_FLOOR,
    IDLE_KEEP_MAX_SECONDS,
    IDLE_MIN_COVERAGE,
    IDLE_POLICY_ANNOTATION,
    KEEP_UNTIL_ANNOTATION,
)
from gpuctl.domain.objects import annotations, parse_time
from gpuctl.domain.utilisation import DeviceUse, gpus_text, percent_text
from gpuctl.domain.workload import format_duration


class IdleAction(StrEnum):
    STOP = "stop"
    FLOOR = "floor"
    ZERO = "zero"
    REPORT = "report"
    NONE = "none"


# What each job kind may be given, the default first (constants.IDLE_ACTIONS, which the spec checks too).
ACTIONS: Mapping[str, tuple[IdleAction, ...]] = {
    k: tuple(IdleAction(a) for a in actions) for k, actions in IDLE_ACTIONS.items()
}
DEFAULT_ACTIONS: Mapping[str, IdleAction] = {k: v[0] for k, v in ACTIONS.items()}
# What acting means: the job gives GPUs back (report and none do nothing to it).
ACTING = (IdleAction.STOP, IdleAction.FLOOR, IdleAction.ZERO)


class PolicyError(ValueError):
    """A stored policy gpuctl cannot read (edited by hand): the job is left alone and the error reported."""


@dataclass(frozen=True)
class KindRule:
    """When a job of one kind counts as idle and what is done."""

    action: str
    after: int = IDLE_AFTER_SECONDS  # seconds under the floor before anything happens
    floor: float = IDLE_FLOOR  # activity (0-1) under which a GPU is idle


@dataclass(frozen=True)
class IdlePolicy:
    """A pool's or a quota's idle policy. `source` says whose ("pool a100", "quota team-a")."""

    rules: Mapping[str, KindRule]
    dry_run: bool = False
    keep_max: int = IDLE_KEEP_MAX_SECONDS
    source: str = ""

    def rule(self, kind: str) -> KindRule | None:
        """The kind's rule, None when the policy does nothing to the kind (action none)."""
        r = self.rules.get(kind)
        return r if r is not None and r.action != IdleAction.NONE else None

    def as_dict(self) -> dict[str, Any]:
        """The stored (and shown) form: every kind spelled out."""
        return {
            "dryRun": self.dry_run,
            "keepMax": self.keep_max,
            "kinds": {k: asdict(r) for k, r in sorted(self.rules.items())},
        }

    def annotation(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))


def policy(
    kinds: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    after: int = IDLE_AFTER_SECONDS,
    floor: float = IDLE_FLOOR,
    dry_run: bool = False,
    keep_max: int = IDLE_KEEP_MAX_SECONDS,
    source: str = "",
) -> IdlePolicy:
    """A policy with every job kind: each kind's own `action`, `after`, `floor` where given, else the
    policy's `after` and `floor` and the kind's default action. Raises PolicyError for an action the kind
    cannot take."""
    rules = {}
    for kind, allowed in ACTIONS.items():
        given = dict((kinds or {}).get(kind) or {})
        action = given.get("action") or DEFAULT_ACTIONS[kind]
        if action not in allowed:
            raise PolicyError(
                f"{kind}: action {action!r} is not one of {', '.join(a.value for a in allowed)}"
            )
        rules[kind] = KindRule(
            action=IdleAction(action).value,
            after=int(given.get("after", after)),
            floor=float(given.get("floor", floor)),
        )
    return IdlePolicy(rules=rules, dry_run=dry_run, keep_max=keep_max, source=source)


def read_policy(obj: Mapping[str, Any] | None, source: str) -> IdlePolicy | None:
    """The policy stored on a ResourceFlavor or ClusterQueue; None when it has none. PolicyError when the
    annotation is not one gpuctl wrote (hand-edited)."""
    text = annotations(obj).get(IDLE_POLICY_ANNOTATION)
    if not text:
        return None
    try:
        d = json.loads(text)
        if not isinstance(d, dict) or not isinstance(d.get("kinds", {}), dict):
            raise ValueError("not an object with kinds")
        return policy(
            d.get("kinds"),
            dry_run=bool(d.get("dryRun", False)),
            keep_max=int(d.get("keepMax", IDLE_KEEP_MAX_SECONDS)),
            source=source,
        )
    except (ValueError, TypeError) as e:
        raise PolicyError(f"{source}: {IDLE_POLICY_ANNOTATION} is not a policy gpuctl wrote: {e}") from None


def effective(quota: IdlePolicy | None, pool: IdlePolicy | None) -> IdlePolicy | None:
    """The policy a job falls under: its team's quota's, else its pool's, else none (off). One policy wins
    whole: its rules, dry run and keep cap together."""
    return quota if quota is not None else pool


# ----------------------------------------------------------------------------- keep
def keep_until(controller: Mapping[str, Any] | None) -> float | None:
    """Until when `gpuctl keep` holds the job (its controller's runwhere.ai/keep-until), or None."""
    return parse_time(annotations(controller).get(KEEP_UNTIL_ANNOTATION))


def keep_clamped(until: float | None, now: float, keep_max: int) -> float | None:
    """The keep-until to write back when `until` passes now + keep_max (set by hand, or the cap lowered
    since): now + keep_max. None when it is within the cap (or absent). serve writes it the first time it
    sees such a value, so no keep outlasts the cap from when it was seen."""
    if until is None or until <= now + keep_max:
        return None
    return now + keep_max


# ----------------------------------------------------------------------------- the verdict
@dataclass(frozen=True)
class Verdict:
    """Whether a job's GPUs were idle over the rule's window, and the evidence (what the history record,
    the Event and the metric carry)."""

    idle: bool
    window: int
    floor: float
    peak: float | None  # the highest activity of any of its devices in any step of the window
    mean: float | None  # the mean activity of its devices over the window
    coverage: float  # the share of the window's steps measured, for its least measured device
    devices: int
    gpus: float = 0.0
    why: str = ""  # why it is not idle, when it is not

    def evidence(self) -> str:
        """GPU activity peak 0.3%, mean 0.1% over 30m on 2 GPUs (floor 1%; 100% of the window measured)."""
        return (
            f"GPU activity peak {percent_text(self.peak)}, mean {percent_text(self.mean)} over "
            f"{format_duration(self.window)} on {self.devices} device(s), {gpus_text(self.gpus)} GPU(s) "
            f"(floor {percent_text(self.floor)}; {self.coverage:.0%} of the window measured)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "evidence": self.evidence()}


def judge(
    devices: Sequence[DeviceUse],
    rule: KindRule,
    *,
    now: float,
    step: int,
    gpus: float = 0.0,
    since: float | None = None,
) -> Verdict:
    """Idle when every device's peak in every step of the last `rule.after` seconds is under the floor and
    at least IDLE_MIN_COVERAGE of those steps were measured for each device. No series at all, or too few
    steps (an exporter or Prometheus down), is no evidence: not idle. since: when the job's newest pod
    started; a job running for less than the window is not idle yet (a resumed notebook keeps its pod's
    name, and so its series from before the stop: those do not count)."""
    window, floor = rule.after, rule.floor
    start = now - window
    expected = max(1, round(window / max(step, 1)))
    peaks = [[v for t, v in d.peaks if start < t <= now] for d in devices]
    coverage = min((min(1.0, len(p) / expected) for p in peaks), default=0.0)
    every = [v for p in peaks for v in p]
    peak = max(every, default=None)
    means = [d.activity for d in devices if d.activity is not None]
    mean = sum(means) / len(means) if means else None

    def verdict(idle: bool, why: str = "") -> Verdict:
        return Verdict(idle, window, floor, peak, mean, coverage, len(devices), gpus, why)

    if not devices:
        return verdict(False, "no GPU series for its pods (dcgm-exporter not scraped, or no GPU given)")
    if since is not None and now - since < window:
        return verdict(False, f"running for {format_duration(now - since)}, under {format_duration(window)}")
    if coverage < IDLE_MIN_COVERAGE:
        return verdict(False, f"only {coverage:.0%} of the last {format_duration(window)} measured")
    if peak is not None and peak >= floor:
        return verdict(False, f"active: peak {percent_text(peak)} in the last {format_duration(window)}")
    return verdict(True)


# ----------------------------------------------------------------------------- the decision
@dataclass(frozen=True)
class Decision:
    """What the reclaimer does with one job on this pass."""

    action: str  # the rule's action (stop, floor, zero, report)
    acts: bool  # True: the action is carried out now (not a dry run, not report, not kept)
    verdict: Verdict
    kept_until: float | None = None
    dry_run: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def due(self) -> bool:
        """Idle by the policy and not kept: reported, and acted on unless a dry run or report only."""
        return self.verdict.idle and self.kept_until is None


def decide(
    rule: KindRule, verdict: Verdict, *, dry_run: bool, kept_until: float | None, now: float
) -> Decision:
    """The rule's action when the verdict is idle and no keep holds the job; carried out unless the policy
    is a dry run or the action only reports."""
    kept = kept_until if kept_until is not None and kept_until > now else None
    acts = verdict.idle and kept is None and not dry_run and rule.action in ACTING
    return Decision(action=rule.action, acts=acts, verdict=verdict, kept_until=kept, dry_run=dry_run)


def target_replicas(action: str, replicas: int, floor: int) -> int | None:
    """A service's replicas after its action: `floor` (its floor: an autoscaled service's minReplicas, else
    1) or 0; None when that changes nothing (already there or below)."""
    want = floor if action == IdleAction.FLOOR else 0 if action == IdleAction.ZERO else None
    if want is None or replicas <= want:
        return None
    return want
