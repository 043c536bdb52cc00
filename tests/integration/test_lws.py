"""A service whose replicas span nodes (issue 44, docs/serving.md "Replicas bigger than a node") on a cluster
that runs the LeaderWorkerSet controller (hack/cluster/up.sh with GPUCTL_TESTBED_LWS=1; the clusters
pytest starts have it), submitted by a team member with only the roles gpuctl ships.

Two fake 8-GPU nodes make a pool; the team's budget is 8 GPUs, nothing borrowed. A service of 2 replicas,
each a group of 2 pods x 4 GPUs, is admitted group by group: one group runs whole (both pods bound), the
other waits as its own Workload with its pods held at Kueue's gate and no GPU; `get jobs` shows one
row (READY 1/2) and `describe job` each replica's state and pods by rank. When the budget grows to 16
GPUs, Kueue admits the second group whole; the team's Kueue usage equals what its pods hold."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuctl.cli.main import main
from gpuctl.cluster import path
from gpuctl.domain.workload import WorkloadState, workload_state
from tests.integration.conftest import require_controller, wait_until
from tests.integration.fake_nodes import fake_node
from tests.integration.own_pool import node_ready, remove_team
from tests.integration.tenancy import SHIPPED_ROLES, TeamMember, apply_caller_roles
from tests.integration.test_gang import _held_gpus, _team_gpus

LWS = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets"
GATE = "kueue.x-k8s.io/admission"


@dataclass(frozen=True)
class Team:
    pool: str
    ns: str
    member: TeamMember
    quota_file: str


@pytest.fixture(scope="module")
def team(cluster, kube, tmp_path_factory) -> Iterator[Team]:
    require_controller(
        kube, "leaderworkersets.leaderworkerset.x-k8s.io", "LeaderWorkerSet", "GPUCTL_TESTBED_LWS"
    )
    sfx = uuid.uuid4().hex[:5]
    nodes = [f"lws-{sfx}-1", f"lws-{sfx}-2"]
    pool, ns = f"lws-{sfx}", f"lws-team-{sfx}"
    tmp = tmp_path_factory.mktemp("lws")
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}
    for n in nodes:
        kube.create(fake_node(n, labels, {"nvidia.com/gpu": "8"}))
    member = None
    try:
        for n in nodes:
            wait_until(lambda n=n: node_ready(kube, n), 60, what=f"node {n} Ready")
        (tmp / "pool.yaml").write_text(
            f"kind: pool\npool: {{name: {pool}}}\nnodes:\n" + "".join(f"  {n}: {{}}\n" for n in nodes)
        )
        quota = tmp / "quota.yaml"
        quota.write_text(
            f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n  {ns}: {{gpu: 8, borrowingLimit: 0}}\n"
        )
        assert main(["create", "-f", str(tmp / "pool.yaml"), "-f", str(quota), "--kubeconfig", cluster]) == 0
        apply_caller_roles(kube)
        member = TeamMember.create(kube, ns, roles=SHIPPED_ROLES)
        yield Team(pool, ns, member, str(quota))
    finally:
        if kube.get_or_none(f"/api/v1/namespaces/{ns}") is not None:
            for lws in kube.list(LWS.format(ns=ns)):
                kube.delete(f"{LWS.format(ns=ns)}/{lws['metadata']['name']}", propagation="Background")
        if member is not None:
            member.delete()
        remove_team(kube, cluster, ns, pool, nodes)


def _pods(kube, ns: str) -> list[dict]:
    return [
        p
        for p in kube.list(path("Pod", namespace=ns), label_selector="leaderworkerset.sigs.k8s.io/name=llm")
        if p["status"].get("phase") not in ("Succeeded", "Failed")
        and not p["metadata"].get("deletionTimestamp")
    ]


def _by_group(kube, ns: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for p in _pods(kube, ns):
        out.setdefault(p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"], []).append(p)
    return out


def _gated(p: dict) -> bool:
    return any(g["name"] == GATE for g in p["spec"].get("schedulingGates") or [])


def _workloads(kube, ns: str) -> dict[str, dict]:
    """The service's Workloads by group index."""
    return {
        (w["metadata"].get("annotations") or {}).get("kueue.x-k8s.io/component-workload-index", ""): w
        for w in kube.list(path("Workload", namespace=ns))
    }


def test_a_two_pod_per_replica_service_is_admitted_group_by_group(team, kube, tmp_path):
    m = team.member
    f = tmp_path / "llm.yaml"
    f.write_text(
        f"kind: inference\njob: {{name: llm, namespace: {team.ns}}}\nenvironment: {{image: vllm}}\n"
        "service: {replicas: 2, port: 8000}\n"
        f"resources: {{pool: {team.pool}, nodes: 2, gpuMemory: 300Gi, cpu: 1, memory: 1Gi}}\n"
    )
    p = m.gpuctl("create", "-f", str(f))
    assert p.returncode == 0, p.stderr
    assert (
        "leaderworkerset.leaderworkerset.x-k8s.io/llm created (2 replicas x 2 nodes x 4 GPUs = 16 GPUs)"
        in p.stdout
    )

    # One group admitted whole (Kueue picks either): both its pods bound; the other waits whole: its pods
    # gated, on no node.
    def split() -> tuple[str, list[dict], list[dict]] | None:
        groups = _by_group(kube, team.ns)
        for run, wait in (("0", "1"), ("1", "0")):
            up, held = groups.get(run, []), groups.get(wait, [])
            if (
                len(up) == 2
                and all(p["spec"].get("nodeName") for p in up)
                and held
                and all(map(_gated, held))
            ):
                return run, up, held
        return None

    run, g_run, g_wait = wait_until(split, 120, what="one group running, the other gated")
    wait = "1" if run == "0" else "0"
    wls = wait_until(lambda: (w := _workloads(kube, team.ns)) and len(w) == 2 and w, 30, what="2 Workloads")
    assert workload_state(wls[run]) == WorkloadState.ADMITTED
    assert workload_state(wls[wait]) == WorkloadState.PENDING
    assert [ps["count"] for ps in wls[run]["spec"]["podSets"]] == [1, 1]  # leader + 1 worker
    assert all(not p["spec"].get("nodeName") for p in g_wait)
    wait_until(lambda: _team_gpus(kube, team.ns) == _held_gpus(kube, team.ns) == 8, 60, what="8 GPUs held")

    # The launcher environment: LWS's leader address first, gpuctl's variables naming it, the rank.
    leader = next(
        p for p in g_run if p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    )
    env = {e["name"]: e.get("value") for e in leader["spec"]["containers"][0]["env"]}
    assert leader["spec"]["containers"][0]["env"][0]["name"] == "LWS_LEADER_ADDRESS"
    assert env["LWS_LEADER_ADDRESS"].startswith(f"llm-{run}.llm.{team.ns}")
    assert env["MASTER_ADDR"] == "$(LWS_LEADER_ADDRESS)" and env["NODE_RANK"] == "$(LWS_WORKER_INDEX)"
    assert env["PET_NPROC_PER_NODE"] == "4" and env["WORLD_SIZE"] == "2"

    # get jobs: one row for the service; describe job: each replica, its state and its pods by rank.
    # READY counts the running group once its pods are ready; GPUS is what the admitted group holds (the
    # waiting group's pods ask for 8 more and hold none); REASON says how many replicas wait, and why.
    def rows() -> list[dict]:
        p = m.gpuctl("get", "jobs", "-o", "json")
        assert p.returncode == 0, p.stderr
        return [j for j in json.loads(p.stdout)["items"] if j["metadata"]["name"] == "llm"]

    (job,) = wait_until(
        lambda: (r := rows()) and r[0]["status"]["ready"] == "1/2" and r, 60, what="READY 1/2"
    )
    row = job["status"]
    assert job["spec"]["kind"] == "inference" and row["gpus"] == 8, job
    # Asked: 2 replicas of a 2-node group of 4 GPUs each.
    assert (job["spec"]["gpus"], job["spec"]["nodes"], job["spec"]["replicas"]) == (16, 2, 2), job
    # The waiting group's Workload asks for its leader's and its worker's GPUs: 2 x 4.
    assert row["reason"].startswith("1 of 2 replicas waiting for GPUs: "), row
    assert row["reason"].endswith("this job needs 8"), row
    p = m.gpuctl("describe", "job", "llm")
    assert p.returncode == 0, p.stderr
    assert "2 replicas x 2 nodes x 4 GPUs = 16 GPUs" in p.stdout
    assert "Replicas:" in p.stdout and "Queued" in p.stdout
    # The waiting replica: what it waits for (its whole group's GPUs) and when it runs at the latest.
    waiting = p.stdout.split("Waiting replicas:\n", 1)[1].splitlines()
    assert waiting[0].split() == ["REPLICA", "WAITS", "FOR", "RUNS", "AT", "THE", "LATEST"], p.stdout
    assert waiting[1].split()[0] == wait and "this job needs 8" in waiting[1], p.stdout

    # A budget of 16: Kueue admits the second group whole.
    team_quota = Path(team.quota_file).read_text().replace("gpu: 8,", "gpu: 16,")
    (tmp_path / "quota16.yaml").write_text(team_quota)
    assert (
        main(["apply", "-f", str(tmp_path / "quota16.yaml"), "--kubeconfig", os.environ["KUBECONFIG"]]) == 0
    )

    def both() -> bool:
        groups = _by_group(kube, team.ns)
        return all(
            len(groups.get(g, [])) == 2 and all(p["spec"].get("nodeName") for p in groups[g]) for g in "01"
        )

    wait_until(both, 120, what="both groups running")
    wait_until(lambda: _team_gpus(kube, team.ns) == _held_gpus(kube, team.ns) == 16, 60, what="16 GPUs held")
    wait_until(
        lambda: any(
            j["metadata"]["name"] == "llm" and j["status"]["ready"] == "2/2"
            for j in json.loads(m.gpuctl("get", "jobs", "-o", "json").stdout)["items"]
        ),
        60,
        what="READY 2/2",
    )
    # apply with 3 replicas: the LeaderWorkerSet grows by one group, which waits whole (16 of 16 held).
    f.write_text(f.read_text().replace("replicas: 2,", "replicas: 3,"))
    p = m.gpuctl("apply", "-f", str(f))
    assert p.returncode == 0, p.stderr
    assert "leaderworkerset.leaderworkerset.x-k8s.io/llm configured" in p.stdout, p.stdout
    held = wait_until(
        lambda: (g := _by_group(kube, team.ns).get("2")) and all(map(_gated, g)) and g,
        60,
        what="group 2 gated",
    )
    assert all(not p["spec"].get("nodeName") for p in held)
    ready = lambda r: r[0]["status"]["ready"] == "2/3"  # noqa: E731
    (row,) = wait_until(lambda: (r := rows()) and ready(r) and r, 60, what="READY 2/3")
    st = row["status"]
    assert st["gpus"] == 16 and st["reason"].startswith("1 of 3 replicas waiting for GPUs: "), row
    p = m.gpuctl("delete", "job", "llm")
    assert p.returncode == 0, p.stderr
    wait_until(lambda: not _pods(kube, team.ns), 120, what="the service's pods gone")
