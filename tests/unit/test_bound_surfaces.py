"""A recorded start bound on every surface (docs/queueing.md "A bound gpuctl keeps"): the one rule of
gpuctl.domain.promise (kept when Kueue reserved quota at or before it, missed when after it or still
waiting past it), read by `get jobs -o wide|json`, the REST API's rows, `describe job` and serve's
gpuctl_start_bounds_total (each Workload counted once)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from gpuctl.cli.get import WIDE_COLUMNS, _job_columns
from gpuctl.cli.objects import job_cells, job_objects
from gpuctl.constants import STARTS_BY_ANNOTATION
from gpuctl.domain.promise import Outcome, bound_outcome, recorded_bound
from gpuctl.server import metrics
from gpuctl.server.api.routes.jobs import row_item
from gpuctl.server.metrics import build_registry
from gpuctl.server.wiring import default_cache
from gpuctl.service.jobs import JobFacts, JobRow
from tests.unit.test_metrics import T0_EPOCH, NoCluster, admitted, preempted, scrape, val, workload_obj

BY = "2026-01-01T00:02:00Z"  # T0 + 120 s
BY_EPOCH = T0_EPOCH + 120


def _bounded(name: str, by: str | None = BY, **kw: Any) -> dict:
    wl = workload_obj(name, "team-a", owner="Job", **kw)
    if by is not None:
        wl["metadata"]["annotations"] = {STARTS_BY_ANNOTATION: by}
    return wl


# ---------------------------------------------------------------------------- the rule
def test_kept_at_or_before_the_bound_missed_after_it_or_waiting_past_it() -> None:
    assert bound_outcome(100.0, 100.0, waiting=False, now=500.0) is Outcome.KEPT  # at the bound: kept
    assert bound_outcome(100.0, 99.0, waiting=False, now=500.0) is Outcome.KEPT
    assert bound_outcome(100.0, 101.0, waiting=False, now=500.0) is Outcome.MISSED
    assert bound_outcome(100.0, None, waiting=True, now=100.0) is Outcome.PENDING
    assert bound_outcome(100.0, None, waiting=True, now=100.5) is Outcome.MISSED
    assert bound_outcome(100.0, None, waiting=False, now=500.0) is None  # stopped: not judged


def test_recorded_bound_reads_the_annotation_and_the_quota_reservation() -> None:
    assert recorded_bound(_bounded("none", by=None), T0_EPOCH) is None
    assert recorded_bound(None, T0_EPOCH) is None
    waiting = recorded_bound(_bounded("w"), BY_EPOCH - 1)
    assert waiting is not None and (waiting.starts_by, waiting.outcome, waiting.text) == (
        BY_EPOCH,
        Outcome.PENDING,
        BY,
    )
    late = recorded_bound(_bounded("w"), BY_EPOCH + 1)
    assert late is not None and late.outcome is Outcome.MISSED
    kept = recorded_bound(_bounded("k", conditions=admitted("2026-01-01T00:01:40Z")), BY_EPOCH + 999)
    assert kept is not None and kept.outcome is Outcome.KEPT
    after = recorded_bound(_bounded("m", conditions=admitted("2026-01-01T00:02:01Z")), BY_EPOCH + 999)
    assert after is not None and after.outcome is Outcome.MISSED


# ---------------------------------------------------------------------------- get jobs, the REST API
class _Job:
    """What JobFacts reads of a gpuctl.service.jobs.Job."""

    def __init__(self, workload: dict | None, status: str):
        self.resource, self.status, self.position, self.workload = "Job", status, 1, workload
        self.obj = {"metadata": {"name": "j", "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z"},
                    "spec": {"template": {"spec": {"containers": [{"name": "main"}]}}}}  # fmt: skip


def _row(workload: dict | None, status: str, now: float) -> JobRow:
    r = JobRow(job_id="j", name="j", namespace="team-a", kind="training", status=status, ready="0/1",
               node="<none>", ip="<none>", age=5.0, pool="training-pool", labels={})  # fmt: skip
    r.owner = JobFacts(_Job(workload, status), None, now)  # type: ignore[arg-type]
    return r


def test_get_jobs_and_the_api_show_the_bound_and_its_outcome() -> None:
    rows = {
        "waiting": _row(_bounded("w"), "Queued", BY_EPOCH - 10),
        "late": _row(_bounded("w"), "Queued", BY_EPOCH + 10),
        "kept": _row(_bounded("k", conditions=admitted()), "Running", BY_EPOCH + 10),
        "none": _row(_bounded("n", by=None), "Queued", BY_EPOCH),
    }
    seen = {}
    for key, r in rows.items():
        [(obj, _)] = job_objects([r])
        st = obj["status"]
        seen[key] = (st["startsBy"], st["bound"], job_cells(obj, None)["BOUND"], row_item(r)["startsBy"],
                     row_item(r)["bound"])  # fmt: skip
    assert seen == {
        "waiting": (BY, "Pending", f"{BY} Pending", BY, "Pending"),
        "late": (BY, "Missed", f"{BY} Missed", BY, "Missed"),
        "kept": (BY, "Kept", f"{BY} Kept", BY, "Kept"),
        "none": (None, None, "-", None, None),
    }


def test_bound_is_a_wide_column() -> None:
    assert "BOUND" in WIDE_COLUMNS
    assert "BOUND" not in _job_columns([], wide=False)


# ---------------------------------------------------------------------------- the metric
def test_serve_counts_each_bound_once_kept_or_missed_per_pool(monkeypatch) -> None:
    clock = [BY_EPOCH - 60]  # serve's clock: a minute before BY
    fake = SimpleNamespace(time=lambda: clock[0], perf_counter=time.perf_counter)
    monkeypatch.setattr(metrics, "time", fake)
    cache = default_cache(NoCluster())
    registry, _, tracker = build_registry(cache, process=False)
    assert tracker is not None
    for inf in cache.informers.values():
        inf.relist()
    wl = cache["Workload"]

    def counted(m: dict, outcome: str) -> float | None:
        return val(m, "gpuctl_start_bounds_total", pool="training-pool", outcome=outcome)

    wl.apply_event("ADDED", _bounded("early", conditions=admitted("2026-01-01T00:01:40Z")))
    wl.apply_event("ADDED", _bounded("late", conditions=admitted("2026-01-01T00:02:30Z")))
    wl.apply_event("ADDED", _bounded("unbounded", by=None, conditions=admitted()))
    wl.apply_event("ADDED", _bounded("waits"))  # its bound passes while it waits: no event says so
    wl.apply_event("ADDED", _bounded("requeued", by="2999-01-01T00:00:00Z", conditions=preempted()))
    m = scrape(registry)
    assert (counted(m, "kept"), counted(m, "missed")) == (1, 1)
    clock[0] = BY_EPOCH + 1  # a scrape after BY finds "waits" still waiting: missed
    m = scrape(registry)
    assert (counted(m, "kept"), counted(m, "missed")) == (1, 2)
    # Later events count no Workload twice: "waits" admitted after its bound, "early" updated.
    wl.apply_event("MODIFIED", _bounded("waits", conditions=admitted("2026-01-01T00:05:00Z")))
    wl.apply_event("MODIFIED", _bounded("early", conditions=admitted("2026-01-01T00:01:40Z", ready=True)))
    m = scrape(registry)
    assert (counted(m, "kept"), counted(m, "missed")) == (1, 2)
    # A Workload finished when serve first lists it is history, not counted (as the wait histogram).
    finished = _bounded("done", conditions=[*admitted(), {"type": "Finished", "status": "True"}])
    wl.apply_event("ADDED", finished)
    assert counted(scrape(registry), "kept") == 1
