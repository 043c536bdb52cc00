"""A JobSet a team member applies with kubectl in a team namespace is queued and charged like a gpuctl job
(issue 31, docs/distributed.md "Other launchers' objects"), on a cluster that runs the JobSet controller
(hack/cluster/up.sh with GPUCTL_TESTBED_JOBSET=1; the clusters pytest starts have it).

Two fake 8-GPU nodes make a pool; the team's budget is 16 GPUs. While a gpuctl job holds 8 of them, the
member's JobSet of two replicated jobs (8 GPUs each) waits as one Workload of two pod sets: the JobSet stays
suspended and none of its pods exists. When the gpuctl job is deleted Kueue admits the JobSet whole, both
pods run in the pool, and the team's Kueue usage equals the GPUs its pods hold (16). Then the same under
gpuctl's whole admission stack (docs/admission.md "JobSets"), with what a member may not do refused."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml

from gpuctl.cluster import path
from gpuctl.constants import GPU_RESOURCE, TAS_UNCONSTRAINED, Labels
from gpuctl.domain.workload import WorkloadState, workload_state
from tests.integration.admission_stack import AdmissionStack
from tests.integration.conftest import require_controller, wait_until
from tests.integration.own_pool import JOBSETS, delete_jobsets, own_pool, rack_node
from tests.integration.tenancy import TeamMember, bind_jobset_editor
from tests.integration.test_cli_cluster import gpuctl  # noqa: F401 - fixture
from tests.integration.test_gang import _held_gpus, _team_gpus


@dataclass(frozen=True)
class Team:
    pool: str
    ns: str
    member: TeamMember


@pytest.fixture(scope="module")
def team(cluster, kube, tmp_path_factory) -> Iterator[Team]:
    require_controller(kube, "jobsets.jobset.x-k8s.io", "JobSet", "GPUCTL_TESTBED_JOBSET")
    sfx = uuid.uuid4().hex[:5]
    nodes = [f"js-{sfx}-1", f"js-{sfx}-2"]
    pool, ns = f"js-{sfx}", f"js-team-{sfx}"
    tmp = tmp_path_factory.mktemp("jobset")
    objs = {n: rack_node(n, "r1") for n in nodes}
    with own_pool(kube, cluster, tmp, pool=pool, ns=ns, nodes=objs, quota="{gpu: 16}"):
        # A team member as a plain kubectl tenant (Kubernetes' `edit` in the namespace) whom the admin also
        # lets manage JobSets (what JobSet's own jobset-editor-role grants).
        member = TeamMember.create(kube, ns, roles=("edit",))
        try:
            bind_jobset_editor(kube, ns, member)
            yield Team(pool, ns, member)
        finally:
            delete_jobsets(kube, ns)
            member.delete()


def _jobset(name: str, ns: str, pool: str) -> dict:
    """Two replicated jobs of one pod of 8 GPUs each, as a JobSet user writes it for a gpuctl cluster: the
    team's LocalQueue, the pool's nodeSelector and a topology annotation on each pod template (gpuctl's
    topology policy adds the annotation to Jobs, not to JobSets: docs/queueing.md "Known limits")."""
    res = {"cpu": "1", "memory": "1Gi", GPU_RESOURCE: "8"}

    def replicated(rj: str) -> dict:
        return {
            "name": rj,
            "replicas": 1,
            "template": {
                "spec": {
                    "parallelism": 1,
                    "completions": 1,
                    "backoffLimit": 0,
                    "template": {
                        "metadata": {"annotations": {TAS_UNCONSTRAINED: "true"}},
                        "spec": {
                            "restartPolicy": "Never",
                            "nodeSelector": {Labels.POOL: pool},
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "busybox",
                                    "command": ["torchrun", "train.py"],
                                    "resources": {"requests": res, "limits": res},
                                }
                            ],
                        },
                    },
                }
            },
        }

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": ns, "labels": {Labels.KUEUE_QUEUE: "default"}},
        "spec": {"replicatedJobs": [replicated("leader"), replicated("workers")]},
    }


def _workload(kube, ns: str, owner: str) -> dict | None:
    for wl in kube.list(path("Workload", namespace=ns)):
        if any(o.get("name") == owner for o in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def _jobset_pods(kube, ns: str, name: str) -> list[dict]:
    return kube.list(path("Pod", namespace=ns), label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")


def _running(kube, ns: str, name: str) -> list[dict] | None:
    """The JobSet's two pods once both run (polled)."""
    pods = _jobset_pods(kube, ns, name)
    return pods if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods) else None


def test_a_team_members_jobset_is_queued_and_charged(gpuctl, kube, kubectl_bin, team, tmp_path):  # noqa: F811
    ns = team.ns
    # A gpuctl job takes 8 of the team's 16 GPUs.
    (tmp_path / "hold.yaml").write_text(
        f"kind: training\njob: {{name: hold, namespace: {ns}}}\n"
        "environment: {image: busybox, command: [sleep, inf], env: [{GPUCTL_FAKE_RUNTIME: 30m}]}\n"
        f"resources: {{pool: {team.pool}, gpu: 8, cpu: 1, memory: 1Gi}}\n"
    )
    rc, _, err = gpuctl("create", "-f", str(tmp_path / "hold.yaml"))
    assert rc == 0, err
    wait_until(lambda: _team_gpus(kube, ns) == 8, 60, what="hold admitted")
    # The member applies a 16-GPU JobSet with kubectl: Kueue suspends it; it waits as one Workload.
    p = team.member.kubectl(
        kubectl_bin, "apply", "-f", "-", input=yaml.safe_dump(_jobset("pair", ns, team.pool))
    )
    assert p.returncode == 0, p.stderr
    wl = wait_until(lambda: _workload(kube, ns, "pair"), 30, what="the JobSet's Workload")
    assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("leader", 1), ("workers", 1)]
    wait_until(
        lambda: workload_state(_workload(kube, ns, "pair")) == WorkloadState.PENDING, 30, what="queued"
    )
    js = kube.get(f"{JOBSETS.format(ns=ns)}/pair")
    assert js["spec"]["suspend"] is True
    assert _jobset_pods(kube, ns, "pair") == []
    assert _team_gpus(kube, ns) == 8
    # The gpuctl job ends: the JobSet is admitted whole in the pool, both pods run, 16 GPUs are charged.
    assert gpuctl("delete", "job", "hold", "-n", ns)[0] == 0
    wait_until(
        lambda: workload_state(_workload(kube, ns, "pair")) == WorkloadState.ADMITTED, 90, what="admitted"
    )
    adm = _workload(kube, ns, "pair")["status"]["admission"]
    assert {ps["flavors"][GPU_RESOURCE] for ps in adm["podSetAssignments"]} == {team.pool}
    pods = wait_until(lambda: _running(kube, ns, "pair"), 90, what="both JobSet pods running")
    assert {p["spec"]["nodeSelector"][Labels.POOL] for p in pods} == {team.pool}
    assert len({p["spec"]["nodeName"] for p in pods}) == 2
    assert wait_until(lambda: (_team_gpus(kube, ns), _held_gpus(kube, ns)) == (16, 16) or None, 60) is True
    # `gpuctl get jobs` lists gpuctl's kinds (Jobs, Deployments, StatefulSets it labels), not JobSets or
    # the Jobs a JobSet makes (docs/distributed.md "Other launchers' objects"); `get quotas` charges them.
    rc, out, err = gpuctl("get", "jobs", "-n", ns, "-o", "json")
    assert rc == 0, err
    assert json.loads(out)["items"] == []
    rc, out, err = gpuctl("get", "quotas", ns, "-o", "json")
    assert rc == 0, err
    (quota,) = json.loads(out)["items"]
    st = quota["status"]
    assert (st["gpus"]["used"], st["gpus"]["free"], st["admittedWorkloads"]) == (16, 0, 1)
    # Deleted by its owner: its Jobs and pods go, and the team's quota is free again.
    p = team.member.kubectl(kubectl_bin, "delete", "jobset", "pair", "--wait=false")
    assert p.returncode == 0, p.stderr
    wait_until(lambda: (_team_gpus(kube, ns), _held_gpus(kube, ns)) == (0, 0) or None, 90, what="released")


def test_a_jobset_runs_under_gpuctls_admission(kube, kubectl_bin, cluster, team, tmp_path):
    """With gpuctl's webhook and policies installed for the namespace (as the chart installs them), a team
    member's JobSet is reviewed like a gpuctl job and runs: its Jobs, made by the JobSet controller, are
    checked at their JobSet (admission.identities.JOB_MAKERS). What the member may not do is refused: a
    JobSet asking GPUs outside Kueue, un-suspending a queued JobSet, a Job of his own claiming the JobSet."""
    ns, jobsets = team.ns, JOBSETS.format(ns=team.ns)
    stack = AdmissionStack.install(kube, kubectl_bin, cluster, [ns], tmp_path)
    try:
        # (A JobSet without a queue label gets LocalQueue default from Kueue's own webhook, its
        # LocalQueueDefaulting; one naming a queue the namespace lacks would never be admitted.)
        lost = _jobset("lost", ns, team.pool)
        lost["metadata"]["labels"][Labels.KUEUE_QUEUE] = "gpu"
        stack.wait_active(lost, "[gpu-queue]")
        p = team.member.kubectl(kubectl_bin, "apply", "-f", "-", input=yaml.safe_dump(lost))
        assert p.returncode == 1, p.stdout
        assert "jobsets.admission.runwhere.ai" in p.stderr and f"JobSet {ns}/lost" in p.stderr
        assert '[gpu-queue] requests 8 nvidia.com/gpu but kueue.x-k8s.io/queue-name "gpu" is not' in p.stderr
        assert kube.get_or_none(f"{jobsets}/lost") is None
        # The queued JobSet is admitted whole and runs; the team is charged exactly the GPUs its pods hold.
        p = team.member.kubectl(
            kubectl_bin, "apply", "-f", "-", input=yaml.safe_dump(_jobset("guarded", ns, team.pool))
        )
        assert p.returncode == 0, p.stderr
        pods = wait_until(lambda: _running(kube, ns, "guarded"), 90, what="both JobSet pods running")
        assert len({p["spec"]["nodeName"] for p in pods}) == 2
        assert wait_until(lambda: (_team_gpus(kube, ns), _held_gpus(kube, ns)) == (16, 16) or None, 60)
        # A second JobSet waits for the team's quota; its owner may not start it himself.
        p = team.member.kubectl(
            kubectl_bin, "apply", "-f", "-", input=yaml.safe_dump(_jobset("second", ns, team.pool))
        )
        assert p.returncode == 0, p.stderr
        wait_until(
            lambda: workload_state(_workload(kube, ns, "second")) == WorkloadState.PENDING, 30, what="queued"
        )
        p = team.member.kubectl(
            kubectl_bin, "patch", "jobset", "second", "--type=merge", "-p", '{"spec":{"suspend":false}}'
        )
        assert p.returncode == 1 and "[kueue-gate] the update un-suspends a JobSet queued" in p.stderr, p
        assert kube.get(f"{jobsets}/second")["spec"]["suspend"] is True
        # Nor may a Job of his claim the running JobSet (Kueue would leave it to the JobSet, uncounted).
        owner = kube.get(f"{jobsets}/guarded")["metadata"]
        rj = _jobset("x", ns, team.pool)["spec"]["replicatedJobs"][0]["template"]
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "claim",
                "namespace": ns,
                "labels": {Labels.KUEUE_QUEUE: "default"},
                "ownerReferences": [
                    {
                        "apiVersion": "jobset.x-k8s.io/v1alpha2",
                        "kind": "JobSet",
                        "name": "guarded",
                        "uid": owner["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": rj["spec"],
        }
        p = team.member.kubectl(kubectl_bin, "create", "-f", "-", input=yaml.safe_dump(job))
        assert p.returncode == 1, p.stdout
        # The team policy refuses it first (issue 43: owner-claim's CEL judges Jobs too), the webhook would.
        assert "breaks [owner-claim]: the Job names JobSet guarded (uid" in p.stderr, p.stderr
        assert "ValidatingAdmissionPolicy" in p.stderr, p.stderr
        assert kube.get_or_none(path("Job", "claim", namespace=ns)) is None
        assert (_team_gpus(kube, ns), _held_gpus(kube, ns)) == (16, 16)
        # Deleted by its owner: the waiting one is admitted in its place and runs.
        p = team.member.kubectl(kubectl_bin, "delete", "jobset", "guarded", "--wait=false")
        assert p.returncode == 0, p.stderr
        wait_until(lambda: _running(kube, ns, "second"), 120, what="the second JobSet running")
        assert wait_until(lambda: (_team_gpus(kube, ns), _held_gpus(kube, ns)) == (16, 16) or None, 60)
    finally:
        for name in ("guarded", "second"):
            if kube.get_or_none(f"{jobsets}/{name}") is not None:
                kube.delete(f"{jobsets}/{name}", propagation="Background")
        stack.remove()
