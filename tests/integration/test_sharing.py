"""Shared GPUs on the real cluster (issue 32, docs/sharing.md): `gpu-share` on pools of fake nodes that
advertise MIG mixed profiles, MIG single slices and time-sliced replicas, and one GPU budget that whole
GPUs and slices both count against, through Kueue.

The test creates its own KWOK nodes through the API (hack/cluster/nodes.yaml stays as every other test
expects it) and deletes them afterwards.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuctl.cli.main import main
from gpuctl.cluster import ApiError, path
from gpuctl.constants import GPU_UNITS, QUOTA_GPU, TAS_UNCONSTRAINED, Labels
from gpuctl.domain.sharing import units_to_gpus
from gpuctl.server.api import create_app
from gpuctl.server.api.auth import ApiKeys, Authenticator, hash_key, new_api_key
from tests.integration.conftest import delete_namespaces, wait_until
from tests.integration.fake_nodes import fake_node
from tests.integration.serve_process import start_serve
from tests.integration.tenancy import SHIPPED_ROLES, TeamMember, apply_caller_roles

MIG, SINGLE, TS, PLAIN = "share-mig", "share-single", "share-ts", "share-plain"
NODE = {p: f"{p}-1" for p in (MIG, SINGLE, TS, PLAIN)}
A100_80 = "NVIDIA-A100-SXM4-80GB"
# What the NVIDIA device plugin and GPU feature discovery make a node advertise.
NODES = {
    # MIG mixed: 8 A100-80GB, 5 whole, 2 cut into 7 x 1g.10gb each, 1 into 2 x 3g.40gb.
    MIG: (
        {"nvidia.com/gpu.product": A100_80, "nvidia.com/gpu.count": "8", "nvidia.com/mig.strategy": "mixed"},
        {"nvidia.com/gpu": "5", "nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "2"},
    ),
    # MIG single: every GPU cut into 1g.10gb, advertised as nvidia.com/gpu.
    SINGLE: (
        {
            "nvidia.com/gpu.product": f"{A100_80}-MIG-1g.10gb",
            "nvidia.com/gpu.count": "2",
            "nvidia.com/mig.strategy": "single",
        },
        {"nvidia.com/gpu": "14"},
    ),
    # Time-slicing, renameByDefault: 2 L4 x 4 replicas.
    TS: (
        {
            "nvidia.com/gpu.product": "NVIDIA-L4",
            "nvidia.com/gpu.count": "2",
            "nvidia.com/gpu.replicas": "4",
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
        },
        {"nvidia.com/gpu.shared": "8"},
    ),
    PLAIN: ({"nvidia.com/gpu.product": A100_80, "nvidia.com/gpu.count": "4"}, {"nvidia.com/gpu": "4"}),
}


@pytest.fixture
def gpuctl(cluster, capsys):
    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main([*args, "--kubeconfig", cluster])
        out = capsys.readouterr()
        return rc, out.out, out.err

    return run


def _ready(node: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in node.get("status", {}).get("conditions", [])
    )


@pytest.fixture
def shared_pools(clean_cluster, kube, gpuctl, tmp_path) -> Iterator[None]:
    """Four fake nodes, each its own pool: MIG mixed, MIG single, time-sliced, plain."""
    for pool, (labels, gpus) in NODES.items():
        with pytest.raises(ApiError):  # not left over: this test owns these names
            kube.get(path("Node", NODE[pool]))
        kube.create(fake_node(NODE[pool], labels, gpus))
    try:
        wait_until(
            lambda: all(_ready(kube.get(path("Node", n))) for n in NODE.values()), 60, what="fake nodes Ready"
        )
        f = tmp_path / "pools.yaml"
        f.write_text(
            "\n---\n".join(f"kind: pool\npool: {{name: {p}}}\nnodes:\n  {NODE[p]}: {{}}\n" for p in NODES)
        )
        rc, _, err = gpuctl("create", "-f", str(f))
        assert rc == 0, err
        yield
    finally:
        for n in NODE.values():
            kube.delete(path("Node", n))


@pytest.fixture
def team(kube, gpuctl, tmp_path) -> Iterator[str]:
    """A team namespace with a hard budget of 1 GPU (borrowingLimit 0: nothing borrowed from idle GPUs)."""
    ns = f"share-{uuid.uuid4().hex[:6]}"
    f = tmp_path / "quota.yaml"
    f.write_text(f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n  {ns}: {{gpu: 1, borrowingLimit: 0}}\n")
    rc, _, err = gpuctl("create", "-f", str(f))
    assert rc == 0, err
    yield ns
    gpuctl("delete", "quota", f"q-{ns}", "--delete-namespace")
    delete_namespaces(kube, [ns])


def job_file(tmp: Path, kind: str, name: str, ns: str, pool: str, resources: str) -> str:
    service = "service: {port: 8000}\n" if kind in ("inference", "compute", "notebook") else ""
    f = tmp / f"{name}.yaml"
    f.write_text(
        f"kind: {kind}\njob: {{name: {name}, namespace: {ns}}}\nenvironment: {{image: busybox}}\n{service}"
        f"resources: {{pool: {pool}, cpu: 1, memory: 1Gi, {resources}}}\n"
    )
    return str(f)


def pod_template(kube, kind: str, name: str, ns: str) -> dict:
    obj = kube.get(path({"training": "Job", "notebook": "StatefulSet"}.get(kind, "Deployment"), name, ns))
    return obj["spec"]["template"]["spec"]


def gpu_requests(spec: dict) -> dict[str, str]:
    req = spec["containers"][0]["resources"]["requests"]
    return {k: v for k, v in req.items() if k not in ("cpu", "memory")}


def running_on(kube, ns: str, node: str) -> int:
    return sum(
        1
        for p in kube.list(path("Pod", namespace=ns))
        if p["spec"].get("nodeName") == node and p["status"].get("phase") == "Running"
    )


def budget_reserved(kube, ns: str) -> int:
    """Kueue's own count: the team ClusterQueue's reservation of the GPU budget, in 1/840 GPU."""
    cq = kube.get(path("ClusterQueue", ns))
    for fl in (cq.get("status") or {}).get("flavorsReservation") or []:
        for r in fl.get("resources") or []:
            if r["name"] == QUOTA_GPU:
                return int(r["total"])
    return 0


@contextlib.contextmanager
def serve_metrics(kubeconfig: str, log: Path, *, reconcile: bool = False) -> Iterator[Callable[[], str]]:
    """`gpuctl serve` (metrics, and with `reconcile` the reconciler, which writes the slices in use on the
    pool flavors) as a subprocess; yields a function returning its /metrics text."""
    flags = (*(() if reconcile else ("--no-reconcile",)), "--no-api", "--no-leader-elect", "--no-history")
    serve = start_serve(kubeconfig, log, *flags)

    def scrape() -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{serve.port}/metrics", timeout=5) as r:
                return r.read().decode()
        except OSError:
            return ""

    try:
        yield scrape
    finally:
        serve.stop()


def quota_row(gpuctl, ns: str) -> dict:
    """`gpuctl get quotas -n NS -o json`: the team's Quota object (a v1 List of one, as kubectl prints a
    list): spec.gpus its budget, status.gpus what it uses."""
    rc, out, err = gpuctl("get", "quotas", "-n", ns, "-o", "json")
    assert rc == 0, err
    (row,) = json.loads(out)["items"]
    return row


def metric(text: str, series: str) -> float | None:
    """The value of one series in a /metrics text (None when absent)."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


# ----------------------------------------------------------------------------- gpu-share -> the slice


def test_gpu_share_is_the_smallest_profile_or_a_replica_for_every_kind(
    shared_pools, team, gpuctl, kube, tmp_path
):
    ns = team
    cases = [
        # kind, pool, resources, what the container asks for
        ("notebook", MIG, "gpu: 1, gpu-share: 10Gi", {"nvidia.com/mig-1g.10gb": "1"}),
        ("training", MIG, "gpu-share: 30Gi", {"nvidia.com/mig-3g.40gb": "1"}),
        ("inference", TS, "gpu-share: 10Gi", {"nvidia.com/gpu.shared": "1"}),
        ("compute", SINGLE, "gpuShare: 1g.10gb", {"nvidia.com/gpu": "1"}),
    ]
    for i, (kind, pool, res, want) in enumerate(cases):
        name = f"{kind}-{i}"
        rc, _, err = gpuctl("create", "-f", job_file(tmp_path, kind, name, ns, pool, res))
        assert rc == 0, err
        assert gpu_requests(pod_template(kube, kind, name, ns)) == want, (kind, pool)
    # Kueue admits each on the pool's node (TAS found the slice free there) and charges the budget:
    # 1g.10gb 120 + 3g.40gb 420 + a replica 210 = 750 of 840; MIG single's slice is nvidia.com/gpu (840)
    # and does not fit what is left, so it waits.
    for pool in (MIG, TS):
        wait_until(
            lambda pool=pool: running_on(kube, ns, NODE[pool]), 90, what=f"a pod running on {NODE[pool]}"
        )
    wait_until(lambda: running_on(kube, ns, NODE[MIG]) == 2, 90, what="both MIG slices running")
    wait_until(lambda: budget_reserved(kube, ns) == 120 + 420 + 210, 60, what="Kueue's reservation 750")
    row = quota_row(gpuctl, ns)
    assert (row["status"]["gpus"]["used"], row["spec"]["gpus"], row["status"]["gpus"]["free"]) == (
        0.89,
        1,
        0.11,
    )
    assert running_on(kube, ns, NODE[SINGLE]) == 0


def test_gpu_share_refused_where_it_cannot_be_met(shared_pools, team, gpuctl, kube, tmp_path):
    ns = team
    rc, _, err = gpuctl("create", "-f", job_file(tmp_path, "notebook", "nb", ns, PLAIN, "gpu-share: 10Gi"))
    assert rc == 1
    assert f"resources.gpu-share: pool {PLAIN} does not share its GPUs" in err
    assert f"pools that share GPUs: {MIG}, {SINGLE}, {TS}" in err
    rc, _, err = gpuctl(
        "create", "-f", job_file(tmp_path, "training", "two", ns, MIG, "gpu: 2, gpu-share: 10Gi")
    )
    assert rc == 1
    assert "gpu: 2 with gpu-share: 10Gi" in err and "set gpu: 1 (or omit gpu)" in err
    # 15Gi needs a 1g.20gb, which this pool's GPUs are not cut into: the error names what it has.
    rc, _, err = gpuctl("create", "-f", job_file(tmp_path, "training", "mid", ns, MIG, "gpu-share: 15Gi"))
    assert rc == 1
    assert "offers no 1g.20gb MIG instances (it has 1g.10gb, 3g.40gb)" in err
    # A profile of another GPU model (A100-40GB's 1g.5gb): the same text as the webhook's mig-profile.
    rc, _, err = gpuctl("create", "-f", job_file(tmp_path, "notebook", "p40", ns, MIG, "gpu-share: 1g.5gb"))
    assert rc == 1
    assert (
        "p40.yaml" in err and "resources.gpu-share: the GPUs of pool share-mig (A100-80GB) have no MIG" in err
    )
    assert "profile 1g.5gb; they have 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb" in err
    # Nothing was created.
    for kind in ("Job", "StatefulSet", "Deployment"):
        assert kube.list(path(kind, namespace=ns)) == []


# ----------------------------------------------------------------------------- one budget


def test_a_one_gpu_team_runs_seven_1g10gb_and_the_eighth_waits(shared_pools, team, gpuctl, kube, tmp_path):
    ns = team
    for i in range(8):
        f = job_file(tmp_path, "training", f"s{i}", ns, MIG, "gpu-share: 1g.10gb")
        rc, _, err = gpuctl("create", "-f", f)
        assert rc == 0, err
    wait_until(lambda: running_on(kube, ns, NODE[MIG]) == 7, 120, what="7 slices running")
    wait_until(
        lambda: budget_reserved(kube, ns) == 7 * 120 == GPU_UNITS, 30, what="the whole budget reserved"
    )

    def pending() -> list[dict]:
        return [
            w
            for w in kube.list(path("Workload", namespace=ns))
            if not any(
                c["type"] == "QuotaReserved" and c["status"] == "True"
                for c in w["status"].get("conditions", [])
            )
        ]

    (waiting,) = wait_until(pending, 30, what="one Workload waiting")
    reason = next(c for c in waiting["status"]["conditions"] if c["type"] == "QuotaReserved")
    assert reason["status"] == "False"
    # gpuctl says why, in GPU equivalents (Kueue's own message names flavors, not the budget).
    job = waiting["metadata"]["ownerReferences"][0]["name"]
    rc, out, err = gpuctl("describe", "job", job, "-n", ns, "-o", "json")
    assert rc == 0, err
    why = json.dumps(json.loads(out))
    assert f"{ns} uses 1 of its 1 GPUs and may borrow 0; this job needs 0.14" in why, why
    # 14 slices exist on the node: the 8th waits for the budget, not for a free 1g.10gb.
    assert running_on(kube, ns, NODE[MIG]) == 7
    row = quota_row(gpuctl, ns)
    assert (
        row["status"]["gpus"]["used"],
        row["status"]["gpus"]["free"],
        row["status"]["pendingWorkloads"],
    ) == (
        1,
        0,
        1,
    )


def test_whole_gpus_and_slices_add_up(shared_pools, gpuctl, kube, tmp_path, cluster):
    ns = f"share-{uuid.uuid4().hex[:6]}"
    f = tmp_path / "quota.yaml"
    f.write_text(f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n  {ns}: {{gpu: 2, borrowingLimit: 0}}\n")
    rc, _, err = gpuctl("create", "-f", str(f))
    assert rc == 0, err
    try:
        rc, _, err = gpuctl("create", "-f", job_file(tmp_path, "training", "whole", ns, MIG, "gpu: 1"))
        assert rc == 0, err
        for i in range(3):
            rc, _, err = gpuctl(
                "create", "-f", job_file(tmp_path, "training", f"s{i}", ns, MIG, "gpu-share: 10Gi")
            )
            assert rc == 0, err
        # A raw kubectl pod asking a MIG profile in the team namespace is queued and charged the same way.
        raw = {
            "apiVersion": "v1",
            "kind": "Pod",
            # The annotation gpuctl's topology policy adds to raw work in team namespaces (admission/).
            "metadata": {"name": "raw-mig", "namespace": ns, "annotations": {TAS_UNCONSTRAINED: "true"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {
                            "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/mig-3g.40gb": "1"},
                            "limits": {"nvidia.com/mig-3g.40gb": "1"},
                        },
                    }
                ],
            },
        }
        kube.create(raw)
        expected = GPU_UNITS + 3 * 120 + 420
        wait_until(lambda: budget_reserved(kube, ns) == expected, 90, what=f"Kueue's reservation {expected}")
        wait_until(lambda: running_on(kube, ns, NODE[MIG]) == 5, 90, what="5 pods running on the MIG node")
        # gpuctl serve's metrics count them the same way; its reconciler writes the slices in use on the
        # pool's flavor, where a team member (who may not list other teams' pods) reads them.
        apply_caller_roles(kube)
        member = TeamMember.create(kube, ns, roles=SHIPPED_ROLES)
        with serve_metrics(cluster, tmp_path / "serve.log", reconcile=True) as scrape:
            wait_until(
                lambda: (
                    metric(scrape(), f'gpuctl_team_budget_used_gpus{{namespace="{ns}"}}')
                    == units_to_gpus(expected)
                ),
                60,
                what=f"gpuctl_team_budget_used_gpus {units_to_gpus(expected)}",
            )
            want = {
                "1g.10gb": {"resource": "nvidia.com/mig-1g.10gb", "total": 14, "used": 3, "free": 11},
                "3g.40gb": {"resource": "nvidia.com/mig-3g.40gb", "total": 2, "used": 1, "free": 1},
            }

            def member_sees() -> dict | None:
                p = member.gpuctl("describe", "pool", MIG, "-o", "json")
                return json.loads(p.stdout)["slices"] if p.returncode == 0 else None

            try:
                wait_until(lambda: member_sees() == want, 60, what="the member sees the slices in use")
                p = member.gpuctl("get", "pools", "-o", "json")
                assert p.returncode == 0, p.stderr
                (row,) = [r for r in json.loads(p.stdout)["items"] if r["metadata"]["name"] == MIG]
                assert row["status"]["slices"] == want
                # The member may not list the pods these numbers come from.
                with pytest.raises(ApiError) as denied:
                    member.client().get("/api/v1/pods")
                assert denied.value.status == 403
            finally:
                member.delete()
        # The pool view: whole GPUs and slices per profile, used and free (the admin reads the pods).
        rc, out, err = gpuctl("describe", "pool", MIG, "-o", "json")
        assert rc == 0, err
        d = json.loads(out)
        assert (d["sharing"], d["shared"]) == ("mig-mixed", "5 GPUs + 3 as 14 x 1g.10gb, 2 x 3g.40gb")
        assert d["slices"] == {
            "1g.10gb": {"resource": "nvidia.com/mig-1g.10gb", "total": 14, "used": 3, "free": 11},
            "3g.40gb": {"resource": "nvidia.com/mig-3g.40gb", "total": 2, "used": 1, "free": 1},
        }
        rc, out, err = gpuctl("get", "pools", "-o", "json")
        assert rc == 0, err
        shared = {p["metadata"]["name"]: p["status"]["shared"] for p in json.loads(out)["items"]}
        assert shared[TS] == "2 GPUs as 8 x shared (time-slicing, memory not isolated)"
        assert shared[SINGLE] == "2 GPUs as 14 x 1g.10gb (MIG single)"
        assert shared[PLAIN] == ""
        pod = kube.get(path("Pod", "raw-mig", ns))
        assert pod["metadata"]["labels"].get(Labels.KUEUE_QUEUE) == "default"
        row = quota_row(gpuctl, ns)
        assert (row["status"]["gpus"]["used"], row["status"]["gpus"]["free"]) == (
            round(expected / GPU_UNITS, 2),
            round(2 - expected / GPU_UNITS, 2),
        )
    finally:
        gpuctl("delete", "quota", f"q-{ns}", "--delete-namespace")
        delete_namespaces(kube, [ns])


# ----------------------------------------------------------------------------- MIG + time-slicing


def test_a_namespace_admins_raw_job_on_time_sliced_mig_is_charged_its_quarter(
    shared_pools, team, gpuctl, kube, kubectl_bin, cluster, tmp_path
):
    """`nvidia.com/mig-1g.10gb.shared` (renameByDefault on a MIG instance) asked by a raw Job of a user who
    may only edit the team namespace: queued, placed on the node that has it, charged 1g.10gb / 4 = 30/840."""
    ns, pool, node = team, "share-migts", "share-migts-1"
    labels = {
        "nvidia.com/gpu.product": A100_80,
        "nvidia.com/gpu.count": "1",
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/gpu.replicas": "4",
    }
    kube.create(fake_node(node, labels, {"nvidia.com/mig-1g.10gb.shared": "28"}))
    try:
        wait_until(lambda: _ready(kube.get(path("Node", node))), 60, what="the MIG + time-slicing node Ready")
        f = tmp_path / "migts.yaml"
        f.write_text(f"kind: pool\npool: {{name: {pool}}}\nnodes:\n  {node}: {{}}\n")
        rc, _, err = gpuctl("create", "-f", str(f))
        assert rc == 0, err
        user = f"admin-{ns}"
        kube.create(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "ns-admin", "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
            }
        )
        res = {"cpu": "1", "memory": "1Gi", "nvidia.com/mig-1g.10gb.shared": "1"}
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "raw-migts", "namespace": ns},
            "spec": {
                "parallelism": 3,
                "completions": 3,
                "template": {
                    "metadata": {"annotations": {TAS_UNCONSTRAINED: "true"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "nodeSelector": {Labels.POOL: pool},
                        "containers": [
                            {"name": "m", "image": "busybox", "resources": {"requests": res, "limits": res}}
                        ],
                    },
                },
            },
        }
        p = subprocess.run(
            [kubectl_bin, "--kubeconfig", cluster, "--as", user, "apply", "-f", "-"],
            input=json.dumps(job), capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        # gpuctl's gpu-share on this pool asks for a replica of the instance (none is offered whole).
        f = job_file(tmp_path, "training", "ts-10g", ns, pool, "gpu-share: 10Gi")
        rc, _, err = gpuctl("create", "-f", f)
        assert rc == 0, err
        want = {"nvidia.com/mig-1g.10gb.shared": "1"}
        assert gpu_requests(pod_template(kube, "training", "ts-10g", ns)) == want
        wait_until(lambda: running_on(kube, ns, node) == 4, 90, what="4 replicas running on the node")
        wait_until(lambda: budget_reserved(kube, ns) == 4 * 30, 60, what="Kueue's reservation 4 x 30")
        row = quota_row(gpuctl, ns)
        assert (row["status"]["gpus"]["used"], row["status"]["gpus"]["free"]) == (
            round(120 / GPU_UNITS, 2),
            round(1 - 120 / GPU_UNITS, 2),
        )
        rc, out, err = gpuctl("describe", "pool", pool, "-o", "json")
        assert rc == 0, err
        d = json.loads(out)
        assert d["shared"] == "1 GPUs as 28 x 1g.10gb.shared"
        assert d["slices"]["1g.10gb.shared"] == {
            "resource": "nvidia.com/mig-1g.10gb.shared", "total": 28, "used": 4, "free": 24,
        }  # fmt: skip
    finally:
        gpuctl("delete", "pool", pool)
        kube.delete(path("Node", node))


# ----------------------------------------------------------------------------- the REST API


def test_gpu_share_through_the_rest_api(shared_pools, team, kube, tmp_path):
    """POST /api/v1/jobs goes through the same submission: the slice on the MIG pool, the error naming the
    pools that share GPUs on the plain one, nothing created."""
    ns = team
    key = new_api_key()
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys:\n- name: ci\n  sha256: '{hash_key(key)}'\n  groups: [system:masters]\n")
    app = create_app(lambda: kube, Authenticator(lambda: kube, api_keys=ApiKeys(keys)))
    with TestClient(app, headers={"X-API-Key": key}) as api:
        text = Path(job_file(tmp_path, "notebook", "nb-api", ns, MIG, "gpu-share: 10Gi")).read_text()
        r = api.post("/api/v1/jobs", json={"yamlContent": text})
        assert r.status_code == 201, r.text
        assert gpu_requests(pod_template(kube, "notebook", "nb-api", ns)) == {"nvidia.com/mig-1g.10gb": "1"}
        text = Path(job_file(tmp_path, "notebook", "nb-plain", ns, PLAIN, "gpu-share: 10Gi")).read_text()
        r = api.post("/api/v1/jobs", json={"yamlContent": text})
        assert r.status_code == 400, r.text
        assert f"pool {PLAIN} does not share its GPUs" in r.text and f"pools that share GPUs: {MIG}" in r.text
        assert kube.get_or_none(path("StatefulSet", "nb-plain", ns)) is None
