"""Every CLI verb as a least-privilege team member (issue 26).

The member is a ServiceAccount bound to exactly the roles gpuctl ships (`gpuctl-user` by a RoleBinding
in its team namespace, `gpuctl-pool-viewer` by a ClusterRoleBinding), its token from an exec plugin,
its kubeconfig context's namespace the team's (tests/integration/tenancy.py). Each command runs as a
new `gpuctl` process, as in the member's shell. Every verb works; admin verbs and -A are refused with
the role to bind named; a member of another team does not see the team's jobs; the numbers a member
reads (pools, quotas, why a job waits) are the admin's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpuctl.cli.main import main
from gpuctl.cluster import Cluster, path
from tests.integration.conftest import delete_namespaces, reset_gpuctl_state, wait_until
from tests.integration.tenancy import SHIPPED_ROLES, TeamMember, apply_caller_roles, dump

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class World:
    kubeconfig: str  # the admin's
    a: str
    b: str
    quota: str
    member: TeamMember  # of team a
    other: TeamMember  # of team b
    tmp: Path

    def admin(self, *args: str) -> tuple[int, str, str]:
        """The CLI as the cluster admin, in-process."""
        import contextlib
        import io

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main([*args, "--kubeconfig", self.kubeconfig])
        return rc, out.getvalue(), err.getvalue()

    def job(self, name: str, gpus: int, pool: str = "training-pool", *, namespace: str | None = None) -> str:
        """A training job's YAML file, without a namespace unless given (the context's then applies)."""
        ns = f", namespace: {namespace}" if namespace else ""
        f = self.tmp / f"{name}-{gpus}.yaml"
        f.write_text(
            f"kind: training\njob: {{name: {name}{ns}}}\n"
            "environment: {image: busybox, env: [{GPUCTL_FAKE_RUNTIME: 30m}]}\n"
            f"resources: {{pool: {pool}, gpu: {gpus}, cpu: 1, memory: 1Gi}}\n"
        )
        return str(f)


def ok(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 0, dump(p)
    assert "forbidden" not in p.stderr.lower(), dump(p)
    return p.stdout


def refused(p: subprocess.CompletedProcess, *needles: str) -> str:
    """A command refused with the role named, never the API server's raw 'forbidden'."""
    assert p.returncode == 1, dump(p)
    assert "is forbidden" not in p.stderr, dump(p)
    for n in needles:
        assert n in p.stderr, (n, dump(p))
    return p.stderr


def _sar(kube: Cluster, user: str, **attrs: str) -> bool:
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": attrs},
    }
    return kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=body)[
        "status"
    ].get("allowed", False)


@pytest.fixture(scope="module")
def world(cluster: str, kube: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("member")
    reset_gpuctl_state(kube)
    s = uuid.uuid4().hex[:6]
    a, b = f"tm-a-{s}", f"tm-b-{s}"
    w = World(cluster, a, b, f"q-{s}", None, None, tmp)  # type: ignore[arg-type]
    rc, _, err = w.admin("create", "-f", str(ROOT / "examples" / "pools.yaml"))
    assert rc == 0, err
    quota = tmp / "quota.yaml"
    quota.write_text(
        f"kind: quota\nquota: {{name: {w.quota}}}\nnamespace:\n"
        f"  {a}: {{cpu: 64, memory: 256Gi, gpu: 24}}\n  {b}: {{cpu: 64, memory: 256Gi, gpu: 4}}\n"
    )
    rc, _, err = w.admin("create", "-f", str(quota))
    assert rc == 0, err
    apply_caller_roles(kube)
    w.member = TeamMember.create(kube, a, roles=SHIPPED_ROLES)
    w.other = TeamMember.create(kube, b, roles=SHIPPED_ROLES)
    try:
        for m in (w.member, w.other):  # RBAC is served from an informer: wait for the bindings
            for attrs in (
                {"verb": "create", "group": "batch", "resource": "jobs", "namespace": m.namespace},
                {"verb": "list", "group": "kueue.x-k8s.io", "resource": "resourceflavors"},
            ):
                wait_until(lambda m=m, at=attrs: _sar(kube, m.username, **at), 30, 0.2, what=f"RBAC {attrs}")
        yield w
    finally:
        for m in (w.member, w.other):
            if m is not None:
                m.delete()
        w.admin("delete", "quota", w.quota, "--delete-namespace")
        delete_namespaces(kube, [a, b], 90)
        reset_gpuctl_state(kube)


def _idle(world: World) -> None:
    """Wait until Kueue holds nothing for the team and no pod of it is left (an earlier test's deleted
    jobs: their Workloads go after the Jobs, by garbage collection, and a terminating pod still holds
    its GPUs in the admin's per-node view)."""
    kube = Cluster.connect(kubeconfig=world.kubeconfig)

    def idle() -> bool:
        st = kube.get(path("ClusterQueue", world.a)).get("status") or {}
        return not kube.list(path("Pod", namespace=world.a)) and all(
            r.get("total") in (None, "0")
            for fr in st.get("flavorsReservation") or []
            for r in fr.get("resources") or []
        )

    wait_until(idle, 120, what=f"nothing reserved for {world.a}")


def _json(p: subprocess.CompletedProcess):
    """The document printed; a listing's items (`get -o json` prints a v1 List)."""
    doc = json.loads(ok(p))
    return doc["items"] if isinstance(doc, dict) and doc.get("kind") == "List" else doc


def _status(m: TeamMember, name: str) -> dict:
    return _json(m.gpuctl("describe", "job", name, "-o", "json"))


# ----------------------------------------------------------------------------- reads
def test_read_verbs_work_in_the_context_namespace(world: World) -> None:
    m, a = world.member, world.a
    # The context's namespace, as kubectl: no -n needed, and nothing of another namespace is read.
    assert "No jobs found in" in m.gpuctl("get", "jobs").stderr
    ok(m.gpuctl("get", "jobs", "-o", "wide"))
    assert _json(m.gpuctl("get", "jobs", "-o", "json")) == []
    ok(m.gpuctl("get", "jobs", "-n", a))

    pools = {p["metadata"]["name"]: p for p in _json(m.gpuctl("get", "pools", "-o", "json"))}
    assert {n: p["status"]["gpus"]["total"] for n, p in pools.items()} == {
        "compute-pool": 0,
        "dev-pool": 4,
        "inference-pool": 8,
        "training-pool": 16,
    }
    assert "training-pool" in ok(m.gpuctl("get", "pools"))
    wide = m.gpuctl("get", "pools", "-o", "wide")
    assert "GPU QUEUED" in ok(wide) and f"counts the waiting jobs of {a} only" in wide.stderr, dump(wide)
    d = _json(m.gpuctl("describe", "pool", "training-pool", "-o", "json"))
    assert (d["gpu_total"], d["gpu_allocated"], d["jobs_namespaces"]) == (16, None, [a])
    assert "GPU Allocated:" in ok(m.gpuctl("describe", "pool", "training-pool"))

    nodes = {n["metadata"]["name"]: n for n in _json(m.gpuctl("get", "nodes", "-o", "json"))}
    node1 = nodes["gpu-node-1"]
    assert (node1["status"]["gpus"]["total"], node1["spec"]["pool"]) == (8, "training-pool")
    assert node1["status"]["gpus"]["used"] is None  # not guessed: the member may not read every pod
    p = m.gpuctl("get", "nodes")
    assert "gpu-node-1" in ok(p) and "GPU USED and GPU FREE per node need" in p.stderr
    d = _json(m.gpuctl("describe", "node", "gpu-node-1", "-o", "json"))
    assert (d["pool"], d["gpu_used"], d["pods_namespaces"]) == ("training-pool", None, [a])
    ok(m.gpuctl("describe", "node", "gpu-node-1"))
    assert "runwhere.ai/pool=training-pool" in ok(m.gpuctl("get", "labels"))
    ok(m.gpuctl("get", "labels", "gpu-node-1"))

    # Its own quota by default (the context's namespace), a named one, and describe.
    rows = _json(m.gpuctl("get", "quotas", "-o", "json"))
    assert [(q["metadata"]["namespace"], q["spec"]["gpus"]) for q in rows] == [(a, 24)]
    assert a in ok(m.gpuctl("get", "quotas"))
    assert _json(m.gpuctl("describe", "quota", a, "-o", "json"))["gpu"]["quota"] == 24
    assert "Quota:" in ok(m.gpuctl("describe", "quota", world.quota))
    assert [n["metadata"]["name"] for n in _json(m.gpuctl("get", "ns", "-o", "json"))] == [a]
    assert _json(m.gpuctl("describe", "ns", a, "-o", "json"))["quota"]["namespace"] == a

    v = _json(m.gpuctl("version", "-o", "json"))
    assert v["serverVersion"] and v["gpuctlVersion"]


def test_admin_verbs_and_every_namespace_name_the_role(world: World) -> None:
    m, a = world.member, world.a
    refused(m.gpuctl("get", "jobs", "-A"), "gpuctl-admin", "ClusterRoleBinding", f"pass -n {a}")
    # A context without a namespace: gpuctl reads every namespace (the earlier habit), and says how to
    # name the team's instead.
    bare = world.tmp / "bare.kubeconfig"
    config = yaml.safe_load(Path(m.kubeconfig).read_text())
    config["contexts"][0]["context"].pop("namespace")
    bare.write_text(yaml.safe_dump(config))
    refused(m.gpuctl("get", "jobs", "--kubeconfig", str(bare)), "gpuctl-admin", "pass -n NAMESPACE")
    ok(m.gpuctl("get", "jobs", "--kubeconfig", str(bare), "-n", a))
    refused(m.gpuctl("get", "jobs", "-n", world.b), f"gpuctl-user in {world.b}", "RoleBinding")
    refused(m.gpuctl("create", "-f", str(ROOT / "examples" / "pool.yaml")), "pools) needs gpuctl-admin")
    refused(m.gpuctl("apply", "-f", str(ROOT / "examples" / "pool.yaml"), "--dry-run=server"), "gpuctl-admin")
    q = world.tmp / "q-member.yaml"
    q.write_text(f"kind: quota\nquota: {{name: mine}}\nnamespace: {{{a}: {{gpu: 99}}}}\n")
    refused(m.gpuctl("apply", "-f", str(q)), "gpuctl-admin")
    refused(m.gpuctl("label", "node", "gpu-node-1", "team=a"), "gpuctl-admin")
    refused(m.gpuctl("delete", "pool", "dev-pool"), "gpuctl-admin")
    refused(m.gpuctl("delete", "quota", world.quota), "gpuctl-admin")
    # Nothing changed.
    kube = Cluster.connect(kubeconfig=world.kubeconfig)
    assert "runwhere.ai/team" not in kube.get(path("Node", "gpu-node-1"))["metadata"]["labels"]
    assert kube.get_or_none(path("ResourceFlavor", "dev-pool")) is not None
    assert kube.get(path("ClusterQueue", a))["metadata"]["labels"]["runwhere.ai/quota"] == world.quota


def test_job_lifecycle_as_a_team_member(world: World) -> None:
    m, a = world.member, world.a
    f = world.job("life", 1)
    out = ok(m.gpuctl("create", "-f", f, "--dry-run=client"))
    assert "job.batch/life created (dry run)" in out, out
    out = ok(m.gpuctl("create", "-f", f, "--dry-run=server"))
    assert "(server dry run)" in out and "would start now on pool training-pool" in out, out
    assert Cluster.connect(kubeconfig=world.kubeconfig).get_or_none(path("Job", "life", a)) is None
    assert "job.batch/life created" in ok(m.gpuctl("create", "-f", f))
    wait_until(lambda: _status(m, "life")["status"] == "Running", 60, what="life Running")
    rows = _json(m.gpuctl("get", "jobs", "-o", "json"))
    assert {(j["metadata"]["name"], j["metadata"]["namespace"], j["status"]["gpus"]) for j in rows} == {
        ("life", a, 1)
    }
    assert "life" in ok(m.gpuctl("get", "jobs", "-o", "wide"))
    d = _status(m, "life")
    assert (d["namespace"], d["pool"], d["gpus"], d["why"]) == (a, "training-pool", 1, "")
    assert "Running" in ok(m.gpuctl("describe", "job", "life"))
    logs = ok(m.gpuctl("logs", "life", "--tail", "1", "--no-timestamps"))
    assert logs.strip().startswith("step"), logs

    # -w: the list, then it keeps watching until interrupted.
    out_file = world.tmp / "watch.out"
    with out_file.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuctl.main", "get", "jobs", "-w"],
            env=m.env(),
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        try:
            wait_until(lambda: "life" in out_file.read_text(), 60, what="get jobs -w lists")
            wait_until(
                lambda: proc.poll() is None and os.path.getsize(out_file) > 0, 5, what="still watching"
            )
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)
    assert "forbidden" not in out_file.read_text().lower(), out_file.read_text()

    # apply: a changed pod template; a server dry run first, then for real (the Job is not running
    # long enough to matter: --force re-creates it).
    f2 = world.job("life", 2)
    out = ok(m.gpuctl("apply", "-f", f2, "--dry-run=server", "--force"))
    assert "job.batch/life replaced (server dry run)" in out, out
    assert "job.batch/life replaced" in ok(m.gpuctl("apply", "-f", f2, "--force"))
    wait_until(lambda: _status(m, "life")["gpus"] == 2, 60, what="life re-created with 2 GPUs")
    assert "unchanged" in ok(m.gpuctl("apply", "-f", f2))

    out = ok(m.gpuctl("delete", "-f", f2, "--dry-run=client"))
    assert "deleted" in out and "dry run" in out, out
    ok(m.gpuctl("delete", "job", "life", "--dry-run=server"))
    assert _status(m, "life")["name"] == "life"
    assert "job.batch/life deleted" in ok(m.gpuctl("delete", "-f", f2))
    kube = Cluster.connect(kubeconfig=world.kubeconfig)
    wait_until(lambda: kube.get_or_none(path("Job", "life", a)) is None, 60, what="life gone")


def test_why_a_job_waits_without_reading_other_teams(world: World) -> None:
    """Capacity and fragmentation, as the member reads them (Kueue's count; Kueue's word on where pods
    fit) and as the admin does (per node): the same cause, from what each may read."""
    m, a = world.member, world.a
    _idle(world)
    # dev-pool (one node, 4 GPUs) full; training-pool with 2 GPUs free on each node.
    for name, gpus, pool in (("d1", 4, "dev-pool"), ("f1", 6, "training-pool"), ("f2", 6, "training-pool")):
        ok(m.gpuctl("create", "-f", world.job(name, gpus, pool)))
    for name in ("d1", "f1", "f2"):
        wait_until(lambda n=name: _status(m, n)["status"] == "Running", 90, what=f"{name} Running")
    ok(m.gpuctl("create", "-f", world.job("d2", 2, "dev-pool"), "-f", world.job("f3", 4)))
    try:
        capacity = "dev-pool has 0 of 4 GPUs free, this job needs 2"
        d2 = wait_until(
            lambda: (s := _status(m, "d2"))["status"] == "Queued" and s["why"].startswith(capacity) and s,
            60,
            what="d2 waits for capacity",
        )
        rc, out, err = world.admin("describe", "job", "d2", "-n", a, "-o", "json")
        assert rc == 0, err
        assert json.loads(out)["why"] == d2["why"]  # the admin's per-node answer is the same

        # f3: 4 GPUs free in number, but no node has 4: the member gets Kueue's word for it.
        def fragmented() -> dict | None:
            s = _status(m, "f3")
            return s if s["status"] == "Queued" and "Kueue has not placed it" in s["why"] else None

        f3 = wait_until(fragmented, 60, what="f3 waits: fragmentation in Kueue's words")
        assert f3["why"].startswith("4 of 16 GPUs of training-pool are free, enough in number"), f3["why"]
        rc, out, err = world.admin("describe", "job", "f3", "-n", a, "-o", "json")
        assert json.loads(out)["why"].startswith("no node in training-pool has 4 free GPUs"), out

        wide = ok(m.gpuctl("get", "jobs", "-o", "wide"))
        line = next(ln for ln in wide.splitlines() if ln.split()[0] == "d2")  # JOB ID: the job's name
        assert capacity in line, wide
        out = ok(m.gpuctl("create", "-f", world.job("d3", 1, "dev-pool"), "--dry-run=server"))
        assert "would wait" in out and "dev-pool has 0 of 4 GPUs free, this job needs 1" in out, out

        # The pools read the same to the member and the admin (Kueue's count), and the member's GPU
        # QUEUED counts its own waiting jobs, which here are all of them.
        def numbers(rows: list[dict]) -> dict:
            return {
                p["metadata"]["name"]: (
                    p["status"]["gpus"]["used"],
                    p["status"]["gpus"]["free"],
                    p["status"]["gpus"]["queued"],
                )
                for p in rows
            }

        rc, out, _ = world.admin("get", "pools", "-o", "json")
        admin_pools = numbers(json.loads(out)["items"])
        assert admin_pools["training-pool"] == (12, 4, 4) and admin_pools["dev-pool"] == (4, 0, 2)
        assert numbers(_json(m.gpuctl("get", "pools", "-o", "json"))) == admin_pools
        # Another team's member sees the same use, and no queue but its own (empty).
        other = numbers(_json(world.other.gpuctl("get", "pools", "-o", "json")))
        assert {n: v[:2] for n, v in other.items()} == {n: v[:2] for n, v in admin_pools.items()}
        assert other["dev-pool"][2] == 0
        # describe node lists the member's own pods there, no one else's.
        node = _json(m.gpuctl("describe", "node", "gpu-node-5", "-o", "json"))
        assert [(j["namespace"], j["job"]) for j in node["jobs"]] == [(a, "d1")]
        assert _json(world.other.gpuctl("describe", "node", "gpu-node-5", "-o", "json"))["jobs"] == []
    finally:
        for name in ("d1", "d2", "f1", "f2", "f3"):
            m.gpuctl("delete", "job", name, "--force")


def test_another_teams_member_does_not_see_the_jobs(world: World) -> None:
    m, b = world.member, world.other
    ok(m.gpuctl("create", "-f", world.job("mine", 1, "dev-pool")))
    try:
        wait_until(lambda: _status(m, "mine")["status"] == "Running", 60, what="mine Running")
        assert _json(b.gpuctl("get", "jobs", "-o", "json")) == []
        refused(b.gpuctl("describe", "job", "mine", "-n", world.a), f"gpuctl-user in {world.a}")
        refused(b.gpuctl("logs", "mine", "-n", world.a), f"gpuctl-user in {world.a}")
        assert "not found" in b.gpuctl("describe", "job", "mine").stderr  # its own namespace has none
        refused(b.gpuctl("delete", "job", "mine", "-n", world.a), f"gpuctl-user in {world.a}")
        assert _status(m, "mine")["status"] == "Running"
    finally:
        m.gpuctl("delete", "job", "mine", "--force")


def test_describe_job_tells_start_end_exit_and_events(world: World) -> None:
    """kubectl describe's Start Time, Completed At, Duration and Events, with the exit code, read as a team
    member (gpuctl-user lists the namespace's Events): the Events of the job's Job (job-controller), its
    pod (default-scheduler) and its Workload (Kueue), and of no other job."""
    m = world.member
    f = world.tmp / "brief.yaml"
    f.write_text(
        "kind: training\njob: {name: brief}\n"
        "environment: {image: busybox, env: [{GPUCTL_FAKE_RUNTIME: 2s}]}\n"
        "resources: {pool: training-pool, gpu: 1, cpu: 1, memory: 1Gi}\n"
    )
    ok(m.gpuctl("create", "-f", str(f)))
    try:
        wait_until(lambda: _status(m, "brief")["status"] == "Succeeded", 90, what="brief Succeeded")
        d = _status(m, "brief")
        assert d["started"] and d["ended"] and d["events_error"] is None, d
        assert (d["exit"]["code"], d["exit"]["reason"], d["exit"]["container"]) == (0, "Completed", "main"), d
        froms = {(e["object"].split("/")[0], e["reason"], e["from"]) for e in d["events"]}
        assert ("Job", "SuccessfulCreate", "job-controller") in froms, froms
        assert ("Pod", "Scheduled", "default-scheduler") in froms, froms
        assert any(k == "Workload" and r == "QuotaReserved" for k, r, _ in froms), froms
        assert all(
            e["object"].split("/")[1].startswith("brief") or "Workload/" in e["object"] for e in d["events"]
        )
        text = ok(m.gpuctl("describe", "job", "brief"))
        assert (
            "\nStart Time:" in text and "\nCompleted At:" in text and "\nExit Code:    0 (Completed" in text
        ), text
        assert re.search(r"\nDuration:\s+\d+s\n", text), text
        table = text[text.index("\nEvents:\n") :].splitlines()[2:]
        assert table[0].split() == ["Type", "Reason", "Age", "From", "Message"], table
        assert {"SuccessfulCreate", "Scheduled", "QuotaReserved"} <= {
            line.split()[1] for line in table[2:]
        }, table
    finally:
        m.gpuctl("delete", "job", "brief", "--force")
