"""gpuctl.server.history: what serve's cache keeps is enough for the records, and a standby never writes."""

from __future__ import annotations

import json

from gpuctl.builders import build
from gpuctl.cluster import ApiError, path
from gpuctl.constants import HISTORY_CONFIGMAP, HISTORY_DATA_KEY
from gpuctl.domain.history import workload_records
from gpuctl.domain.multicluster import placement
from gpuctl.server.cache import trim_workload
from gpuctl.server.history import HistoryRecorder, trim_event
from gpuctl.server.wiring import default_cache
from gpuctl.spec import load_text
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
    assert got["preempted"] == "job urgent" and got["stopped"] == "bob (unverified)", got
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


# ----------------------------------------------------------------------------- issue 33: failures, erasures
class StoreCluster(NoCluster):
    """The history store as the API server keeps it: one ConfigMap per namespace, `immutable` honoured."""

    def __init__(self):
        self.cms: dict[str, dict] = {}

    def get_or_none(self, p):
        cm = self.cms.get(p)
        return json.loads(json.dumps(cm)) if cm else None

    def create(self, body):
        self.cms[path("ConfigMap", body["metadata"]["name"], body["metadata"]["namespace"])] = body

    def request(self, method, p, body=None, **_):
        assert method == "PUT"
        if self.cms[p].get("immutable"):
            raise ApiError(422, "Invalid", "field is immutable when `immutable` is set")
        self.cms[p] = body
        return body


def _recorder(cluster):
    cache = default_cache(NoCluster(), metrics=False, history=True)
    cache["ClusterQueue"].apply_event("ADDED", {"metadata": {"name": "team-a", "resourceVersion": "1"}})
    rec = HistoryRecorder(cluster, cache, leader=lambda: True, wall=lambda: 1_800_000_000.0)
    rec.attach()
    return cache, rec


def _families(rec) -> dict[str, list]:
    return {
        f.name: [(s.labels, s.value) for s in f.samples if not s.name.endswith("_created")]
        for f in rec.collect()
    }


def test_a_failing_write_is_counted_per_namespace_and_retried():
    """`immutable: true` on the store used to stop every write with only a log line."""
    store = StoreCluster()
    cache, rec = _recorder(store)
    cache["Workload"].apply_event("ADDED", _raw())
    assert rec.flush() > 0
    cm = path("ConfigMap", HISTORY_CONFIGMAP, "team-a")
    store.cms[cm]["immutable"] = True
    resumed = _raw()
    resumed["metadata"]["resourceVersion"] = "8"
    resumed["status"]["conditions"].append(
        {
            "type": "Finished",
            "status": "True",
            "reason": "Succeeded",
            "lastTransitionTime": "2026-11-25T10:30:00Z",
        }
    )
    cache["Workload"].apply_event("MODIFIED", resumed)
    assert rec.flush() == 0 and rec.flush() == 0  # kept and retried at every flush
    fam = _families(rec)
    assert fam["gpuctl_history_write_failures"] == [({"namespace": "team-a"}, 2.0)]
    assert fam["gpuctl_history_last_write_success_timestamp_seconds"] == [({}, 1_800_000_000.0)]
    del store.cms[cm]["immutable"]
    assert rec.flush() == 1  # the finished record, once the store is writable again
    assert any(
        r["action"] == "finished"
        for r in map(json.loads, store.cms[cm]["data"][HISTORY_DATA_KEY].splitlines())
    )


def test_records_erased_from_the_store_are_written_again_with_the_next_write():
    """Where the chart's gpuctl-history-writer policy is not installed, someone who can edit the ConfigMap
    can erase records: the leader writes what it wrote again the next time it writes there."""
    store = StoreCluster()
    cache, rec = _recorder(store)
    cache["Workload"].apply_event("ADDED", _raw())
    first = rec.flush()
    cm = path("ConfigMap", HISTORY_CONFIGMAP, "team-a")
    before = store.cms[cm]["data"][HISTORY_DATA_KEY].splitlines()
    del store.cms[cm]  # erased, ConfigMap and all
    later = _raw()
    later["metadata"]["resourceVersion"] = "9"
    later["status"]["conditions"].append(
        {
            "type": "Finished",
            "status": "True",
            "reason": "Succeeded",
            "lastTransitionTime": "2026-11-25T10:30:00Z",
        }
    )
    cache["Workload"].apply_event("MODIFIED", later)
    assert rec.flush() == first + 1
    after = store.cms[cm]["data"][HISTORY_DATA_KEY].splitlines()
    assert set(before) < set(after) and len(after) == len(before) + 1


# ----------------------------------------------------------------------------- issue 44: a service's scales
def _hpa(
    rv: str, scaled_at: str | None, current: int, desired: int, manager: str = "kube-controller-manager"
):
    """gpuctl's HPA of an autoscaled service (floor 2 x target 10) as the HPA controller leaves it."""
    text = (
        "kind: inference\njob: {name: chat, namespace: team-a}\nenvironment: {image: vllm}\n"
        "resources: {pool: p, gpu: 1, cpu: 4, memory: 16Gi}\n"
        "service: {port: 8000, autoscaling: {minReplicas: 2, maxReplicas: 6, targetConcurrency: 10}}\n"
    )
    (doc,) = load_text(text, "hpa")
    hpa = next(o for o in build(doc.spec, "team-a") if o["kind"] == "HorizontalPodAutoscaler")
    hpa["metadata"] |= {"uid": "hpa-1", "resourceVersion": rv}
    hpa["metadata"]["managedFields"] = [
        {"manager": "gpuctl", "operation": "Update", "fieldsV1": {"f:spec": {}}},
        {
            "manager": manager,
            "operation": "Update",
            "subresource": "status",
            "fieldsV1": {"f:status": {"f:lastScaleTime": {}, "f:desiredReplicas": {}}},
        },
    ]
    metric = hpa["spec"]["metrics"][0]["external"]["metric"]
    hpa["status"] = {
        "currentReplicas": current,
        "desiredReplicas": desired,
        "currentMetrics": [
            {"type": "External", "external": {"metric": metric, "current": {"averageValue": "15"}}}
        ],
    }
    if scaled_at:
        hpa["status"]["lastScaleTime"] = scaled_at
    return hpa


def test_a_services_scale_is_a_record_of_the_hpa_controller():
    store = StoreCluster()
    cache, rec = _recorder(store)
    assert "HorizontalPodAutoscaler" in cache.informers  # with the history alone
    cm = path("ConfigMap", HISTORY_CONFIGMAP, "team-a")

    def scaled() -> list[dict]:
        lines = store.cms[cm]["data"][HISTORY_DATA_KEY].splitlines() if cm in store.cms else []
        return [r for r in map(json.loads, lines) if r["action"] == "scaled"]

    cache["HorizontalPodAutoscaler"].apply_event("ADDED", _hpa("1", None, 0, 0))
    assert rec.flush() == 0 and scaled() == []  # never scaled yet
    cache["HorizontalPodAutoscaler"].apply_event("MODIFIED", _hpa("2", "2026-11-29T10:00:00Z", 0, 2))
    assert rec.flush() == 1
    (r,) = scaled()
    assert (r["job"], r["time"], r["actor"]) == ("chat", "2026-11-29T10:00:00Z", "horizontal-pod-autoscaler")
    assert r["reason"] == "burst 0 -> 2 replica(s); concurrency above the floor's 20: 15 a replica, target 10"
    # the controller's next status write (the burst caught up) is the same scale: nothing new
    cache["HorizontalPodAutoscaler"].apply_event("MODIFIED", _hpa("3", "2026-11-29T10:00:00Z", 2, 2))
    assert rec.flush() == 0 and len(scaled()) == 1
    # a scale time another writer put in the status is that writer's word
    cache["HorizontalPodAutoscaler"].apply_event(
        "MODIFIED", _hpa("4", "2026-11-29T10:05:00Z", 2, 4, manager="kubectl-patch")
    )
    assert rec.flush() == 1
    assert [(r["actor"], r["reason"].split(";")[0]) for r in scaled()] == [
        ("horizontal-pod-autoscaler", "burst 0 -> 2 replica(s)"),
        ("via kubectl-patch (unverified)", "burst 2 -> 4 replica(s)"),
    ]


def test_a_record_serve_made_itself_is_stored_in_team_namespaces_only_and_retried():
    """The backstop's `reclaimed` record (issue 43: no object shows that serve ended a pod's termination)
    goes through the same store, at the next flush, kept while the store refuses it."""
    from gpuctl.domain.history import reclaimed

    store = StoreCluster()
    _, rec = _recorder(store)
    rec.note(reclaimed("team-a", "train", "pod-uid", 1_800_000_000.0, "gpuctl serve ended the termination"))
    rec.note(reclaimed("not-a-team", "x", "pod-uid-2", 1_800_000_000.0, "outside team namespaces"))
    cm = path("ConfigMap", HISTORY_CONFIGMAP, "team-a")
    store.cms[cm] = {"metadata": {"name": HISTORY_CONFIGMAP, "namespace": "team-a"}, "immutable": True}
    assert rec.flush() == 0 and rec.flush() == 0
    del store.cms[cm]["immutable"]
    assert rec.flush() == 1
    (line,) = store.cms[cm]["data"][HISTORY_DATA_KEY].splitlines()
    r = json.loads(line)
    assert (r["job"], r["action"], r["actor"], r["uid"]) == (
        "train",
        "reclaimed",
        "gpuctl-serve (backstop)",
        "pod-uid",
    )
    assert path("ConfigMap", HISTORY_CONFIGMAP, "not-a-team") not in store.cms


# ----------------------------------------------------------------------------- issue 40: a scaled service
def test_an_idle_scale_names_the_service_when_the_workload_it_hangs_on_goes_before_the_flush():
    """serve --idle posts GpuctlIdleScaled on the service's Workload, which may be the replica's that the
    scale removes: Kueue deletes that Workload with its pod, often before the next flush. The record still
    names the service (from the deleted Workload the same flush saw), not the Workload."""
    from gpuctl.constants import IDLE_SCALED_REASON

    store = StoreCluster()
    cache, rec = _recorder(store)
    replica = wl(
        [("Admitted", "True", "Admitted", "", "2026-11-25T10:00:03Z")],
        owner=("Pod", "svc-7c9f8d6b5-x2x4q"),
        uid="u-replica",
        resourceVersion="3",
    )
    cache["Workload"].apply_event("ADDED", replica)
    assert rec.flush() > 0  # its submission and admission
    event = {
        "metadata": {"name": "svc.1", "namespace": "team-a", "resourceVersion": "4"},
        "involvedObject": {"kind": "Workload", "name": replica["metadata"]["name"], "uid": "u-replica"},
        "reason": IDLE_SCALED_REASON,
        "message": "scaled from 2 to 1 replica(s): idle, GPU activity peak 0.2%",
        "lastTimestamp": "2026-11-25T11:00:00Z",
    }
    cache["Event"].apply_event("ADDED", event)
    cache["Workload"].apply_event(
        "DELETED", {**replica, "metadata": {**replica["metadata"], "resourceVersion": "5"}}
    )
    rec.flush()
    cm = path("ConfigMap", HISTORY_CONFIGMAP, "team-a")
    scaled = [
        r
        for r in map(json.loads, store.cms[cm]["data"][HISTORY_DATA_KEY].splitlines())
        if r["action"] == "scaled"
    ]
    assert [(r["job"], r["uid"]) for r in scaled] == [("svc", "u-replica")], scaled


def test_records_keep_the_kind_of_the_jobs_object():
    """Each record names its job's Kubernetes kind (`history -o name` prints statefulset.apps/x, not
    job/x): a Workload's owner (a pod's own Workload: a Deployment's), an HPA's target."""
    _, rec = _recorder(StoreCluster())
    admitted = [("Admitted", "True", "Admitted", "", "2026-11-25T10:01:00Z")]
    changes = [
        ("Workload", wl(admitted, owner=("StatefulSet", "nb"), uid="u1"), None),
        ("Workload", wl(admitted, owner=("Pod", "web-7d9f8-abcde"), uid="u2"), None),
        ("Workload", wl(admitted, owner=("Job", "train"), uid="u3"), None),
        ("HorizontalPodAutoscaler", _hpa("2", "2026-11-29T10:00:00Z", 0, 2), None),
    ]
    got = {(r.job, r.kind) for r in rec.records(changes)["team-a"]}
    assert got == {("nb", "StatefulSet"), ("web", "Deployment"), ("train", "Job"), ("chat", "Deployment")}
