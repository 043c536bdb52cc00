"""gpuctl.server.history: what serve's cache keeps is enough for the records, and a standby never writes."""

from __future__ import annotations

from gpuctl.domain.history import workload_records
from gpuctl.domain.multicluster import placement
from gpuctl.server.cache import trim_workload
from gpuctl.server.history import HistoryRecorder, trim_event
from gpuctl.server.wiring import default_cache
from tests.unit.test_history import PREEMPT_MSG, dispatched, wl
from tests.unit.test_metrics import NoCluster


def _raw():
    w = wl(
        [
            ("Preempted", "True", "InClusterQueue", PREEMPT_MSG, "2026-11-25T10:05:00Z"),
            ("Requeued", "False", "Deactivated", "", "2026-11-25T10:07:01Z"),
        ],
        managed=[
            {"manager": "kueue", "time": "2026-11-25T10:00:00Z", "fieldsV1": {"f:status": {}}},
            {
                "manager": "gpuctl-stop:bob",
                "time": "2026-11-25T10:07:00Z",
                "fieldsV1": {"f:spec": {"f:active": {}}},
            },
        ],
        resourceVersion="7",
    )
    w["spec"]["active"] = False
    return w


def test_the_trimmed_workload_still_names_the_preemptor_and_who_stopped_it():
    recs = workload_records(trim_workload(_raw()), uids={"u-high": ("team-a", "urgent")})
    got = {r.action: r.actor for r in recs}
    assert got["preempted"] == "job urgent" and got["stopped"] == "bob", got
    assert trim_workload(_raw())["metadata"]["managedFields"] == [
        {"manager": "gpuctl-stop:bob", "time": "2026-11-25T10:07:00Z", "active": True}
    ]


def test_the_trimmed_workload_still_names_the_worker_it_was_dispatched_to():
    """A MultiKueue manager's Workload in serve's cache: the admission record names the worker (the
    integration test saw it lost when the cache dropped status.clusterName), placement() reads the same."""
    w = trim_workload(
        dispatched(wl([("Admitted", "True", "Admitted", "", "2026-11-25T10:00:03Z")]), "worker-b")
    )
    (adm,) = [r for r in workload_records(w) if r.action == "admitted"]
    assert adm.reason.endswith("in cluster worker-b"), adm.reason
    where = placement(w)
    assert where is not None and (where.cluster, where.state) == ("worker-b", "Ready")


def test_events_are_trimmed_in_either_spelling():
    new = {
        "metadata": {"name": "e", "namespace": "team-a", "managedFields": [{}]},
        "regarding": {"kind": "Workload", "name": "w"},
        "note": "n",
        "reason": "Preempted",
        "eventTime": "2026-11-25T10:00:00.000001Z",
    }
    t = trim_event(new)
    assert t["involvedObject"] == {"kind": "Workload", "name": "w"} and t["message"] == "n"
    assert "managedFields" not in t["metadata"]


def test_a_standby_gathers_and_never_writes():
    cache = default_cache(NoCluster(), metrics=False, history=True)
    assert {"Workload", "Event", "ClusterQueue"} <= set(cache.informers)
    rec = HistoryRecorder(NoCluster(), cache, leader=lambda: False)
    rec.attach()
    cache["Workload"].apply_event("ADDED", _raw())
    assert rec.flush() == 0  # a standby does not even read the store
    assert len(rec._pending) == 1
