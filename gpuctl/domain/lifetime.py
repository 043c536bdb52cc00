"""A job's life as `describe job` tells it, the way kubectl's describe does: when it started and ended,
how its containers last ended (exit code), and the Events about it.

- Start: a Job's status.startTime (the job controller sets it when Kueue unsuspends the Job, again
  after each resume, as `kubectl describe job` prints it); for the other kinds (Deployment,
  StatefulSet, LeaderWorkerSet: services and notebooks) the earliest start of its current pods.
- End: a Job's status.completionTime, or when its Failed condition became true. A service never ends.
- Exit: the latest non-zero exit of a container of its pods (state.terminated, else the previous run's
  lastState.terminated), else the latest exit 0; None while no container has ended.
- Events: the Events (core/v1 involvedObject or events.k8s.io regarding) about the job's objects, by
  uid (its controller, its pods and their owners, its Workloads), oldest first, as kubectl's Events
  table lists them; how many times and since when (kubectl's "5m (x3 over 10m)").
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, NamedTuple

from gpuctl.domain.objects import condition, meta, parse_time


class Times(NamedTuple):
    start: str | None  # RFC 3339, as the API server wrote it
    end: str | None

    def duration(self, now: float) -> tuple[float | None, bool]:
        """Seconds from start to end (to now while it runs), and whether it still runs."""
        start = parse_time(self.start)
        if start is None:
            return None, False
        end = parse_time(self.end)
        return (end if end is not None else now) - start, end is None


def _earliest_start(pods: Iterable[Mapping[str, Any]]) -> str | None:
    starts = [t for p in pods if (t := (p.get("status") or {}).get("startTime"))]
    return min(starts, key=lambda t: parse_time(t) or 0.0) if starts else None


def _true_since(obj: Mapping[str, Any], ctype: str) -> str | None:
    c = condition(obj, ctype)
    return c.get("lastTransitionTime") if c.get("status") == "True" else None


def job_times(resource: str, obj: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> Times:
    """When the job (its controller `obj` of kind `resource`, with its pods) started and ended."""
    st = obj.get("status") or {}
    if resource == "Job":
        return Times(
            st.get("startTime") or _earliest_start(pods),
            st.get("completionTime") or _true_since(obj, "Failed"),
        )
    return Times(_earliest_start(pods), None)


class Exit(NamedTuple):
    code: int
    pod: str
    container: str
    reason: str  # the kubelet's: Completed, Error, OOMKilled, ...
    finished: str | None


def job_exit(pods: Iterable[Mapping[str, Any]]) -> Exit | None:
    """How the job's containers last ended (the latest failure, else the latest success); None when none
    has ended yet."""
    ended = []
    for p in pods:
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
            if term:
                ended.append(
                    Exit(
                        int(term.get("exitCode") or 0),
                        meta(p).get("name", ""),
                        cs.get("name", ""),
                        term.get("reason") or "",
                        term.get("finishedAt"),
                    )
                )
    if not ended:
        return None
    failed = [e for e in ended if e.code != 0]
    return max(failed or ended, key=lambda e: parse_time(e.finished) or 0.0)


# ----------------------------------------------------------------------------- Events
def regarding(ev: Mapping[str, Any]) -> Mapping[str, Any]:
    """The object an Event is about (core/v1 involvedObject, events.k8s.io regarding)."""
    return ev.get("regarding") or ev.get("involvedObject") or {}


def event_times(ev: Mapping[str, Any]) -> tuple[float | None, float | None, int]:
    """(first seen, last seen, count) of an Event, core/v1 or events.k8s.io, a series or not."""
    series = ev.get("series") or {}
    first = ev.get("firstTimestamp") or ev.get("deprecatedFirstTimestamp") or ev.get("eventTime")
    last = (
        series.get("lastObservedTime")
        or ev.get("lastTimestamp")
        or ev.get("deprecatedLastTimestamp")
        or ev.get("eventTime")
        or first
        or meta(ev).get("creationTimestamp")
    )
    count = int(series.get("count") or ev.get("count") or ev.get("deprecatedCount") or 1)
    return parse_time(first or last), parse_time(last), count


def job_events(events: Iterable[Mapping[str, Any]], uids: Collection[str]) -> list[Mapping[str, Any]]:
    """The Events about the objects with these uids, oldest first (by when last seen, kubectl's order)."""
    mine = [ev for ev in events if regarding(ev).get("uid") in uids]
    return sorted(mine, key=lambda ev: event_times(ev)[1] or 0.0)


def event_source(ev: Mapping[str, Any]) -> str:
    """kubectl describe's FROM: the reporting component (core/v1 source.component, else the reporting
    controller of an Event written through events.k8s.io: core/v1's reportingComponent, events.k8s.io's
    reportingController)."""
    src = (ev.get("source") or {}).get("component")
    return src or ev.get("reportingComponent") or ev.get("reportingController") or ""


__all__ = ["Exit", "Times", "event_source", "event_times", "job_events", "job_exit", "job_times", "regarding"]
