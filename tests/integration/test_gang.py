"""Multi-node training on the real cluster (issue 31, docs/distributed.md): a pool of three fake 8-GPU
nodes in two racks, made by this module through the API (hack/cluster/nodes.yaml, which every other test
relies on, is left alone). A 2-node x 8-GPU job is one Workload of 16 GPUs, both pods are placed at once on
two nodes of one rack with the launcher environment; with one node free no pod of it exists and `describe`
says why; a killed rank fails the whole gang and its quota is released; the team's Kueue usage always
equals the GPUs its pods hold."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from gpuctl.cluster import path
from gpuctl.constants import GANG_PLACEMENT, GPU_RESOURCE, TAS_REQUEST_KEYS, Labels
from gpuctl.domain.gang import set_aside_tolerations
from gpuctl.domain.gpus import pod_gpus, workload_gpus
from gpuctl.domain.teams import team_usage
from gpuctl.domain.workload import WorkloadState, workload_state
from tests.integration.admission_stack import AdmissionStack
from tests.integration.conftest import wait_until
from tests.integration.own_pool import BLOCK, RACK, node_ready, own_pool, rack_node
from tests.integration.tenancy import EDIT_ROLES, TeamMember
from tests.integration.test_cli_cluster import gpuctl  # noqa: F401 - fixture
from tests.integration.test_raw_kubectl import topology_policies

INDEX = "batch.kubernetes.io/job-completion-index"
KWOK_MANAGED = "kwok.x-k8s.io/node"


@dataclass(frozen=True)
class Racks:
    pool: str
    ns: str
    nodes: dict[str, str]  # node -> rack


@pytest.fixture(scope="module")
def racks(cluster, kube, tmp_path_factory) -> Iterator[Racks]:
    sfx = uuid.uuid4().hex[:5]
    nodes = {f"gang-{sfx}-1": "r1", f"gang-{sfx}-2": "r1", f"gang-{sfx}-3": "r2"}
    pool, ns = f"racks-{sfx}", f"gang-{sfx}"
    objs = {n: rack_node(n, rack) for n, rack in nodes.items()}
    tmp = tmp_path_factory.mktemp("gang")
    with own_pool(
        kube, cluster, tmp, pool=pool, ns=ns, nodes=objs, quota="{gpu: 24}", topology=f"[{BLOCK}, {RACK}]"
    ):
        yield Racks(pool, ns, nodes)


def _job_file(
    tmp_path, racks: Racks, name: str, nodes: int, *, topology: str = "", runtime: str = "30m"
) -> str:
    f = tmp_path / f"{name}.yaml"
    extra = f", topology: {topology}" if topology else ""
    f.write_text(
        f"kind: training\njob: {{name: {name}, namespace: {racks.ns}}}\n"
        "environment: {image: busybox, command: [torchrun, train.py], "
        f"env: [{{GPUCTL_FAKE_RUNTIME: {runtime}}}]}}\n"
        f"resources: {{pool: {racks.pool}, nodes: {nodes}, gpu: 8, cpu: 8, memory: 64Gi{extra}}}\n"
    )
    return str(f)


def _workload(kube, ns: str, job: str) -> dict | None:
    for wl in kube.list(path("Workload", namespace=ns)):
        if any(o.get("name") == job for o in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def _pods(kube, ns: str, job: str) -> list[dict]:
    return kube.list(path("Pod", namespace=ns), label_selector=f"batch.kubernetes.io/job-name={job}")


def _team_gpus(kube, ns: str) -> int:
    """The team's GPUs as Kueue counts them: its ClusterQueue's usage of the GPU budget."""
    return team_usage(kube.get(path("ClusterQueue", ns))).gpus


def _held_gpus(kube, ns: str) -> int:
    """The GPUs the team's pods hold: bound, not finished."""
    return sum(
        pod_gpus(p)
        for p in kube.list(path("Pod", namespace=ns))
        if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")
    )


def _usage_matches(kube, ns: str) -> tuple[int, int] | None:
    """(Kueue's count, pods' GPUs) when they agree, else None (polled: pods bind a moment after admission)."""
    counted, held = _team_gpus(kube, ns), _held_gpus(kube, ns)
    return (counted, held) if counted == held else None


def test_a_two_node_job_is_one_workload_placed_in_one_rack(gpuctl, kube, racks, tmp_path):  # noqa: F811
    rc, out, err = gpuctl("create", "-f", _job_file(tmp_path, racks, "pair", 2))
    assert rc == 0, err
    assert "job.batch/pair created (2 nodes x 8 GPUs = 16 GPUs)" in out
    wl = wait_until(lambda: _workload(kube, racks.ns, "pair"), 30, what="pair's Workload")
    (ps,) = wl["spec"]["podSets"]
    assert ps["count"] == 2
    wait_until(
        lambda: workload_state(_workload(kube, racks.ns, "pair")) == WorkloadState.ADMITTED,
        60,
        what="admitted",
    )
    assert workload_gpus(_workload(kube, racks.ns, "pair")) == 16

    def bound() -> list[dict] | None:
        pods = _pods(kube, racks.ns, "pair")
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = sorted(
        wait_until(bound, 60, what="both ranks bound"), key=lambda p: int(p["metadata"]["annotations"][INDEX])
    )
    # Two nodes of one rack (the only rack that holds 16 GPUs), one rank per node.
    used = [p["spec"]["nodeName"] for p in pods]
    assert len(set(used)) == 2 and {racks.nodes[n] for n in used} == {"r1"}, used
    for rank, pod in enumerate(pods):
        assert pod["metadata"]["annotations"][INDEX] == str(rank)
        assert pod["spec"]["hostname"] == f"pair-{rank}" and pod["spec"]["subdomain"] == "svc-pair"
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["WORLD_SIZE"]["value"] == env["PET_NNODES"]["value"] == "2"
        assert env["PET_NPROC_PER_NODE"]["value"] == "8"
        # master address = rank 0's host name in the headless Service
        assert (
            env["MASTER_ADDR"]["value"]
            == env["PET_MASTER_ADDR"]["value"]
            == f"{pods[0]['spec']['hostname']}.svc-pair"
        )
        for var in ("PET_NODE_RANK", "NODE_RANK"):
            assert env[var]["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.annotations['{INDEX}']"
    svc = kube.get(path("Service", "svc-pair", racks.ns))
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["selector"] == {
        "batch.kubernetes.io/job-name": "pair"
    }
    assert wait_until(lambda: _usage_matches(kube, racks.ns), 30, what="usage = held") == (16, 16)

    def pair_row() -> dict | None:  # KWOK marks the bound pods Ready a moment later
        rc, out, err = gpuctl("get", "jobs", "-n", racks.ns, "-o", "json")
        assert rc == 0, err
        (job,) = [j for j in json.loads(out)["items"] if j["metadata"]["name"] == "pair"]
        return job if job["status"]["ready"] == "2/2" else None

    job = wait_until(pair_row, 30, what="get jobs shows pair 2/2 ready")
    assert (job["status"]["ready"], job["status"]["nodes"]) == ("2/2", used)
    assert (job["spec"]["gpus"], job["spec"]["nodes"], job["status"]["gpus"]) == (16, 2, 16)
    rc, out, err = gpuctl("describe", "job", "pair", "-n", racks.ns)
    assert rc == 0, err
    assert "2 nodes x 8 GPUs = 16 GPUs" in out
    for rank, node in enumerate(used):
        assert any(
            line.split()[:3] == [str(rank), pods[rank]["metadata"]["name"], node] and line.split()[-1] == "r1"
            for line in out.splitlines()
        ), out
    rc, _, err = gpuctl("delete", "job", "pair", "-n", racks.ns)
    assert rc == 0, err
    wait_until(
        lambda: kube.get_or_none(path("Service", "svc-pair", racks.ns)) is None, 30, what="svc-pair deleted"
    )


def test_with_one_node_free_no_pod_of_the_gang_exists(gpuctl, kube, racks, tmp_path):  # noqa: F811
    # Two one-node jobs take two of the three nodes; whichever they take, no rack has two free nodes.
    for name in ("solo-a", "solo-b"):
        rc, _, err = gpuctl("create", "-f", _job_file(tmp_path, racks, name, 1))
        assert rc == 0, err
    for name in ("solo-a", "solo-b"):
        wait_until(
            lambda name=name: workload_state(_workload(kube, racks.ns, name)) == WorkloadState.ADMITTED,
            60,
            what=name,
        )
    rc, _, err = gpuctl("create", "-f", _job_file(tmp_path, racks, "wait", 2))
    assert rc == 0, err
    wait_until(
        lambda: workload_state(_workload(kube, racks.ns, "wait")) == WorkloadState.PENDING,
        30,
        what="wait queued",
    )
    job = kube.get(path("Job", "wait", racks.ns))
    assert job["spec"]["suspend"] is True and _pods(kube, racks.ns, "wait") == []
    rc, out, err = gpuctl("describe", "job", "wait", "-n", racks.ns, "-o", "json")
    d = json.loads(out)
    assert d["status"] == "Queued" and d["pods"] == []
    assert "needs 2 nodes with 8 free GPUs" in d["why"], d["why"]
    assert wait_until(lambda: _usage_matches(kube, racks.ns), 30, what="usage = held") == (16, 16)
    # One of the solo jobs ends: the gang fits only if its node's rack partner is free; stop both.
    for name in ("solo-a", "solo-b"):
        assert gpuctl("delete", "job", name, "-n", racks.ns)[0] == 0
    wait_until(
        lambda: workload_state(_workload(kube, racks.ns, "wait")) == WorkloadState.ADMITTED,
        90,
        what="wait admitted",
    )
    assert gpuctl("delete", "job", "wait", "-n", racks.ns)[0] == 0


def test_a_killed_rank_fails_the_whole_gang_and_frees_its_quota(gpuctl, kube, racks, tmp_path):  # noqa: F811
    rc, _, err = gpuctl("create", "-f", _job_file(tmp_path, racks, "crash", 2))
    assert rc == 0, err

    def running() -> list[dict] | None:
        pods = _pods(kube, racks.ns, "crash")
        return pods if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods) else None

    pods = wait_until(running, 90, what="both ranks running")
    assert wait_until(lambda: _usage_matches(kube, racks.ns), 30, what="usage = held") == (16, 16)
    victim = next(p for p in pods if p["metadata"]["annotations"][INDEX] == "1")
    # Rank 1's container dies (exit 137, as an OOM kill): the fake kubelet reports it Failed.
    kube.merge_patch(
        path("Pod", victim["metadata"]["name"], racks.ns, subresource="status"),
        {
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "started": False,
                        "state": {"terminated": {"exitCode": 137, "reason": "Error"}},
                    }
                ],
            }
        },
    )

    def failed() -> dict | None:
        job = kube.get(path("Job", "crash", racks.ns))
        conds = {c["type"]: c for c in job.get("status", {}).get("conditions", []) if c["status"] == "True"}
        return conds.get("Failed")

    cond = wait_until(failed, 60, what="the Job failed")
    assert cond["reason"] == "PodFailurePolicy", cond
    # The other rank is stopped and no GPU stays reserved: Kueue's count and the pods' agree at 0.
    wait_until(
        lambda: workload_state(_workload(kube, racks.ns, "crash")) == WorkloadState.FINISHED,
        60,
        what="finished",
    )
    assert (
        wait_until(lambda: _usage_matches(kube, racks.ns) == (0, 0) or None, 90, what="quota released")
        is True
    )
    rc, out, _ = gpuctl("get", "jobs", "-n", racks.ns, "-o", "json")
    (job,) = [j for j in json.loads(out)["items"] if j["metadata"]["name"] == "crash"]
    assert job["status"]["phase"] == "Failed"
    assert gpuctl("delete", "job", "crash", "-n", racks.ns)[0] == 0


def test_without_a_required_level_a_gang_no_rack_holds_spreads(gpuctl, kube, racks, tmp_path):  # noqa: F811
    # 3 nodes x 8 GPUs fit the pool (24 GPUs) but no rack (r1 has 2 nodes): with `topology: rack` it is
    # refused at create (test_a_gang_the_pool_can_never_hold_...), preferred it spreads over both racks.
    rc, _, err = gpuctl("create", "-f", _job_file(tmp_path, racks, "spread", 3))
    assert rc == 0, err
    wait_until(
        lambda: len([p for p in _pods(kube, racks.ns, "spread") if p["spec"].get("nodeName")]) == 3,
        90,
        what="3 ranks bound",
    )
    assert {p["spec"]["nodeName"] for p in _pods(kube, racks.ns, "spread")} == set(racks.nodes)
    assert gpuctl("delete", "job", "spread", "-n", racks.ns)[0] == 0


def test_a_level_the_pool_does_not_have_is_refused(gpuctl, racks, tmp_path):  # noqa: F811
    rc, _, err = gpuctl("create", "-f", _job_file(tmp_path, racks, "zoned", 2, topology="zone"))
    assert rc != 0
    assert "resources.topology: zone is no level of pool" in err and "use one of block, rack" in err, err


@pytest.mark.parametrize(
    ("nodes", "topology", "words"),
    [
        (4, "", "4 pods x 8 GPUs never fit in pool {pool}: its 3 node(s) hold 3 such pods at most"),
        (3, "rack", "3 pods x 8 GPUs never fit in one rack of pool {pool}: the largest (r1) holds 2"),
    ],
)
def test_a_gang_the_pool_can_never_hold_is_refused_before_anything_is_written(
    gpuctl,  # noqa: F811
    kube,
    racks,
    tmp_path,
    nodes: int,
    topology: str,
    words: str,
):
    f = _job_file(tmp_path, racks, "huge", nodes, topology=topology)
    rc, _, err = gpuctl("create", "-f", f)
    assert rc != 0
    assert f"{f}: job huge: resources.nodes: " + words.format(pool=racks.pool) in err, err
    assert "lower resources.nodes or resources.gpu (per node)" in err, err
    assert kube.get_or_none(path("Job", "huge", racks.ns)) is None
    assert kube.get_or_none(path("Service", "svc-huge", racks.ns)) is None


def _raw_gang(racks: Racks, name: str, pods: int) -> dict:
    """A team member's own Indexed Job of `pods` ranks x 8 GPUs in the pool, written for kubectl."""
    res = {"cpu": "8", "memory": "64Gi", GPU_RESOURCE: "8"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": racks.ns, "labels": {Labels.KUEUE_QUEUE: "default"}},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": pods,
            "completions": pods,
            "template": {
                "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "600s"}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "nodeSelector": {Labels.POOL: racks.pool},
                    "containers": [{"name": "main", "image": "busybox", "resources": {"limits": res}}],
                },
            },
        },
    }


def _set_ready(kube, name: str, ready: bool) -> None:
    """A fake node goes NotReady as when its kubelet stops (KWOK, which would report it Ready at once, lets go
    of it: its annotation removed, then condition Ready False), or Ready again (KWOK manages it again)."""
    if ready:
        kube.merge_patch(path("Node", name), {"metadata": {"annotations": {KWOK_MANAGED: "fake"}}})
        return
    kube.merge_patch(path("Node", name), {"metadata": {"annotations": {KWOK_MANAGED: None}}})
    conds = kube.get(path("Node", name))["status"]["conditions"]
    for c in conds:
        if c["type"] == "Ready":
            c["status"], c["reason"] = "False", "KubeletNotReady"
    kube.merge_patch(path("Node", name, subresource="status"), {"status": {"conditions": conds}})


def test_with_a_node_not_ready_gpuctl_and_the_webhook_give_one_answer(
    gpuctl,  # noqa: F811
    kube,
    kubectl_bin,
    cluster,
    racks,
    tmp_path,
):
    """Which nodes of a pool count is one answer (gpuctl.domain.pools.node_ready: Ready, not cordoned). With
    the pool's three nodes Ready, a 3-node x 8-GPU gang is accepted by `gpuctl create` and by the webhook's
    gang-fits (a team member's raw Indexed Job through kubectl); with one node NotReady both refuse it, in
    the same words. (Before, `gpuctl create` counted Ready nodes and the webhook every node: refused by one,
    admitted by the other.) Dry runs and refusals only: nothing is written."""
    down = next(n for n, rack in racks.nodes.items() if rack == "r2")
    member = TeamMember.create(kube, racks.ns, roles=EDIT_ROLES)
    stack = AdmissionStack.install(kube, kubectl_bin, cluster, [racks.ns], tmp_path)
    f = _job_file(tmp_path, racks, "three", 3)
    raw = json.dumps(_raw_gang(racks, "three", 3))

    def by_kubectl() -> subprocess.CompletedProcess:
        return member.kubectl(kubectl_bin, "create", "--dry-run=server", "-f", "-", input=raw)

    try:
        stack.wait_active(_raw_gang(racks, "four", 4), "[gang-fits]")  # 4 ranks never fit 3 nodes
        p = by_kubectl()
        assert p.returncode == 0, p.stderr
        rc, _, err = gpuctl("create", "-f", f, "--dry-run=server")
        assert rc == 0, err
        _set_ready(kube, down, False)
        wait_until(lambda: not node_ready(kube, down), 30, what=f"{down} NotReady")
        # The webhook sees the node's condition through its watch cache a moment later.
        p = wait_until(lambda: (q := by_kubectl()).returncode != 0 and q, 30, what="the webhook refuses")
        words = (
            f"3 pods x 8 GPUs never fit in pool {racks.pool}: its 2 node(s) hold 2 such pods at most "
            "(2 with 8 GPUs; 1 more NotReady or cordoned, not counted)"
        )
        assert f"[gang-fits] a multi-node job of {words}" in p.stderr, p.stderr
        rc, _, err = gpuctl("create", "-f", f)
        assert rc != 0
        assert f"{f}: job three: resources.nodes: {words}" in err, err
        assert kube.get_or_none(path("Job", "three", racks.ns)) is None
        assert kube.get_or_none(path("Service", "svc-three", racks.ns)) is None
    finally:
        _set_ready(kube, down, True)
        stack.remove()
        member.delete()
        wait_until(lambda: node_ready(kube, down), 60, what=f"{down} Ready again")
        taints = lambda: kube.get(path("Node", down))["spec"].get("taints") or []  # noqa: E731
        wait_until(
            lambda: not [t for t in taints() if t["key"].startswith("node.kubernetes.io/")],
            60,
            what="the node controller's NotReady taints lifted",
        )


def test_a_raw_indexed_job_a_team_member_applies_is_queued_as_the_same_gang(
    gpuctl,  # noqa: F811
    kubectl,
    kube,
    racks,
    tmp_path,
):
    """A team member's own Indexed Job (kubectl, no gpuctl) gets what gpuctl's gang gets from the topology
    MutatingAdmissionPolicy: the placement annotation and the set-aside toleration; Kueue admits it as one
    Workload of 2 pods, placed in one rack like gpuctl's."""
    user = f"alice-{uuid.uuid4().hex[:5]}"
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"edit-{user}", "namespace": racks.ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    kubectl("create", "-f", "-", input=json.dumps(binding))
    raw = _raw_gang(racks, "rawgang", 2)
    with topology_policies(kubectl, [racks.ns], racks.ns):
        p = kubectl(f"--as={user}", "create", "-f", "-", input=json.dumps(raw), check=False)
        assert p.returncode == 0, p.stderr
    try:
        tmpl = kube.get(path("Job", "rawgang", racks.ns))["spec"]["template"]
        # What gpuctl's own 2-node job renders for this pool (its dry run), the same keys and toleration.
        rc, out, err = gpuctl(
            "create", "-f", _job_file(tmp_path, racks, "ref", 2), "--dry-run=client", "-o", "json"
        )
        assert rc == 0, err
        ref = next(o for o in json.loads(out)["items"] if o["kind"] == "Job")["spec"]["template"]

        def placement(t: dict) -> dict:
            return {k: v for k, v in t["metadata"]["annotations"].items() if k in TAS_REQUEST_KEYS}

        assert placement(tmpl) == placement(ref) == GANG_PLACEMENT
        # Issue 43: the job's own set-aside only (its namespace and name), as gpuctl's builder writes it.
        own = set_aside_tolerations(racks.ns, "rawgang")
        assert all(t in tmpl["spec"]["tolerations"] for t in own)
        assert set_aside_tolerations(racks.ns, "ref") == [
            t for t in ref["spec"]["tolerations"] if t["key"].startswith("runwhere.ai/set-aside")
        ]
        wl = wait_until(lambda: _workload(kube, racks.ns, "rawgang"), 30, what="rawgang's Workload")
        assert [ps["count"] for ps in wl["spec"]["podSets"]] == [2]
        wait_until(
            lambda: workload_state(_workload(kube, racks.ns, "rawgang")) == WorkloadState.ADMITTED,
            60,
            what="rawgang admitted",
        )

        def bound() -> list[str] | None:
            nodes = [p["spec"].get("nodeName") for p in _pods(kube, racks.ns, "rawgang")]
            return nodes if len(nodes) == 2 and all(nodes) else None

        used = wait_until(bound, 60, what="both ranks bound")
        assert len(set(used)) == 2 and {racks.nodes[n] for n in used} == {"r1"}, used
    finally:
        kube.delete(path("Job", "rawgang", racks.ns), propagation="Background")
        kubectl("delete", "rolebinding", f"edit-{user}", "-n", racks.ns, check=False)
        wait_until(lambda: not _pods(kube, racks.ns, "rawgang"), 60, what="rawgang's pods gone")
