"""A multi-node job MultiKueue placed in a worker gets its headless Service there (issue 31,
docs/distributed.md "Across clusters"): which jobs (gpuctl.domain.multicluster.gang_placements), the copy
(worker_service) and serve's step (gpuctl.server.multicluster) against fake clusters."""

from __future__ import annotations

from typing import Any

from gpuctl.cluster import path
from gpuctl.constants import GPU_RESOURCE, MULTIKUEUE_CHECK, POOL_CLUSTERS_ANNOTATION
from gpuctl.domain.multicluster import gang_placements, worker_service
from gpuctl.server.multicluster import GangServiceMirror


def _wl(job: str, count: int, cluster: str | None, ns: str = "team") -> dict:
    res = {GPU_RESOURCE: "8"}
    status: dict = {
        "admissionChecks": [{"name": MULTIKUEUE_CHECK, "state": "Ready" if cluster else "Pending"}]
    }
    if cluster:
        status["clusterName"] = cluster
    owners = [{"kind": "Job", "name": job}]
    return {
        "metadata": {"name": f"job-{job}-x", "namespace": ns, "ownerReferences": owners},
        "spec": {"podSets": [{"name": "main", "count": count, "template": {"spec": {"containers": [
            {"name": "main", "resources": {"requests": res}}]}}}]},
        "status": status,
    }  # fmt: skip


SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {
        "name": "svc-pair",
        "namespace": "team",
        "uid": "manager-svc",
        "resourceVersion": "7",
        "labels": {"runwhere.ai/job-type": "training"},
    },
    "spec": {
        "clusterIP": "None",
        "clusterIPs": ["None"],
        "selector": {"batch.kubernetes.io/job-name": "pair"},
        "publishNotReadyAddresses": True,
        "ports": [{"name": "rendezvous", "port": 29500, "targetPort": 29500, "protocol": "TCP"}],
    },
}
WORKER_JOB = {"metadata": {"name": "pair", "namespace": "team", "uid": "worker-job-uid"}}


def test_only_placed_gangs_need_a_service_in_their_worker() -> None:
    wls = [_wl("pair", 2, "worker-b"), _wl("solo", 1, "worker-a"), _wl("waits", 2, None)]
    assert gang_placements(wls) == [("worker-b", "team", "pair")]
    assert gang_placements([{**_wl("raw", 2, "worker-a"), "status": {}}]) == []  # not MultiKueue's


def test_the_copy_is_the_managers_service_owned_by_the_workers_job() -> None:
    copy = worker_service(SERVICE, WORKER_JOB)
    assert copy["metadata"] == {
        "name": "svc-pair",
        "namespace": "team",
        "labels": {"runwhere.ai/job-type": "training"},
        "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "pair", "uid": "worker-job-uid",
             "blockOwnerDeletion": False}
        ],
    }  # fmt: skip
    # The manager's allocated fields (clusterIPs, uid, resourceVersion) are not carried over.
    assert copy["spec"] == {k: v for k, v in SERVICE["spec"].items() if k != "clusterIPs"}


class FakeCluster:
    def __init__(self, objects: dict[str, dict], members: dict[str, FakeCluster] | None = None):
        self.objects, self.members, self.created = dict(objects), members or {}, []

    def get_or_none(self, api_path: str, **_: Any) -> dict | None:
        return self.objects.get(api_path)

    def create(self, obj: dict) -> dict:
        self.created.append(obj)
        self.objects[path(obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"])] = obj
        return obj

    def member(self, name: str) -> FakeCluster:
        return self.members[name]


def test_serve_copies_once_when_the_workers_job_exists_and_again_after_a_move() -> None:
    worker = FakeCluster({})
    manager = FakeCluster({path("Service", "svc-pair", "team"): SERVICE}, {"worker-b": worker})
    flavors = [{"metadata": {"name": "a100", "annotations": {POOL_CLUSTERS_ANNOTATION: "worker-b"}}}]
    wls = [_wl("pair", 2, "worker-b")]
    mirror = GangServiceMirror(manager, lambda: (wls, flavors))  # type: ignore[arg-type]
    assert mirror.step() == []  # MultiKueue has not made the Job there yet
    worker.objects[path("Job", "pair", "team")] = WORKER_JOB
    assert mirror.step() == [("worker-b", "team", "pair")]
    assert mirror.step() == []  # done: no second read or write
    assert [o["metadata"]["ownerReferences"][0]["uid"] for o in worker.created] == ["worker-job-uid"]
    # Evicted (no cluster), then placed again: copied again if the worker lost it with its Job.
    wls[0] = _wl("pair", 2, None)
    assert mirror.step() == []
    del worker.objects[path("Service", "svc-pair", "team")]
    wls[0] = _wl("pair", 2, "worker-b")
    assert mirror.step() == [("worker-b", "team", "pair")]
    # Not a MultiKueue manager (no pool in a worker): nothing is read at all.
    assert GangServiceMirror(FakeCluster({}), lambda: (wls, [])).step() == []  # type: ignore[arg-type]
