"""gpuctl's main job on the real cluster: pools, team quotas and jobs through Kueue, via the CLI."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from gpuctl.cli.main import main
from gpuctl.cluster import path
from gpuctl.constants import COHORT_NAME, GPU_UNITS, QUOTA_GPU, Labels
from gpuctl.domain.gpus import workload_gpus
from gpuctl.domain.workload import IN_QUEUE, job_pool, reserved_gpus, workload_state
from tests.integration.conftest import delete_namespaces, wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gpuctl(cluster, capsys):
    """Run the CLI in-process: gpuctl("get", "pools") -> (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main([*args, "--kubeconfig", cluster])
        out = capsys.readouterr()
        return rc, out.out, out.err

    return run


@pytest.fixture
def teams(tmp_path, gpuctl, kube):
    """Two fresh team namespaces with quotas (a: 16 GPUs, borrow 8, 8 guaranteed in training-pool;
    b: 8 GPUs, hard cap); deleted with their namespaces afterwards."""
    a, b = f"ta-{uuid.uuid4().hex[:6]}", f"tb-{uuid.uuid4().hex[:6]}"
    q = tmp_path / "quota.yaml"
    q.write_text(
        f"kind: quota\nquota: {{name: q-{a}}}\nnamespace:\n"
        f"  {a}: {{cpu: 256, memory: 2Ti, gpu: 16, borrowingLimit: 8, "
        "pools: {training-pool: {gpu: 8}}}\n"
        f"  {b}: {{cpu: 128, memory: 1Ti, gpu: 8, borrowingLimit: 0}}\n"
    )
    rc, _, err = gpuctl("create", "-f", str(q))
    assert rc == 0, err
    yield a, b
    gpuctl("delete", "quota", f"q-{a}", "--delete-namespace")
    delete_namespaces(kube, [a, b], 60)


@pytest.fixture
def pools(clean_cluster, gpuctl):
    rc, out, err = gpuctl("create", "-f", str(ROOT / "examples" / "pools.yaml"))
    assert rc == 0, err
    return out


def _cohort_budget(kube) -> int:
    """GPUs the Cohort lends beyond the team quotas (all Ready GPUs less the quotas)."""
    cohort = kube.get(path("Cohort", COHORT_NAME))
    (fl,) = cohort["spec"]["resourceGroups"][0]["flavors"]
    return int(next(r["nominalQuota"] for r in fl["resources"] if r["name"] == QUOTA_GPU)) // GPU_UNITS


def _pool_gpus(gpuctl) -> dict[str, int]:
    rc, out, err = gpuctl("get", "pools", "-o", "json")
    assert rc == 0, err
    return {p["metadata"]["name"]: p["status"]["gpus"]["total"] for p in json.loads(out)["items"]}


def _training(
    tmp_path,
    name: str,
    ns: str,
    gpus: int,
    priority: str = "medium",
    pool: str = "training-pool",
    runtime: str = "30m",
) -> str:
    f = tmp_path / f"{name}.yaml"
    f.write_text(
        f"kind: training\njob: {{name: {name}, namespace: {ns}, priority: {priority}}}\n"
        f"environment: {{image: busybox, env: [{{GPUCTL_FAKE_RUNTIME: {runtime}}}]}}\n"
        f"resources: {{pool: {pool}, gpu: {gpus}, cpu: 2, memory: 8Gi}}\n"
    )
    return str(f)


def _status(gpuctl, name: str, ns: str) -> dict:
    rc, out, err = gpuctl("describe", "job", name, "-n", ns, "-o", "json")
    assert rc == 0, err
    return json.loads(out)


# ----------------------------------------------------------------------------- pools
def test_four_pools_capacity_and_node_moves(pools, gpuctl, kube):
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in kube.list(path("Node"))}
    assert nodes["gpu-node-1"][Labels.POOL] == "training-pool"
    assert nodes["gpu-node-1"][Labels.GPU_TYPE] == "A100-100G"
    assert nodes["cpu-node-2"][Labels.POOL] == "compute-pool"
    assert Labels.GPU_TYPE not in nodes["cpu-node-2"]
    assert _cohort_budget(kube) == 28  # no quotas yet: every GPU is lendable
    rc, out, _ = gpuctl("get", "pools", "-o", "json")
    got = {
        p["metadata"]["name"]: (p["status"]["gpus"]["total"], len(p["spec"]["nodes"]))
        for p in json.loads(out)["items"]
    }
    assert got == {
        "compute-pool": (0, 2),
        "dev-pool": (4, 1),
        "inference-pool": (8, 2),
        "training-pool": (16, 2),
    }

    # kubectl semantics: changing a value needs --overwrite; the GPUs move with the node.
    rc, _, err = gpuctl("label", "node", "gpu-node-4", "runwhere.ai/pool=dev-pool")
    assert rc == 1 and "--overwrite" in err
    assert _pool_gpus(gpuctl)["dev-pool"] == 4
    rc, _, err = gpuctl("label", "node", "gpu-node-4", "runwhere.ai/pool=dev-pool", "--overwrite")
    assert rc == 0, err
    caps = _pool_gpus(gpuctl)
    assert (caps["dev-pool"], caps["inference-pool"]) == (8, 4)
    assert _cohort_budget(kube) == 28
    # A pool label must name an existing pool.
    rc, _, err = gpuctl("label", "node", "gpu-node-4", "pool=nope", "--overwrite")
    assert rc == 1 and "pool nope does not exist" in err

    # apply removes a node from a pool and its capacity with it.
    rc, _, err = gpuctl("apply", "-f", str(ROOT / "examples" / "pool.yaml"))  # training-pool, same nodes
    assert rc == 0, err
    assert "pool/training-pool configured" in _
    gpuctl("label", "node", "gpu-node-2", "pool-", "gpu-type-")
    assert _pool_gpus(gpuctl)["training-pool"] == 8
    assert _cohort_budget(kube) == 20


def test_pool_delete_refuses_while_used_and_spares_foreign_objects(pools, teams, gpuctl, kube, tmp_path):
    a, _ = teams
    # A finished job holds nothing and keeps no pool (issue 42: it did, with a fix about running jobs).
    rc, _, err = gpuctl("create", "-f", _training(tmp_path, "done", a, 1, pool="dev-pool", runtime="1s"))
    assert rc == 0, err
    wait_until(lambda: _status(gpuctl, "done", a)["status"] == "Succeeded", 90, what="job done Succeeded")
    rc, _, err = gpuctl("create", "-f", _training(tmp_path, "busy", a, 1, pool="dev-pool"))
    assert rc == 0, err
    rc, _, err = gpuctl("delete", "pool", "dev-pool")
    assert rc == 1 and f"{a}/busy" in err and "done" not in err, err
    assert kube.get_or_none(path("ResourceFlavor", "dev-pool")) is not None
    # A flavor gpuctl did not create is never touched.
    kube.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "foreign"},
            "spec": {},
        }
    )
    try:
        rc, _, err = gpuctl("delete", "pool", "foreign")
        assert rc == 1 and "not created by gpuctl" in err
        assert kube.get_or_none(path("ResourceFlavor", "foreign")) is not None
    finally:
        kube.delete(path("ResourceFlavor", "foreign"))
    gpuctl("delete", "job", "busy", "-n", a)
    # Kueue releases the job's quota once the garbage collector has removed its Workload.
    wait_until(
        lambda: gpuctl("delete", "pool", "dev-pool")[0] == 0, 30, what="pool deleted once the job is gone"
    )
    assert kube.get_or_none(path("ResourceFlavor", "dev-pool")) is None
    assert Labels.POOL not in kube.get(path("Node", "gpu-node-5"))["metadata"]["labels"]


def test_type_slash_name_and_several_names(pools, teams, gpuctl, kube, tmp_path):
    """kubectl's grammar: `describe job/a job/b`, what `-o name` prints read back, `delete job/a job/b`;
    a missing one among several is an error that does not stop the others (issue 42)."""
    a, _ = teams
    for n in ("sl-1", "sl-2"):
        rc, _, err = gpuctl("create", "-f", _training(tmp_path, n, a, 1, pool="dev-pool"))
        assert rc == 0, err
    rc, out, err = gpuctl("describe", "job/sl-1", "job/sl-2", "-n", a)
    assert rc == 0 and out.count("Name:") == 2 and "sl-1" in out and "sl-2" in out, out + err
    rc, names, err = gpuctl("get", "jobs", "-n", a, "-o", "name")
    assert rc == 0 and "job.batch/sl-1" in names, names + err
    rc, out, err = gpuctl("describe", "job.batch/sl-1", "job/nope", "-n", a)
    assert rc == 1 and "sl-1" in out and "nope" in err, out + err
    rc, out, err = gpuctl("delete", "job/sl-1", "job/sl-2", "-n", a)
    assert rc == 0, err
    wait_until(
        lambda: not {"sl-1", "sl-2"} & {j["metadata"]["name"] for j in kube.list(path("Job", namespace=a))},
        60,
        what="both jobs deleted",
    )


def test_a_quota_naming_a_missing_pool_says_so_once_and_creates_nothing(pools, gpuctl, kube, tmp_path):
    """The file, the document once (it read `quota q: quota q:`), the field's fix; no namespace made."""
    f, ns = tmp_path / "q.yaml", f"miss-{uuid.uuid4().hex[:6]}"
    f.write_text(
        f"kind: quota\nquota: {{name: q-miss}}\nnamespace:\n"
        f"  {ns}: {{gpu: 2, pools: {{no-pool: {{gpu: 1}}}}}}\n"
    )
    rc, _, err = gpuctl("create", "-f", str(f))
    assert rc == 1 and err.count("quota q-miss:") == 1 and "pool no-pool does not exist" in err, err
    assert f"{f}: quota q-miss:" in err, err
    assert kube.get_or_none(path("Namespace", ns)) is None


# ----------------------------------------------------------------------------- quotas and queueing
def test_job_runs_only_on_its_pool_and_waits_for_capacity(pools, teams, gpuctl, kube, tmp_path):
    a, b = teams
    for name in ("big1", "big2"):  # 8 GPUs each: the two A100 nodes are full
        assert gpuctl("create", "-f", _training(tmp_path, name, a, 8))[0] == 0
    for name in ("big1", "big2"):
        wait_until(
            lambda name=name: _status(gpuctl, name, a)["status"] == "Running", 60, what=f"{name} Running"
        )
    nodes = {p["spec"]["nodeName"] for p in kube.list(path("Pod", namespace=a))}
    assert nodes == {"gpu-node-1", "gpu-node-2"}
    # Training pods are found by job-name (not by name prefix) for logs.
    rc, out, err = gpuctl("logs", "big1", "-n", a, "--tail", "1", "--no-timestamps")
    assert (rc, out.strip()) == (0, "step 20: loss=0.05"), err

    assert gpuctl("create", "-f", _training(tmp_path, "wait", b, 4))[0] == 0
    st = wait_until(
        lambda: (s := _status(gpuctl, "wait", b))["status"] == "Queued" and "GPUs free" in s["why"] and s,
        30,
        what="wait Queued for the pool",
    )
    # Both teams are within their quotas: the pool is full, not the quota (gpuctl.domain.explain).
    assert st["why"].startswith("training-pool has 0 of 16 GPUs free, this job needs 4"), (
        st["why"] + " | " + str(st["conditions"])
    )
    rc, out, _ = gpuctl("get", "jobs", "-n", b, "-o", "wide")
    assert rc == 0 and "Queued" in out and "POSITION" in out and "REASON" in out
    assert "training-pool has 0 of 16 GPUs free" in out
    # A compute job's pods wait at Kueue's gate, each with a Workload of its own: the REASON comes from
    # the gated pod itself (the table reads no Deployment Workload). A pod larger than every node on
    # CPU says so rather than "being admitted".
    web = tmp_path / "web.yaml"
    web.write_text(
        f"kind: compute\njob: {{name: web, namespace: {b}}}\nenvironment: {{image: nginx}}\n"
        "service: {replicas: 1, port: 80}\nresources: {pool: training-pool, gpu: 2, cpu: 1, memory: 1Gi}\n"
    )
    huge = tmp_path / "huge.yaml"
    huge.write_text(
        f"kind: training\njob: {{name: huge, namespace: {b}}}\nenvironment: {{image: busybox}}\n"
        "resources: {pool: training-pool, gpu: 1, cpu: 30000, memory: 1Gi}\n"
    )
    assert gpuctl("create", "-f", str(web), "-f", str(huge))[0] == 0

    def reasons() -> dict[str, str] | None:
        rc, out, _ = gpuctl("get", "jobs", "-A", "-o", "json")
        rows = [
            j
            for j in json.loads(out)["items"]
            if j["metadata"]["namespace"] == b and j["metadata"]["name"] in ("web", "huge")
        ]
        if rc != 0 or len(rows) != 2 or any(j["status"]["phase"] != "Queued" for j in rows):
            return None
        rc, wide, _ = gpuctl("get", "jobs", "-A", "-o", "wide")
        cells = [ln.split() for ln in wide.splitlines()[1:]]
        lines = {c[0]: " ".join(c) for c in cells if c[2] == b and c[0] in ("web", "huge")}  # JOB ID, POD, NS
        return lines if rc == 0 and len(lines) == 2 else None

    lines = wait_until(reasons, 30, what="web and huge Queued")
    # get pools: RESERVED from the ClusterQueues' status and QUEUED from the waiting Workloads Kueue's
    # visibility API names agree with summing every Workload (the rule they replace).
    workloads = kube.list(path("Workload"))
    expected = {"reserved": 0, "queued": 0}
    for w in workloads:
        expected["reserved"] += reserved_gpus(w).get("training-pool", 0)
        if workload_state(w) in IN_QUEUE and job_pool(w) == "training-pool":
            expected["queued"] += workload_gpus(w)
    assert expected == {"reserved": 16, "queued": 7}, expected

    def pool_numbers() -> dict[str, int] | None:
        rc, out, _ = gpuctl("get", "pools", "-o", "json")
        row = next(r for r in json.loads(out)["items"] if r["metadata"]["name"] == "training-pool")
        got = {"reserved": row["status"]["gpus"]["reserved"], "queued": row["status"]["gpus"]["queued"]}
        return got if rc == 0 and got == expected else None

    wait_until(pool_numbers, 30, what=f"get pools shows training-pool {expected}")
    # Used is what pods hold or Kueue reserved, whichever is more: the same in get and describe.
    rc, out, _ = gpuctl("get", "pools", "-o", "json")
    row = next(r for r in json.loads(out)["items"] if r["metadata"]["name"] == "training-pool")
    assert (row["status"]["gpus"]["used"], row["status"]["gpus"]["free"]) == (16, 0), row
    rc, out, _ = gpuctl("describe", "pool", "training-pool")
    assert rc == 0 and "GPU Used:" in out and "GPU Allocated:" in out, out
    used = next(line for line in out.splitlines() if line.startswith("GPU Used:"))
    assert used.split()[-1] == "16", out
    assert "training-pool has 0 of 16 GPUs free, this job needs 2" in lines["web"], lines["web"]
    assert "no node in training-pool has 30000 CPUs for one pod" in lines["huge"], lines["huge"]
    assert gpuctl("delete", "job", "web", "-n", b)[0] == 0
    assert gpuctl("delete", "job", "huge", "-n", b)[0] == 0

    assert gpuctl("delete", "job", "big1", "-n", a)[0] == 0
    wait_until(
        lambda: _status(gpuctl, "wait", b)["status"] == "Running",
        60,
        what="wait Running after capacity freed",
    )


def test_job_beyond_team_quota_waits_with_quota_reason(pools, teams, gpuctl, tmp_path):
    _, b = teams
    assert gpuctl("create", "-f", _training(tmp_path, "b1", b, 8))[0] == 0
    wait_until(lambda: _status(gpuctl, "b1", b)["status"] == "Running", 60, what="b1 Running")
    assert gpuctl("create", "-f", _training(tmp_path, "b2", b, 2, pool="dev-pool"))[0] == 0
    st = wait_until(
        lambda: (s := _status(gpuctl, "b2", b))["conditions"] and "GPUs" in s["why"] and s,
        30,
        what="b2 reason",
    )
    assert st["status"] == "Queued"
    assert st["why"].startswith(f"{b} uses 8 of its 8 GPUs and may borrow 0; this job needs 2")


def test_high_priority_preempts_low(pools, teams, gpuctl, tmp_path):
    a, _ = teams
    for name in ("low1", "low2"):
        assert gpuctl("create", "-f", _training(tmp_path, name, a, 8, priority="low"))[0] == 0
    for name in ("low1", "low2"):
        wait_until(
            lambda name=name: _status(gpuctl, name, a)["status"] == "Running", 60, what=f"{name} Running"
        )
    assert gpuctl("create", "-f", _training(tmp_path, "urgent", a, 8, priority="high"))[0] == 0
    wait_until(lambda: _status(gpuctl, "urgent", a)["status"] == "Running", 60, what="high Running")
    states = sorted(_status(gpuctl, n, a)["status"] for n in ("low1", "low2"))
    assert states[1] == "Running" and states[0] in ("Preempted", "Queued"), states
    victim = next(n for n in ("low1", "low2") if _status(gpuctl, n, a)["status"] != "Running")
    assert "preempted" in _status(gpuctl, victim, a)["why"]


# ----------------------------------------------------------------------------- the service kinds
def test_inference_compute_notebook_admitted_reachable_logs_describe(pools, teams, gpuctl, kube, tmp_path):
    a, b = teams
    for kind, ns in (("inference", a), ("compute", b), ("notebook", b)):
        text = (ROOT / "examples" / f"{kind}.yaml").read_text().replace("team-a", ns).replace("team-b", ns)
        f = tmp_path / f"{kind}.yaml"
        f.write_text(text)
        rc, _, err = gpuctl("create", "-f", str(f))
        assert rc == 0, err
    for name, ns, port in (("llm-serving", a, 8000), ("nginx-web", b, 80), ("alice-notebook", b, 8888)):
        wait_until(
            lambda name=name, ns=ns: _status(gpuctl, name, ns)["status"] == "Running",
            60,
            what=f"{name} Running",
        )
        svc = kube.get(path("Service", f"svc-{name}", ns))
        assert svc["spec"]["type"] == "NodePort" and svc["spec"]["selector"] == {"app": name}
        assert svc["spec"]["ports"][0]["targetPort"] == port and svc["spec"]["ports"][0]["nodePort"] >= 30000
        pods = kube.list(path("Pod", namespace=ns), label_selector=f"app={name}")
        assert pods and all(p["status"]["phase"] == "Running" for p in pods)
        rc, out, err = gpuctl("logs", name, "-n", ns, "--tail", "2")
        assert rc == 0, err
        assert "step 20" in out
        rc, out, err = gpuctl("describe", "job", name, "-n", ns)
        ip, node_port = svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["nodePort"]
        assert rc == 0 and f"svc-{name} NodePort {ip} {port}->{port} nodePort {node_port}" in out, out
    # apply keeps the NodePort of a Service.
    before = kube.get(path("Service", "svc-nginx-web", b))["spec"]["ports"][0]["nodePort"]
    text = (tmp_path / "compute.yaml").read_text().replace("replicas: 1", "replicas: 2")
    (tmp_path / "compute.yaml").write_text(text)
    assert gpuctl("apply", "-f", str(tmp_path / "compute.yaml"))[0] == 0
    assert kube.get(path("Deployment", "nginx-web", b))["spec"]["replicas"] == 2
    assert kube.get(path("Service", "svc-nginx-web", b))["spec"]["ports"][0]["nodePort"] == before


# ----------------------------------------------------------------------------- bad input leaves nothing
def _gpuctl_objects(kube, ns: str) -> list[str]:
    return sorted(
        f"{k}/{o['metadata']['name']}"
        for k in ("Job", "Deployment", "StatefulSet", "Service")
        for o in kube.list(path(k, namespace=ns))
    )


def test_bad_input_is_refused_and_changes_nothing(pools, teams, gpuctl, kube, tmp_path):
    a, _ = teams
    before = _gpuctl_objects(kube, a)
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"kind: training\njob: {{name: Bad_Name, namespace: {a}}}\nenvironment: {{image: x}}\n"
        "resources: {cpu: 1, memory: lots}\n"
    )
    rc, _, err = gpuctl("create", "-f", str(bad))
    assert rc == 1 and str(bad) in err and "resources.memory" in err and "fix:" in err

    rc, _, err = gpuctl("create", "-f", _training(tmp_path, "nopool", a, 1, pool="no-such-pool"))
    assert rc == 1 and "pool no-such-pool does not exist" in err

    rc, _, err = gpuctl("create", "-f", _training(tmp_path, "nons", "no-such-namespace", 1))
    assert rc == 1 and "namespace no-such-namespace does not exist" in err

    # Two documents: the second is bad, so the first is not created either.
    two = tmp_path / "two.yaml"
    two.write_text(
        Path(_training(tmp_path, "first", a, 1)).read_text()
        + "---\n"
        + Path(_training(tmp_path, "second", a, 1, pool="no-such-pool")).read_text()
    )
    rc, _, err = gpuctl("create", "-f", str(two))
    assert rc == 1
    assert _gpuctl_objects(kube, a) == before

    assert gpuctl("create", "-f", _training(tmp_path, "dup", a, 1))[0] == 0
    rc, _, err = gpuctl("create", "-f", _training(tmp_path, "dup", a, 2))
    assert rc == 1 and "already exists" in err and "apply" in err
    assert (
        kube.get(path("Job", "dup", a))["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
            "nvidia.com/gpu"
        ]
        == "1"
    )


def test_delete_quota_file_with_delete_namespace_removes_only_the_namespaces_gpuctl_created(
    gpuctl, kube, tmp_path
):
    """`delete -f quota.yaml --delete-namespace` (issue 26: it left the namespace it had created) deletes
    the team namespace gpuctl made and keeps, unlabelled, one that existed before the quota."""
    made, existing = f"qm-{uuid.uuid4().hex[:6]}", f"qe-{uuid.uuid4().hex[:6]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": existing}})
    q = tmp_path / "quota.yaml"
    q.write_text(
        f"kind: quota\nquota: {{name: q-{made}}}\nnamespace:\n"
        f"  {made}: {{gpu: 2}}\n  {existing}: {{gpu: 2}}\n"
    )
    try:
        rc, _, err = gpuctl("create", "-f", str(q))
        assert rc == 0, err
        rc, out, err = gpuctl("delete", "-f", str(q), "--delete-namespace")
        assert rc == 0, err
        assert f"namespace/{made} deleted" in out, out
        assert f"namespace/{existing} kept" in out, out
        delete_namespaces(kube, [made], 60, delete=False)  # gpuctl deleted it
        kept = kube.get(path("Namespace", existing))
        assert kept["metadata"].get("deletionTimestamp") is None
        assert Labels.NAMESPACE not in (kept["metadata"].get("labels") or {})
        assert kube.get_or_none(path("ClusterQueue", made)) is None
        assert kube.get_or_none(path("ClusterQueue", existing)) is None
    finally:
        for ns in (made, existing):
            if kube.get_or_none(path("Namespace", ns)) is not None:
                kube.delete(path("Namespace", ns))
