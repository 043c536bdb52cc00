"""Issue 43, attack 2 (the backstop's half): a job with `terminationGracePeriodSeconds: 7200` is stopped or
deleted. Kueue frees its quota at once (a terminating pod is not active) while the pod keeps its GPUs for
the grace its tenant chose: before, a team capped at 8 held 14 and another team's admitted job sat
unschedulable on that node for up to two hours. Now `gpuctl serve`'s backstop ends the termination of a
pod that holds GPUs Kueue no longer counts once past its bound (its grace up to --termination-allowance,
then --uncovered-grace; docs/security.md, "The bound"), by default, as its own ServiceAccount with the RBAC
the chart grants for it (manifests/serve/rbac.yaml + evict/rbac.yaml) and nothing more.

Tried as the tenants the issue names, on a pool of one fake 8-GPU node made here: a team member with only
gpuctl's shipped roles stops the job (`kubectl patch workload`, as kueuectl does), a namespace admin with
Kubernetes' `edit` deletes one; after each, the team's Kueue reservation equals the GPUs of its bound pods
(terminating ones included) within the bound, and the other team's admitted job gets the node. KWOK is told
to keep the pod until its deletionTimestamp (a container that uses its whole grace: KWOK would otherwise
end it at a random moment of the 7200 s)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuctl.cli.main import main
from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import (
    GPU_RESOURCE,
    HISTORY_CONFIGMAP,
    HISTORY_DATA_KEY,
    UNCOVERED_TERMINATION_ENDED_REASON,
)
from gpuctl.domain.gpus import pod_spec_gpus
from tests.integration.conftest import delete_namespaces, reset_gpuctl_state, wait_until
from tests.integration.fake_nodes import fake_node
from tests.integration.serve_process import (
    drop_leader_lease,
    remove_serve_rbac,
    service_account_kubeconfig,
    start_serve,
)
from tests.integration.tenancy import EDIT_ROLES, SHIPPED_ROLES, TeamMember, apply_caller_roles, dump
from tests.integration.test_metrics import _job
from tests.integration.test_tenant_attacks import kueue_gpus

pytestmark = pytest.mark.integration

GRACE, ALLOWANCE = 4, 10  # serve's --uncovered-grace and --termination-allowance here
LONG_GRACE = 7200  # the tenant's terminationGracePeriodSeconds
# The bound: the allowance, the grace, a scan (1 s at this grace), the eviction reaching the API server;
# the rest is the shared 2-core machine's (Kueue's eviction and the Job controller's delete come first).
BOUND = ALLOWANCE + GRACE + 2
SLACK = 45


@dataclass
class Env:
    kube: Cluster
    kubectl_bin: str
    node: str
    pool: str
    team: str  # capped at 8 GPUs
    other: str  # another team, 8 GPUs
    member: TeamMember  # team's, with gpuctl's shipped roles
    editor: TeamMember  # team's namespace admin (edit)
    rival: TeamMember  # other's member
    port: int
    log: Path
    proc: subprocess.Popen

    def metric(self, name: str, **labels: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return s.value
        return 0.0


def job(name: str, ns: str, pool: str, *, grace: int) -> dict:
    """An 8-GPU Job for gpuctl's LocalQueue with this termination grace, as a tenant writes it with kubectl;
    KWOK keeps a deleted pod of it until its deletionTimestamp (the whole grace)."""
    j = _job(name, ns, 8, "low", pool=pool)
    j["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = grace
    j["spec"]["template"]["metadata"]["annotations"]["pod-delete.stage.kwok.x-k8s.io/delay"] = (
        f"{LONG_GRACE + 3600}s"
    )
    return j


def bound_gpus(kube: Cluster, ns: str) -> int:
    """GPUs of the team's bound, unfinished pods, terminating ones included (what the node's GPUs hold)."""
    return sum(
        pod_spec_gpus(p["spec"])
        for p in kube.list(path("Pod", namespace=ns))
        if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")
    )


def pods_of(kube: Cluster, ns: str, job_name: str) -> list[dict]:
    return kube.list(path("Pod", namespace=ns), label_selector=f"job-name={job_name}")


def running(kube: Cluster, ns: str, job_name: str) -> bool:
    return any(
        p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        for p in pods_of(kube, ns, job_name)
    )


def create(who: TeamMember, kubectl_bin: str, obj: dict) -> None:
    p = who.kubectl(kubectl_bin, "create", "-f", "-", input=json.dumps(obj))
    assert p.returncode == 0, dump(p)


@pytest.fixture(scope="module")
def env(
    cluster: str, kube: Cluster, kubectl_bin: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("termination")
    sfx = uuid.uuid4().hex[:5]
    node, pool, team, other = f"term-{sfx}", f"term-{sfx}", f"term-{sfx}-a", f"term-{sfx}-b"
    kube.create(fake_node(node, None, {GPU_RESOURCE: "8"}))
    members: list[TeamMember] = []
    serve = None
    try:
        (tmp / "setup.yaml").write_text(
            f"kind: pool\npool: {{name: {pool}}}\nnodes:\n  {node}: {{gpu-type: A100}}\n---\n"
            f"kind: quota\nquota: {{name: q-{sfx}}}\nnamespace:\n"
            f"  {team}: {{gpu: 8, borrowing-limit: 0}}\n  {other}: {{gpu: 8}}\n"
        )
        assert main(["create", "-f", str(tmp / "setup.yaml"), "--kubeconfig", cluster]) == 0
        apply_caller_roles(kube)
        member = TeamMember.create(kube, team, roles=SHIPPED_ROLES)
        members.append(member)
        editor = TeamMember.create(kube, team, roles=EDIT_ROLES)
        members.append(editor)
        rival = TeamMember.create(kube, other, roles=SHIPPED_ROLES)
        members.append(rival)
        sa = service_account_kubeconfig(kube, kubectl_bin, cluster, tmp / "sa-kubeconfig", "evict/rbac.yaml")
        drop_leader_lease(kube)
        # The defaults but for the two times (the chart's: backstop on, ending terminations on).
        serve = start_serve(
            sa, tmp / "serve.log", "--uncovered-grace", str(GRACE), "--termination-allowance", str(ALLOWANCE)
        )
        port, log = serve.port, serve.log
        e = Env(kube, kubectl_bin, node, pool, team, other, member, editor, rival, port, log, serve.proc)

        def ready() -> bool:
            serve.alive()
            try:
                return e.metric("gpuctl_serve_leader") == 1
            except OSError:
                return False

        wait_until(ready, 60, 0.5, what="gpuctl serve synced and leading")
        yield e
    finally:
        if serve is not None:
            serve.stop()
            print(f"\n----- gpuctl serve log (tail)\n{(tmp / 'serve.log').read_text()[-3000:]}")
        for m in members:
            m.delete()
        for ns in (team, other):
            for j in kube.list(path("Job", namespace=ns)):
                kube.delete(path("Job", j["metadata"]["name"], ns), propagation="Background")
        main(["delete", "quota", f"q-{sfx}", "--delete-namespace", "--kubeconfig", cluster])
        delete_namespaces(kube, [team, other])
        main(["delete", "pool", pool, "--kubeconfig", cluster])
        try:
            kube.delete(path("Node", node))
        except ApiError as e:
            if e.status != 404:
                raise
        remove_serve_rbac(kubectl_bin, cluster, "evict/rbac.yaml")
        reset_gpuctl_state(kube)


def _attack(env: Env, name: str, end_it, rival_job: str) -> float:
    """One attack: the team's 8-GPU job with a 7200 s grace runs, `end_it()` stops or deletes it as a
    tenant; the other team's 8-GPU job waits for the node. Returns the seconds from Kueue's reservation
    dropping to the team's reservation equalling its bound pods' GPUs again."""
    kube, ns = env.kube, env.team
    create(env.member, env.kubectl_bin, job(name, ns, env.pool, grace=LONG_GRACE))
    wait_until(lambda: running(kube, ns, name), 120, 0.5, what=f"{name} running")
    wait_until(lambda: kueue_gpus(kube, ns) == bound_gpus(kube, ns) == 8, 60, what="8 reserved = 8 held")
    end_it()
    # Kueue frees the quota at once; the pod keeps its 8 GPUs, terminating: the hole.
    wait_until(lambda: kueue_gpus(kube, ns) == 0, 60, 0.2, what="Kueue's reservation released")
    dropped = time.monotonic()
    (pod,) = pods_of(kube, ns, name)
    assert pod["metadata"].get("deletionTimestamp") and pod["spec"].get("nodeName") == env.node, pod
    assert bound_gpus(kube, ns) == 8  # reserved 0, held 8
    create(env.rival, env.kubectl_bin, job(rival_job, env.other, env.pool, grace=0))
    # The team's reservation equals what its pods hold again within the bound: serve ended the termination.
    wait_until(
        lambda: kueue_gpus(kube, ns) == bound_gpus(kube, ns) == 0, BOUND + SLACK, 0.5,
        what=f"the terminating pod's GPUs released (serve log: {env.log})",
    )  # fmt: skip
    took = time.monotonic() - dropped
    assert kube.get_or_none(path("Pod", pod["metadata"]["name"], ns)) is None
    # The other team's admitted job gets the node.
    wait_until(lambda: running(kube, env.other, rival_job), 120, 0.5, what=f"{rival_job} running on the node")
    (theirs,) = [p for p in pods_of(kube, env.other, rival_job) if not p["metadata"].get("deletionTimestamp")]
    assert theirs["spec"]["nodeName"] == env.node
    assert kueue_gpus(kube, env.other) == bound_gpus(kube, env.other) == 8
    # Said: an Event on the pod, the metric, the team's audit trail.
    events = kube.list(
        path("Event", namespace=ns), field_selector=f"involvedObject.name={pod['metadata']['name']}"
    )
    (ended,) = [e for e in events if e.get("reason") == UNCOVERED_TERMINATION_ENDED_REASON]
    assert f"held 8 GPU(s) on node {env.node}" in ended["message"], ended
    assert f"of a {LONG_GRACE} s termination grace" in ended["message"], ended

    def reclaimed() -> list[dict]:
        cm = kube.get_or_none(path("ConfigMap", HISTORY_CONFIGMAP, ns)) or {}
        lines = ((cm.get("data") or {}).get(HISTORY_DATA_KEY) or "").splitlines()
        return [r for r in map(json.loads, lines) if r["action"] == "reclaimed" and r["job"] == name]

    (record,) = wait_until(reclaimed, 30, 0.5, what=f"the reclaimed record of {name}")
    assert record["actor"] == "gpuctl-serve (backstop)" and record["uid"] == pod["metadata"]["uid"]
    # Room for the next attack: the other team's job goes (immediately: grace 0).
    kube.delete(path("Job", rival_job, env.other), propagation="Background")
    wait_until(lambda: bound_gpus(kube, env.other) == 0, 60, what=f"{rival_job} gone")
    return took


def test_a_stopped_jobs_long_termination_holds_its_gpus_no_longer_than_the_bound(env: Env) -> None:
    """A team member (gpuctl's shipped roles) stops the job as kueuectl does: spec.active false."""

    def stop() -> None:
        wl = next(
            w
            for w in env.kube.list(path("Workload", namespace=env.team))
            if any(o.get("name") == "hold-stop" for o in w["metadata"].get("ownerReferences", []))
        )
        p = env.member.kubectl(
            env.kubectl_bin, "patch", "workload", wl["metadata"]["name"], "--type=merge",
            "-p", '{"spec":{"active":false}}',
        )  # fmt: skip
        assert p.returncode == 0, dump(p)

    took = _attack(env, "hold-stop", stop, "rival-1")
    print(f"\nstopped: reservation = held again {took:.1f} s after Kueue released it (bound {BOUND} s)")
    assert env.metric("gpuctl_uncovered_terminations_ended_total", result="ended") >= 1


def test_a_deleted_jobs_long_termination_holds_its_gpus_no_longer_than_the_bound(env: Env) -> None:
    """The namespace admin (`edit`) deletes the job, as kubectl does (background propagation)."""

    def delete() -> None:
        p = env.editor.kubectl(env.kubectl_bin, "delete", "job", "hold-delete", "--wait=false")
        assert p.returncode == 0, dump(p)

    before = env.metric("gpuctl_uncovered_terminations_ended_total", result="ended")
    took = _attack(env, "hold-delete", delete, "rival-2")
    print(f"\ndeleted: reservation = held again {took:.1f} s after Kueue released it (bound {BOUND} s)")
    assert env.metric("gpuctl_uncovered_terminations_ended_total", result="ended") == before + 1
