"""The Reader abstraction: selector matching, CacheReader serving what the serve cache holds (and passing
the rest to the cluster), and `get jobs` rows from the trimmed cache equal to rows from full objects."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpuctl.cluster.reader import (
    ClusterReader,
    as_reader,
    fields_match,
    implies,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from gpuctl.constants import GPU_RESOURCE, Labels
from gpuctl.server.cache import Cache, CacheReader
from gpuctl.server.wiring import JOB_CONTROLLERS, MANAGED_SELECTOR, default_cache
from gpuctl.service.inventory import Inventory
from gpuctl.service.jobs import collect_jobs, list_job_rows

T0 = "2026-01-01T00:00:00Z"
GATE = "kueue.x-k8s.io/admission"


class Empty:
    """A transport whose lists are empty (caches are filled by hand) and whose watches end at once."""

    def get(self, api_path: str, **query: Any) -> dict:
        return {"items": [], "metadata": {"resourceVersion": "1"}}

    def watch(self, api_path: str, **kw: Any) -> Iterator[tuple[str, dict]]:
        return iter(())


class Recorder:
    """A fallback Reader recording what reached it."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def list(self, kind, namespace=None, label_selector=None, field_selector=None):
        self.calls.append(("list", kind, namespace, label_selector, field_selector))
        return [{"metadata": {"name": "from-cluster"}}]

    def get(self, kind, name, namespace=None):
        self.calls.append(("get", kind, name, namespace))
        return {"metadata": {"name": name}}


# ----------------------------------------------------------------------------- selectors
@pytest.mark.parametrize(
    ("selector", "labels", "want"),
    [
        ("a=1", {"a": "1"}, True),
        ("a==1", {"a": "2"}, False),
        ("a!=1", {}, True),
        ("a!=1", {"a": "1"}, False),
        ("a", {"a": ""}, True),
        ("a", {}, False),
        ("!a", {}, True),
        ("!a", {"a": "x"}, False),
        ("a in (x, y),b=2", {"a": "y", "b": "2"}, True),
        ("a in (x,y)", {"a": "z"}, False),
        ("a notin (x,y)", {"a": "z"}, True),
        ("a notin (x,y)", {}, True),
        ("a notin (x,y)", {"a": "x"}, False),
        ("", {}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict, want: bool) -> None:
    assert labels_match(parse_label_selector(selector), labels) is want


def test_field_selectors_and_bad_selectors() -> None:
    pod = {"metadata": {"name": "p"}, "status": {"phase": "Running"}, "spec": {}}
    unfinished = parse_field_selector("status.phase!=Succeeded,status.phase!=Failed")
    assert fields_match(unfinished, pod)
    assert not fields_match(unfinished, {**pod, "status": {"phase": "Failed"}})
    assert fields_match(parse_field_selector("spec.nodeName="), pod)  # missing = "" (API server's rule)
    assert fields_match(parse_field_selector("metadata.name==p"), pod)
    for bad in ("a in (x", "=x", "!a in (x)"):
        with pytest.raises(ValueError):
            parse_label_selector(bad)
    with pytest.raises(ValueError):
        parse_field_selector("status.phase")


def test_a_cache_answers_only_requests_its_own_selector_implies() -> None:
    managed = parse_label_selector(MANAGED_SELECTOR)
    assert implies(parse_label_selector(f"{MANAGED_SELECTOR},x=y"), managed)
    assert not implies(parse_label_selector(""), managed)
    assert implies(parse_label_selector("x"), ())


def test_as_reader_wraps_anything_that_speaks_http() -> None:
    class Http:
        def request(self, *a: Any, **k: Any) -> None: ...

        def list(self, *a: Any, **k: Any) -> list: ...

        def get(self, *a: Any, **k: Any) -> None: ...

    assert isinstance(as_reader(Http()), ClusterReader)
    rec = Recorder()
    assert as_reader(rec) is rec


# ----------------------------------------------------------------------------- CacheReader
def pod(name: str, ns: str, *, phase: str = "Running", **labels: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"u-{ns}-{name}", "labels": labels},
        "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
        "status": {"phase": phase},
    }


def filled(cache: Cache, objects: dict[str, list[dict]]) -> Cache:
    for kind, inf in cache.informers.items():
        inf.relist()  # synced, empty
        for o in objects.get(kind, []):
            inf.apply_event("ADDED", o)
    return cache


def test_cache_reader_filters_namespace_labels_and_fields_in_memory() -> None:
    cache = Cache(Empty())
    cache.add("Pod")
    filled(
        cache,
        {
            "Pod": [
                pod("a", "team-a", **{Labels.JOB_TYPE: "training", Labels.KUEUE_JOB_UID: "1"}),
                pod(
                    "b",
                    "team-a",
                    phase="Succeeded",
                    **{Labels.JOB_TYPE: "training", Labels.KUEUE_JOB_UID: "2"},
                ),
                pod("c", "team-b", **{Labels.JOB_TYPE: "compute", Labels.KUEUE_JOB_UID: "3"}),
                pod("other", "team-a"),
            ]
        },
    )
    rec = Recorder()
    r = CacheReader(cache, rec)

    def names(**kw: Any) -> list[str]:
        return sorted(o["metadata"]["name"] for o in r.list("Pod", **kw))

    assert names() == ["a", "b", "c", "other"]
    assert names(namespace="team-a", label_selector=Labels.JOB_TYPE) == ["a", "b"]
    assert names(label_selector=f"{Labels.JOB_TYPE}=compute") == ["c"]
    assert names(label_selector=f"{Labels.KUEUE_JOB_UID} in (1,3)") == ["a", "c"]
    assert names(field_selector="status.phase!=Succeeded,status.phase!=Failed") == ["a", "c", "other"]
    assert r.get("Pod", "a", "team-a")["metadata"]["name"] == "a"
    assert r.get("Pod", "zz", "team-a") is None
    assert rec.calls == []  # all of it from memory


def test_cache_reader_falls_back_for_what_the_cache_cannot_answer() -> None:
    cache = default_cache(Empty(), metrics=False)
    rec = Recorder()
    r = CacheReader(cache, rec)
    assert r.list("ClusterQueue", label_selector=MANAGED_SELECTOR)[0]["metadata"]["name"] == "from-cluster"
    assert rec.calls[-1][0:2] == ("list", "ClusterQueue")  # not synced yet: the cluster answers
    filled(cache, {"Cohort": [{"metadata": {"name": "gpuctl"}, "spec": {}}]})
    rec.calls.clear()
    assert r.list("ClusterQueue", label_selector=MANAGED_SELECTOR) == []  # cached through that selector
    assert r.get("Cohort", "gpuctl") == {"metadata": {"name": "gpuctl"}, "spec": {}}
    assert rec.calls == []
    r.list("ResourceFlavor")  # the cache holds only gpuctl's flavors: every flavor needs the cluster
    r.get("Cohort", "someone-elses")  # cached by name: another name needs the cluster
    r.list("Service", "team-a")  # not cached at all
    assert [c[:3] for c in rec.calls] == [
        ("list", "ResourceFlavor", None),
        ("get", "Cohort", "someone-elses"),
        ("list", "Service", "team-a"),
    ]


# ----------------------------------------------------------------------------- get jobs from the cache
def _res(gpus: int) -> dict:
    return {"requests": {"cpu": "1", GPU_RESOURCE: str(gpus)}, "limits": {GPU_RESOURCE: str(gpus)}}


def _meta(name: str, ns: str, kind_label: str, uid: str, **labels: str) -> dict:
    return {
        "name": name,
        "namespace": ns,
        "uid": uid,
        "resourceVersion": "5",
        "creationTimestamp": T0,
        "labels": {
            Labels.JOB_TYPE: kind_label,
            Labels.POOL: "training-pool",
            Labels.PRIORITY: "high",
            Labels.KUEUE_QUEUE: "default",
            **labels,
        },
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 500 + "}"},
    }


def _template(gpus: int) -> dict:
    return {
        "metadata": {"labels": {"x": "y"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "env": [{"name": "A", "value": "1"}],
                    "resources": _res(gpus),
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }


def controller(
    kind: str, name: str, ns: str, job_type: str, *, suspend: bool = False, ready: int = 0, replicas: int = 1
) -> dict:
    api = {"Job": "batch/v1", "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1"}.get(kind, "apps/v1")
    extra = {} if kind == "Job" else {Labels.APP: name}
    spec: dict[str, Any] = {"template": _template(2)}
    status: dict[str, Any] = {}
    if kind == "Job":
        spec["suspend"] = suspend
        status = {"ready": ready, "active": ready}
    else:
        spec["replicas"] = replicas
        status = {"replicas": replicas, "readyReplicas": ready}
    if kind == "LeaderWorkerSet":  # groups of 2 pods
        t = spec.pop("template")
        spec["leaderWorkerTemplate"] = {"size": 2, "leaderTemplate": t, "workerTemplate": t}
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": _meta(name, ns, job_type, f"uid-{name}", **extra),
        "spec": spec,
        "status": status,
    }


def job_pod(
    name: str, ns: str, owner: dict, *, state: dict | None = None, gated: bool = False, **kw: Any
) -> dict:
    labels = {Labels.JOB_NAME: owner["metadata"]["name"]} if owner["kind"] == "Job" else {}
    if owner["kind"] != "Job":
        labels[Labels.APP] = owner["metadata"]["name"]
    meta = _meta(name, ns, owner["metadata"]["labels"][Labels.JOB_TYPE], f"uid-{name}", **labels)
    ref = {"apiVersion": "v1", "kind": owner["kind"], "name": owner["metadata"]["name"]}
    meta["ownerReferences"] = [{**ref, "uid": owner["metadata"]["uid"], "controller": True}]
    spec = {**_template(2)["spec"], "nodeName": kw.get("node", "gpu-node-1"), "restartPolicy": "Never"}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
        del spec["nodeName"]
    cs = {"name": "main", "ready": kw.get("ready", False), "restartCount": 0, "image": "busybox",
          "imageID": "docker://sha256:abc", "state": state or {"running": {"startedAt": T0}}}  # fmt: skip
    status: dict[str, Any] = {
        "phase": kw.get("phase", "Running"),
        "podIP": "10.0.0.7",
        "hostIP": "172.16.0.1",
        "startTime": T0,
        "qosClass": "Burstable",
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if kw.get("ready") else "False",
                "lastProbeTime": None,
                "lastTransitionTime": T0,
                "reason": "ContainersNotReady",
                "message": "containers not ready",
            },
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": T0},
        ],
    }
    if not gated:
        status["containerStatuses"] = [cs]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def workload(
    name: str, ns: str, owner: dict, conditions: list[tuple[str, str, str]], prio: int = 100
) -> dict:
    meta = _meta(name, ns, "training", f"uid-{name}", **{Labels.KUEUE_JOB_UID: owner["metadata"]["uid"]})
    meta["ownerReferences"] = [
        {"apiVersion": "v1", "kind": owner["kind"], "name": owner["metadata"]["name"],
         "uid": owner["metadata"]["uid"], "controller": True}
    ]  # fmt: skip
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": meta,
        "spec": {
            "queueName": "default",
            "priority": prio,
            "podSets": [{"name": "main", "count": 1, "template": _template(2)}],
        },
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": "m", "lastTransitionTime": T0}
                for t, s, r in conditions
            ],
            "resourceRequests": [{"name": "main", "resources": {"cpu": "1"}}],
        },
    }


def cluster_objects() -> dict[str, list[dict]]:
    train = controller("Job", "train", "team-a", "training", ready=1)
    queued = controller("Job", "queued", "team-a", "training", suspend=True)
    queued2 = controller("Job", "queued2", "team-b", "training", suspend=True)
    preempted = controller("Job", "preempted", "team-a", "training", suspend=True)
    gated = controller("Job", "gated", "team-a", "training")
    infer = controller("Deployment", "infer", "team-a", "inference")
    nb = controller("StatefulSet", "nb", "team-b", "notebook")
    # A service of 2-pod replicas (issue 44): replica 0 runs (leader and worker), replica 1 is queued.
    llm = controller("LeaderWorkerSet", "llm", "team-a", "inference", ready=1, replicas=2)
    group = {"leaderworkerset.sigs.k8s.io/name": "llm"}
    lws_pods = [
        job_pod(
            f"llm-{g}{'-1' if r else ''}",
            "team-a",
            llm,
            ready=g == 0,
            gated=g == 1,
            phase="Running" if g == 0 else "Pending",
        )
        for g, r in ((0, 0), (0, 1), (1, 0), (1, 1))
    ]
    for p, (g, r) in zip(lws_pods, ((0, 0), (0, 1), (1, 0), (1, 1)), strict=True):
        p["metadata"]["labels"].update(
            {
                **group,
                "leaderworkerset.sigs.k8s.io/group-index": str(g),
                "leaderworkerset.sigs.k8s.io/worker-index": str(r),
                "kueue.x-k8s.io/pod-group-name": f"lws-llm-{g}",
            }
        )
    infer_pod = job_pod(
        "infer-7d9-x", "team-a", infer, phase="Pending",
        state={"waiting": {"reason": "ImagePullBackOff", "message": "back-off pulling image"}},
    )  # fmt: skip
    pods = [
        job_pod("train-abc", "team-a", train, ready=True),
        job_pod("gated-1", "team-a", gated, gated=True, phase="Pending"),
        infer_pod,
        job_pod("nb-0", "team-b", nb, state={"terminated": {"reason": "OOMKilled", "exitCode": 137}}),
        pod("not-gpuctl", "team-a"),
        *lws_pods,
    ]
    admitted = [("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted")]
    pending = [("QuotaReserved", "False", "Pending")]
    workloads = [
        workload("job-train", "team-a", train, admitted),
        workload("job-queued", "team-a", queued, pending, prio=100),
        workload("job-queued2", "team-b", queued2, pending, prio=1000),
        workload("job-preempted", "team-a", preempted, [*pending, ("Evicted", "True", "Preempted"),
                                                        ("Preempted", "True", "InClusterQueue")]),
        workload("job-gated", "team-a", gated, pending),
        workload("pod-infer", "team-a", infer_pod, pending),
        workload("lws-llm-0", "team-a", llm, admitted),
        workload("lws-llm-1", "team-a", llm, pending, prio=10),
    ]  # fmt: skip
    for i, wl in enumerate(workloads[-2:]):
        wl["metadata"]["annotations"]["kueue.x-k8s.io/component-workload-index"] = str(i)
    return {
        "Job": [train, queued, queued2, preempted, gated],
        "Deployment": [infer],
        "StatefulSet": [nb],
        "LeaderWorkerSet": [llm],
        "Pod": pods,
        "Workload": workloads,
    }


def readers() -> tuple[CacheReader, CacheReader]:
    """The serve cache (trimmed, as wired with --api) and a cache of the full objects."""
    objects = cluster_objects()
    full = Cache(Empty())
    for kind in objects:
        full.add(kind, label_selector=Labels.JOB_TYPE if kind in JOB_CONTROLLERS else None)
    trimmed = default_cache(Empty(), metrics=True, api=True)
    return CacheReader(filled(trimmed, objects), Recorder()), CacheReader(filled(full, objects), Recorder())


@pytest.mark.parametrize("namespace", [None, "team-a", "team-b"])
@pytest.mark.parametrize("positions", [True, False])
def test_job_rows_from_the_trimmed_cache_equal_rows_from_full_objects(namespace, positions) -> None:
    trimmed, full = readers()
    got = list_job_rows(trimmed, namespace, positions=positions)
    want = list_job_rows(full, namespace, positions=positions)

    def shown(rows: list) -> list[dict]:
        return [{k: v for k, v in r.as_dict().items() if k != "age"} for r in rows]  # age: the clock moved

    assert shown(got) == shown(want) and all(r.age is not None for r in got)
    assert trimmed.fallback.calls == []  # type: ignore[attr-defined]
    by_id = {r.job_id: r for r in want}
    if namespace in (None, "team-a"):
        assert by_id["train-abc"].status == "Running" and by_id["train-abc"].ip == "10.0.0.7"
        assert by_id["infer-7d9-x"].status == "ImagePullBackOff"
        assert by_id["gated-1"].status == "Queued"
        assert by_id["preempted"].status == "Preempted"
        assert by_id["train-abc"].ready == "1/1" and by_id["train-abc"].gpus == 2
        # One row for the service of 2-pod replicas: 1 of 2 replicas ready, the GPUs of the admitted group
        # (2 pods x 2; the waiting group's pods ask for 4 more and hold none).
        assert [r.job_id for r in want if r.name == "llm"] == ["llm"]
        assert (by_id["llm"].ready, by_id["llm"].gpus, by_id["llm"].kind) == ("1/2", 4, "inference")
        assert by_id["llm"].status == "Partially Running"
    if namespace in (None, "team-b"):
        assert by_id["nb-0"].status == "OOMKilled"
    if positions and namespace is None:
        assert by_id["queued2"].position == 1  # higher priority first
        assert by_id["queued"].position is not None


def test_job_statuses_and_reasons_agree_through_inventory() -> None:
    trimmed, full = readers()
    for ns in (None, "team-a"):
        a = [(j.name, j.kind, j.status, j.reason, j.position) for j in collect_jobs(Inventory(trimmed, ns))]
        b = [(j.name, j.kind, j.status, j.reason, j.position) for j in collect_jobs(Inventory(full, ns))]
        assert sorted(a) == sorted(b) and a
