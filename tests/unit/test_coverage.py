"""Which GPU pods on pool nodes no admitted Workload covers (gpuctl.domain.coverage), and the backstop in
`gpuctl serve` that reports them after a grace and evicts them when asked (gpuctl.server.backstop).

The objects are shaped like the API server's and Kueue's (a Job's Workload owned by the Job; a Deployment
pod's Workload owned by the pod; a StatefulSet's by the StatefulSet and its pods; Kueue's TAS annotation);
the real cluster: tests/integration/test_backstop.py.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuctl.constants import GPU_RESOURCE, KUEUE_WORKLOAD_ANNOTATION
from gpuctl.domain.coverage import Reason, uncovered_gpus_by_pool, uncovered_pods
from gpuctl.server.backstop import Backstop, default_interval
from gpuctl.server.metrics import build_registry
from gpuctl.server.wiring import default_cache
from tests.unit.test_metrics import admitted, cond, feed, node_obj, pod_obj, preempted, workload_obj

POOL = "training-pool"
NODES = {"g1": POOL, "g2": POOL, "i1": "inference-pool"}


def owned(obj: dict, kind: str, name: str, uid: str, controller: bool = True) -> dict:
    obj["metadata"].setdefault("ownerReferences", []).append(
        {"apiVersion": "x", "kind": kind, "name": name, "uid": uid, "controller": controller}
    )
    return obj


def job_pod(name: str, job_uid: str, node: str = "g1", gpus: int = 4, created: str = "2026-01-01T00:02:00Z"):
    p = owned(pod_obj(name, "team-a", node, gpus), "Job", "train", job_uid)
    p["metadata"]["creationTimestamp"] = created
    return p


def job_workload(job_uid: str, gpus: int = 4, count: int = 1, conditions: list[dict] | None = None) -> dict:
    wl = workload_obj("job-train-1", "team-a", gpus=gpus, count=count, admitted_pool=POOL,
                      conditions=admitted() if conditions is None else conditions)  # fmt: skip
    return owned(wl, "Job", "train", job_uid)


def finished() -> list[dict]:
    return [*admitted(), cond("Finished", "True", "Succeeded")]


def reasons(found) -> dict[str, Reason]:
    return {u.name: u.reason for u in found}


# ---------------------------------------------------------------------------------------------- the rule
def test_an_admitted_jobs_pods_are_covered():
    pods = [job_pod("train-0", "job-uid", gpus=4), job_pod("train-1", "job-uid", "g2", gpus=4)]
    assert uncovered_pods(pods, [job_workload("job-uid", gpus=4, count=2)], NODES) == []


def test_an_orphaned_pod_is_uncovered_whatever_its_workload_says():
    """kubectl delete job --cascade=orphan: the pod loses its owner, Kueue finishes the Workload."""
    pod = pod_obj("train-0", "team-a", "g1", 4)  # no ownerReferences left
    (u,) = uncovered_pods([pod], [job_workload("job-uid", conditions=finished())], NODES)
    assert (u.reason, u.gpus, u.pool, u.node, u.workload) == (Reason.NO_WORKLOAD, 4, POOL, "g1", "")
    assert "holds 4 GPU(s) on node g1 of pool training-pool" in u.describe()


def test_a_bare_pod_bound_by_node_name_is_uncovered_and_only_on_pool_nodes():
    pods = [pod_obj("rogue", "default", "g2", 2), pod_obj("elsewhere", "default", "cpu-node", 2)]
    assert reasons(uncovered_pods(pods, [], NODES)) == {"rogue": Reason.NO_WORKLOAD}


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (pod_obj("cpu-only", "default", "g1", 0), "no GPUs"),
        (pod_obj("done", "default", "g1", 4, phase="Succeeded"), "finished"),
        (pod_obj("failed", "default", "g1", 4, phase="Failed"), "finished"),
        (pod_obj("pending", "default", None, 4, phase="Pending"), "not bound"),
    ],
)
def test_pods_that_hold_no_gpus_are_never_reported(pod, why):
    assert uncovered_pods([pod], [], NODES) == [], why


def test_a_pod_of_a_finished_preempted_or_pending_workload_is_not_admitted():
    for conditions in (finished(), preempted(), []):
        wl = job_workload("job-uid", conditions=conditions)
        (u,) = uncovered_pods([job_pod("train-0", "job-uid")], [wl], NODES)
        assert u.reason == Reason.NOT_ADMITTED and u.workload == "job-train-1"


def test_a_pod_claiming_a_real_jobs_controller_gets_no_more_gpus_than_the_workload_reserved():
    """The forged ownerReference of issue 26 (correct uid, controller: true): the real pod keeps its
    place (older), the forged one is beyond the admission."""
    real = job_pod("train-0", "job-uid", created="2026-01-01T00:02:00Z")
    forged = job_pod("sneaky", "job-uid", "g2", created="2026-01-01T00:03:00Z")
    found = uncovered_pods([forged, real], [job_workload("job-uid")], NODES)
    assert reasons(found) == {"sneaky": Reason.BEYOND_ADMISSION}


def test_a_forged_workload_annotation_is_held_to_the_same_budget():
    real = job_pod("train-0", "job-uid", created="2026-01-01T00:02:00Z")
    forged = pod_obj("sneaky", "team-a", "g2", 4)
    forged["metadata"]["annotations"] = {KUEUE_WORKLOAD_ANNOTATION: "job-train-1"}
    forged["metadata"]["creationTimestamp"] = "2026-01-01T00:05:00Z"
    assert reasons(uncovered_pods([real, forged], [job_workload("job-uid")], NODES)) == {
        "sneaky": Reason.BEYOND_ADMISSION
    }
    # Alone, a pod that names an admitted Workload takes its place (JobSet-like owners: the TAS annotation).
    assert uncovered_pods([forged], [job_workload("job-uid")], NODES) == []
    # In another namespace the name means nothing.
    forged["metadata"]["namespace"] = "team-b"
    assert reasons(uncovered_pods([forged], [job_workload("job-uid")], NODES)) == {
        "sneaky": Reason.NO_WORKLOAD
    }


def test_a_terminating_pod_yields_its_place_to_its_replacement():
    """A Job replaces a pod being deleted at once: the replacement is covered, the pod on its way out is
    the one over the budget (and it is terminating: the backstop never evicts it)."""
    old = job_pod("train-0", "job-uid", created="2026-01-01T00:02:00Z")
    old["metadata"]["deletionTimestamp"] = "2026-01-01T00:10:00Z"
    new = job_pod("train-0b", "job-uid", "g2", created="2026-01-01T00:09:00Z")
    (u,) = uncovered_pods([old, new], [job_workload("job-uid")], NODES)
    assert u.name == "train-0" and u.terminating and u.reason == Reason.BEYOND_ADMISSION


def test_deployment_pods_are_covered_by_their_own_workloads_statefulsets_by_theirs():
    d0 = owned(pod_obj("web-abc", "team-a", "i1", 1), "ReplicaSet", "web-5f", "rs-uid")
    d1 = owned(pod_obj("web-def", "team-a", "i1", 1), "ReplicaSet", "web-5f", "rs-uid")
    wl0 = workload_obj("pod-web-abc", "team-a", gpus=1, admitted_pool="inference-pool", conditions=admitted())
    owned(wl0, "Pod", "web-abc", d0["metadata"]["uid"], controller=False)
    # web-def's own Workload is still pending: it is not covered by web-abc's.
    wl1 = owned(workload_obj("pod-web-def", "team-a", gpus=1), "Pod", "web-def", d1["metadata"]["uid"], False)
    assert reasons(uncovered_pods([d0, d1], [wl0, wl1], NODES)) == {"web-def": Reason.NOT_ADMITTED}
    s0 = owned(pod_obj("nb-0", "team-a", "g1", 2), "StatefulSet", "nb", "sts-uid")
    s1 = owned(pod_obj("nb-1", "team-a", "g2", 2), "StatefulSet", "nb", "sts-uid")
    wl = workload_obj("statefulset-nb", "team-a", gpus=2, count=2, admitted_pool=POOL, conditions=admitted())
    owned(wl, "StatefulSet", "nb", "sts-uid", controller=False)
    for p in (s0, s1):
        owned(wl, "Pod", p["metadata"]["name"], p["metadata"]["uid"], controller=False)
    assert uncovered_pods([s0, s1], [wl], NODES) == []


def test_a_node_moved_to_another_pool_does_not_uncover_its_admitted_pods():
    """GPUs are compared in total: an admin relabelling a node must not turn admitted work into evictions."""
    pod = job_pod("train-0", "job-uid", node="i1")
    assert uncovered_pods([pod], [job_workload("job-uid")], NODES) == []


def test_gpus_by_pool():
    pods = [pod_obj("a", "default", "g1", 2), pod_obj("b", "default", "g2", 4), pod_obj("c", "x", "i1", 1)]
    assert uncovered_gpus_by_pool(uncovered_pods(pods, [], NODES)) == {POOL: 6, "inference-pool": 1}


# ---------------------------------------------------------------------------------------------- the backstop
class Recorder:
    """Lists nothing, watches nothing (the cache is fed by hand); records the evictions and Events posted,
    answering evictions with `evict_status` (201, or an API error status)."""

    def __init__(self, evict_status: int = 201):
        self.posts: list[tuple[str, dict]] = []
        self.evict_status = evict_status
        self.lock = threading.Lock()

    def get(self, api_path: str, **query: Any) -> dict:
        return {"items": [], "metadata": {"resourceVersion": "1"}}

    def watch(self, api_path: str, **kw: Any):
        return iter(())

    def request(self, method: str, api_path: str, body: Any = None, **kw: Any) -> dict:
        from gpuctl.cluster import ApiError

        with self.lock:
            self.posts.append((api_path, body))
        if api_path.endswith("/eviction") and self.evict_status >= 400:
            raise ApiError(self.evict_status, "TooManyRequests", "Cannot evict pod: disruption budget")
        return {}

    def evictions(self) -> list[str]:
        return [p for p, _ in self.posts if p.endswith("/eviction")]

    def events(self) -> list[dict]:
        return [b for p, b in self.posts if p.endswith("/events")]


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def make_backstop(
    evict: bool = False, evict_status: int = 201, leader=None, evict_terminating: bool = True, record=None
):
    c, clock = Recorder(evict_status), Clock()
    cache = default_cache(c, metrics=False, backstop=True)
    b = Backstop(
        c,
        cache,
        grace=10,
        evict=evict,
        evict_after=30,
        leader=leader,
        clock=clock,
        wall=clock,
        evict_terminating=evict_terminating,
        record=record,
    )
    for inf in cache.informers.values():
        inf.relist()
    feed(cache, "Node", node_obj("g1", POOL), node_obj("g2", POOL), node_obj("cpu", None))
    return c, cache, b, clock


def test_backstop_reports_after_the_grace_only_and_once():
    c, cache, b, clock = make_backstop()
    feed(cache, "Pod", pod_obj("rogue", "default", "g1", 4))
    assert b.scan() == []  # seen, within the grace
    clock.t += 9.9
    assert b.scan() == []
    clock.t += 0.2
    (u,) = b.scan()
    assert u.key == "default/rogue"
    (ev,) = c.events()
    assert ev["reason"] == "GpuctlUncoveredGPUs" and ev["type"] == "Warning"
    assert ev["involvedObject"] == {
        **{"apiVersion": "v1", "kind": "Pod", "name": "rogue"},
        **{"namespace": "default", "uid": "uid-default-rogue"},
    }
    clock.t += 100
    assert len(b.scan()) == 1 and len(c.events()) == 1  # one Event per pod
    assert c.evictions() == []  # eviction is off by default


def test_a_pod_covered_within_the_grace_is_never_reported():
    """The healthy window: the pod's event arrives before its Workload's admission."""
    c, cache, b, clock = make_backstop(evict=True)
    feed(cache, "Pod", job_pod("train-0", "job-uid", node="g1"))
    b.scan()
    clock.t += 5
    feed(cache, "Workload", job_workload("job-uid"))
    for _ in range(10):
        clock.t += 10
        assert b.scan() == []
    assert c.posts == []


def test_the_grace_starts_again_when_a_pod_was_covered_in_between():
    _, cache, b, clock = make_backstop()
    pod = job_pod("train-0", "job-uid")
    feed(cache, "Pod", pod)
    b.scan()
    clock.t += 8
    feed(cache, "Workload", job_workload("job-uid"))
    b.scan()
    clock.t += 1
    cache["Workload"].apply_event("MODIFIED", job_workload("job-uid", conditions=finished()))
    b.scan()
    clock.t += 8
    assert b.scan() == []  # 8 s uncovered this time, not 17
    clock.t += 3
    assert [u.reason for u in b.scan()] == [Reason.NOT_ADMITTED]


def test_eviction_after_evict_after_through_the_eviction_api_with_the_uid_and_retried_when_blocked():
    c, cache, b, clock = make_backstop(evict=True, evict_status=429)
    feed(cache, "Pod", pod_obj("rogue", "default", "g1", 4))
    b.scan()
    clock.t += 20
    b.scan()
    assert c.evictions() == []  # reported, not yet evicted
    clock.t += 10
    b.scan()
    (path,) = c.evictions()
    assert path == "/api/v1/namespaces/default/pods/rogue/eviction"
    body = next(bd for p, bd in c.posts if p == path)
    assert body["apiVersion"] == "policy/v1" and body["deleteOptions"]["preconditions"] == {
        "uid": "uid-default-rogue"
    }
    assert b.evictions["blocked"] == 1
    clock.t += 5
    b.scan()
    assert len(c.evictions()) == 1  # not hammered
    c.evict_status = 201
    clock.t += 30
    b.scan()
    assert len(c.evictions()) == 2 and b.evictions["evicted"] == 1
    assert [e["reason"] for e in c.events()] == ["GpuctlUncoveredGPUs", "GpuctlEvictedUncovered"]


def _deleting(name: str, at: float) -> dict:
    pod = pod_obj(name, "default", "g1", 4)
    pod["metadata"]["deletionTimestamp"] = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return pod


def test_a_pod_being_deleted_gets_its_termination_grace_then_the_grace_and_is_never_evicted():
    """A deleted Job's pod shuts down after its Workload is gone: its deletionTimestamp (30 s away here)
    is waited for, then the 10 s grace. With the termination rule off (--no-evict-terminating) it is
    only reported, whatever --evict-uncovered says."""
    c, cache, b, clock = make_backstop(evict=True, evict_terminating=False)
    feed(cache, "Pod", _deleting("leaving", clock.t + 30))
    b.scan()
    clock.t += 39
    assert b.scan() == []
    clock.t += 2
    assert len(b.scan()) == 1
    clock.t += 600
    assert len(b.scan()) == 1 and c.evictions() == []  # already going away: never evicted


def test_a_terminating_pod_past_its_bound_has_its_termination_ended_recorded_and_counted():
    """Issue 43, attack 2: a stopped job's pod deleted with terminationGracePeriodSeconds 7200 keeps its
    GPUs while Kueue counts none. By default its termination is ended once reported (the allowance,
    300 s, then the 10 s grace): an eviction with gracePeriodSeconds 0 and its uid, a Warning Event, a
    `reclaimed` record for the audit trail and gpuctl_uncovered_terminations_ended_total."""
    records = []
    c, cache, b, clock = make_backstop(record=records.append)
    pod = _deleting("slow", clock.t + 7200)
    pod["metadata"]["deletionGracePeriodSeconds"] = 7200
    pod["metadata"]["labels"] = {"job-name": "train"}
    feed(cache, "Pod", pod)
    b.scan()
    clock.t += 309
    assert b.scan() == [] and c.evictions() == []
    clock.t += 2
    (u,) = b.scan()
    assert (u.deletion_grace, u.job) == (7200, "train")
    (path,) = c.evictions()
    assert path == "/api/v1/namespaces/default/pods/slow/eviction"
    body = next(bd for p, bd in c.posts if p == path)
    assert body["deleteOptions"] == {"gracePeriodSeconds": 0, "preconditions": {"uid": "uid-default-slow"}}
    assert [e["reason"] for e in c.events()] == ["GpuctlUncoveredGPUs", "GpuctlEndedTermination"]
    assert "its termination is ended now" in c.events()[0]["message"]
    (r,) = records
    assert (r.namespace, r.job, r.action, r.actor, r.uid) == (
        "default",
        "train",
        "reclaimed",
        "gpuctl-serve (backstop)",
        "uid-default-slow",
    )
    assert "held 4 GPU(s) on node g1" in r.reason and "311 s of a 7200 s termination grace" in r.reason
    assert b.terminations_ended == {"ended": 1, "gone": 0, "error": 0}
    counter = next(f for f in b.own_families() if f.name == "gpuctl_uncovered_terminations_ended")
    assert {s.labels["result"]: s.value for s in counter.samples} == {"ended": 1, "gone": 0, "error": 0}
    clock.t += 5
    b.scan()
    assert len(c.evictions()) == 1  # not hammered while the API server's delete reaches the cache
    # Gone meanwhile (404): counted as such, no Event, no record.
    c.evict_status = 404
    clock.t += 30
    b.scan()
    assert b.terminations_ended["gone"] == 1 and len(records) == 1 and len(c.events()) == 2


def test_a_long_termination_grace_buys_at_most_the_allowance():
    """terminationGracePeriodSeconds of a day would keep GPUs off Kueue's books for a day: capped at 300 s."""
    _, cache, b, clock = make_backstop()
    feed(cache, "Pod", _deleting("slow", clock.t + 86400))
    b.scan()
    clock.t += 309
    assert b.scan() == []
    clock.t += 2
    assert len(b.scan()) == 1
    # A deadline already passed (the kubelet did not stop it): just the grace.
    feed(cache, "Pod", _deleting("stuck", clock.t - 100))
    b.scan()
    clock.t += 10.5
    assert {u.name for u in b.scan()} == {"slow", "stuck"}


def test_only_the_leader_scans_and_a_new_leader_measures_its_own_grace():
    leading = [False]
    _, cache, b, clock = make_backstop(evict=True, leader=lambda: leading[0])
    feed(cache, "Pod", pod_obj("rogue", "default", "g1", 4))
    for _ in range(5):
        clock.t += 20
        assert b.scan() == []
    leading[0] = True
    assert b.scan() == []
    clock.t += 10
    assert len(b.scan()) == 1


def test_metrics_pool_series_on_the_leader_and_zero_when_all_is_covered():
    _, cache, b, clock = make_backstop()
    feed(cache, "Pod", pod_obj("rogue", "default", "g1", 4), pod_obj("rogue2", "default", "g2", 2))
    registry, _, _ = build_registry(cache, process=False, backstop=b)

    def scrape() -> dict:
        out = {}
        from prometheus_client import generate_latest

        for fam in text_string_to_metric_families(generate_latest(registry).decode()):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    b.scan()
    m = scrape()
    assert m[("gpuctl_pool_uncovered_gpus", (("pool", POOL),))] == 0
    clock.t += 11
    b.scan()
    m = scrape()
    assert m[("gpuctl_pool_uncovered_gpus", (("pool", POOL),))] == 6
    assert m[("gpuctl_uncovered_pods", (("pool", POOL), ("reason", "no_workload")))] == 2
    assert m[("gpuctl_uncovered_pods", (("pool", POOL), ("reason", "beyond_admission")))] == 0
    assert m[("gpuctl_uncovered_evictions_total", (("result", "evicted"),))] == 0
    assert m[("gpuctl_backstop_last_scan_timestamp_seconds", ())] == clock.t


def test_a_cache_not_yet_listed_reports_nothing():
    c = Recorder()
    cache = default_cache(c, metrics=False, backstop=True)
    b = Backstop(c, cache, grace=0)
    assert b.scan() == []


def test_parameters():
    c = Recorder()
    with pytest.raises(ValueError, match="Pod"):
        Backstop(c, default_cache(c, metrics=False), grace=1)
    with pytest.raises(ValueError, match="evict_after"):
        Backstop(c, default_cache(c, metrics=False, backstop=True), grace=10, evict_after=5)
    assert default_interval(60) == 10 and default_interval(2) == 1 and default_interval(20) == 5


def test_trimmed_pods_keep_what_the_rule_reads():
    """serve's cache trims pods: owner, the TAS annotation, deletion time and GPUs survive the trim."""
    from gpuctl.server.cache import trim_pod

    pod = job_pod("train-0", "job-uid")
    pod["metadata"]["annotations"] = {KUEUE_WORKLOAD_ANNOTATION: "job-train-1", "other": "x" * 100}
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:10:00Z"
    t = trim_pod(pod)
    assert t["metadata"]["annotations"] == {KUEUE_WORKLOAD_ANNOTATION: "job-train-1"}
    assert t["metadata"]["ownerReferences"][0]["uid"] == "job-uid"
    (u,) = uncovered_pods([t], [], NODES)
    assert u.terminating and u.gpus == 4
    assert GPU_RESOURCE in t["spec"]["containers"][0]["resources"]["requests"]


def test_a_quiet_cluster_is_not_scanned_again_but_the_grace_still_runs(monkeypatch):
    """The rule runs again only after a Pod, Workload or Node event; meanwhile the last answer ages."""
    import gpuctl.server.backstop as backstop_mod

    calls = []
    real = backstop_mod.uncovered_pods
    monkeypatch.setattr(backstop_mod, "uncovered_pods", lambda *a: calls.append(1) or real(*a))
    _, cache, b, clock = make_backstop()
    feed(cache, "Pod", pod_obj("rogue", "default", "g1", 4))
    b.scan()
    for _ in range(5):
        clock.t += 3
        b.scan()
    assert len(calls) == 1 and len(b.reported()) == 1
    feed(cache, "Pod", pod_obj("rogue2", "default", "g2", 1))
    b.scan()
    assert len(calls) == 2


def test_a_costly_scan_stretches_the_interval():
    _, _, b, _ = make_backstop()
    assert b.next_wait() == b.interval
    b.last_scan_seconds = 0.3  # 20,000 GPU pods on a slow machine
    assert b.next_wait() == pytest.approx(15.0)
