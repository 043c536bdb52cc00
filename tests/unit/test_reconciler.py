"""The pool capacity reconciler: what triggers it, what it writes, and what it never touches."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from gpuctl.constants import COHORT_NAME, GPU_RESOURCE, GPU_UNITS, QUOTA_GPU, Labels
from gpuctl.domain.pools import desired_flavor
from gpuctl.domain.teams import desired_cohort
from gpuctl.server.reconciler import Reconciler, capacity_fingerprint, slice_fingerprint
from gpuctl.server.wiring import default_cache
from queues import PoolCapacity, PoolGuarantee, TeamQuota, cluster_queue, cohort, resource_flavor
from tests.unit.test_metrics import node_obj


class RecordingCluster:
    """Lists nothing, watches nothing; records applies (optionally failing the first `fail` ones)."""

    def __init__(self, fail: int = 0):
        self.applied: list[dict] = []
        self.fail = fail
        self.lock = threading.Lock()

    def get(self, api_path: str, **query: Any) -> dict:
        return {"items": [], "metadata": {"resourceVersion": "1"}}

    def watch(self, api_path: str, **kw: Any):
        return iter(())

    def apply(self, obj: dict) -> dict:
        with self.lock:
            if self.fail > 0:
                self.fail -= 1
                raise ConnectionError("apiserver unavailable")
            self.applied.append(obj)
        return obj


TEAM = TeamQuota("team-b", "q", gpu=8, pools={"training-pool": PoolGuarantee(gpu=8)})


def make(fail: int = 0, *, cohort_obj: dict | str | None = "default", debounce: float = 0.5, **kw: Any):
    c = RecordingCluster(fail)
    cache = default_cache(c, metrics=False)
    rec = Reconciler(c, cache, debounce=debounce, **kw)
    for inf in cache.informers.values():
        inf.relist()
    # As gpuctl creates it: tolerating its own pool taint (else the reconciler would re-create it).
    cache["ResourceFlavor"].apply_event("ADDED", desired_flavor("training-pool", []))
    cache["ClusterQueue"].apply_event("ADDED", cluster_queue(TEAM, ["training-pool"]))
    for i in (1, 2):
        cache["Node"].apply_event("ADDED", node_obj(f"g{i}", "training-pool", 8))
    if cohort_obj == "default":
        cohort_obj = cohort([PoolCapacity("training-pool", 16, "192", "2199023255552")], [TEAM])
    if cohort_obj is not None:
        cohort_obj = {**cohort_obj, "metadata": {**cohort_obj["metadata"], "resourceVersion": "1"}}
        cache["Cohort"].apply_event("ADDED", cohort_obj)
    return c, cache, rec


def gpus_of(c: dict) -> int:
    """GPUs of budget the Cohort lends beyond the team quotas (the pools' GPUs less the quotas)."""
    (fl,) = c["spec"]["resourceGroups"][0]["flavors"]
    return int(next(r["nominalQuota"] for r in fl["resources"] if r["name"] == QUOTA_GPU)) // GPU_UNITS


def test_unchanged_capacity_writes_nothing() -> None:
    c, _, rec = make()
    assert rec.reconcile_once() == "unchanged"
    assert c.applied == []


def test_a_node_joining_writes_the_desired_cohort() -> None:
    c, cache, rec = make()
    cache["Node"].apply_event("ADDED", node_obj("g3", "training-pool", 4))
    assert rec.reconcile_once() == "applied"
    (applied,) = c.applied
    assert applied == desired_cohort(
        cache["Node"].list(), cache["ResourceFlavor"].list(), cache["ClusterQueue"].list()
    )
    assert gpus_of(applied) == 16 + 4 - 8  # the team's quota is its own budget
    assert applied["metadata"]["labels"][Labels.MANAGED_BY] == "gpuctl"


@pytest.mark.parametrize(
    "change",
    [
        lambda n: n["metadata"]["labels"].update({Labels.POOL: "other-pool"}),
        lambda n: n["status"]["conditions"][0].update({"status": "False"}),
        lambda n: n["spec"].update({"unschedulable": True}),
        lambda n: n["status"]["allocatable"].update({GPU_RESOURCE: "4"}),
        lambda n: n["status"]["allocatable"].update({"memory": "512Gi"}),
    ],
    ids=["pool label", "NotReady", "cordoned", "GPUs", "memory"],
)
def test_capacity_changes_move_the_fingerprint(change) -> None:
    a, b = node_obj("n", "training-pool"), node_obj("n", "training-pool")
    change(b)
    assert capacity_fingerprint(a) != capacity_fingerprint(b)


def test_heartbeats_and_other_labels_do_not_trigger() -> None:
    _, cache, rec = make()
    n = node_obj("g1", "training-pool", 8)
    n["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T02:00:00Z"
    n["metadata"]["labels"]["team"] = "x"
    rec._first_trigger = None
    cache["Node"].apply_event("MODIFIED", n)
    assert rec._first_trigger is None
    n["status"]["allocatable"][GPU_RESOURCE] = "2"
    cache["Node"].apply_event("MODIFIED", n)
    assert rec._first_trigger is not None and "g1" in rec.last_reason


def test_a_missing_cohort_is_not_created() -> None:
    c, _, rec = make(cohort_obj=None)
    assert rec.reconcile_once() == "missing"
    assert c.applied == []


def test_a_cohort_not_managed_by_gpuctl_is_never_written() -> None:
    foreign = cohort([PoolCapacity("training-pool", 1)])
    foreign["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "someone-else"}
    c, cache, rec = make(cohort_obj=foreign)
    cache["Node"].apply_event("ADDED", node_obj("g3", "training-pool", 4))
    assert rec.reconcile_once() == "foreign"
    assert c.applied == []


def test_objects_without_the_managed_by_label_are_ignored() -> None:
    """A ResourceFlavor or ClusterQueue that is not gpuctl's adds no pool and no guarantee."""
    c, cache, rec = make()
    assert c.applied == []
    stranger = resource_flavor("stranger-pool")
    stranger["metadata"]["labels"] = {}
    cache["ResourceFlavor"].apply_event("ADDED", stranger)
    cq = cluster_queue(TeamQuota("x", "q", pools={"training-pool": PoolGuarantee(gpu=4)}), ["training-pool"])
    cq["metadata"]["labels"] = {}
    cache["ClusterQueue"].apply_event("ADDED", cq)
    assert rec.reconcile_once() == "unchanged"
    assert c.applied == []


def test_nothing_happens_before_every_informer_has_listed() -> None:
    c = RecordingCluster()
    cache = default_cache(c, metrics=False)
    rec = Reconciler(c, cache)
    cache["Cohort"].apply_event("ADDED", cohort([PoolCapacity("training-pool", 99)]))
    assert rec.reconcile_once() == "not_synced"
    assert c.applied == []


def test_a_failed_apply_is_counted_and_retried() -> None:
    c, cache, rec = make(fail=1)
    cache["Node"].apply_event("ADDED", node_obj("g3", "training-pool", 4))
    assert rec.reconcile_once() == "error"
    assert rec.reconcile_once() == "applied"
    assert rec.results["error"] == 1 and rec.results["applied"] == 1
    assert len(c.applied) == 1


class Clock:
    """The reconciler's clock, moved by the test: debounce and max_delay are judged on it, not on the
    machine's load."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds


def settled(clock: Clock, **kw: Any):
    """make() on `clock`, its set-up's own triggers reconciled (nothing to change) and gone."""
    c, cache, rec = make(clock=clock, **kw)
    clock.tick(kw.get("max_delay", 2.0))
    assert rec.poll() == "unchanged" and rec.poll() is None
    return c, cache, rec


def test_bursts_are_debounced_into_one_apply() -> None:
    clock = Clock()
    c, cache, rec = settled(clock, debounce=0.5, max_delay=10, resync=3600)
    for i in range(3, 23):  # a rack of 20 nodes joins, one every 20 ms
        clock.tick(0.02)
        cache["Node"].apply_event("ADDED", node_obj(f"g{i}", "training-pool", 8))
        assert rec.poll() is None  # never while the burst goes on
    clock.tick(0.49)
    assert rec.poll() is None  # 0.49 s of quiet: not yet
    clock.tick(0.02)
    assert rec.poll() == "applied"
    assert len(c.applied) == 1 and gpus_of(c.applied[0]) == 22 * 8 - 8
    # From the first event: 19 more events 20 ms apart, then the 0.5 s debounce (and 10 ms).
    assert rec.latency._sum.get() == pytest.approx(19 * 0.02 + 0.51)
    assert rec.poll() is None  # nothing pending any more


def test_a_long_burst_is_applied_after_max_delay() -> None:
    clock = Clock()
    c, cache, rec = settled(clock, debounce=0.25, max_delay=0.5, resync=3600)
    applied_at = None
    for i in range(3, 100):  # a change every 62.5 ms (exact in binary): never 250 ms of quiet
        cache["Node"].apply_event("ADDED", node_obj(f"g{i}", "training-pool", 8))
        if rec.poll() == "applied":
            applied_at = i
            break
        clock.tick(0.0625)
    assert applied_at == 3 + 8  # 0.5 s after the first change, not after the burst
    assert len(c.applied) == 1


def test_the_loop_reconciles_a_trigger_in_its_thread() -> None:
    """run(): the start-up reconcile, then a trigger, applied by the reconciler's own thread."""
    c, cache, rec = make(debounce=0.05, resync=3600)
    stop = threading.Event()
    rec.start(stop)
    try:
        _wait(lambda: rec.results["unchanged"] >= 1, "the start-up reconcile")
        cache["Node"].apply_event("ADDED", node_obj("g3", "training-pool", 8))
        _wait(lambda: c.applied, "the new node's capacity applied")
        assert gpus_of(c.applied[0]) == 16
    finally:
        stop.set()


def _wait(cond, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_hand_edit_of_the_cohort_triggers_a_reconcile() -> None:
    clock = Clock()
    c, cache, rec = settled(clock, debounce=0.05, resync=3600)
    edited = cohort([PoolCapacity("training-pool", 100, "192", "2199023255552")], [TEAM])
    edited["metadata"]["resourceVersion"] = "2"
    cache["Cohort"].apply_event("MODIFIED", edited)
    clock.tick(0.05)
    assert rec.poll() == "applied"
    assert c.applied and gpus_of(c.applied[0]) == 8
    assert COHORT_NAME in rec.last_reason


# --- issue 32: the slices in use, written on the pool flavor for team members -------------------------


class PatchingCluster(RecordingCluster):
    def __init__(self) -> None:
        super().__init__()
        self.patched: list[tuple[str, dict]] = []

    def merge_patch(self, api_path: str, patch: dict, **kw: Any) -> dict:
        self.patched.append((api_path, patch))
        return patch


def _slice_pod(name: str, node: str, phase: str = "Running") -> dict:
    res = {"requests": {"nvidia.com/mig-1g.10gb": "1"}}
    return {
        "metadata": {"name": name, "namespace": "team-b", "resourceVersion": "1"},
        "spec": {"nodeName": node, "containers": [{"name": "m", "resources": res}]},
        "status": {"phase": phase},
    }


def test_slices_in_use_are_written_on_the_pool_flavor_when_they_change() -> None:
    c = PatchingCluster()
    cache = default_cache(c, metrics=True)
    rec = Reconciler(c, cache)
    for inf in cache.informers.values():
        inf.relist()
    cache["ResourceFlavor"].apply_event("ADDED", desired_flavor("training-pool", []))
    mig = node_obj("m1", "training-pool", 0)
    mig["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "14"
    cache["Node"].apply_event("ADDED", mig)
    for i in range(3):
        cache["Pod"].apply_event("ADDED", _slice_pod(f"p{i}", "m1"))
    cache["Pod"].apply_event("ADDED", _slice_pod("done", "m1", phase="Succeeded"))
    assert rec.reconcile_once() == "applied"  # no Cohort here; the flavor is written all the same
    assert c.patched == [
        (
            "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/training-pool",
            {"metadata": {"annotations": {"runwhere.ai/slices-used": '{"nvidia.com/mig-1g.10gb":3}'}}},
        )
    ]
    # Once the flavor says so, nothing more is written; a pod binding or ending changes it again.
    flavor = desired_flavor("training-pool", [])
    flavor["metadata"].setdefault("annotations", {})["runwhere.ai/slices-used"] = (
        '{"nvidia.com/mig-1g.10gb":3}'
    )
    cache["ResourceFlavor"].apply_event("MODIFIED", flavor)
    rec.reconcile_once()
    assert len(c.patched) == 1
    # What of a pod triggers: its slices binding or ending; not its other changes, nor whole-GPU pods.
    p0 = _slice_pod("p0", "m1")
    assert slice_fingerprint(p0) != slice_fingerprint(_slice_pod("p0", "m1", phase="Succeeded"))
    assert slice_fingerprint(p0) != slice_fingerprint({**p0, "spec": {**p0["spec"], "nodeName": ""}})
    assert slice_fingerprint(p0) == slice_fingerprint({**p0, "status": {"phase": "Running", "podIP": "1"}})
    whole = {
        "spec": {
            "nodeName": "g1",
            "containers": [{"name": "m", "resources": {"limits": {GPU_RESOURCE: "1"}}}],
        }
    }
    assert slice_fingerprint(whole) is None
    cache["Pod"].apply_event("MODIFIED", _slice_pod("p0", "m1", phase="Succeeded"))
    rec.reconcile_once()
    assert (
        c.patched[-1][1]["metadata"]["annotations"]["runwhere.ai/slices-used"]
        == '{"nvidia.com/mig-1g.10gb":2}'
    )
