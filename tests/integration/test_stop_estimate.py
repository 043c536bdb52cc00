"""Stop, resume and "when will it run" on the local cluster (issue 23), as a team member with only the
shipped roles (gpuctl-user + gpuctl-pool-viewer, exec-plugin kubeconfig).

- stop/resume round-trip a training job and a notebook: pods go, the Workload is inactive and holds no
  quota, REASON and describe say "stopped", resume re-admits; an inference job (a Deployment) is refused;
- kueuectl's `stop|resume workload` (built from the Kueue module by hack/cluster/build.sh) and gpuctl's
  read the same, both ways;
- an estimate holds: a pool filled with jobs of short maxRuntime (Kueue evicts them at their deadline),
  one more queued: it is admitted no later than its "at the latest";
- the REST API's stop/resume answer the team and refuse another team (403);
- dry runs (client and server) write nothing: the Workload's spec and generation do not move;
- the workload-edit policy leaves a team member spec.active and nothing else of a Workload.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from admission.policies import workload_edit as workload_edit_policy
from admission.policies.workload_edit import NAME
from gpuctl.cluster import Cluster, path
from gpuctl.constants import MAX_EXEC_TIME_LABEL
from gpuctl.domain.objects import condition, parse_time
from gpuctl.domain.workload import WorkloadState, workload_state
from tests.conftest import CACHE
from tests.integration.conftest import delete_namespaces, wait_until
from tests.integration.tenancy import SHIPPED_ROLES, TeamMember, apply_caller_roles, caller_roles
from tests.integration.test_api_cluster import env  # noqa: F401 - the API fixture
from tests.integration.test_cli_cluster import gpuctl, pools  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parents[2]
KUEUE_VERSION = next(
    line.split("=", 1)[1].strip()
    for line in (ROOT / "hack/cluster/versions.env").read_text().splitlines()
    if line.startswith("KUEUE_VERSION=")
)
KUEUECTL = CACHE / "bin" / f"kueuectl-{KUEUE_VERSION}" / "kubectl-kueue"


# ----------------------------------------------------------------------------- helpers
@pytest.fixture
def team(pools, gpuctl, kube, tmp_path):  # noqa: F811
    """A team namespace with a 16-GPU quota (no borrowing) and a member holding only the shipped roles."""
    ns = f"st-{uuid.uuid4().hex[:6]}"
    q = tmp_path / "quota.yaml"
    q.write_text(
        f"kind: quota\nquota: {{name: q-{ns}}}\nnamespace:\n"
        f"  {ns}: {{cpu: 256, memory: 2Ti, gpu: 16, borrowingLimit: 0}}\n"
    )
    rc, _, err = gpuctl("create", "-f", str(q))
    assert rc == 0, err
    # The shipped ClusterRoles; those this test adds go afterwards (a later `helm install` of the chart
    # would find them owned by no release).
    roles = [path("ClusterRole", r["metadata"]["name"]) for r in caller_roles()]
    added = [r for r in roles if kube.get_or_none(r) is None]
    apply_caller_roles(kube)
    member = TeamMember.create(kube, ns, roles=SHIPPED_ROLES)
    try:
        yield member
    finally:
        member.delete()
        for r in added:
            kube.delete(r)
        gpuctl("delete", "quota", f"q-{ns}", "--delete-namespace")
        delete_namespaces(kube, [ns], 90)


def write(tmp: Path, text: str) -> str:
    f = tmp / f"{uuid.uuid4().hex[:8]}.yaml"
    f.write_text(text)
    return str(f)


def training(
    name: str, gpus: int, *, max_runtime: str | None = None, runtime: str = "30m", pool: str = "training-pool"
) -> str:
    limit = f", maxRuntime: {max_runtime}" if max_runtime else ""
    return (
        f"kind: training\njob: {{name: {name}, priority: medium{limit}}}\n"
        f"environment: {{image: busybox, env: [{{GPUCTL_FAKE_RUNTIME: {runtime}}}]}}\n"
        f"resources: {{pool: {pool}, gpu: {gpus}, cpu: 2, memory: 8Gi}}\n"
    )


def ok(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 0, f"rc={p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return p.stdout


def workload_of(kube: Cluster, ns: str, owner: str) -> dict | None:
    """The Workload a Job or StatefulSet named `owner` owns (Kueue labels it with the owner's uid)."""
    for wl in kube.list(path("Workload", namespace=ns)):
        if any(r.get("name") == owner for r in wl["metadata"].get("ownerReferences") or []):
            return wl
    return None


def job_pods(kube: Cluster, ns: str, selector: str) -> list[dict]:
    return kube.list(path("Pod", namespace=ns), label_selector=selector)


def wide_row(member: TeamMember, name: str) -> str:
    out = ok(member.gpuctl("get", "jobs", "-o", "wide"))
    rows = [line for line in out.splitlines() if line.split()[:1] == [name]]  # JOB ID: the job's name
    assert rows, out
    return rows[0]


def describe(member: TeamMember, name: str) -> dict:
    return json.loads(ok(member.gpuctl("describe", "job", name, "-o", "json")))


def pool_gpus_reserved(kube: Cluster, ns: str) -> int:
    cq = kube.get(path("ClusterQueue", ns))
    return sum(
        int(r.get("total") or 0)
        for fl in (cq.get("status") or {}).get("flavorsReservation") or []
        for r in fl.get("resources") or []
        if r["name"] == "nvidia.com/gpu"
    )


# ----------------------------------------------------------------------------- stop / resume
def test_stop_and_resume_round_trip_as_a_team_member(team, kube, tmp_path):
    ns = team.namespace
    ok(team.gpuctl("create", "-f", write(tmp_path, training("train-a", 8))))
    nb = write(
        tmp_path,
        "kind: notebook\njob: {name: nb-a, priority: low}\nenvironment: {image: busybox}\n"
        "service: {port: 8888}\nresources: {pool: dev-pool, gpu: 1, cpu: 2, memory: 4Gi}\n",
    )
    ok(team.gpuctl("create", "-f", nb))
    for sel in ("job-name=train-a", "app=nb-a"):
        wait_until(
            lambda sel=sel: any(p["status"].get("phase") == "Running" for p in job_pods(kube, ns, sel)),
            90,
            what=f"{sel} Running",
        )
    wait_until(lambda: pool_gpus_reserved(kube, ns) == 9, 30, what="9 GPUs reserved")
    wl = workload_of(kube, ns, "train-a")
    assert wl is not None

    # Dry runs write nothing: the Workload's spec is not written (its generation stays; Kueue's status
    # writes do not count, they go through the status subresource).
    for mode, suffix in (("client", "(dry run)"), ("server", "(server dry run)")):
        out = ok(team.gpuctl("stop", "train-a", f"--dry-run={mode}"))
        assert out.strip() == f"job.batch/train-a stopped {suffix}"
    after = kube.get(path("Workload", wl["metadata"]["name"], ns))
    assert (after["metadata"]["generation"], after["spec"]) == (wl["metadata"]["generation"], wl["spec"])
    assert (after["spec"].get("active") is not False) and workload_state(after) == WorkloadState.ADMITTED

    # Stop: the one field kueuectl sets, pods gone, quota released, REASON and describe say so.
    assert ok(team.gpuctl("stop", "train-a", "nb-a", "-o", "name")).split() == [
        "job.batch/train-a",
        "statefulset.apps/nb-a",
    ]
    for owner in ("train-a", "nb-a"):
        w = kube.get(path("Workload", workload_of(kube, ns, owner)["metadata"]["name"], ns))
        assert w["spec"]["active"] is False
    wait_until(lambda: not job_pods(kube, ns, "job-name=train-a"), 90, what="train-a's pods gone")
    wait_until(lambda: pool_gpus_reserved(kube, ns) == 0, 60, what="quota released")
    wait_until(
        lambda: all(p["spec"].get("schedulingGates") for p in job_pods(kube, ns, "app=nb-a")),
        90,
        what="the notebook's pod back at Kueue's gate",
    )
    for name in ("train-a", "nb-a"):
        row = wide_row(team, name)
        assert " Inactive " in row and "stopped (spec.active=false)" in row, row
        d = describe(team, name)
        assert d["status"] == "Inactive" and d["why"].startswith("stopped"), d["why"]
        assert d["estimate"] is None  # in no queue: no "when"
    assert "unchanged (already stopped)" in ok(team.gpuctl("stop", "train-a"))

    # An inference job is a Deployment: one Workload per pod, replaced at once; refused, nothing changed.
    ok(
        team.gpuctl(
            "create",
            "-f",
            write(
                tmp_path,
                "kind: inference\njob: {name: inf-a}\nenvironment: {image: busybox}\n"
                "service: {port: 8000, replicas: 1}\n"
                "resources: {pool: inference-pool, gpu: 1, cpu: 1, memory: 1Gi}\n",
            ),
        )
    )
    p = team.gpuctl("stop", "inf-a")
    assert p.returncode == 1 and "is a Deployment" in p.stderr and "scale" in p.stderr, p.stderr

    # Resume: Kueue queues them again and admits them.
    assert ok(team.gpuctl("resume", "train-a", "nb-a")).split("\n")[:2] == [
        "job.batch/train-a resumed",
        "statefulset.apps/nb-a resumed",
    ]
    for sel in ("job-name=train-a", "app=nb-a"):
        wait_until(
            lambda sel=sel: any(p["status"].get("phase") == "Running" for p in job_pods(kube, ns, sel)),
            90,
            what=f"{sel} Running again",
        )
    w = kube.get(path("Workload", wl["metadata"]["name"], ns))
    assert w["spec"]["active"] is True and workload_state(w) == WorkloadState.ADMITTED
    assert "stopped" not in wide_row(team, "train-a")


@pytest.mark.skipif(not KUEUECTL.exists(), reason=f"{KUEUECTL} not built: run hack/cluster/build.sh")
def test_kueuectl_and_gpuctl_read_the_same(team, kube, tmp_path):
    ns = team.namespace

    def kueuectl(*args: str, kubeconfig: str = team.kubeconfig) -> str:
        # The member's own kubeconfig (exec plugin, context namespace = the team's): its roles suffice
        # for stop and resume.
        p = subprocess.run([str(KUEUECTL), "--kubeconfig", kubeconfig, *args], capture_output=True, text=True)
        return ok(p)

    ok(team.gpuctl("create", "-f", write(tmp_path, training("kq", 4))))
    wait_until(lambda: workload_of(kube, ns, "kq") is not None, 30, what="kq's Workload")
    name = workload_of(kube, ns, "kq")["metadata"]["name"]
    wait_until(lambda: describe(team, "kq")["status"] == "Running", 90, what="kq Running")

    # kueuectl stops: gpuctl's status, REASON and describe say stopped.
    assert kueuectl("stop", "workload", name).strip() == f"workload.kueue.x-k8s.io/{name} stopped"
    wait_until(lambda: describe(team, "kq")["status"] == "Inactive", 90, what="kq Inactive")
    assert "stopped (spec.active=false)" in wide_row(team, "kq")
    assert describe(team, "kq")["why"].startswith("stopped")
    # gpuctl resumes what kueuectl stopped ...
    assert ok(team.gpuctl("resume", "kq")).strip() == "job.batch/kq resumed"
    wait_until(lambda: describe(team, "kq")["status"] == "Running", 90, what="kq Running again")
    # ... and kueuectl sees gpuctl's stop and resumes it.
    ok(team.gpuctl("stop", "kq"))
    wait_until(lambda: describe(team, "kq")["status"] == "Inactive", 90, what="kq Inactive again")
    # `kueuectl list workload` asks the visibility API of the ClusterQueue of every Pending Workload
    # (cmd/kueuectl/app/list/list_workload.go, pendingWorkloads): clusterqueues/pendingworkloads is
    # cluster-scoped and would show every team's waiting jobs, so gpuctl-user does not grant it
    # (docs/cli.md) and the member's list fails with Forbidden while its job waits. A cluster admin lists.
    denied = subprocess.run(
        [str(KUEUECTL), "--kubeconfig", team.kubeconfig, "list", "workload", "-o", "json"],
        capture_output=True,
        text=True,
    )
    assert denied.returncode == 1 and "clusterqueues/pendingworkloads" in denied.stderr, denied.stderr
    listed = kueuectl("list", "workload", "-n", ns, "-o", "json", kubeconfig=os.environ["KUBECONFIG"])
    (item,) = [w for w in json.loads(listed)["items"] if w["metadata"]["name"] == name]
    assert item["spec"]["active"] is False
    assert kueuectl("resume", "workload", name).strip() == f"workload.kueue.x-k8s.io/{name} resumed"
    wait_until(lambda: describe(team, "kq")["status"] == "Running", 90, what="kq Running after kueuectl")


# ----------------------------------------------------------------------------- when will it run
def test_an_estimate_holds(team, kube, tmp_path):
    """Fill training-pool (2 nodes x 8 GPUs) with jobs whose maxRuntime is short and that would run for
    30 minutes: Kueue stops each at its deadline. The next two 8-GPU jobs are admitted no later than
    their estimates' "at the latest": next-1 when fill-1 ends, next-2 when next-1 ends (before fill-2
    does), so next-2's estimate goes through a queued job.

    fill-1's 60 s must outlast the setup up to both estimates (55-62 s on a loaded 2-core machine with
    50 s, which failed there); next-1's 30 s ends before fill-2's 120 s. (next-1 and fill-2 had 60 and
    150 s: next-2 then waited for next-1 until about 120 s after the start, now about 90 s.)"""
    ns = team.namespace
    # Different deadlines: fill-1 frees gpu-node-1 first.
    t0 = time.monotonic()
    ok(team.gpuctl("create", "-f", write(tmp_path, training("fill-1", 8, max_runtime="60s"))))
    time.sleep(2)
    ok(team.gpuctl("create", "-f", write(tmp_path, training("fill-2", 8, max_runtime="120s"))))
    for name in ("fill-1", "fill-2"):
        wait_until(lambda name=name: describe(team, name)["status"] == "Running", 90, what=f"{name} Running")
    assert job_pods(kube, ns, "job-name=fill-1")[0]["metadata"]["labels"][MAX_EXEC_TIME_LABEL] == "60"

    # A server dry run says when it would start, and writes nothing.
    before = {j["metadata"]["name"] for j in kube.list(path("Job", namespace=ns))}
    next_1 = write(tmp_path, training("next-1", 8, max_runtime="30s"))
    out = ok(team.gpuctl("create", "-f", next_1, "--dry-run=server"))
    assert "would wait" in out and "starts by" in out and "at the latest (fill-1 ends by" in out, out
    assert {j["metadata"]["name"] for j in kube.list(path("Job", namespace=ns))} == before

    ok(team.gpuctl("create", "-f", next_1))
    time.sleep(1.1)  # creation timestamps have whole seconds: next-1 is older
    ok(team.gpuctl("create", "-f", write(tmp_path, training("next-2", 8, max_runtime="30s"))))
    estimates = {}
    for name in ("next-1", "next-2"):
        d = wait_until(
            lambda name=name: (d := describe(team, name))["status"] == "Queued" and d["estimate"] and d,
            30,
            what=f"{name} Queued with an estimate",
        )
        e = d["estimate"]
        assert e["bounded"], e
        estimates[name] = parse_time(e["startsBy"])
        print(f"estimate {name}: {e['summary']} (read {time.monotonic() - t0:.0f} s after fill-1's create)")
    assert "fill-1 ends by" in describe(team, "next-1")["estimate"]["basis"]

    for name in ("next-1", "next-2"):
        wl = wait_until(
            lambda name=name: (
                (w := workload_of(kube, ns, name)) and condition(w, "Admitted").get("status") == "True" and w
            ),
            300,
            5,
            what=f"{name} admitted",
        )
        started = parse_time(condition(wl, "Admitted")["lastTransitionTime"])
        error = started - estimates[name]
        print(f"ESTIMATE {name}: actual start - estimate = {error:+.0f} s")
        # The API server's timestamps have whole seconds: one second of rounding.
        assert started <= estimates[name] + 1, (name, started, estimates[name])
    # Kueue stopped the fillers at their maxRuntime: they read as stopped, not as queued work.
    assert describe(team, "fill-1")["why"].startswith("stopped: it ran its maxRuntime of 1m")


# ----------------------------------------------------------------------------- the REST API
def test_api_stop_and_resume_for_the_team_and_403_for_another(env):  # noqa: F811
    a, b = env.client("a"), env.client("b")
    job = f"api-stop-{uuid.uuid4().hex[:5]}"
    text = training(job, 1).replace(f"name: {job},", f"name: {job}, namespace: {env.a},")
    r = a.post("/api/v1/jobs", json={"yamlContent": text})
    assert r.status_code == 201, r.text
    wait_until(lambda: workload_of(env.kube, env.a, job) is not None, 30, what="its Workload")
    wl = workload_of(env.kube, env.a, job)
    wl_path = path("Workload", wl["metadata"]["name"], env.a)

    # Another team: 403, and nothing changed.
    r = b.post(f"/api/v1/jobs/{env.a}/{job}/stop")
    assert r.status_code == 403, r.text
    # Dry runs: answered, nothing stored.
    for mode in ("client", "server"):
        r = a.post(f"/api/v1/jobs/{env.a}/{job}/stop", params={"dryRun": mode})
        assert r.status_code == 200 and r.json()["dryRun"] is True, r.text
    after = env.kube.get(wl_path)
    assert (after["metadata"]["generation"], after["spec"]) == (wl["metadata"]["generation"], wl["spec"])

    r = a.post(f"/api/v1/jobs/{env.a}/{job}/stop")
    assert r.status_code == 200, r.text
    assert (r.json()["active"], r.json()["changed"], r.json()["message"]) == (
        False,
        True,
        f"job.batch/{job} stopped",
    )
    assert env.kube.get(wl_path)["spec"]["active"] is False
    d = wait_until(
        lambda: (
            (d := a.get(f"/api/v1/jobs/{job}", params={"namespace": env.a}).json())["status"] == "Inactive"
            and d
        ),
        60,
        what="Inactive through the API",
    )
    assert d["why"].startswith("stopped") and d["estimate"] is None
    # The other route shape (as DELETE /api/v1/jobs/{jobId}?namespace=) does the same.
    r = a.post(f"/api/v1/jobs/{job}/resume", params={"namespace": env.a})
    assert r.status_code == 200 and r.json()["active"] is True, r.text
    assert env.kube.get(wl_path)["spec"]["active"] is True
    assert b.post(f"/api/v1/jobs/{job}/resume", params={"namespace": env.a}).status_code == 403
    assert a.delete(f"/api/v1/jobs/{job}", params={"namespace": env.a}).status_code == 200


# ----------------------------------------------------------------------------- workload-edit
@pytest.fixture
def workload_edit(kube, kubectl, team):
    """The shipped workload-edit policy, under a test name, bound as shipped (team namespaces) and
    narrowed to the team's namespace (as tests/integration/admission_stack.py binds the others)."""
    vap, binding = copy.deepcopy(workload_edit_policy.policies())
    sfx = uuid.uuid4().hex[:6]
    vap["metadata"]["name"] = binding["metadata"]["name"] = binding["spec"]["policyName"] = f"{NAME}-t{sfx}"
    binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"].append(
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [team.namespace]}
    )
    objs = [vap, binding]
    kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    try:
        yield vap
    finally:
        kubectl(
            "delete",
            "-f",
            "-",
            "--ignore-not-found",
            input=json.dumps({"kind": "List", "apiVersion": "v1", "items": objs}),
        )


def test_a_team_member_may_change_only_spec_active(workload_edit, team, kube, kubectl_bin, tmp_path):
    ns = team.namespace
    # The policy names every field of the served Workload CRD's spec but `active`.
    crd = kube.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/workloads.kueue.x-k8s.io")
    (v1beta2,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
    served = set(v1beta2["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])
    assert served - {"active"} == set(workload_edit_policy.FROZEN_SPEC)

    # 8 GPUs in dev-pool (one 4-GPU node): its Workload waits for good, so every field is mutable as far
    # as Kueue's own CRD rules go (they freeze some while quota is reserved) and the policy alone decides.
    ok(team.gpuctl("create", "-f", write(tmp_path, training("guarded", 8, pool="dev-pool"))))
    wait_until(lambda: workload_of(kube, ns, "guarded") is not None, 30, what="its Workload")
    name = workload_of(kube, ns, "guarded")["metadata"]["name"]

    def patch(body: dict) -> subprocess.CompletedProcess:
        return team.kubectl(kubectl_bin, "patch", "workload", name, "--type=merge", "-p", json.dumps(body))

    # The policy is in effect once a harmless forbidden change (a new annotation each try) is refused:
    # the API server loads policies asynchronously.
    def refused() -> subprocess.CompletedProcess | None:
        p = patch({"metadata": {"annotations": {"probe": uuid.uuid4().hex}}})
        return p if p.returncode != 0 else None

    p = wait_until(refused, 30, what="workload-edit in effect")
    assert "breaks [workload-edit]: only spec.active may change" in p.stderr
    assert "this update changes metadata.annotations" in p.stderr
    for body in (
        {"spec": {"priority": 2_000_000_000}},
        {"metadata": {"labels": {"runwhere.ai/pool": "training-pool"}}},
        {"spec": {"maximumExecutionTimeSeconds": 99999}},
        {"spec": {"queueName": "other"}},
    ):
        p = patch(body)
        assert p.returncode != 0 and "breaks [workload-edit]" in p.stderr, (body, p.stdout, p.stderr)
    w = kube.get(path("Workload", name, ns))
    assert w["spec"]["priority"] == 500000 and "maximumExecutionTimeSeconds" not in w["spec"]
    # spec.active alone passes: gpuctl's stop and resume, and a plain merge patch as kueuectl sends.
    ok(team.gpuctl("stop", "guarded"))
    assert kube.get(path("Workload", name, ns))["spec"]["active"] is False
    assert patch({"spec": {"active": True}}).returncode == 0
    assert kube.get(path("Workload", name, ns))["spec"]["active"] is True
