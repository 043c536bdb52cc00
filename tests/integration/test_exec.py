"""`gpuctl exec`, `attach` and `port-forward` refused cleanly on the KWOK cluster, as a team member with only
the roles gpuctl ships (docs/cli.md, "Into a running job"): a job that does not exist, a job still queued
when --pod-running-timeout runs out, another team's job; and what the shipped gpuctl-user role grants, asked
of the API server itself (SubjectAccessReview). KWOK's pods run nothing, so the sessions themselves are
proved on the real node (tests/integration/real_node_exec.py, run by test_real_node.py).
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuctl.cli.main import main
from gpuctl.cluster import Cluster
from tests.integration.conftest import delete_namespaces, reset_gpuctl_state, wait_until
from tests.integration.tenancy import SHIPPED_ROLES, TeamMember, apply_caller_roles, dump
from tests.integration.test_team_member import _sar  # a SubjectAccessReview's answer

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Teams:
    kubeconfig: str
    a: str
    b: str
    quota: str
    member: TeamMember  # of team a
    other: TeamMember  # of team b
    tmp: Path

    def admin(self, *args: str) -> int:
        return main([*args, "--kubeconfig", self.kubeconfig])

    def job(self, name: str, gpus: int) -> str:
        f = self.tmp / f"{name}.yaml"
        f.write_text(
            f"kind: training\njob: {{name: {name}}}\n"
            "environment: {image: busybox, env: [{GPUCTL_FAKE_RUNTIME: 30m}]}\n"
            f"resources: {{pool: training-pool, gpu: {gpus}, cpu: 1, memory: 1Gi}}\n"
        )
        return str(f)


@pytest.fixture(scope="module")
def teams(cluster: str, kube: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Teams]:
    tmp = tmp_path_factory.mktemp("exec")
    reset_gpuctl_state(kube)
    s = uuid.uuid4().hex[:6]
    t = Teams(cluster, f"ex-a-{s}", f"ex-b-{s}", f"q-{s}", None, None, tmp)  # type: ignore[arg-type]
    assert t.admin("create", "-f", str(ROOT / "examples" / "pools.yaml")) == 0
    quota = tmp / "quota.yaml"
    quota.write_text(
        f"kind: quota\nquota: {{name: {t.quota}}}\nnamespace:\n"
        f"  {t.a}: {{cpu: 64, memory: 256Gi, gpu: 8}}\n  {t.b}: {{cpu: 64, memory: 256Gi, gpu: 8}}\n"
    )
    assert t.admin("create", "-f", str(quota)) == 0
    apply_caller_roles(kube)
    t.member = TeamMember.create(kube, t.a, roles=SHIPPED_ROLES)
    t.other = TeamMember.create(kube, t.b, roles=SHIPPED_ROLES)
    try:
        for m in (t.member, t.other):  # RBAC is served from an informer: wait for the bindings
            wait_until(
                lambda m=m: _sar(
                    kube,
                    m.username,
                    verb="create",
                    resource="pods",
                    subresource="exec",
                    namespace=m.namespace,
                ),
                30,
                0.2,
                what=f"RBAC of {m.name}",
            )
        yield t
    finally:
        for m in (t.member, t.other):
            if m is not None:
                m.delete()
        t.admin("delete", "quota", t.quota, "--delete-namespace")
        delete_namespaces(kube, [t.a, t.b], 90)
        reset_gpuctl_state(kube)


def _refused(p: subprocess.CompletedProcess, *needles: str) -> str:
    assert p.returncode == 1, dump(p)
    assert "Traceback" not in p.stderr, dump(p)
    for n in needles:
        assert n in p.stderr, (n, dump(p))
    return p.stderr


def test_the_shipped_role_opens_the_teams_own_pods_only(teams: Teams, kube: Cluster) -> None:
    for sub in ("exec", "attach", "portforward"):
        for verb in ("create", "get"):
            own = _sar(
                kube, teams.member.username, verb=verb, resource="pods", subresource=sub, namespace=teams.a
            )
            other = _sar(
                kube, teams.member.username, verb=verb, resource="pods", subresource=sub, namespace=teams.b
            )
            assert (own, other) == (True, False), (sub, verb)


def test_a_job_that_does_not_exist_is_refused(teams: Teams) -> None:
    _refused(teams.member.gpuctl("exec", "no-such-job", "--", "echo", "hi"), 'jobs "no-such-job" not found')
    _refused(teams.member.gpuctl("port-forward", "no-such-job", "8888"), 'jobs "no-such-job" not found')
    _refused(teams.member.gpuctl("attach", "no-such-job"), 'jobs "no-such-job" not found')


def test_a_queued_job_is_refused_when_the_timeout_runs_out(teams: Teams) -> None:
    name = f"big-{uuid.uuid4().hex[:4]}"
    create = teams.member.gpuctl("create", "-f", teams.job(name, 16))  # over the team's 8: it waits
    assert create.returncode == 0, dump(create)
    err = _refused(
        teams.member.gpuctl("exec", name, "--pod-running-timeout", "2s", "--", "echo", "hi"),
        f"cannot exec into job {name}: it is not running",
        "--pod-running-timeout",
        "gpuctl describe job",
    )
    assert "after waiting 2s" in err
    _refused(
        teams.member.gpuctl("port-forward", name, "8080", "--pod-running-timeout=1s"),
        f"cannot forward a port of job {name}: it is not running",
    )


def test_another_teams_job_is_refused_with_the_role_to_bind(teams: Teams) -> None:
    name = f"theirs-{uuid.uuid4().hex[:4]}"
    create = teams.other.gpuctl("create", "-f", teams.job(name, 1))
    assert create.returncode == 0, dump(create)
    for argv in (
        ("exec", "-n", teams.b, name, "--", "echo", "hi"),
        ("attach", "-n", teams.b, name),
        ("port-forward", "-n", teams.b, name, "8080"),
    ):
        err = _refused(teams.member.gpuctl(*argv), f"needs gpuctl-user in {teams.b}")
        assert "is forbidden" not in err, err
