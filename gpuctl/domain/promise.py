"""A bound gpuctl keeps (docs/queueing.md "A bound gpuctl keeps"): the start bounds `gpuctl serve`
records on waiting one-pod Jobs (pure).

The first bound a waiting Job gets ("starts by ... at the latest", gpuctl.domain.estimate) is written on its
Workload (runwhere.ai/starts-by) and stays: it is the promise `describe job` shows, and the time serve's
set-aside (gpuctl.domain.setaside) holds a node for the job from SET_ASIDE_BOUND_LEAD_SECONDS before. A job
whose start has no bound gets no promise (the estimate says why); a later estimate never moves it.

Whether a recorded bound was kept (`recorded_bound`, the one reading `describe job`, `get jobs -o wide`, the
REST API and serve's gpuctl_start_bounds_total share): kept when Kueue reserved quota for the Workload at or
before it, missed when it did so after it or the Workload still waits past it, pending until then.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from enum import StrEnum
from typing import Any, NamedTuple

from gpuctl.constants import ESTIMATE_STEP_SLACK_SECONDS, STARTS_BY_ANNOTATION
from gpuctl.domain.objects import annotations, name, namespace, owner_ref, parse_time, rfc3339
from gpuctl.domain.workload import IN_QUEUE, job_pool, quota_reserved_at, workload_state


class Outcome(StrEnum):
    """What became of a recorded start bound (module docstring)."""

    PENDING = "Pending"  # still waiting, the bound not passed yet
    KEPT = "Kept"  # quota reserved at or before the bound
    MISSED = "Missed"  # quota reserved after it, or still waiting past it


def bound_outcome(starts_by: float, reserved_at: float | None, waiting: bool, now: float) -> Outcome | None:
    """The rule (module docstring) on a Workload's facts: its bound, when its quota was reserved (None: it
    holds none), whether it waits in the queue. None: neither waiting nor holding quota (stopped, or
    finished without Kueue's reservation), so the bound is not judged."""
    if reserved_at is not None:
        return Outcome.KEPT if reserved_at <= starts_by else Outcome.MISSED
    if not waiting:
        return None
    return Outcome.MISSED if now > starts_by else Outcome.PENDING


class RecordedBound(NamedTuple):
    """The start bound a Workload was first shown (runwhere.ai/starts-by) and what became of it."""

    starts_by: float
    outcome: Outcome | None

    @property
    def text(self) -> str:
        """RFC 3339 (the date and zone with the time)."""
        return rfc3339(self.starts_by)

    @staticmethod
    def fields(bound: RecordedBound | None) -> dict[str, str | None]:
        """The fields `get jobs -o json` (status) and the REST API's rows carry: startsBy (RFC 3339) and
        bound (Pending, Kept or Missed); None each without a recorded bound or an outcome."""
        return {
            "startsBy": bound.text if bound else None,
            "bound": str(bound.outcome) if bound and bound.outcome else None,
        }


def starts_by_of(wl: Mapping[str, Any] | None) -> float | None:
    """The recorded bound (runwhere.ai/starts-by), any kind of Workload; None: none recorded."""
    return parse_time(annotations(wl).get(STARTS_BY_ANNOTATION)) if wl else None


def recorded_bound(wl: Mapping[str, Any] | None, now: float) -> RecordedBound | None:
    """The Workload's recorded bound and its outcome at `now`; None when it has none."""
    by = starts_by_of(wl)
    if wl is None or by is None:
        return None
    return RecordedBound(by, bound_outcome(by, quota_reserved_at(wl), workload_state(wl) in IN_QUEUE, now))


def one_pod_job(wl: Mapping[str, Any]) -> bool:
    """A Job's Workload of one pod set of one pod: what a promise is held for (a Deployment's or a
    StatefulSet's pods do not tolerate a set-aside; a gang has its own)."""
    sets = (wl.get("spec") or {}).get("podSets") or []
    return (
        len(sets) == 1 and int(sets[0].get("count") or 1) == 1 and (owner_ref(wl) or {}).get("kind") == "Job"
    )


def new_promises(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    workloads: Sequence[Mapping[str, Any]],
    cluster_queues: Sequence[Mapping[str, Any]],
    cohort: Callable[[], Mapping[str, Any] | None],
    *,
    pools: Collection[str] | None,
    now: float,
    slack: float = ESTIMATE_STEP_SLACK_SECONDS,
) -> dict[str, float]:
    """Workload ns/name -> the start bound to record: each waiting one-pod Job of `pools` (None: all) that
    has none yet and whose start the estimate bounds (not one Kueue is admitting now). `cohort`: read only
    when there is such a job."""
    todo = [
        w
        for w in workloads
        if workload_state(w) in IN_QUEUE
        and one_pod_job(w)
        and STARTS_BY_ANNOTATION not in annotations(w)
        and (pools is None or job_pool(w) in pools)
    ]
    if not todo:
        return {}
    from gpuctl.domain.demand import workload_demand  # noqa: PLC0415 - lazy: only with work to bound
    from gpuctl.domain.estimate import estimate  # noqa: PLC0415
    from gpuctl.domain.explain import Snapshot  # noqa: PLC0415

    snap = Snapshot.build(
        nodes=nodes, pods=pods, workloads=workloads, cluster_queues=cluster_queues, cohort=cohort(), now=now
    )
    out: dict[str, float] = {}
    for w in todo:
        d = workload_demand(w)
        e = estimate(snap, d, now=now, verdict=snap.verdict(d), slack=slack)
        if e.starts_by is not None and not e.now:
            out[f"{namespace(w)}/{name(w)}"] = e.starts_by
    return out
