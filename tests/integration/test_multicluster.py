"""Pools across clusters (issue 24): a MultiKueue manager and two worker clusters, all real (etcd, API
server, KWOK GPU nodes, Kueue each), started once for this module by hack/cluster/multi.sh.

gpuctl makes every MultiKueue object from a pool document; a job submitted to the manager lands in the
worker that has room, its status and logs are read through gpuctl; a worker whose API server goes away and
comes back loses no job and duplicates none; kinds MultiKueue cannot carry are refused before any write.

Environment: GPUCTL_MULTI_OFFSETS (default "400 500 900": manager, worker-a, worker-b port offsets);
GPUCTL_TEST_MULTI_RUN: reuse the clusters a `hack/cluster/multi.sh up` started there (not stopped after).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpuctl.cli.main import main
from gpuctl.cluster import Cluster, path
from gpuctl.constants import (
    LOCAL_QUEUE_NAME,
    METRICS_CLUSTER_LABEL,
    MULTIKUEUE_CHECK,
    MULTIKUEUE_CONFIG,
    POOL_TAINT_KEY,
    Labels,
)
from gpuctl.domain.objects import is_true
from tests.integration.conftest import wait_until
from tests.integration.serve_process import free_port as _free_port
from tests.integration.tenancy import SHIPPED_ROLES, TeamMember, apply_caller_roles
from tests.integration.test_api_cluster import _token

ROOT = Path(__file__).resolve().parents[2]
MULTI = ROOT / "hack" / "cluster" / "multi.sh"
WORKERS = ("worker-a", "worker-b")
TEAM = "team-mc"
POOL = "a100"


@pytest.fixture(scope="module")
def multi() -> Iterator[Path]:
    """The run directory of three clusters: kubeconfig (contexts manager, worker-a, worker-b) and each
    worker's multikueue.kubeconfig."""
    reuse = os.environ.get("GPUCTL_TEST_MULTI_RUN")
    if reuse:
        yield Path(reuse)
        return
    run = Path(f"/tmp/gpuctl-multi-pytest-{os.getpid()}")
    env = {**os.environ, "GPUCTL_MULTI_RUN": str(run)}
    up = subprocess.run([str(MULTI), "up"], env=env, capture_output=True, text=True)
    try:
        if up.returncode != 0:
            pytest.fail(f"hack/cluster/multi.sh up failed:\n{up.stdout[-4000:]}\n{up.stderr[-4000:]}")
        yield run
    finally:
        subprocess.run([str(MULTI), "down"], env=env, capture_output=True)


@pytest.fixture(scope="module")
def kc(multi: Path) -> str:
    return str(multi / "kubeconfig")


@pytest.fixture(scope="module")
def manager(kc: str) -> Cluster:
    return Cluster.connect(kubeconfig=kc, context="manager")


@pytest.fixture(scope="module")
def workers(kc: str) -> dict[str, Cluster]:
    return {w: Cluster.connect(kubeconfig=kc, context=w) for w in WORKERS}


@pytest.fixture
def gpuctl(kc, capsys):
    """The CLI in-process on the manager: gpuctl("get", "jobs") -> (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main([*args, "--kubeconfig", kc])
        out = capsys.readouterr()
        return rc, out.out, out.err

    return run


def _job(name: str, kind: str = "training", gpu: int = 8) -> str:
    return (
        f"kind: {kind}\nversion: v0.1\njob: {{name: {name}, namespace: {TEAM}}}\n"
        "environment:\n  image: pytorch/pytorch:2.2.0\n  command: [python, train.py]\n"
        "  env:\n  - GPUCTL_FAKE_RUNTIME: 30m\n"
        f"resources: {{pool: {POOL}, gpu: {gpu}, cpu: 8, memory: 32Gi}}\n"
    )


def _workload(manager: Cluster, job: str) -> dict | None:
    found = [
        w
        for w in manager.list(path("Workload", namespace=TEAM))
        if any(r.get("name") == job for r in w["metadata"].get("ownerReferences") or [])
    ]
    return found[0] if found else None


def _admitted_in(manager: Cluster, job: str) -> str | None:
    wl = _workload(manager, job)
    if wl is None or not is_true(wl, "Admitted"):
        return None
    return (wl.get("status") or {}).get("clusterName")


def _remote_jobs(workers: dict[str, Cluster], job: str) -> dict[str, int]:
    """How many batch Jobs named `job` each worker holds."""
    return {
        w: sum(1 for j in c.list(path("Job", namespace=TEAM)) if j["metadata"]["name"] == job)
        for w, c in workers.items()
    }


@pytest.fixture(scope="module")
def setup(multi, kc, manager, workers, tmp_path_factory) -> Iterator[dict]:
    """The pool (gpu-node-1, 8 GPUs, in both workers) and the team quota, made through gpuctl."""
    d = tmp_path_factory.mktemp("mc")
    (d / "pool.yaml").write_text(
        f"kind: pool\nversion: v0.1\npool:\n  name: {POOL}\n  clusters:\n"
        + "".join(f"    {w}: {{kubeconfig: {multi / w / 'multikueue.kubeconfig'}}}\n" for w in WORKERS)
        + "nodes:\n  gpu-node-1: {gpuType: a100}\n"
    )
    (d / "quota.yaml").write_text(
        f"kind: quota\nversion: v0.1\nquota: {{name: mc}}\nnamespace:\n  {TEAM}: {{gpu: 24}}\n"
    )
    for f in ("pool.yaml", "quota.yaml"):
        rc = main(["create", "-f", str(d / f), "--kubeconfig", kc])
        assert rc == 0, f
    wait_until(
        lambda: all(is_true(manager.get(path("MultiKueueCluster", w)), "Active") for w in WORKERS),
        120,
        what="both MultiKueueClusters connected",
    )
    yield {"dir": d}
    # What a failed test left (test_deleting_everything_leaves_nothing deletes it all through gpuctl).
    if manager.get_or_none(path("ResourceFlavor", POOL)) is not None:
        for job in ("mc-m", "mc-1", "mc-2", "mc-3"):
            main(["delete", "job", job, "-n", TEAM, "--kubeconfig", kc])
        wait_until(lambda: not manager.list(path("Job", namespace=TEAM)), 60, what="the manager's Jobs gone")
        main(["delete", "quota", "mc", "--delete-namespace", "--kubeconfig", kc])
        main(["delete", "pool", POOL, "--kubeconfig", kc])


def test_gpuctl_makes_the_multikueue_objects(setup, manager, workers):
    """From one pool document: Secrets, MultiKueueClusters, MultiKueueConfig, AdmissionCheck, the team
    queue's check on the manager; the flavor, node label and taint, and the team's queues on each worker."""
    for w in WORKERS:
        secret = manager.get(path("Secret", f"gpuctl-cluster-{w}", "kueue-system"))
        assert set(secret["data"]) == {"kubeconfig"}
    assert manager.get(path("MultiKueueConfig", MULTIKUEUE_CONFIG))["spec"]["clusters"] == list(WORKERS)
    ac = manager.get(path("AdmissionCheck", MULTIKUEUE_CHECK))
    assert ac["spec"]["controllerName"] == "kueue.x-k8s.io/multikueue"
    wait_until(lambda: is_true(manager.get(path("AdmissionCheck", MULTIKUEUE_CHECK)), "Active"), 60)
    cq = manager.get(path("ClusterQueue", TEAM))
    assert cq["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": MULTIKUEUE_CHECK}]}
    assert manager.list(path("Node")) == []  # the manager has no GPU nodes at all
    for w, c in workers.items():
        assert c.get(path("ResourceFlavor", POOL))["spec"]["nodeLabels"] == {Labels.POOL: POOL}
        node = c.get(path("Node", "gpu-node-1"))
        assert node["metadata"]["labels"][Labels.POOL] == POOL
        assert any(t["key"] == POOL_TAINT_KEY and t.get("value") == POOL for t in node["spec"]["taints"]), w
        wcq = c.get(path("ClusterQueue", TEAM))
        assert "admissionChecksStrategy" not in wcq["spec"]
        assert c.get(path("LocalQueue", "default", TEAM))["spec"]["clusterQueue"] == TEAM


def test_refused_kinds_leave_nothing(setup, gpuctl, manager, tmp_path):
    """A Deployment-based job (no MultiKueue adapter in v0.19.2) is refused naming file, field and fix;
    nothing is created, in a dry run or not."""
    f = tmp_path / "inf.yaml"
    f.write_text(_job("inf-1", kind="inference"))
    for extra in ((), ("--dry-run=server",)):
        rc, _, err = gpuctl("create", "-f", str(f), *extra)
        assert rc != 0
        assert str(f) in err and "resources.pool" in err and "no Deployment adapter" in err, err
        assert "kind: training" in err  # the fix
    assert manager.list(path("Deployment", namespace=TEAM)) == []
    assert manager.list(path("Service", namespace=TEAM)) == []


def test_team_member_sees_where_its_job_runs(setup, kc, manager, workers, monkeypatch, tmp_path):
    """A team member with only the shipped roles, on the manager alone: submits, sees the cluster its job
    runs in; its logs need a context for that worker, and gpuctl says so. Its job leaves no copy behind."""
    monkeypatch.setenv("KUBECONFIG", kc)
    apply_caller_roles(manager)
    member = TeamMember.create(manager, TEAM, roles=SHIPPED_ROLES)
    try:
        f = tmp_path / "m1.yaml"
        f.write_text(_job("mc-m", gpu=1))
        p = member.gpuctl("create", "-f", str(f))
        assert p.returncode == 0, p.stderr
        where = wait_until(lambda: _admitted_in(manager, "mc-m"), 90, what="mc-m admitted")
        p = member.gpuctl("get", "jobs")
        assert p.returncode == 0 and "CLUSTER" in p.stdout and where in p.stdout, p.stdout + p.stderr
        p = member.gpuctl("logs", "mc-m")
        assert p.returncode != 0
        assert f"runs in cluster {where}" in p.stderr and "context" in p.stderr, p.stderr
        assert member.gpuctl("delete", "job", "mc-m").returncode == 0
        wait_until(
            lambda: sum(_remote_jobs(workers, "mc-m").values()) == 0, 90, what="mc-m gone from workers"
        )
        wait_until(
            lambda: not [w for c in workers.values() for w in c.list(path("Workload", namespace=TEAM))],
            90,
            what="no Workload left in the workers",
        )
    finally:
        member.delete()


def test_pool_dry_runs_write_nothing_and_bad_kubeconfigs_are_refused(
    setup, multi, gpuctl, manager, workers, tmp_path
):
    """A second pool, in worker-a only: --dry-run=client and =server leave the API servers as they were;
    a kubeconfig Kueue would refuse (TLS verification off) is refused naming the file, the field and the
    fix, before anything is written."""
    kubeconfig = multi / "worker-a" / "multikueue.kubeconfig"
    doc = tmp_path / "h100.yaml"
    doc.write_text(
        "kind: pool\nversion: v0.1\npool:\n  name: h100\n  clusters:\n"
        f"    worker-a: {{kubeconfig: {kubeconfig}}}\n"
        "nodes:\n  gpu-node-3: {gpuType: a10}\n"
    )

    def state() -> tuple:
        node = workers["worker-a"].get(path("Node", "gpu-node-3"))
        return (
            manager.get_or_none(path("ResourceFlavor", "h100")),
            workers["worker-a"].get_or_none(path("ResourceFlavor", "h100")),
            node["metadata"].get("labels", {}).get(Labels.POOL),
            node["spec"].get("taints"),
            manager.get(path("MultiKueueConfig", MULTIKUEUE_CONFIG))["metadata"]["resourceVersion"],
            manager.get(path("Secret", "gpuctl-cluster-worker-a", "kueue-system"))["metadata"][
                "resourceVersion"
            ],
        )

    before = state()
    assert before[:3] == (None, None, None)
    for mode in ("client", "server"):
        rc, out, err = gpuctl("create", "-f", str(doc), f"--dry-run={mode}")
        assert rc == 0, err
        assert "pool/h100 created in cluster(s) worker-a" in out, out
        assert state() == before, mode
    bad = yaml.safe_load(kubeconfig.read_text())
    for c in bad["clusters"]:
        c["cluster"].pop("certificate-authority-data", None)
        c["cluster"]["insecure-skip-tls-verify"] = True
    insecure = tmp_path / "insecure.kubeconfig"
    insecure.write_text(yaml.safe_dump(bad))
    doc.write_text(doc.read_text().replace(str(kubeconfig), str(insecure)))
    rc, _, err = gpuctl("create", "-f", str(doc))
    assert rc != 0
    assert "pool.clusters.worker-a.kubeconfig" in err and str(insecure) in err and "skips TLS" in err, err
    assert state() == before


def test_a_gang_runs_whole_in_one_worker_with_its_service(
    setup, multi, kc, gpuctl, manager, workers, tmp_path
):
    """A 2-node job in a pool of two 4-GPU nodes of worker-b: MultiKueue sends its one Workload, both pods,
    to worker-b; the manager's serve copies the headless Service svc-<job> there (MultiKueue copies only the
    Job), owned by worker-b's Job, so rank 0's name `<job>-0.svc-<job>` has its record in worker-b's
    EndpointSlice; the job deleted, worker-b's garbage collector deletes the copy
    (gpuctl.server.multicluster)."""
    w, other = "worker-b", "worker-a"
    pool = tmp_path / "a10.yaml"
    pool.write_text(
        "kind: pool\nversion: v0.1\npool:\n  name: a10\n  clusters:\n"
        f"    {w}: {{kubeconfig: {multi / w / 'multikueue.kubeconfig'}}}\n"
        "nodes:\n  gpu-node-3: {gpuType: a10}\n  gpu-node-4: {gpuType: a10}\n"
    )
    assert gpuctl("create", "-f", str(pool))[0] == 0
    port, log = _free_port(), tmp_path / "serve-mirror.log"
    to_worker = f"--worker-kubeconfig={w}={_context_kubeconfig(kc, w, tmp_path / w)}"
    cmd = [sys.executable, "-m", "gpuctl.server.main", "--kubeconfig", kc, "--context", "manager",
           "--address", "127.0.0.1", "--metrics-port", str(port), "--no-api", "--no-backstop", "--no-history",
           "--no-leader-elect", to_worker]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    job = tmp_path / "mc-g.yaml"
    job.write_text(_job("mc-g", gpu=4).replace("pool: a100, gpu: 4", "pool: a10, nodes: 2, gpu: 4"))
    try:
        rc, out, err = gpuctl("create", "-f", str(job))
        assert rc == 0 and "2 nodes x 4 GPUs = 8 GPUs" in out, out + err
        assert wait_until(lambda: _admitted_in(manager, "mc-g"), 90, what="mc-g admitted") == w
        wait_until(lambda: _remote_jobs(workers, "mc-g") == {other: 0, w: 1}, 60, what=f"mc-g in {w} only")
        remote = workers[w].get(path("Job", "mc-g", TEAM))
        assert remote["spec"]["parallelism"] == 2  # the whole gang, in one worker

        def copied() -> dict | None:
            assert proc.poll() is None, log.read_text()[-4000:]
            return workers[w].get_or_none(path("Service", "svc-mc-g", TEAM))

        svc = wait_until(copied, 60, what=f"svc-mc-g in {w}")
        assert [(o["kind"], o["uid"]) for o in svc["metadata"]["ownerReferences"]] == [
            ("Job", remote["metadata"]["uid"])
        ]
        assert svc["spec"]["clusterIP"] == "None"
        assert svc["spec"]["selector"] == manager.get(path("Service", "svc-mc-g", TEAM))["spec"]["selector"]
        assert workers[other].get_or_none(path("Service", "svc-mc-g", TEAM)) is None

        def records() -> set[str]:
            slices = workers[w].list(
                "/apis/discovery.k8s.io/v1/namespaces/" + TEAM + "/endpointslices",
                label_selector="kubernetes.io/service-name=svc-mc-g",
            )
            return {e.get("hostname") for s in slices for e in s.get("endpoints") or []} & {
                "mc-g-0",
                "mc-g-1",
            }

        assert wait_until(lambda: records() == {"mc-g-0", "mc-g-1"} or None, 90, what="both ranks' records")
        assert gpuctl("delete", "job", "mc-g", "-n", TEAM)[0] == 0
        wait_until(
            lambda: workers[w].get_or_none(path("Service", "svc-mc-g", TEAM)) is None,
            90,
            what=f"svc-mc-g in {w} deleted with its Job",
        )
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        gpuctl("delete", "job", "mc-g", "-n", TEAM)
        assert gpuctl("delete", "pool", "a10")[0] == 0


def test_job_lands_where_there_is_room(setup, gpuctl, manager, workers, tmp_path):
    """Two 8-GPU jobs fill gpu-node-1 of both workers, one each; a third waits with quota reserved on the
    manager and no cluster. Status and logs of a running one through gpuctl, read in its worker."""
    placed = {}
    for name in ("mc-1", "mc-2"):
        f = tmp_path / f"{name}.yaml"
        f.write_text(_job(name))
        rc, _, err = gpuctl("create", "-f", str(f))
        assert rc == 0, err
        placed[name] = wait_until(lambda n=name: _admitted_in(manager, n), 90, what=f"{name} admitted")
    assert sorted(placed.values()) == list(WORKERS), placed  # the second went where there was room
    for name, w in placed.items():
        wait_until(lambda n=name, w=w: _remote_jobs(workers, n) == {x: int(x == w) for x in WORKERS}, 60)
    f = tmp_path / "mc-3.yaml"
    f.write_text(_job("mc-3"))
    assert gpuctl("create", "-f", str(f))[0] == 0
    wait_until(
        lambda: (_workload(manager, "mc-3") or {}).get("status", {}).get("admission"), 60, what="mc-3 quota"
    )

    def row_of(out: str, name: str) -> list[str]:
        return next(line.split() for line in out.splitlines() if line.split()[:1] == [name])

    def shown() -> bool:
        rc, out, _ = gpuctl("get", "jobs", "-n", TEAM)
        return rc == 0 and row_of(out, "mc-1")[4] == "Running"

    wait_until(shown, 60, what="mc-1 Running in get jobs")
    rc, out, err = gpuctl("get", "jobs", "-n", TEAM)
    header = out.splitlines()[0].split()
    assert "CLUSTER" in header
    col = header.index("CLUSTER") - 1  # the header "JOB ID" is two words
    assert row_of(out, "mc-1")[col] == placed["mc-1"]
    assert row_of(out, "mc-2")[col] == placed["mc-2"]
    assert row_of(out, "mc-3")[4] == "QuotaReserved"  # held on the manager, no worker has room

    # GPU TOTAL: both workers' node; GPU USED: the manager's reservations, mc-3's too (held, not placed).
    # Kueue counts mc-3 in its ClusterQueue's status.flavorsReservation a moment after the Workload's
    # status.admission (its ClusterQueue reconciler; the CI run of bca9ad7 read the count before): waited for.
    def counted() -> str | None:
        rc, out, err = gpuctl("get", "pools", "-o", "wide")
        assert rc == 0, err
        assert row_of(out, POOL)[2] == "16", out
        return out if row_of(out, POOL)[3] == "24" else None

    out = wait_until(counted, 30, what="mc-3's reservation counted in the pool's GPU USED (24)")
    assert "worker-a:0/8,worker-b:0/8" in out, out  # each worker's node is full
    rc, out, err = gpuctl("describe", "job", "mc-1", "-n", TEAM)
    assert rc == 0, err
    assert "Cluster:" in out and placed["mc-1"] in out and "MultiKueue Ready" in out, out
    assert "gpu-node-1" in out  # its pod, read in the worker
    rc, out, err = gpuctl("logs", "mc-1", "-n", TEAM, "--tail", "5")
    assert rc == 0, err
    assert "step 20: loss=0.05" in out, out


def test_serve_with_cluster_labels_its_series(setup, kc, tmp_path):
    """`gpuctl serve --cluster NAME` on the manager and on worker-a (metrics only, nothing written): every
    series each exports carries its cluster; the manager's shows the team's queue, the worker's its pool's
    8 GPUs (gpu-node-1), each under its own name, as one Prometheus scraping both would keep them."""
    served: dict[str, tuple[subprocess.Popen, int, Path]] = {}
    metrics_only = ["--no-reconcile", "--no-api", "--no-backstop", "--no-history", "--no-leader-elect"]
    try:
        for context in ("manager", "worker-a"):
            port, log = _free_port(), tmp_path / f"serve-{context}.log"
            cmd = [sys.executable, "-m", "gpuctl.server.main", "--kubeconfig", kc, "--context", context,
                   "--cluster", context, "--address", "127.0.0.1", "--metrics-port", str(port)]  # fmt: skip
            with log.open("w") as out:
                proc = subprocess.Popen([*cmd, *metrics_only], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
            served[context] = (proc, port, log)

        def samples(context: str) -> list:
            proc, port, log = served[context]
            assert proc.poll() is None, log.read_text()[-4000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    body = r.read().decode()
            except OSError:
                return []
            return [s for f in text_string_to_metric_families(body) for s in f.samples]

        def value(context: str, name: str, **labels: str) -> float | None:
            want = {**labels, METRICS_CLUSTER_LABEL: context}
            found = [s.value for s in samples(context) if s.name == name and s.labels == want]
            return found[0] if found else None

        wait_until(
            lambda: value("worker-a", "gpuctl_pool_capacity_gpus", pool=POOL) == 8, 60, what="worker-a's pool"
        )
        team = {"namespace": TEAM, "cluster_queue": TEAM, "local_queue": LOCAL_QUEUE_NAME, "quota": "mc"}
        wait_until(lambda: value("manager", "gpuctl_team_info", **team) == 1, 60, what="the manager's team")
        for context in served:
            got = samples(context)
            assert {s.name for s in got} >= {"gpuctl_build_info", "process_cpu_seconds_total"}, context
            assert [s for s in got if s.labels.get(METRICS_CLUSTER_LABEL) != context] == [], context
    finally:
        for proc, _, _ in served.values():
            proc.terminate()
            proc.wait(timeout=15)


def _context_kubeconfig(kc: str, context: str, dest: Path) -> str:
    """One context of the module's kubeconfig as a file of its own (what an admin mounts into serve's pod)."""
    full = yaml.safe_load(Path(kc).read_text())
    ctx = next(c for c in full["contexts"] if c["name"] == context)
    dest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": context,
                "contexts": [ctx],
                "clusters": [c for c in full["clusters"] if c["name"] == ctx["context"]["cluster"]],
                "users": [u for u in full["users"] if u["name"] == ctx["context"]["user"]],
            }
        )
    )
    return str(dest)


def test_api_reads_a_dispatched_jobs_pods_in_its_worker_and_history_names_it(
    setup, kc, manager, gpuctl, monkeypatch, tmp_path
):
    """The manager's serve with --api and --worker-kubeconfig for both workers: a team member's describe
    and logs of mc-1 through the REST API read its pod in its worker; the audit trail serve writes names
    the worker in mc-1's admission."""
    where = _admitted_in(manager, "mc-1")
    assert where, "mc-1 is not running (test_job_lands_where_there_is_room)"
    monkeypatch.setenv("KUBECONFIG", kc)  # the team member's kubeconfig names the manager's server from it
    apply_caller_roles(manager)
    member = TeamMember.create(manager, TEAM, roles=SHIPPED_ROLES)
    port, log = _free_port(), tmp_path / "serve-api.log"
    workers = [f"--worker-kubeconfig={w}={_context_kubeconfig(kc, w, tmp_path / w)}" for w in WORKERS]
    cmd = [sys.executable, "-m", "gpuctl.server.main", "--kubeconfig", kc, "--context", "manager", "--api",
           "--address", "127.0.0.1", "--metrics-port", str(port), "--no-reconcile", "--no-backstop",
           "--no-leader-elect", *workers]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        token = _token(manager, TEAM, member.name)

        def api(route: str) -> tuple[int, dict]:
            assert proc.poll() is None, log.read_text()[-4000:]
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}{route}", headers={"Authorization": f"Bearer {token}"}
            )
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    return r.status, json.load(r)
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read() or b"{}")
            except (OSError, ValueError):
                return 0, {}

        wait_until(lambda: api("/healthz")[0] == 200, 60, what="serve listening")
        wait_until(lambda: api(f"/api/v1/jobs/mc-1?namespace={TEAM}")[0] == 200, 60, what="the API up")
        code, job = api(f"/api/v1/jobs/mc-1?namespace={TEAM}")
        assert code == 200 and where in json.dumps(job) and "gpu-node-1" in json.dumps(job), job
        code, logs = api(f"/api/v1/jobs/mc-1/logs?namespace={TEAM}&tail=5&timestamps=false")
        assert code == 200 and any("step 20: loss=0.05" in line for line in logs["logs"]), logs

        def admitted_reason() -> str | None:
            code, h = api(f"/api/v1/history/{TEAM}?job=mc-1")
            found = (
                [r["reason"] for r in h.get("items") or [] if r["action"] == "admitted"]
                if code == 200
                else []
            )
            return found[0] if found else None

        reason = wait_until(admitted_reason, 60, what="mc-1's admission in the history")
        assert reason.endswith(f"in cluster {where}"), reason
        rc, out, err = gpuctl("history", "mc-1", "-n", TEAM)
        assert rc == 0 and f"in cluster {where}" in out, out + err
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        member.delete()


def test_worker_goes_away_and_comes_back(setup, multi, gpuctl, manager, workers):
    """The API server of mc-1's worker stops: the manager notices (MultiKueueCluster inactive), keeps the
    job where it was (Kueue's workerLostTimeout, 15 min), and gpuctl says why it cannot read its pods.
    It comes back: every job is in exactly one worker, as before, none lost, none duplicated."""
    where = {n: _admitted_in(manager, n) for n in ("mc-1", "mc-2")}
    lost = where["mc-1"]
    assert lost, where
    env = {**os.environ, "GPUCTL_MULTI_RUN": str(multi)}
    t0 = time.monotonic()
    subprocess.run([str(MULTI), "stop-worker", lost], env=env, check=True, capture_output=True)
    try:
        wait_until(
            lambda: not is_true(manager.get(path("MultiKueueCluster", lost)), "Active"),
            120,
            what=f"the manager sees {lost} gone",
        )
        noticed = time.monotonic() - t0
        assert {n: _admitted_in(manager, n) for n in where} == where  # nothing moved or lost
        rc, out, _ = gpuctl("get", "jobs", "-n", TEAM)
        assert rc == 0 and "mc-1" in out
        rc, _, err = gpuctl("logs", "mc-1", "-n", TEAM)
        assert rc != 0 and lost in err, err
        rc, out, err = gpuctl("get", "pools", "-o", "wide")
        assert rc == 0 and f"{lost}:?" in out and "degraded" in out, out
        assert f"cluster {lost} not read" in err, err
    finally:
        subprocess.run([str(MULTI), "start-worker", lost], env=env, check=True, capture_output=True)
    wait_until(
        lambda: is_true(manager.get(path("MultiKueueCluster", lost)), "Active"),
        180,
        what=f"the manager reconnects to {lost}",
    )
    back = time.monotonic() - t0
    assert {n: _admitted_in(manager, n) for n in where} == where
    for name, w in where.items():
        wait_until(
            lambda n=name, w=w: _remote_jobs(workers, n) == {x: int(x == w) for x in WORKERS},
            60,
            what=f"{name} in {w} only",
        )
    assert sum(_remote_jobs(workers, "mc-3").values()) == 0  # still waiting: no copy ran anywhere
    rc, out, err = gpuctl("logs", "mc-1", "-n", TEAM, "--tail", "1")
    assert rc == 0, err
    print(f"\nworker outage: noticed after {noticed:.1f}s, reconnected {back:.1f}s after the stop")


def test_rotated_kubeconfig(setup, multi, gpuctl, manager, workers, tmp_path):
    """Kueue's credential for a worker is replaced through the pool document: a wrong one disconnects the
    worker (gpuctl get pools says so and why, nothing running is lost), a fresh token reconnects it."""
    w = "worker-b"
    good = yaml.safe_load((multi / w / "multikueue.kubeconfig").read_text())
    placed = {n: _admitted_in(manager, n) for n in ("mc-1", "mc-2")}

    def pool_doc(kubeconfig: dict) -> Path:
        f = tmp_path / f"{w}-{time.monotonic_ns()}.kubeconfig"
        f.write_text(yaml.safe_dump(kubeconfig))
        doc = tmp_path / "pool.yaml"
        doc.write_text(
            (setup["dir"] / "pool.yaml").read_text().replace(str(multi / w / "multikueue.kubeconfig"), str(f))
        )
        return doc

    bad = {**good, "users": [{"name": u["name"], "user": {"token": "not-a-token"}} for u in good["users"]]}
    rc, _, err = gpuctl("apply", "-f", str(pool_doc(bad)))
    assert rc == 0, err
    wait_until(
        lambda: not is_true(manager.get(path("MultiKueueCluster", w)), "Active"), 90, what=f"{w} refused"
    )
    rc, out, err = gpuctl("get", "pools", "-o", "wide")
    assert rc == 0 and f"{w}:0/8*" in out and "degraded" in out, out
    assert f"cluster {w} (*)" in err and "credentials" in err, err
    assert {n: _admitted_in(manager, n) for n in placed} == placed
    token = workers[w].request(
        "POST",
        path("ServiceAccount", "gpuctl-multikueue", "kueue-system", "token"),
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )["status"]["token"]
    fresh = {**good, "users": [{"name": u["name"], "user": {"token": token}} for u in good["users"]]}
    rc, _, err = gpuctl("apply", "-f", str(pool_doc(fresh)))
    assert rc == 0, err
    wait_until(lambda: is_true(manager.get(path("MultiKueueCluster", w)), "Active"), 90, what=f"{w} back")
    assert {n: _admitted_in(manager, n) for n in placed} == placed
    for name, where in placed.items():
        assert _remote_jobs(workers, name) == {x: int(x == where) for x in WORKERS}


def test_deleting_everything_leaves_nothing(setup, gpuctl, manager, workers):
    """Jobs, the quota and the pool deleted through gpuctl: no MultiKueue object, Secret, flavor, team
    queue, node label or taint of gpuctl's is left on the manager or a worker."""
    for job in ("mc-1", "mc-2", "mc-3"):
        rc, _, err = gpuctl("delete", "job", job, "-n", TEAM)
        assert rc == 0, err
    wait_until(lambda: not manager.list(path("Job", namespace=TEAM)), 90, what="the manager's Jobs gone")
    rc, _, err = gpuctl("delete", "quota", "mc", "--delete-namespace")
    assert rc == 0, err
    rc, _, err = gpuctl("delete", "pool", POOL)
    assert rc == 0, err
    for kind in ("MultiKueueCluster", "MultiKueueConfig", "AdmissionCheck"):
        assert manager.list(path(kind)) == [], kind
    assert (
        manager.list(path("Secret", namespace="kueue-system"), label_selector=f"{Labels.MANAGED_BY}=gpuctl")
        == []
    )
    for w, c in workers.items():
        wait_until(
            lambda c=c: c.get_or_none(path("ResourceFlavor", POOL)) is None, 60, what=f"{w}: flavor gone"
        )
        # Deleted, but Kueue removes its in-use finalizer in its own time, as for the flavor above.
        wait_until(
            lambda c=c: c.get_or_none(path("ClusterQueue", TEAM)) is None, 60, what=f"{w}: team queue gone"
        )
        node = c.get(path("Node", "gpu-node-1"))
        assert Labels.POOL not in node["metadata"].get("labels", {}), w
        assert not any(t["key"] == POOL_TAINT_KEY for t in node["spec"].get("taints") or []), w
        assert not [j for j in c.list(path("Job", namespace=TEAM))], w
