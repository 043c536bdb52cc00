"""Issue 24's audit trail on the real cluster, as team members with only the shipped roles: `gpuctl serve`
(as its ServiceAccount with manifests/serve/rbac.yaml) records a job's submission, admission and
preemption by a higher-priority job of the same team, and a stop and a deletion, in the team's ConfigMap
gpuctl-history; `gpuctl history` lists them with actor and reason; another team's member cannot read
them; they survive the Events being deleted and serve being restarted, without duplicates.

About 1-2 minutes: one `gpuctl serve` started twice, fake 8-GPU jobs on training-pool (two 8-GPU nodes).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuctl.cluster import Cluster, path
from gpuctl.constants import AUDIT_SUBMITTED_BY_ANNOTATION, HISTORY_CONFIGMAP
from gpuctl.domain.workload import HOLDING_QUOTA, workload_state
from gpuctl.service import history
from tests.integration.admission_stack import submitted_by_policy
from tests.integration.conftest import delete_namespaces, wait_until
from tests.integration.serve_process import (
    ROOT,
    ServeProcess,
    free_port,
    service_account_kubeconfig,
    start_serve,
)
from tests.integration.tenancy import SHIPPED_ROLES, TeamMember, apply_caller_roles
from tests.integration.test_cli_cluster import gpuctl, pools  # noqa: F401 - fixtures
from tests.integration.test_defrag_anypool import _workload


def _job_yaml(name: str, ns: str, priority: str) -> str:
    return (
        f"kind: training\njob: {{name: {name}, namespace: {ns}, priority: {priority}}}\n"
        "environment: {image: busybox, env: [{GPUCTL_FAKE_RUNTIME: 30m}]}\n"
        "resources: {pool: training-pool, gpu: 8, cpu: 2, memory: 8Gi}\n"
    )


@pytest.fixture
def teams(pools, kube, kubectl_bin, cluster, gpuctl, tmp_path) -> Iterator[tuple[TeamMember, TeamMember]]:  # noqa: F811
    a, b = f"hist-{uuid.uuid4().hex[:6]}", f"histb-{uuid.uuid4().hex[:6]}"
    q = tmp_path / "quota.yaml"
    q.write_text(f"kind: quota\nquota: {{name: q-{a}}}\nnamespace:\n  {a}: {{gpu: 24}}\n  {b}: {{gpu: 1}}\n")
    rc, _, err = gpuctl("create", "-f", str(q))
    assert rc == 0, err
    apply_caller_roles(kube)
    members = (
        TeamMember.create(kube, a, roles=SHIPPED_ROLES),
        TeamMember.create(kube, b, roles=SHIPPED_ROLES),
    )
    # The submitter is the API server's word (the shipped submitted-by policy), not the client's.
    with submitted_by_policy(kube, kubectl_bin, cluster, [a, b]):
        yield members
    for m in members:
        m.delete()
    gpuctl("delete", "quota", f"q-{a}", "--delete-namespace")
    delete_namespaces(kube, [a, b], 120)


class Serve:
    """`gpuctl serve --api` with its defaults but the backstop (not needed) and leader election (one
    replica)."""

    def __init__(self, sa: Path, log: Path):
        self.sa, self.log, self.port = sa, log, free_port()
        self.process: ServeProcess | None = None

    def start(self) -> None:
        flags = ("--no-backstop", "--no-leader-elect", "--no-metrics", "--api")
        self.process = start_serve(self.sa, self.log, *flags, port=self.port, append=True)
        self.process.wait_ready()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(20)


# serve --api as the chart runs it (serve.api): serve's ServiceAccount also holds the API's ClusterRole and
# Kubernetes' auth-delegator (TokenReview, SubjectAccessReview of each caller).
API_BINDINGS = (
    ("gpuctl-history-test-api", "gpuctl-api"),
    ("gpuctl-history-test-auth", "system:auth-delegator"),
)


@pytest.fixture
def serve(kube, kubectl_bin, cluster, tmp_path) -> Iterator[Serve]:
    sa = service_account_kubeconfig(kube, kubectl_bin, cluster, tmp_path / "sa-kubeconfig", "rbac-api.yaml")
    api_role = next(
        d for d in yaml.safe_load_all((ROOT / "manifests/api/rbac.yaml").read_text())
        if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gpuctl-api"
    )  # fmt: skip
    had_role = kube.get_or_none(path("ClusterRole", "gpuctl-api")) is not None
    kube.apply(api_role)
    for name, role in API_BINDINGS:
        kube.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [
                    {"kind": "ServiceAccount", "name": "gpuctl-serve", "namespace": "gpuctl-system"}
                ],
            }
        )
    s = Serve(sa, tmp_path / "serve.log")
    s.start()
    try:
        yield s
    finally:
        s.stop()
        for name, _ in API_BINDINGS:
            kube.delete(path("ClusterRoleBinding", name))
        if not had_role:
            kube.delete(path("ClusterRole", "gpuctl-api"))


def _api(serve: Serve, member: TeamMember, url: str) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{serve.port}{url}",
        headers={"Authorization": f"Bearer {(member.dir / 'token').read_text().strip()}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _history(member: TeamMember, *args: str) -> list[dict]:
    r = member.gpuctl("history", *args, "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    return [_record(i) for i in json.loads(r.stdout)["items"]]


def _record(obj: dict) -> dict:
    """A HistoryRecord object (docs/cli.md) as the record it stands for."""
    m = obj["metadata"]
    return {**obj["spec"], "namespace": m["namespace"], "time": m["creationTimestamp"], "uid": m["uid"]}


def _find(records: list[dict], job: str, action: str) -> dict | None:
    return next((r for r in records if r["job"] == job and r["action"] == action), None)


def _wait(member: TeamMember, job: str, action: str, serve: Serve) -> dict:
    """The record as the member's `gpuctl history` lists it, once the store holds it (watched with the
    admin's credential, in this process: a CLI process per look would load the 2-core machine)."""
    kube = member.kube
    wait_until(
        lambda: any(r.job == job and r.action == action for r in history.read(kube, member.namespace)),
        60,
        what=f"{job} {action} in the history; serve log:\n{serve.log.read_text()[-3000:]}",
    )
    found = _find(_history(member), job, action)
    assert isinstance(found, dict)
    return found


def _admitted(kube: Cluster, ns: str, job: str) -> bool:
    return workload_state(_workload(kube, ns, job)) in HOLDING_QUOTA


def test_history_of_submission_admission_preemption_stop_and_delete(
    teams,
    serve,
    kube,
    kubectl_bin,
    gpuctl,  # noqa: F811
    tmp_path,
):
    a, b = teams
    ns = a.namespace
    for name in ("low1", "low2"):
        f = tmp_path / f"{name}.yaml"
        f.write_text(_job_yaml(name, ns, "low"))
        r = a.gpuctl("create", "-f", str(f))
        assert r.returncode == 0, r.stdout + r.stderr
    wait_until(
        lambda: _admitted(kube, ns, "low1") and _admitted(kube, ns, "low2"), 60, what="low jobs admitted"
    )
    # The submitter is stamped by admission from the request's user (admission/policies/submitted_by.py).
    job = kube.get(path("Job", "low1", ns))
    assert job["metadata"]["annotations"][AUDIT_SUBMITTED_BY_ANNOTATION] == a.username
    # training-pool is full (two 8-GPU nodes): a high-priority job of the same team preempts one.
    f = tmp_path / "urgent.yaml"
    f.write_text(_job_yaml("urgent", ns, "high"))
    assert a.gpuctl("create", "-f", str(f)).returncode == 0
    wait_until(lambda: _admitted(kube, ns, "urgent"), 90, what="urgent admitted")
    victim = next(n for n in ("low1", "low2") if not _admitted(kube, ns, n))
    survivor = "low2" if victim == "low1" else "low1"

    pre = _wait(a, victim, "preempted", serve)
    assert pre["actor"] == "job urgent", pre
    assert pre["reason"].startswith("InClusterQueue"), pre
    records = _history(a)
    sub = _find(records, "low1", "submitted")
    assert sub and sub["actor"] == a.username and sub["reason"] == "Job low1 created", sub
    adm = _find(records, "low1", "admitted")
    assert adm and adm["actor"] == "kueue" and "training-pool" in adm["reason"], adm
    # urgent's admission is recorded as the serve sees it, which may come after the victim's preemption
    # (a rehearsal read the trail in between once): waited for like the others.
    assert _wait(a, "urgent", "admitted", serve)["actor"] == "kueue"

    # A stop through gpuctl names the member, as admission stamped it from the request (the
    # gpuctl-active-set-by policy: not the field manager's claim, so no "(unverified)"); a delete is recorded.
    assert a.gpuctl("stop", "urgent").returncode == 0
    stop = _wait(a, "urgent", "stopped", serve)
    assert stop["actor"] == a.username, stop
    assert a.gpuctl("delete", "job", survivor).returncode == 0
    gone = _wait(a, survivor, "deleted", serve)
    assert gone["actor"] == "unknown"

    # One job's history, as a table.
    r = a.gpuctl("history", victim)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["TIME", "JOB", "ACTION", "ACTOR", "REASON"]
    assert [ln.split()[2] for ln in lines[1:]][:3] == ["submitted", "admitted", "preempted"], r.stdout

    # The team's only: another team's member reads neither through gpuctl nor kubectl; the member reads
    # no other ConfigMap of its own namespace.
    r = b.gpuctl("history", "-n", ns)
    assert r.returncode != 0 and f"needs gpuctl-user in {ns}" in r.stderr, r.stderr
    kb = b.kubectl(kubectl_bin, "get", "configmap", HISTORY_CONFIGMAP, "-n", ns)
    assert kb.returncode != 0 and "forbidden" in kb.stderr.lower(), kb.stderr
    assert _history(b) == []  # its own namespace: nothing happened there
    r = a.kubectl(kubectl_bin, "get", "configmaps")
    assert r.returncode != 0 and "forbidden" in r.stderr.lower(), r.stderr
    assert a.gpuctl("history", "-A").returncode != 0  # every namespace is an admin's
    # An admin reads every team's (-A: one list of the ConfigMaps by name).
    rc, out, err = gpuctl("history", "-A", "-o", "json")
    assert rc == 0, err
    assert {r["metadata"]["namespace"] for r in json.loads(out)["items"]} >= {ns}
    # The same through the REST API: the member reads its team's, the other team's member is refused.
    code, body = _api(serve, a, f"/api/v1/history/{ns}?job={victim}")
    assert code == 200 and [r["action"] for r in body["items"]][:3] == [
        "submitted",
        "admitted",
        "preempted",
    ], body
    code, body = _api(serve, b, f"/api/v1/history/{ns}")
    assert code == 403 and f"needs gpuctl-user in {ns}" in body["error"], body

    # Events gone (they expire after an hour), serve restarted: the records stay, none twice.
    serve.stop()
    kube.request("DELETE", path("Event", None, ns))
    assert kube.list(path("Event", namespace=ns), field_selector="involvedObject.kind=Workload") == []
    before = _history(a)
    serve.start()
    assert a.gpuctl("resume", "urgent").returncode == 0  # something new after the restart's first look
    _wait(a, "urgent", "resumed", serve)
    after = _history(a)
    assert [r for r in after if r["action"] != "resumed"][: len(before)] == before
    counts = Counter((r["uid"], r["action"], r["time"]) for r in after)
    assert max(counts.values()) == 1, counts
    assert Counter((r["job"], r["action"]) for r in after)[(victim, "preempted")] == 1
