"""A dry run changes nothing: every mutating verb, CLI and REST API, with each dry-run form.

The proof is the API server's own state: the uid and resourceVersion of every object gpuctl can
write (Jobs, Deployments, StatefulSets, Services, Nodes, the Kueue objects, Namespaces) are the same
before and after. Also: `--dry-run` alone is client, client needs no cluster for a create of jobs,
and deleting the last pool works (gpuctl's Cohort goes, the next pool brings it back).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from gpuctl.cli.main import main
from gpuctl.cluster import Cluster, path
from gpuctl.constants import COHORT_NAME, GPU_UNITS, QUOTA_GPU, UNLIMITED, Labels
from tests.integration.conftest import delete_namespaces, reset_gpuctl_state, wait_until

# The API's `env` (ServiceAccounts with the shipped roles, the API as gpuctl-api) and the CLI runner
# `gpuctl`: fixtures of the other suites, asked for by name (request.getfixturevalue).
from tests.integration.test_api_cluster import _training, env  # noqa: F401
from tests.integration.test_cli_cluster import gpuctl  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
KINDS = (
    "Job",
    "Deployment",
    "StatefulSet",
    "Service",
    "Node",
    "ResourceFlavor",
    "ClusterQueue",
    "LocalQueue",
    "Cohort",
    "Namespace",
    "WorkloadPriorityClass",
)
FORMS = {"--dry-run": " (dry run)", "--dry-run=client": " (dry run)", "--dry-run=server": " (server dry run)"}

Snapshot = dict[tuple[str, str | None, str], tuple[str, str, bool]]  # uid, resourceVersion, being deleted


def snapshot(kube: Cluster) -> Snapshot:
    out: Snapshot = {}
    for kind in KINDS:
        for o in kube.list(path(kind)):
            m = o["metadata"]
            # Objects already being deleted (a namespace an earlier module left terminating) may vanish
            # during a dry run; diff() does not count that as the dry run's change.
            out[(kind, m.get("namespace"), m["name"])] = (
                m["uid"],
                m["resourceVersion"],
                "deletionTimestamp" in m,
            )
    return out


def settled(kube: Cluster, timeout: float = 60) -> Snapshot:
    """A snapshot once controllers are done (two in a row, a second apart, are equal)."""
    last: dict = {}

    def same() -> Snapshot | None:
        nonlocal last
        now = snapshot(kube)
        if now == last:
            return now
        last = now
        time.sleep(1)
        return None

    return wait_until(same, timeout, 0, what="a quiet cluster")  # type: ignore[return-value]


def diff(a: Snapshot, b: Snapshot) -> list:
    """What changed from `a` to `b`, but for objects that were being deleted in `a` and are gone (or still
    going) in `b`: their deletion began before."""

    def going(k) -> bool:
        return a[k][2] and (k not in b or b[k][2])

    return sorted(
        {k for k in a.keys() | b.keys() if a.get(k) != b.get(k) and not (k in a and going(k))}, key=str
    )


def _pool(name: str, nodes: dict[str, str]) -> str:
    lines = [f"kind: pool\npool: {{name: {name}}}\nnodes:"]
    lines += [f"  {n}: {{gpu-type: {t}}}" for n, t in nodes.items()]
    return "\n".join(lines) + "\n"


def _quota(name: str, teams: dict[str, int]) -> str:
    body = "".join(f"  {ns}: {{cpu: 64, memory: 256Gi, gpu: {g}}}\n" for ns, g in teams.items())
    return f"kind: quota\nquota: {{name: {name}}}\nnamespace:\n{body}"


def _compute(name: str, ns: str, image: str = "nginx:1") -> str:
    return (
        f"kind: compute\njob: {{name: {name}, namespace: {ns}}}\nenvironment: {{image: {image}}}\n"
        "service: {replicas: 1, port: 80}\nresources: {pool: compute-pool, cpu: 1, memory: 256Mi}\n"
    )


@pytest.fixture(scope="module")
def world(cluster: str, kube: Cluster, tmp_path_factory: pytest.TempPathFactory):
    """Pools on some nodes (gpu-node-3 and -4 free), a team with a quota, a running training Job and a
    compute Deployment + Service: something for every verb to (not) change."""
    tmp = tmp_path_factory.mktemp("dry")
    s = uuid.uuid4().hex[:6]
    team, other = f"dry-a-{s}", f"dry-b-{s}"
    files = {
        "pools": _pool("training-pool", {"gpu-node-1": "A100", "gpu-node-2": "A100"})
        + "---\n"
        + _pool("dev-pool", {"gpu-node-5": "RTX4090"})
        + "---\n"
        + _pool("compute-pool", {"cpu-node-1": '""', "cpu-node-2": '""'}),
        "quota": _quota(f"q-{s}", {team: 8}),
        "other-quota": _quota(f"q2-{s}", {other: 2}),
        "train": _training("train", team),
        "web": _compute("web", team),
    }
    paths = {k: tmp / f"{k}.yaml" for k in files}
    for k, text in files.items():
        paths[k].write_text(text)
    reset_gpuctl_state(kube)

    def run(*args: str) -> None:
        assert main([*args, "--kubeconfig", cluster]) == 0, args

    try:
        for k in ("pools", "quota", "other-quota", "train", "web"):
            run("create", "-f", str(paths[k]))
        wait_until(
            lambda: (kube.get(path("Job", "train", team)).get("status") or {}).get("active"),
            60,
            what="the training job runs",
        )
        wait_until(
            lambda: (kube.get(path("Deployment", "web", team)).get("status") or {}).get("readyReplicas"),
            60,
            what="the compute job is ready",
        )
        # Documents that would change things: a new job, changed jobs, a new pool, changed pool and quota.
        more = {
            "new-job": _training("newjob", team),
            "train-changed": _training("train", team, runtime="11m"),
            "web-changed": _compute("web", team, image="nginx:2"),
            "new-pool": _pool("inference-pool", {"gpu-node-3": "A10", "gpu-node-4": "A10"}),
            "dev-pool-changed": _pool("dev-pool", {"gpu-node-5": "RTX4090", "gpu-node-3": "A10"}),
            "new-quota": _quota(f"q3-{s}", {f"dry-c-{s}": 2}),
            "quota-changed": _quota(f"q-{s}", {team: 6}),
        }
        for k, text in more.items():
            paths[k] = tmp / f"{k}.yaml"
            paths[k].write_text(text)
        yield {"team": team, "other": other, "quota": f"q-{s}", "other_quota": f"q2-{s}", "files": paths}
    finally:
        for ns in (team, other):
            main(["delete", "quota", f"q-{s}" if ns == team else f"q2-{s}", "--delete-namespace"])
        # A quota a test case already deleted leaves its namespace (and its jobs) behind: remove the
        # namespaces this fixture made, so later tests see no stray Deployments.
        delete_namespaces(kube, [team, other, f"dry-c-{s}"])
        reset_gpuctl_state(kube)


def _cli_cases(w: dict) -> list[tuple[list[str], list[str]]]:
    """(arguments, lines the dry run must print without its suffix)."""
    f = {k: str(v) for k, v in w["files"].items()}
    t = w["team"]
    return [
        (["create", "-f", f["new-job"]], ["job.batch/newjob created"]),
        (["apply", "-f", f["web-changed"]], ["deployment.apps/web configured", "service/svc-web unchanged"]),
        (["apply", "-f", f["train-changed"], "--force"], ["job.batch/train replaced"]),
        (["delete", "-f", f["train"]], ["job.batch/train deleted"]),
        (
            ["delete", "job", "web", "-n", t, "--force"],
            ["deployment.apps/web deleted", "service/svc-web deleted"],
        ),
        (["delete", "pool", "dev-pool"], ["pool/dev-pool deleted", "node/gpu-node-5 unlabeled"]),
        (["delete", "quota", w["quota"]], [f"quota/{w['quota']} deleted for namespace {t}"]),
        (
            ["delete", "quota", w["other_quota"], "--delete-namespace"],
            [
                f"quota/{w['other_quota']} deleted for namespace {w['other']}",
                f"namespace/{w['other']} deleted",
            ],
        ),
        (["delete", "ns", w["other"]], [f"namespace/{w['other']} deleted"]),
        (["label", "node", "gpu-node-1", "team=x"], ["node/gpu-node-1 labeled runwhere.ai/team=x"]),
        (
            ["label", "node", "gpu-node-5", "pool=training-pool", "--overwrite"],
            ["node/gpu-node-5 labeled runwhere.ai/pool=training-pool"],
        ),
        (["label", "node", "gpu-node-5", "pool-"], ["node/gpu-node-5 unlabeled runwhere.ai/pool"]),
        (
            ["create", "-f", f["new-pool"]],
            [
                "pool/inference-pool created",
                "node/gpu-node-3 labeled runwhere.ai/pool=inference-pool",
                "node/gpu-node-4 labeled runwhere.ai/pool=inference-pool",
            ],
        ),
        (["apply", "-f", f["dev-pool-changed"]], ["pool/dev-pool configured"]),
        (["delete", "-f", f["new-pool"]], []),  # not there: an error, and still no change
        (["create", "-f", f["new-quota"]], ["quota/q3-", "created for namespace dry-c-"]),
        (["apply", "-f", f["quota-changed"]], [f"quota/{w['quota']} configured for namespace {t}"]),
        (["delete", "-f", f["quota"]], [f"quota/{w['quota']} deleted for namespace {t}"]),
    ]


@pytest.mark.parametrize("form", list(FORMS))
def test_no_cli_dry_run_changes_anything(world, request, kube, form):
    cli = request.getfixturevalue("gpuctl")
    failures = []
    for args, expected in _cli_cases(world):
        before = settled(kube)
        rc, out, err = cli(*args, form)
        after = snapshot(kube)
        if diff(before, after):
            failures.append(f"{' '.join(args)} {form} CHANGED {diff(before, after)}")
        if not expected:
            if rc != 1 or "not found" not in err:
                failures.append(f"{' '.join(args)} {form}: expected a not-found error, got {rc} {out} {err}")
            continue
        if rc != 0:
            failures.append(f"{' '.join(args)} {form}: exit {rc}: {err}")
            continue
        lines = out.splitlines()
        if not lines or not all(line.endswith(FORMS[form]) for line in lines):
            failures.append(f"{' '.join(args)} {form}: lines without {FORMS[form]!r}: {out}")
        for e in expected:
            if not any(e in line for line in lines):
                failures.append(f"{' '.join(args)} {form}: {e!r} not in {out!r}")
    assert not failures, "\n".join(failures)


def test_dry_run_with_output_prints_objects_and_changes_nothing(world, request, kube):
    cli = request.getfixturevalue("gpuctl")
    f = world["files"]
    before = settled(kube)
    rc, out, err = cli("create", "-f", str(f["new-job"]), "-f", str(f["new-pool"]), "--dry-run", "-o", "yaml")
    assert rc == 0, err
    kinds = [o["kind"] for o in yaml.safe_load_all(out)]
    assert "Job" in kinds and "ResourceFlavor" in kinds and "Node" in kinds
    rc, out, err = cli("apply", "-f", str(f["web-changed"]), "--dry-run=server", "-o", "json")
    assert rc == 0, err
    # The server's answer, not gpuctl's summary or what it sent: the stored Deployment with the change
    # (its uid and generation are the server's), the unchanged Service as stored; no managedFields.
    doc = json.loads(out)
    assert doc["kind"] == "List", doc
    deploy, svc = doc["items"]
    stored = kube.get(path("Deployment", "web", world["team"]))
    assert (deploy["kind"], deploy["metadata"]["uid"]) == ("Deployment", stored["metadata"]["uid"])
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:2"
    # a default only the API server fills in
    assert (
        deploy["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"]
        == "/dev/termination-log"
    )
    assert svc["kind"] == "Service" and svc["spec"]["clusterIP"]
    assert not any("managedFields" in o["metadata"] for o in doc["items"])
    # A server dry run of a create: the server's new object (a uid the server made up; nothing stored).
    rc, out, err = cli("create", "-f", str(f["new-job"]), "--dry-run=server", "-o", "yaml")
    assert rc == 0, err
    (job,) = list(yaml.safe_load_all(out))
    assert job["kind"] == "Job" and job["metadata"]["uid"]
    assert (
        job["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] == "/dev/termination-log"
    )
    assert diff(before, snapshot(kube)) == []


def test_a_real_run_is_seen_by_the_snapshot(world, request, kube):
    cli = request.getfixturevalue("gpuctl")
    """The check above can see a change: a real label changes the Node's resourceVersion."""
    before = settled(kube)
    assert cli("label", "node", "gpu-node-1", "dry-probe=1")[0] == 0
    try:
        assert diff(before, snapshot(kube)) == [("Node", None, "gpu-node-1")]
    finally:
        assert cli("label", "node", "gpu-node-1", "dry-probe-")[0] == 0


def test_apply_of_an_unchanged_quota_says_unchanged_and_a_changed_one_configured(world, request, kube):
    """kubectl's words: an apply that changes nothing is `unchanged`, for real and with --dry-run=server
    (whose answer is the object as it would be); a changed guarantee is `configured`."""
    cli = request.getfixturevalue("gpuctl")
    f, t, q = world["files"], world["team"], world["quota"]
    rc, out, err = cli("apply", "-f", str(f["quota"]))  # may re-spell a quantity Kueue stored as 64k
    assert rc == 0 and f"quota/{q} unchanged for namespace {t}" in out, out + err
    before = settled(kube)
    rc, out, err = cli("apply", "-f", str(f["quota"]), "--dry-run=server")
    assert rc == 0 and f"quota/{q} unchanged for namespace {t} (server dry run)" in out, out + err
    rc, out, err = cli("apply", "-f", str(f["quota-changed"]), "--dry-run=server")
    assert rc == 0 and f"quota/{q} configured for namespace {t}" in out, out + err
    assert diff(before, snapshot(kube)) == []


def test_client_dry_run_of_jobs_needs_no_cluster(tmp_path):
    envv = {**os.environ, "KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)}
    envv.pop("KUBERNETES_SERVICE_HOST", None)
    job = str(ROOT / "examples" / "training.yaml")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "gpuctl.main", *args], capture_output=True, text=True, env=envv, timeout=60
        )

    for form in ("--dry-run", "--dry-run=client"):
        p = run("create", "-f", job, form)
        assert p.returncode == 0, p.stderr
        assert p.stdout == "job.batch/llama-finetune created (dry run)\n"
        p = run("create", "-f", job, form, "-o", "yaml")
        assert p.returncode == 0, p.stderr
        (obj,) = list(yaml.safe_load_all(p.stdout))
        assert obj["kind"] == "Job" and obj["metadata"]["name"] == "llama-finetune"
    # What needs the cluster says so, and writes nothing anywhere.
    p = run("apply", "-f", job, "--dry-run=client")
    assert p.returncode == 1 and "no cluster configured" in p.stderr


# ----------------------------------------------------------------------------- last pool
def test_deleting_the_last_pool_works_and_a_new_pool_brings_the_cohort_back(
    clean_cluster, request, kube, tmp_path
):
    cli = request.getfixturevalue("gpuctl")
    f = tmp_path / "pool.yaml"
    f.write_text(_pool("only-pool", {"gpu-node-5": "RTX4090"}))
    q = tmp_path / "quota.yaml"
    ns = f"last-{uuid.uuid4().hex[:6]}"
    q.write_text(_quota(f"q-{ns}", {ns: 2}))
    assert cli("create", "-f", str(f))[0] == 0
    assert cli("create", "-f", str(q))[0] == 0
    try:
        assert kube.get_or_none(path("Cohort", COHORT_NAME)) is not None
        for form in FORMS:
            rc, out, err = cli("delete", "pool", "only-pool", form)
            assert rc == 0 and out.endswith(f"{FORMS[form]}\n"), (form, out, err)
            assert kube.get_or_none(path("ResourceFlavor", "only-pool")) is not None
        rc, out, err = cli("delete", "pool", "only-pool")
        assert rc == 0, err
        assert "pool/only-pool deleted" in out
        assert kube.get_or_none(path("ResourceFlavor", "only-pool")) is None
        assert kube.get_or_none(path("Cohort", COHORT_NAME)) is None
        assert Labels.POOL not in kube.get(path("Node", "gpu-node-5"))["metadata"]["labels"]
        # The team's queue no longer names the pool, and the next pool brings the Cohort back.
        cq = kube.get(path("ClusterQueue", ns))
        assert "only-pool" not in str(cq["spec"]["resourceGroups"])
        assert cli("create", "-f", str(f))[0] == 0
        co = kube.get(path("Cohort", COHORT_NAME))
        (flavor,) = co["spec"]["resourceGroups"][0]["flavors"]
        assert flavor["name"] == "gpuctl-budget"
        # 4 RTX4090 less every team's quota (this test's 2, and any other test's still around)
        quotas = sum(
            int(r["nominalQuota"]) // GPU_UNITS
            for q in kube.list(path("ClusterQueue"), label_selector=f"{Labels.MANAGED_BY}=gpuctl")
            for g in q["spec"]["resourceGroups"]
            for fl in g["flavors"]
            for r in fl["resources"]
            if r["name"] == QUOTA_GPU and r["nominalQuota"] != UNLIMITED[QUOTA_GPU]
        )
        assert {"name": QUOTA_GPU, "nominalQuota": str(max(4 - quotas, 0) * GPU_UNITS)} in flavor["resources"]
        assert "only-pool" in str(kube.get(path("ClusterQueue", ns))["spec"]["resourceGroups"])
        # And once more through delete -f (the document path).
        rc, _, err = cli("delete", "-f", str(f))
        assert rc == 0, err
        assert kube.get_or_none(path("Cohort", COHORT_NAME)) is None
    finally:
        cli("delete", "quota", f"q-{ns}", "--delete-namespace")


# ----------------------------------------------------------------------------- REST API
API_FORMS = [True, "client", "server"]


def _api_cases(e, w: dict | None = None) -> list[tuple[str, str, dict | None, dict | None]]:
    """(method, path, json body, query) of every write route; `dryRun` is added by the test."""
    a = e.a
    job = _training("api-dry", a)
    return [
        ("POST", "/api/v1/jobs", {"yamlContent": job}, None),
        ("POST", "/api/v1/jobs/batch", {"yamlContents": [job]}, None),
        ("PUT", "/api/v1/jobs/api-dry", {"yamlContent": job}, None),
        ("POST", "/api/v1/pools", {"name": "api-dry-pool", "nodes": ["gpu-node-4"]}, None),
        ("PUT", "/api/v1/pools/dev-pool", {"nodes": ["gpu-node-5"], "description": "changed"}, None),
        ("DELETE", "/api/v1/pools/dev-pool", None, {}),
        ("POST", "/api/v1/quotas", {"yamlContent": _quota("api-dry-q", {"api-dry-ns": 1})}, None),
        ("PUT", "/api/v1/quotas", {"yamlContent": _quota(e.quota, {a: 4})}, None),
        ("DELETE", f"/api/v1/quotas/{a}", None, {"deleteNamespace": "true"}),
        ("DELETE", f"/api/v1/namespaces/{e.b}", None, {}),
        ("POST", "/api/v1/nodes/gpu-node-1/labels", {"key": "team", "value": "a"}, None),
        ("PUT", "/api/v1/nodes/gpu-node-1/labels/team", {"value": "b"}, None),
        ("POST", "/api/v1/nodes/labels/batch", {"nodeNames": ["gpu-node-1"], "key": "x", "value": "y"}, None),
        ("POST", "/api/v1/nodes/gpu-node-1/pools", {"pool": "dev-pool", "overwrite": True}, None),
        ("DELETE", "/api/v1/nodes/gpu-node-5/pools/dev-pool", None, {}),
        ("DELETE", f"/api/v1/nodes/gpu-node-5/labels/{Labels.POOL}", None, {}),
    ]


def test_no_api_dry_run_changes_anything(request, kube):
    e = request.getfixturevalue("env")
    admin = e.client("admin")
    # A running job in team a, for the job routes that need one.
    r = admin.post("/api/v1/jobs", json={"yamlContent": _training("api-run", e.a)})
    assert r.status_code == 201, r.text
    wait_until(lambda: kube.get(path("Job", "api-run", e.a)).get("status", {}).get("active"), 60)
    # A free node for a new pool; dryRun none really writes (and the snapshot sees it).
    before = settled(kube)
    r = admin.delete("/api/v1/nodes/gpu-node-4/pools/inference-pool", params={"dryRun": "none"})
    assert r.status_code == 200, r.text
    assert ("Node", None, "gpu-node-4") in diff(before, snapshot(kube))
    cases = [
        *_api_cases(e),
        ("DELETE", "/api/v1/jobs/api-run", None, {"namespace": e.a, "force": "true"}),
    ]
    failures = []
    try:
        for dry in API_FORMS:
            for method, p, body, query in cases:
                before = settled(kube)
                if body is not None:
                    r = admin.request(method, p, json={**body, "dryRun": dry})
                else:
                    r = admin.request(method, p, params={**(query or {}), "dryRun": str(dry).lower()})
                changed = diff(before, snapshot(kube))
                if changed:
                    failures.append(f"{method} {p} dryRun={dry} CHANGED {changed}")
                if r.status_code not in (200, 201):
                    failures.append(f"{method} {p} dryRun={dry}: {r.status_code} {r.text}")
                elif dry == "server" and "batch" not in p and "(server dry run)" not in r.text:
                    failures.append(f"{method} {p} dryRun={dry}: no '(server dry run)' in {r.text}")
    finally:
        admin.delete("/api/v1/jobs/api-run", params={"namespace": e.a, "force": "true"})
        admin.post("/api/v1/nodes/gpu-node-4/pools", json={"pool": "inference-pool", "dryRun": False})
    assert not failures, "\n".join(failures)


def test_api_dry_run_values(request):
    e = request.getfixturevalue("env")
    admin = e.client("admin")
    job = {"yamlContent": _training("api-dry", e.a)}
    for dry in (True, "client"):
        r = admin.post("/api/v1/jobs", json={**job, "dryRun": dry})
        assert r.status_code == 200 and r.json()["dryRun"] == "client", r.text
        assert [o["kind"] for o in r.json()["objects"]] == ["Job"]
    r = admin.post("/api/v1/jobs", json={**job, "dryRun": "server"})
    assert r.status_code == 201 and r.json()["dryRun"] is True, r.text
    # A server dry run also says when the job would run (gpuctl.domain.explain).
    assert r.json()["message"] == (
        "job.batch/api-dry created (server dry run); "
        "job.batch/api-dry: would start now on pool training-pool (server dry run)"
    )
    assert admin.post("/api/v1/jobs", json={**job, "dryRun": "maybe"}).status_code in (400, 422)
    r = admin.delete("/api/v1/pools/dev-pool", params={"dryRun": "client"})
    assert r.status_code == 200 and r.json()["message"].startswith("pool/dev-pool deleted (dry run)"), r.text
