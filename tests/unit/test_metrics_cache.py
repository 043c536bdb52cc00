"""The serve cache: informers over the Cluster transport (paged lists, watch events, bookmarks, re-list on
410 Gone diffed against the store), trimming that keeps what metrics and `get jobs` read, handler
isolation, and the wiring (gpuctl.server.wiring; gpuctl.server.cache imports nothing of gpuctl.server)."""

from __future__ import annotations

import ast
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuctl.cluster import ApiError
from gpuctl.constants import AUDIT_ACTIVE_SET_BY_ANNOTATION, GPU_RESOURCE, Labels
from gpuctl.server import cache as cache_module
from gpuctl.server.cache import Informer, trim_controller, trim_node, trim_pod, trim_workload
from gpuctl.server.wiring import JOB_CONTROLLERS, JOB_SELECTOR, default_cache
from tests.unit.test_reader import GATE, controller, job_pod, workload

T0 = "2026-01-01T00:00:00Z"


def node_obj(name: str, pool: str | None, gpus: int = 8) -> dict:
    labels = {"kubernetes.io/hostname": name, **({Labels.POOL: pool} if pool else {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", "labels": labels,
                     "managedFields": [{"manager": "kubelet"}]},
        "spec": {},
        "status": {
            "capacity": {"cpu": "96", GPU_RESOURCE: str(gpus)},
            "allocatable": {"cpu": "96", GPU_RESOURCE: str(gpus)},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "lastHeartbeatTime": "2026-01-01T00:05:00Z", "lastTransitionTime": T0,
                            "message": "m"}],
            "addresses": [{"type": "InternalIP", "address": "172.16.0.9"},
                          {"type": "Hostname", "address": name}],
            "images": [{"names": ["busybox"], "sizeBytes": 1}],
        },
    }  # fmt: skip


def pod_obj(name: str, ns: str, node: str | None, gpus: int) -> dict:
    res = {"cpu": "1", **({GPU_RESOURCE: str(gpus)} if gpus else {})}
    spec: dict = {"containers": [{"name": "main", "image": "x", "resources": {"requests": res}}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": "Running"},
    }


def _pod(name: str, rv: str = "1") -> dict:
    p = pod_obj(name, "ns", "n1", 1)
    p["metadata"]["resourceVersion"] = rv
    return p


class ScriptedCluster:
    """Lists come from `lists` (one per full list, paged by `limit`); watches from a queue of events."""

    def __init__(self, lists: list[list[dict]]):
        self.lists = lists
        self.list_calls: list[dict] = []
        self.watch_calls: list[str | None] = []
        self.events: queue.Queue = queue.Queue()

    def get(self, api_path: str, **query: Any) -> dict:
        self.list_calls.append(query)
        items = self.lists[
            min(len([q for q in self.list_calls if "continue" not in q]) - 1, len(self.lists) - 1)
        ]
        start = int(query.get("continue") or 0)
        size = query["limit"]
        page = items[start : start + size]
        meta: dict = {"resourceVersion": f"list-{len(self.list_calls)}"}
        if start + size < len(items):
            meta["continue"] = str(start + size)
        return {"items": page, "metadata": meta}

    def watch(
        self, api_path: str, *, resource_version: str | None = None, **kw: Any
    ) -> Iterator[tuple[str, dict]]:
        self.watch_calls.append(resource_version)
        while True:
            ev = self.events.get()
            if ev is None:
                return
            if isinstance(ev, Exception):
                raise ev
            yield ev


def test_relist_pages_through_continue_tokens_and_trims() -> None:
    pods = [_pod(f"p{i}") for i in range(5)]
    for p in pods:
        p["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    c = ScriptedCluster([pods])
    inf = Informer(c, "Pod", "/api/v1/pods", transform=trim_pod, page_size=2)
    rv = inf.relist()
    assert len(c.list_calls) == 3 and [q.get("continue") for q in c.list_calls] == [None, "2", "4"]
    assert all(q["limit"] == 2 for q in c.list_calls)
    assert rv == "list-3"
    assert sorted(p["metadata"]["name"] for p in inf.list()) == [f"p{i}" for i in range(5)]
    assert "managedFields" not in inf.get("ns/p0")["metadata"]
    assert inf.synced.is_set()


def test_watch_events_update_the_store_and_call_handlers() -> None:
    c = ScriptedCluster([[_pod("a")]])
    inf = Informer(c, "Pod", "/api/v1/pods", transform=trim_pod)
    seen: list[tuple[str, str | None, str | None]] = []

    def rv(o: dict | None) -> str | None:
        return o and o["metadata"]["resourceVersion"]

    inf.add_handler(lambda t, old, new: seen.append((t, rv(old), rv(new))))
    inf.relist()
    inf.apply_event("MODIFIED", _pod("a", "2"))
    inf.apply_event("ADDED", _pod("b", "3"))
    inf.apply_event("DELETED", _pod("a", "4"))
    inf.apply_event("DELETED", _pod("never-seen", "5"))  # nothing to tell anyone
    assert seen == [
        ("ADDED", None, "1"),
        ("MODIFIED", "1", "2"),
        ("ADDED", None, "3"),
        ("DELETED", "2", None),
    ]
    assert [p["metadata"]["name"] for p in inf.list()] == ["b"]
    assert inf.stats.events == 4


def test_410_gone_relists_and_reports_the_difference() -> None:
    """While the watch was down, a was deleted, b changed and c appeared: handlers see exactly that."""
    c = ScriptedCluster([[_pod("a"), _pod("b")], [_pod("b", "7"), _pod("c", "8")]])
    inf = Informer(c, "Pod", "/api/v1/pods", transform=trim_pod)
    seen: list[tuple[str, str]] = []
    done = threading.Event()

    def handler(t: str, old: dict | None, new: dict | None) -> None:
        seen.append((t, (new or old)["metadata"]["name"]))
        if len(seen) == 5:
            done.set()

    inf.add_handler(handler)
    stop = threading.Event()
    c.events.put(ApiError(410, "Gone", "too old resource version"))
    t = threading.Thread(target=inf.run, args=(stop,), daemon=True)
    t.start()
    assert done.wait(5)
    stop.set()
    c.events.put(None)
    t.join(5)
    assert seen[:2] == [("ADDED", "a"), ("ADDED", "b")]
    assert sorted(seen[2:]) == [("ADDED", "c"), ("DELETED", "a"), ("MODIFIED", "b")]
    assert sorted(p["metadata"]["name"] for p in inf.list()) == ["b", "c"]
    assert inf.stats.lists == 2 and inf.stats.errors_by_reason == {"410": 1}
    # The second watch starts from the second list's resourceVersion.
    assert c.watch_calls[:2] == ["list-1", "list-2"]


def test_a_closed_watch_resumes_from_the_last_resource_version() -> None:
    c = ScriptedCluster([[_pod("a")]])
    inf = Informer(c, "Pod", "/api/v1/pods", transform=trim_pod)
    stop = threading.Event()
    c.events.put(("MODIFIED", _pod("a", "42")))
    c.events.put(None)  # server closes the watch (timeoutSeconds)
    t = threading.Thread(target=inf.run, args=(stop,), daemon=True)
    t.start()
    for _ in range(100):
        if len(c.watch_calls) >= 2:
            break
        threading.Event().wait(0.02)
    stop.set()
    c.events.put(None)
    t.join(5)
    assert c.watch_calls[:2] == ["list-1", "42"]
    assert inf.stats.lists == 1  # no re-list needed


def test_a_failing_handler_does_not_stop_the_cache() -> None:
    inf = Informer(ScriptedCluster([[]]), "Pod", "/api/v1/pods", transform=trim_pod)
    got = []

    def bad(*_: Any) -> None:
        raise RuntimeError("boom")

    inf.add_handler(bad)
    inf.add_handler(lambda t, o, n: got.append(t))
    inf.apply_event("ADDED", _pod("a"))
    assert got == ["ADDED"] and inf.get("ns/a") is not None


def test_summaries_follow_the_objects() -> None:
    inf = Informer(ScriptedCluster([[]]), "Pod", "/api/v1/pods", transform=trim_pod,
                   summarize=lambda p: p["metadata"]["resourceVersion"])  # fmt: skip
    inf.apply_event("ADDED", _pod("a", "1"))
    inf.apply_event("MODIFIED", _pod("a", "2"))
    inf.apply_event("ADDED", _pod("b", "3"))
    assert sorted(inf.summaries()) == ["2", "3"]
    inf.apply_event("DELETED", _pod("a", "4"))
    assert inf.summaries() == ["3"]


def test_heartbeats_leave_a_trimmed_node_unchanged() -> None:
    """Nodes report status every few seconds to minutes; only real changes should look like changes."""
    a, b = node_obj("n", "p"), node_obj("n", "p")
    b["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-01-01T01:00:00Z"
    b["status"]["conditions"][0]["message"] = "kubelet is posting ready status (again)"
    b["metadata"]["resourceVersion"] = a["metadata"]["resourceVersion"]
    assert trim_node(a) == trim_node(b)
    b["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    assert trim_node(a) != trim_node(b)


def test_bookmarks_advance_the_resource_version_a_resumed_watch_starts_from() -> None:
    c = ScriptedCluster([[_pod("a")]])
    inf = Informer(c, "Pod", "/api/v1/pods", transform=trim_pod)
    stop = threading.Event()
    c.events.put(("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "99"}}))
    c.events.put(None)
    t = threading.Thread(target=inf.run, args=(stop,), daemon=True)
    t.start()
    for _ in range(100):
        if len(c.watch_calls) >= 2:
            break
        threading.Event().wait(0.02)
    stop.set()
    c.events.put(None)
    t.join(5)
    assert c.watch_calls[:2] == ["list-1", "99"] and inf.stats.events == 0


def test_trimmed_workload_keeps_what_metrics_and_get_jobs_read() -> None:
    owner = controller("Job", "train", "ns", "training")
    wl = workload("w", "ns", owner, [("QuotaReserved", "True", "QuotaReserved")])
    t = trim_workload(wl)
    assert "volumes" not in t["spec"]["podSets"][0]["template"]["spec"]
    assert (
        t["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]
        == (wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"])
    )
    assert t["metadata"]["labels"] == wl["metadata"]["labels"]
    assert t["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]  # Job -> Workload join
    assert "managedFields" not in t["metadata"] and "annotations" not in t["metadata"]
    # The audit trail's stop/resume actor, stamped by admission, is kept; other annotations are not.
    wl["metadata"]["annotations"] = {AUDIT_ACTIVE_SET_BY_ANNOTATION: "alice", "note": "x"}
    notes = {"f:annotations": {f"f:{AUDIT_ACTIVE_SET_BY_ANNOTATION}": {}}}
    fields = {"f:spec": {"f:active": {}}, "f:metadata": notes}
    wl["metadata"]["managedFields"] = [{"manager": "kubectl-patch", "time": "t1", "fieldsV1": fields}]
    t = trim_workload(wl)
    assert t["metadata"]["annotations"] == {AUDIT_ACTIVE_SET_BY_ANNOTATION: "alice"}
    assert t["metadata"]["managedFields"] == [
        {"manager": "kubectl-patch", "time": "t1", "active": True},
        {"stamp": "t1"},
    ]


def test_trimmed_pod_keeps_what_a_job_row_reads_and_drops_the_rest() -> None:
    owner = controller("Job", "train", "ns", "training")
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}}
    p = trim_pod(job_pod("p", "ns", owner, state=waiting))
    st = p["status"]
    assert st["podIP"] == "10.0.0.7" and st["phase"] == "Running"
    assert st["containerStatuses"] == [
        {
            "name": "main",
            "ready": False,
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}},
        }
    ]
    assert st["conditions"] == [{"type": "PodScheduled", "status": "True"}]  # the one gpuctl reads
    unschedulable = job_pod("u", "ns", owner, phase="Pending")
    unschedulable["status"]["conditions"][1].update(
        status="False", reason="Unschedulable", message="0/7 nodes"
    )
    assert trim_pod(unschedulable)["status"]["conditions"][0]["message"] == "0/7 nodes"
    assert "hostIP" not in st and "volumes" not in p["spec"] and "env" not in p["spec"]["containers"][0]
    gated = trim_pod(job_pod("g", "ns", owner, gated=True, phase="Pending"))
    assert gated["spec"]["schedulingGates"] == [{"name": GATE}]


def test_trimmed_controller_keeps_status_counters_and_conditions() -> None:
    job = controller("Job", "train", "ns", "training", suspend=True, ready=2)
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "m"}
    job["status"]["conditions"] = [{**failed, "lastProbeTime": T0, "lastTransitionTime": T0}]
    t = trim_controller(job)
    assert t["spec"]["suspend"] is True and t["status"]["ready"] == 2
    assert t["status"]["conditions"][0]["reason"] == "BackoffLimitExceeded"
    c = t["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "busybox" and "env" not in c and "volumes" not in t["spec"]["template"]["spec"]
    deploy = trim_controller(controller("Deployment", "inf", "ns", "inference", ready=1))
    assert deploy["spec"]["replicas"] == 1 and deploy["status"]["readyReplicas"] == 1


def test_trimmed_node_keeps_its_internal_ip() -> None:
    t = trim_node(node_obj("n", "p"))
    assert t["status"]["addresses"] == [{"type": "InternalIP", "address": "172.16.0.9"}]
    assert "images" not in t["status"]


def test_wiring_adds_the_job_controllers_only_for_the_api() -> None:
    c = ScriptedCluster([[]])
    metrics_only = default_cache(c)
    assert not any(k in metrics_only for k in JOB_CONTROLLERS if k != "Deployment")
    # The metrics read autoscaled services' Deployments only (docs/serving.md), and gpuctl's HPAs.
    assert metrics_only["Deployment"].label_selector == "runwhere.ai/serving-tier"
    assert metrics_only["HorizontalPodAutoscaler"].label_selector == JOB_SELECTOR
    with_api = default_cache(c, metrics=False, api=True)
    assert all(with_api[k].label_selector == JOB_SELECTOR for k in JOB_CONTROLLERS)
    assert "Pod" in with_api and "Workload" in with_api


def test_the_cache_module_imports_nothing_of_the_server_package() -> None:
    tree = ast.parse(Path(cache_module.__file__).read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + [
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    ]
    assert not [m for m in imported if m.startswith("gpuctl.server")]
