"""Issue 44: a service whose replicas span nodes (`kind: inference`, `resources.nodes: N`): the
LeaderWorkerSet gpuctl builds (Kueue's labels, one placement for leader and workers, the launcher
environment of training gangs, the Service in front of the leaders), the spec's refusals, a cluster that
serves no LeaderWorkerSet API, and how a group's Workloads and pods read back (`describe job`'s
replicas). The real controllers: tests/integration/test_lws.py."""

from __future__ import annotations

import pytest

from gpuctl.builders import build
from gpuctl.cluster import ApiError
from gpuctl.domain.demand import workload_demand
from gpuctl.domain.gang import gang_note, groups_gpus, groups_waiting, replica_groups, replica_rows
from gpuctl.domain.idle import Decision, IdleAction, IdlePolicy, Verdict
from gpuctl.domain.utilisation import pod_job
from gpuctl.server.idle import IdleReclaimer
from gpuctl.service.activation import set_active
from gpuctl.service.errors import ServiceError
from gpuctl.service.inventory import Inventory
from gpuctl.service.jobs import Job
from gpuctl.service.lifecycle import submit
from gpuctl.spec import SpecError, load_text
from tests.unit.test_submit_reads import NS, POOL, RecordingCluster, cluster


def _spec(resources: str = "gpu: 8, nodes: 2", name: str = "llm", service: str = "replicas: 2"):
    (doc,) = load_text(
        f"kind: inference\njob: {{name: {name}, namespace: {NS}}}\nenvironment: {{image: vllm}}\n"
        f"service: {{{service}, port: 8000, healthCheck: /health}}\n"
        f"resources: {{pool: {POOL}, {resources}, cpu: 4, memory: 8Gi}}\n",
        "svc.yaml",
    )
    return doc


def _env(template: dict) -> dict:
    return {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}


def test_a_service_of_two_node_replicas_is_a_leader_worker_set():
    lws, svc = build(_spec().spec, NS)
    assert (lws["apiVersion"], lws["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    # Kueue queues it through its labels, like every gpuctl job.
    assert lws["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert lws["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "gpuctl-medium"
    spec = lws["spec"]
    assert spec["replicas"] == 2 and spec["leaderWorkerTemplate"]["size"] == 2
    assert spec["rolloutStrategy"]["rollingUpdateConfiguration"] == {"maxUnavailable": 1, "maxSurge": 0}
    leader, worker = (
        spec["leaderWorkerTemplate"]["leaderTemplate"],
        spec["leaderWorkerTemplate"]["workerTemplate"],
    )
    for t in (leader, worker):
        ann = t["metadata"]["annotations"]
        # One placement for the whole group: Kueue's Topology Aware Scheduling keeps it in one domain.
        assert ann["kueue.x-k8s.io/podset-group-name"] == "replica"
        assert ann["kueue.x-k8s.io/podset-preferred-topology"] == "kubernetes.io/hostname"
        assert "kueue.x-k8s.io/podset-unconstrained-topology" not in ann
        assert t["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
        env = _env(t)
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "$(LWS_LEADER_ADDRESS)"
        assert env["PET_NODE_RANK"] == env["NODE_RANK"] == "$(LWS_WORKER_INDEX)"
        assert (env["PET_NNODES"], env["WORLD_SIZE"], env["PET_NPROC_PER_NODE"]) == ("2", "2", "8")
    # Only the leader serves (its port and probes); both have the rendezvous port.
    assert [p["containerPort"] for p in leader["spec"]["containers"][0]["ports"]] == [8000, 29500]
    assert [p["containerPort"] for p in worker["spec"]["containers"][0]["ports"]] == [29500]
    assert "readinessProbe" in leader["spec"]["containers"][0]
    assert "readinessProbe" not in worker["spec"]["containers"][0]
    assert svc["spec"]["selector"] == {"app": "llm", "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    assert gang_note(lws) == " (2 replicas x 2 nodes x 8 GPUs = 32 GPUs)"


def test_one_node_is_still_a_deployment():
    assert build(_spec("gpu: 1").spec, NS)[0]["kind"] == "Deployment"


def test_a_required_topology_level_is_the_groups_placement():
    lws, _ = build(_spec("gpu: 8, nodes: 2, topology: kubernetes.io/hostname").spec, NS)
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["annotations"]
    assert leader["kueue.x-k8s.io/podset-required-topology"] == "kubernetes.io/hostname"


def test_users_own_environment_wins():
    (doc,) = load_text(
        f"kind: inference\njob: {{name: llm, namespace: {NS}}}\n"
        "environment: {image: vllm, env: [{MASTER_PORT: '1234'}]}\n"
        f"resources: {{pool: {POOL}, gpu: 1, nodes: 2, cpu: 1, memory: 1Gi}}\n",
        "svc.yaml",
    )
    lws, _ = build(doc.spec, NS)
    env = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "MASTER_PORT"] == ["1234"]


@pytest.mark.parametrize(
    ("resources", "name", "words"),
    [
        ("gpu: 1, nodes: 2, replicas: 2", "llm", "service.replicas"),
        ("gpu: 1, nodes: 2", "x" * 40, "Kueue limits to 39"),
        ("gpu: 1, topology: rack", "llm", "this job has one node"),
    ],
)
def test_spec_refusals(resources, name, words):
    with pytest.raises(SpecError, match=words):
        _spec(resources, name)


def test_a_cluster_without_the_leader_worker_set_api_refuses_before_any_write():
    class NoLws(RecordingCluster):
        def list(self, api_path: str, **kw) -> list[dict]:
            if "leaderworkersets" in api_path:
                self.calls.append("list LeaderWorkerSet")
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return super().list(api_path, **kw)

        def get_or_none(self, api_path: str, **kw) -> dict | None:
            if "leaderworkersets" in api_path:
                return None
            return super().get_or_none(api_path, **kw)

    c = NoLws(cluster().objects)
    (r,) = submit(c, [_spec()], NS, action="create")
    assert "serves no LeaderWorkerSet API" in (r.error or "") and "resources.nodes: 1" in r.error
    assert c.writes() == []
    # Listing jobs there reads no LeaderWorkerSet and fails on none.
    assert Inventory(c, NS).controllers == []


def test_a_caller_who_may_not_list_leader_worker_sets_sees_the_other_jobs():
    class Forbidden(RecordingCluster):
        def list(self, api_path: str, **kw) -> list[dict]:
            if "leaderworkersets" in api_path:
                raise ApiError(403, "Forbidden", "leaderworkersets is forbidden")
            if "/jobs" in api_path:
                raise ApiError(403, "Forbidden", "jobs is forbidden")
            return super().list(api_path, **kw)

    with pytest.raises(ApiError):  # only the optional kind is forgiven
        Inventory(Forbidden(cluster().objects), NS).controllers  # noqa: B018


def test_replica_rows_pair_each_groups_workload_and_pods():
    def wl(i: int, admitted: bool) -> dict:
        conds = [{"type": "QuotaReserved", "status": "True" if admitted else "False"}]
        conds += [{"type": "Admitted", "status": "True"}] if admitted else []
        return {
            "metadata": {"name": f"w{i}", "annotations": {"kueue.x-k8s.io/component-workload-index": str(i)}},
            "status": {"conditions": conds},
        }

    def pod(name: str, group: int, rank: int, node: str | None) -> dict:
        labels = {"leaderworkerset.sigs.k8s.io/group-index": str(group)}
        labels["leaderworkerset.sigs.k8s.io/worker-index"] = str(rank)
        return {"metadata": {"name": name, "labels": labels}, "spec": {"nodeName": node}, "status": {}}

    pods = [pod("llm-0-1", 0, 1, "n2"), pod("llm-0", 0, 0, "n1"), pod("llm-1", 1, 0, None)]
    rows = replica_rows([wl(1, False), wl(0, True)], pods)
    assert [(r["replica"], r["state"], [p["pod"] for p in r["pods"]]) for r in rows] == [
        (0, "Admitted", ["llm-0", "llm-0-1"]),
        (1, "Queued", ["llm-1"]),
    ]
    assert rows[0]["pods"][1] == {"rank": 1, "pod": "llm-0-1", "node": "n2"}


def test_a_waiting_group_counts_as_waiting_and_holds_no_gpus():
    def pod(group: int, rank: int, gated: bool) -> dict:
        labels = {"leaderworkerset.sigs.k8s.io/group-index": str(group)}
        labels["leaderworkerset.sigs.k8s.io/worker-index"] = str(rank)
        spec = {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "4"}}}]}
        if gated:
            spec["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
        else:
            spec["nodeName"] = f"n{group}{rank}"
        return {"metadata": {"name": f"llm-{group}-{rank}", "labels": labels}, "spec": spec, "status": {}}

    groups = replica_groups([pod(0, 0, False), pod(0, 1, False), pod(1, 0, True), pod(1, 1, True)])
    assert groups_waiting(groups) == 1
    assert groups_gpus(groups) == 8  # the admitted group's 2 x 4; the gated group's 8 are asked, not held
    assert groups_waiting(replica_groups([pod(0, 0, False)])) == 0


def test_a_groups_workload_needs_the_gpus_of_its_leader_and_its_workers():
    def pod_set(name: str, count: int) -> dict:
        spec = {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "4"}}}]}
        return {"name": name, "count": count, "template": {"spec": spec}}

    wl = {
        "metadata": {"name": "w", "namespace": NS},
        "spec": {"podSets": [pod_set("leader", 1), pod_set("workers", 2)]},
    }
    d = workload_demand(wl)
    assert (d.pods, d.gpus) == (3, 4)  # the leader's pod set alone said 1 x 4


def test_a_groups_pods_are_the_services_in_gpu_use():
    """The per-job GPU series (gpuctl_job_pod_info) name the LeaderWorkerSet for the leader (its
    StatefulSet <name>) and for the workers (their StatefulSet <name>-<group>, under the leader pod)."""

    def pod(name: str, owner: str) -> dict:
        ref = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": owner, "controller": True}
        labels = {"leaderworkerset.sigs.k8s.io/name": "llm", "app": "llm"}
        return {"metadata": {"name": name, "labels": labels, "ownerReferences": [ref]}}

    assert [pod_job(pod("llm-0", "llm")), pod_job(pod("llm-0-1", "llm-0"))] == ["llm", "llm"]


def test_resume_gives_back_the_groups_serve_scaled_down_for_idle_gpus():
    """gpuctl serve --idle scales an idle service to its floor (issue 40) keeping its replicas in
    runwhere.ai/idle-replicas; resume restores them on the LeaderWorkerSet as on a Deployment (and stop
    stays refused)."""

    class Patching(RecordingCluster):
        def merge_patch(self, api_path: str, body: dict, **_) -> dict:
            self.calls.append(f"patch {api_path}")
            self.patches.append(body)
            return body

    lws, _ = build(_spec().spec, NS)
    lws["metadata"].update(uid="u-llm", annotations={"runwhere.ai/idle-replicas": "2"})
    lws["spec"]["replicas"] = 1
    c = Patching(cluster(lws).objects)
    c.patches = []
    with pytest.raises(ServiceError, match="cannot be held by stop"):
        set_active(c, "llm", NS, False)
    done = set_active(c, "llm", NS, True)
    assert done.changed and done.resource == "LeaderWorkerSet"
    assert [x for x in c.calls if x.startswith("patch")] == [
        f"patch /apis/leaderworkerset.x-k8s.io/v1/namespaces/{NS}/leaderworkersets/llm"
    ]
    assert c.patches == [
        {
            "metadata": {"uid": "u-llm", "annotations": {"runwhere.ai/idle-replicas": None}},
            "spec": {"replicas": 2},
        }
    ]


def test_serve_idle_scales_a_leader_worker_set_service_by_its_groups():
    """gpuctl serve --idle (issue 40): an idle service of multi-node replicas goes to its floor (1 group)
    on its LeaderWorkerSet, keeping its replicas in runwhere.ai/idle-replicas; never stopped."""

    class Patching(RecordingCluster):
        def merge_patch(self, api_path: str, body: dict, **_) -> dict:
            self.calls.append(f"patch {api_path}")
            self.patches.append(body)
            return body

    lws, _ = build(_spec(service="replicas: 3").spec, NS)
    lws["metadata"]["uid"] = "u-llm"
    c = Patching(cluster(lws).objects)
    c.patches = []
    job = Job("inference", "LeaderWorkerSet", lws, None, [], "Running")
    verdict = Verdict(
        idle=True, window=3600, floor=0.05, peak=0.0, mean=0.0, coverage=1.0, devices=16, gpus=16
    )
    reclaimer = IdleReclaimer(c, None, None)
    pol = IdlePolicy(rules={}, source="pool p")
    assert reclaimer._act(job, Decision(action=IdleAction.STOP, acts=True, verdict=verdict), pol, 1e9) == ""
    assert c.patches == []
    assert reclaimer._act(job, Decision(action=IdleAction.FLOOR, acts=True, verdict=verdict), pol, 1e9) == (
        "scaled to 1"
    )
    assert [x for x in c.calls if x.startswith("patch")] == [
        f"patch /apis/leaderworkerset.x-k8s.io/v1/namespaces/{NS}/leaderworkersets/llm"
    ]
    assert c.patches[0]["spec"] == {"replicas": 1}
    assert c.patches[0]["metadata"]["annotations"] == {"runwhere.ai/idle-replicas": "3"}
