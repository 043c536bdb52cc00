"""What a create reads before it writes (issue 22): only what its jobs need, a constant number of reads
for a sweep of many jobs, every conflict found before the first write, and one cluster snapshot per
server dry run. The cluster is a recording fake of the Cluster client's calls (the real API server's
behaviour is covered by tests/integration/test_cli_cluster.py and test_dry_run.py)."""

from __future__ import annotations

import json

import pytest

from gpuctl.cluster import ApiError
from gpuctl.constants import LOCAL_QUEUE_NAME, MANAGED_BY_VALUE, Labels
from gpuctl.domain.dryrun import DryRun
from gpuctl.service.lifecycle import submit
from gpuctl.service.prechecks import NAME_GETS_MAX
from gpuctl.spec import load_text

NS = "team-a"
POOL = "training-pool"
KINDS = {
    "jobs": "Job",
    "deployments": "Deployment",
    "statefulsets": "StatefulSet",
    "leaderworkersets": "LeaderWorkerSet",
    "services": "Service",
    "resourceflavors": "ResourceFlavor",
    "clusterqueues": "ClusterQueue",
    "nodes": "Node",
    "pods": "Pod",
    "workloads": "Workload",
    "cohorts": "Cohort",
    "namespaces": "Namespace",
    "workloadpriorityclasses": "WorkloadPriorityClass",
    "topologies": "Topology",
}


def managed(kind: str, name: str, ns: str | None = None, **labels: str) -> dict:
    meta = {"name": name, "labels": {Labels.MANAGED_BY: MANAGED_BY_VALUE, **labels}, "uid": f"uid-{name}"}
    if ns:
        meta["namespace"] = ns
    return {"kind": kind, "metadata": meta, "spec": {}}


class RecordingCluster:
    """The Cluster calls lifecycle.submit makes, answered from `objects` and recorded in order."""

    def __init__(self, objects: list[dict]):
        self.objects = objects
        self.calls: list[str] = []

    @staticmethod
    def _parse(api_path: str) -> tuple[str, str | None, str | None]:
        parts = api_path.split("?")[0].strip("/").split("/")
        parts = parts[2:] if parts[0] == "api" else parts[3:]
        ns = None
        if parts[0] == "namespaces" and len(parts) >= 3:
            ns, parts = parts[1], parts[2:]
        return KINDS[parts[0]], ns, parts[1] if len(parts) > 1 else None

    def _match(self, kind: str, ns: str | None, selector: str | None) -> list[dict]:
        out = []
        for o in self.objects:
            if o["kind"] != kind or (ns is not None and o["metadata"].get("namespace") != ns):
                continue
            if selector and "=" in selector:
                key, value = selector.split("=", 1)
                if (o["metadata"].get("labels") or {}).get(key) != value:
                    continue
            elif selector and selector not in (o["metadata"].get("labels") or {}):
                continue
            out.append(json.loads(json.dumps(o)))
        return out

    def list(self, api_path: str, *, label_selector=None, field_selector=None, **_) -> list[dict]:
        kind, ns, _ = self._parse(api_path)
        self.calls.append(f"list {kind}")
        return self._match(kind, ns, label_selector)

    def list_metadata(self, api_path: str, *, label_selector=None) -> list[dict]:
        kind, ns, _ = self._parse(api_path)
        self.calls.append(f"metadata {kind}")
        return [o["metadata"] for o in self._match(kind, ns, label_selector)]

    def get_or_none(self, api_path: str, **_) -> dict | None:
        kind, ns, name = self._parse(api_path)
        self.calls.append(f"get {kind}")
        found = [o for o in self._match(kind, ns, None) if o["metadata"]["name"] == name]
        return found[0] if found else None

    def get(self, api_path: str, **_) -> dict:
        obj = self.get_or_none(api_path)
        if obj is None:
            raise ApiError(404, "NotFound", "not found")
        return obj

    def create(self, obj: dict, *, dry_run: bool = False) -> dict:
        self.calls.append(f"create {obj['kind']}")
        meta = obj["metadata"]
        if any(
            o["kind"] == obj["kind"]
            and o["metadata"]["name"] == meta["name"]
            and o["metadata"].get("namespace") == meta.get("namespace")
            for o in self.objects
        ):
            raise ApiError(409, "AlreadyExists", f'{obj["kind"].lower()}s "{meta["name"]}" already exists')
        if not dry_run:
            self.objects.append(obj)
        return obj

    def delete(self, api_path: str, **_) -> bool:
        self.calls.append("delete")
        return True

    def request(self, method: str, api_path: str, **_) -> dict:
        self.calls.append(f"{method} {api_path}")
        return {"status": {"allowed": True}}  # the SelfSubjectAccessReview: an admin

    def pending_workloads(self, cluster_queue: str) -> None:
        return None

    def pending_in_local_queue(self, namespace: str, local_queue: str) -> None:
        return None

    def writes(self) -> list[str]:
        return [c for c in self.calls if c.startswith(("create", "delete"))]

    def reads(self) -> list[str]:
        return [c for c in self.calls if not c.startswith(("create", "delete"))]


def cluster(*extra: dict) -> RecordingCluster:
    return RecordingCluster(
        [
            managed("ResourceFlavor", POOL),
            managed("ClusterQueue", NS),
            managed("Namespace", NS),
            {"kind": "LocalQueue", "metadata": {"name": LOCAL_QUEUE_NAME, "namespace": NS}},
            *extra,
        ]
    )


def jobs(*names: str, kind: str = "training") -> list:
    text = "\n---\n".join(
        f"kind: {kind}\njob: {{name: {n}, namespace: {NS}}}\nenvironment: {{image: busybox}}\n"
        f"resources: {{pool: {POOL}, gpu: 1, cpu: 1, memory: 1Gi}}\n"
        for n in names
    )
    return load_text(text, "sweep.yaml")


def test_one_job_reads_its_team_its_pool_and_the_other_job_kinds() -> None:
    c = cluster()
    results = submit(c, jobs("one"), "default", action="create")
    assert [r.error for r in results] == [None]
    # Its own kind is the create's own 409; the other three job kinds are one GET each.
    others = ["get Deployment", "get StatefulSet", "get LeaderWorkerSet"]
    assert c.reads() == ["list ClusterQueue", "list ResourceFlavor", *others]
    assert c.writes() == ["create Job"]


def test_a_sweep_costs_the_same_reads_whatever_its_size() -> None:
    few, many = cluster(), cluster()
    submit(few, jobs(*(f"s{i}" for i in range(NAME_GETS_MAX + 1))), "default", action="create")
    results = submit(many, jobs(*(f"s{i}" for i in range(150))), "default", action="create")
    assert all(r.error is None for r in results)
    expected = ["list ClusterQueue", "list ResourceFlavor", "metadata Job", "metadata Deployment"]
    assert many.reads() == few.reads() == [*expected, "metadata StatefulSet", "metadata LeaderWorkerSet"]
    assert many.writes() == ["create Job"] * 150


@pytest.mark.parametrize("taken_kind", ["Job", "Deployment", "StatefulSet", "LeaderWorkerSet"])
def test_a_taken_name_in_a_sweep_stops_it_before_the_first_write(taken_kind: str) -> None:
    c = cluster(managed(taken_kind, "s7", NS, **{Labels.JOB_TYPE: "compute"}))
    results = submit(c, jobs(*(f"s{i}" for i in range(10))), "default", action="create")
    assert c.writes() == []
    (r,) = results
    assert "job s7 already exists in namespace team-a" in (r.error or "")
    assert "gpuctl apply -f sweep.yaml" in (r.error or "")


def test_one_job_whose_name_its_own_kind_holds_gets_the_same_message_from_the_409() -> None:
    foreign = {"kind": "Job", "metadata": {"name": "one", "namespace": NS, "labels": {}}}
    c = cluster(foreign)
    (r,) = submit(c, jobs("one"), "default", action="create")
    assert c.writes() == ["create Job"]  # refused by the API server: nothing was stored
    assert r.error_status == 409
    assert "job one already exists in namespace team-a (kind: Job)" in (r.error or "")
    assert "gpuctl apply -f sweep.yaml" in (r.error or "")


def test_a_server_dry_run_of_a_sweep_reads_the_cluster_once() -> None:
    c = cluster()
    results = submit(
        c, jobs(*(f"s{i}" for i in range(20))), "default", action="create", dry_run=DryRun.SERVER
    )
    assert all(r.error is None and len(r.lines) == 2 for r in results), [r.lines for r in results]
    assert c.reads().count("list Node") == 1
    assert c.objects[-1]["kind"] == "LocalQueue"  # nothing stored


def test_jobs_for_a_missing_pool_or_team_fail_before_anything_is_read_twice() -> None:
    c = RecordingCluster([managed("ClusterQueue", NS)])
    (r,) = submit(c, jobs("one"), "default", action="create")
    assert "pool training-pool does not exist" in (r.error or "")
    assert c.writes() == []
    assert c.reads() == ["list ClusterQueue", "list ResourceFlavor"]


class PoolCluster(RecordingCluster):
    """RecordingCluster with the writes a pool makes (server-side apply, node merge patches) applied."""

    def apply(self, obj: dict, *, dry_run: bool = False) -> dict:
        self.calls.append(f"apply {obj['kind']}")
        if not dry_run:
            self.objects = [
                o
                for o in self.objects
                if not (o["kind"] == obj["kind"] and o["metadata"]["name"] == obj["metadata"]["name"])
            ] + [json.loads(json.dumps(obj))]
        return obj

    def merge_patch(self, api_path: str, patch: dict, *, dry_run: bool = False) -> dict:
        kind, _, name = self._parse(api_path)
        self.calls.append(f"patch {kind}")
        (obj,) = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name]
        if not dry_run:
            labels = {
                **(obj["metadata"].get("labels") or {}),
                **(patch.get("metadata") or {}).get("labels", {}),
            }
            obj["metadata"]["labels"] = {k: v for k, v in labels.items() if v is not None}
            obj["spec"].update(patch.get("spec") or {})
        return obj


def _node(name: str) -> dict:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {}, "uid": f"uid-{name}"},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "8", "memory": "8Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_create_pool_reads_the_cluster_once_before_and_once_after_its_writes() -> None:
    """Issue 30: `create pool` used to list the nodes, flavors and ClusterQueues four times (its checks,
    then sync_queues, sync_cohort and sync_flavors each on their own Inventory). Now: once for the
    checks, once for what its writes made (the new flavor, the relabelled nodes), shared by the syncs."""
    c = PoolCluster([*cluster().objects, _node("n1")])
    (doc,) = load_text("kind: pool\npool: {name: new-pool}\nnodes: {n1: {}}\n", "pool.yaml")
    (result,) = submit(c, [doc], None, action="create")
    assert "pool/new-pool created" in result.lines
    lists = [r for r in c.reads() if r.startswith("list")]
    assert lists.count("list Node") == 2, c.calls
    assert lists.count("list ResourceFlavor") == 2, c.calls
    assert lists.count("list ClusterQueue") <= 2, c.calls
    assert ("Node", "n1") in {(o["kind"], o["metadata"]["name"]) for o in c.objects}
    (n1,) = [o for o in c.objects if o["kind"] == "Node"]
    assert n1["metadata"]["labels"][Labels.POOL] == "new-pool"
