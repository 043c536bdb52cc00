"""`describe job`: start, end, duration, exit code and the job's Events, as kubectl's describe prints them
(gpuctl.domain.lifetime, gpuctl.service.lifetime; issue 42)."""

from __future__ import annotations

import contextlib
import io
import re

from gpuctl.cli.main import main as cli_main
from gpuctl.domain.lifetime import Times, event_source, event_times, job_events, job_exit, job_times
from tests.unit.test_consistency import NS, FakeApiServer, _cli_cluster, _team_objects, cond, job_obj, pod_obj

SPEC = {
    "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]
}


def _ended(code: int, reason: str, at: str, *, last: bool = False) -> dict:
    term = {"terminated": {"exitCode": code, "reason": reason, "finishedAt": at}}
    return {
        "name": "main",
        "state": {"waiting": {}} if last else term,
        **({"lastState": term} if last else {}),
    }


def _pod(name: str, job: dict, *statuses: dict, start: str | None = None) -> dict:
    p = pod_obj(name, job, SPEC, gated=False, node="gpu-node-1", phase="Failed")
    p["status"]["containerStatuses"] = list(statuses)
    if start:
        p["status"]["startTime"] = start
    return p


def test_a_jobs_times_are_its_status_or_its_pods() -> None:
    done = job_obj("d", SPEC, suspend=False, status={"startTime": "2026-01-01T00:01:00Z"})
    done["status"]["completionTime"] = "2026-01-01T00:11:30Z"
    assert job_times("Job", done, []) == Times("2026-01-01T00:01:00Z", "2026-01-01T00:11:30Z")
    assert Times("2026-01-01T00:01:00Z", "2026-01-01T00:11:30Z").duration(0.0) == (630.0, False)
    failed = job_obj("f", SPEC, suspend=False, status={"startTime": "2026-01-01T00:01:00Z"})
    failed["status"]["conditions"] = [{**cond("Failed"), "lastTransitionTime": "2026-01-01T00:02:00Z"}]
    assert job_times("Job", failed, []).end == "2026-01-01T00:02:00Z"
    # A service: its earliest pod's start, never an end; running for as long as now says.
    pods = [_pod("a", done, start="2026-01-01T00:05:00Z"), _pod("b", done, start="2026-01-01T00:03:00Z")]
    t = job_times("Deployment", {"status": {}}, pods)
    assert t == Times("2026-01-01T00:03:00Z", None)
    assert t.duration(1767225780.0 + 60) == (60.0, True)  # 00:04:00, one minute after the start
    assert Times(None, None).duration(0.0) == (None, False)


def test_the_exit_code_is_the_latest_failure_else_the_latest_exit() -> None:
    job = job_obj("j", SPEC, suspend=False)
    ok_late = _pod("ok", job, _ended(0, "Completed", "2026-01-01T00:09:00Z"))
    oom = _pod("oom", job, _ended(137, "OOMKilled", "2026-01-01T00:05:00Z", last=True))
    err = _pod("err", job, _ended(3, "Error", "2026-01-01T00:02:00Z"))
    assert job_exit([err, ok_late, oom])[:4] == (137, "oom", "main", "OOMKilled")  # lastState counts
    assert job_exit([ok_late])[:4] == (0, "ok", "main", "Completed")
    assert job_exit([pod_obj("r", job, SPEC, gated=False, node="n", phase="Running")]) is None


def _event(name: str, kind: str, uid: str, reason: str, last: str, count: int = 1, **extra) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "creationTimestamp": last},
        "involvedObject": {"kind": kind, "name": name.split(".")[0], "namespace": NS, "uid": uid},
        "type": "Normal",
        "reason": reason,
        "message": f"{reason} of {kind}  ",
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": last,
        "count": count,
        **extra,
    }


def test_events_about_the_job_oldest_first_with_their_counts() -> None:
    evs = [
        _event("x.1", "Pod", "uid-other", "Scheduled", "2026-01-01T00:00:01Z"),
        _event("j.2", "Job", "uid-j", "Completed", "2026-01-01T00:09:00Z"),
        _event("j.1", "Job", "uid-j", "SuccessfulCreate", "2026-01-01T00:00:05Z", 3),
        # events.k8s.io's shape, through core/v1: a series, reportingController, no lastTimestamp
        {
            "kind": "Event",
            "metadata": {"name": "w.1", "namespace": NS},
            "involvedObject": {"kind": "Workload", "uid": "uid-w"},
            "eventTime": "2026-01-01T00:00:02.000000Z",
            "series": {"count": 4, "lastObservedTime": "2026-01-01T00:00:03.000000Z"},
            "reportingComponent": "kueue",
            "reason": "QuotaReserved",
        },
    ]
    mine = job_events(evs, {"uid-j", "uid-w"})
    assert [e["reason"] for e in mine] == ["QuotaReserved", "SuccessfulCreate", "Completed"]
    first, last, count = event_times(mine[0])
    assert (last - first, count) == (1.0, 4)
    assert event_source(mine[0]) == "kueue"  # core/v1's reportingComponent (events.k8s.io's controller)


def test_describe_job_prints_start_end_duration_exit_code_and_events(monkeypatch) -> None:
    status = {"startTime": "2026-01-01T00:01:00Z", "completionTime": "2026-01-01T00:03:30Z", "succeeded": 1}
    job = job_obj("done", SPEC, suspend=False, status=status)
    job["status"]["conditions"] = [cond("Complete")]
    pod = _pod("done-x", job, _ended(0, "Completed", "2026-01-01T00:03:29Z"), start="2026-01-01T00:01:01Z")
    pod["status"]["phase"] = "Succeeded"
    events = [
        _event(
            "done.1",
            "Job",
            "uid-done",
            "SuccessfulCreate",
            "2026-01-01T00:01:00Z",
            source={"component": "job-controller"},
        ),
        _event(
            "done-x.1",
            "Pod",
            "uid-done-x",
            "Pulled",
            "2026-01-01T00:02:00Z",
            3,
            source={"component": "kubelet", "host": "n"},
        ),
        _event("other.1", "Pod", "uid-other", "Scheduled", "2026-01-01T00:01:00Z"),
    ]
    fake = FakeApiServer([*_team_objects(), job, pod, *events])
    out = io.StringIO()
    with _cli_cluster(monkeypatch, fake), contextlib.redirect_stdout(out):
        assert cli_main(["describe", "job", "done", "-n", NS]) == 0
    text = out.getvalue()
    lines = {m[1]: m[2] for m in re.finditer(r"^([A-Z][\w ]+):\s+(.*)$", text, re.M)}
    assert re.fullmatch(r"\w{3}, \d\d \w{3} 2026 \d\d:\d\d:\d\d [+-]\d{4}", lines["Start Time"]), lines
    assert "Completed At" in lines and "Failed At" not in lines
    assert (lines["Duration"], lines["Exit Code"]) == ("2m30s", "0 (Completed: pod done-x, container main)")
    # The Events table, last: the job's and its pod's, not another pod's; kubectl's columns and counts.
    events_part = text[text.index("\nEvents:\n") :].splitlines()[2:]
    assert [line.split()[:2] for line in events_part] == [
        ["Type", "Reason"],
        ["----", "------"],
        ["Normal", "SuccessfulCreate"],
        ["Normal", "Pulled"],
    ]
    assert re.search(r"Pulled\s+\S+ \(x3 over \S+\)\s+kubelet\s+Pulled of Pod$", events_part[3]), events_part
    assert events_part[2].split()[3] == "job-controller"
