"""Issue 43's admission holes, tried as the tenants who found them (docs/security.md, "Issue 43").

Setup (module): a pool of two fake 8-GPU nodes, a team with 8 GPUs of quota and no borrowing, gpuctl's whole
admission stack as it ships (tests/integration/admission_stack.py: webhook + policies), the JobSet
controller (hack/cluster/up.sh with GPUCTL_TESTBED_JOBSET=1), and three tenants through exec-plugin
kubeconfigs: a team member with exactly gpuctl's shipped roles, that member plus the JobSet rights
docs/distributed.md tells admins to bind ("jobset"), and a namespace admin with Kubernetes' `edit`.

Each test tries one attack and ends with the rule of the issue: the team's Kueue reservation (its
ClusterQueue's flavorsReservation of the GPU budget, runwhere.ai/quota-gpu-840ths) equals the GPUs and
other accelerators of its bound pods, terminating ones included.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import GPU_RESOURCE, TAS_UNCONSTRAINED, Labels
from tests.integration.admission_stack import AdmissionStack
from tests.integration.conftest import require_controller, wait_until
from tests.integration.own_pool import JOBSETS, delete_jobsets, own_pool, rack_node
from tests.integration.tenancy import (
    EDIT_ROLES,
    SHIPPED_ROLES,
    TeamMember,
    apply_caller_roles,
    bind_jobset_editor,
)
from tests.integration.test_tenant_attacks import kueue_gpus

pytestmark = pytest.mark.integration

QUOTA = 8
DELAY = {"pod-complete.stage.kwok.x-k8s.io/delay": "3600s"}  # KWOK: pods keep running
ACCELERATORS = ("habana.ai/gaudi", "nvidia.com/GA100_A100_SXM4_80GB")


@dataclass(frozen=True)
class Env:
    kube: Cluster
    kubectl_bin: str
    cluster: str
    ns: str
    pool: str
    member: TeamMember  # gpuctl's shipped roles
    jobset: TeamMember  # the shipped roles + JobSet's editor rights (docs/distributed.md)
    editor: TeamMember  # Kubernetes' `edit` in the namespace

    def kubectl(self, who: TeamMember, *args: str, obj: dict | None = None):
        return who.kubectl(self.kubectl_bin, *args, input=yaml.safe_dump(obj) if obj else None)


# ---------------------------------------------------------------------------------------------------------
# What Kueue charges and what the team's pods hold.


def held(kube: Cluster, ns: str) -> int:
    """GPUs and other accelerators the team's bound pods hold, terminating ones included (a terminating pod
    keeps its devices until it exits), finished ones not."""
    total = 0
    for p in kube.list(path("Pod", namespace=ns)):
        if not p["spec"].get("nodeName") or p["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        for c in [*p["spec"].get("containers", []), *p["spec"].get("initContainers", [])]:
            limits = (c.get("resources") or {}).get("limits") or {}
            total += sum(int(limits.get(r, 0)) for r in (GPU_RESOURCE, *ACCELERATORS))
    return total


def charged_equals_held(env: Env, what: str) -> None:
    """The rule of the issue, once pods being started or stopped settle."""
    last: list[tuple[int, int]] = []

    def ok() -> bool:
        last[:] = [(kueue_gpus(env.kube, env.ns), held(env.kube, env.ns))]
        return last[0][0] == last[0][1] <= QUOTA

    try:
        wait_until(ok, 60, what=f"{what}: Kueue's reservation equal to the accelerators the team holds")
    except AssertionError as e:
        raise AssertionError(f"{e}: reserved {last[0][0]}, held {last[0][1]}") from None


def refused(p, rule: str) -> None:
    assert p.returncode != 0, f"[{rule}] expected a refusal: {p.stdout}"
    assert f"[{rule}]" in p.stderr, p.stderr


# ---------------------------------------------------------------------------------------------------------
# Objects as a tenant writes them.


def _pod_spec(pool: str, gpus: int, **spec) -> dict:
    res: dict = {"cpu": "100m", "memory": "64Mi"}
    if gpus:
        res[GPU_RESOURCE] = str(gpus)
    return {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {Labels.POOL: pool},
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": res, "limits": res}}],
        **spec,
    }


def job(env: Env, name: str, gpus: int = 1, **spec) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": env.ns, "labels": {Labels.KUEUE_QUEUE: "default"}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {TAS_UNCONSTRAINED: "true", **DELAY}},
                "spec": _pod_spec(env.pool, gpus, **spec),
            },
        },
    }


def jobset(env: Env, name: str, gpus: int, replicas: int = 1) -> dict:
    """One replicated job (`replicas` Jobs) of one pod of `gpus` GPUs, as docs/distributed.md writes a
    JobSet."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": env.ns, "labels": {Labels.KUEUE_QUEUE: "default"}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "backoffLimit": 0,
                            "template": {
                                "metadata": {"annotations": {TAS_UNCONSTRAINED: "true", **DELAY}},
                                "spec": _pod_spec(env.pool, gpus),
                            },
                        }
                    },
                }
            ]
        },
    }


def _child(env: Env, name: str) -> dict | None:
    """The Job the JobSet controller made for JobSet `name`."""
    jobs = env.kube.list(
        path("Job", namespace=env.ns), label_selector=f"jobset.sigs.k8s.io/jobset-name={name}"
    )
    return jobs[0] if jobs else None


def _delete_jobset(env: Env, name: str) -> None:
    with contextlib.suppress(ApiError):
        env.kube.delete(f"{JOBSETS.format(ns=env.ns)}/{name}", propagation="Background")
    wait_until(lambda: _child(env, name) is None, 60, what=f"JobSet {name}'s Jobs gone")


@pytest.fixture(scope="module")
def env(cluster, kube, kubectl_bin, tmp_path_factory) -> Iterator[Env]:
    require_controller(kube, "jobsets.jobset.x-k8s.io", "JobSet", "GPUCTL_TESTBED_JOBSET")
    sfx = uuid.uuid4().hex[:5]
    nodes = [f"holes-{sfx}-1", f"holes-{sfx}-2"]
    pool, ns = f"holes-{sfx}", f"holes-team-{sfx}"
    tmp = tmp_path_factory.mktemp("holes")
    members: list[TeamMember] = []
    stack = None
    objs = {n: rack_node(n, "r1") for n in nodes}
    quota = f"{{cpu: 32, memory: 64Gi, gpu: {QUOTA}, borrowingLimit: 0}}"
    with own_pool(kube, cluster, tmp, pool=pool, ns=ns, nodes=objs, quota=quota):
        try:
            stack = AdmissionStack.install(kube, kubectl_bin, cluster, [ns], tmp)
            probe = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "probe", "namespace": ns},
                "spec": {**_pod_spec(pool, 0), "terminationGracePeriodSeconds": 7200},
            }
            stack.wait_active(probe, "[termination-grace]")
            apply_caller_roles(kube)
            member = TeamMember.create(kube, ns, roles=SHIPPED_ROLES)
            members.append(member)
            js_member = TeamMember.create(kube, ns, roles=SHIPPED_ROLES)
            members.append(js_member)
            bind_jobset_editor(kube, ns, js_member)
            editor = TeamMember.create(kube, ns, roles=EDIT_ROLES)
            members.append(editor)
            yield Env(kube, kubectl_bin, cluster, ns, pool, member, js_member, editor)
        finally:  # before the team and its pool go (own_pool)
            delete_jobsets(kube, ns)
            if stack is not None:
                stack.remove()
            for m in members:
                with contextlib.suppress(ApiError):
                    m.delete()


# ---------------------------------------------------------------------------------------------------------
# 1. A JobSet's child Job, orphaned.


def test_orphaning_a_jobsets_child_job_or_the_jobset_is_refused(env: Env) -> None:
    """Before: `kubectl delete job <child> --cascade=orphan`, then deleting the JobSet, left the pod running
    with no Workload (reserved 0, held 8)."""
    p = env.kubectl(env.jobset, "create", "-f", "-", obj=jobset(env, "orphan", QUOTA))
    assert p.returncode == 0, p.stderr
    child = wait_until(lambda: _child(env, "orphan"), 60, what="the JobSet's Job")
    wait_until(lambda: held(env.kube, env.ns) == QUOTA or None, 90, what="the JobSet's pod running")
    name = child["metadata"]["name"]
    for who in (env.member, env.jobset, env.editor):
        refused(env.kubectl(who, "delete", "job", name, "--cascade=orphan", "--wait=false"), "orphan-delete")
    refused(
        env.kubectl(env.jobset, "delete", "jobset", "orphan", "--cascade=orphan", "--wait=false"),
        "orphan-delete",
    )
    assert env.kube.get_or_none(path("Job", name, env.ns)) is not None
    charged_equals_held(env, "orphaning refused")
    # The usual delete (background) takes the pods with it.
    assert env.kubectl(env.jobset, "delete", "jobset", "orphan", "--wait=false").returncode == 0
    wait_until(lambda: held(env.kube, env.ns) == 0 or None, 90, what="the JobSet's pods gone")
    charged_equals_held(env, "deleted")


# ---------------------------------------------------------------------------------------------------------
# 3. Un-suspending a queued JobSet's child Job.


def test_unsuspending_a_queued_jobsets_child_job_is_refused(env: Env) -> None:
    """Before: only warned ("not denied because the object already had it"); the Job controller made pods,
    bound to pool nodes with no admission, until the JobSet controller re-suspended it."""
    p = env.kubectl(env.jobset, "create", "-f", "-", obj=jobset(env, "toobig", QUOTA, replicas=2))  # waits
    assert p.returncode == 0, p.stderr
    child = wait_until(lambda: _child(env, "toobig"), 60, what="the queued JobSet's Job")
    assert child["spec"].get("suspend") is True
    name = child["metadata"]["name"]
    patch = ("patch", "job", name, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    for who in (env.member, env.jobset, env.editor):
        p = env.kubectl(who, *patch)
        refused(p, "kueue-gate")
        assert "which Kueue queues" in p.stderr, p.stderr
    assert env.kube.get(path("Job", name, env.ns))["spec"]["suspend"] is True
    charged_equals_held(env, "un-suspend refused")
    _delete_jobset(env, "toobig")


# ---------------------------------------------------------------------------------------------------------
# 4. Accelerators under other names.


@pytest.mark.parametrize("resource", ACCELERATORS)
def test_accelerators_kueue_does_not_charge_are_refused(env: Env, resource: str) -> None:
    """Before: `habana.ai/gaudi: 8` and `nvidia.com/GA100_A100_SXM4_80GB: 2` were admitted at zero charge
    while the team was at its cap."""
    obj = job(env, "accel", gpus=0)
    for m in obj["spec"]["template"]["spec"]["containers"][0]["resources"].values():
        m[resource] = "2"
    for who in (env.member, env.editor):
        p = env.kubectl(who, "create", "-f", "-", obj=obj)
        refused(p, "extended-resource")
        assert resource in p.stderr, p.stderr
    assert env.kube.get_or_none(path("Job", "accel", env.ns)) is None
    charged_equals_held(env, resource)


# ---------------------------------------------------------------------------------------------------------
# 5. Host paths.


@pytest.mark.parametrize(
    "host", ["/opt/cni/bin", "/usr", "/lib/modules", "/boot", "/var/log/pods", "/var/lib/containers"]
)
def test_system_host_paths_are_refused_by_kubectl_and_gpuctl_create(
    env: Env, host: str, tmp_path: Path
) -> None:
    """Before: writable hostPath (and storage.workdirs through `gpuctl create`, as a member) of these was
    accepted: root on a pool node (CNI plugins run as root) and other teams' logs."""
    obj = job(env, "hostpath", volumes=[{"name": "h", "hostPath": {"path": host}}])
    obj["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "h", "mountPath": "/h"}]
    for who in (env.member, env.editor):
        p = env.kubectl(who, "create", "-f", "-", obj=obj)
        refused(p, "host-path")
        assert "system location" in p.stderr, p.stderr
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"kind: training\njob: {{name: workdir, namespace: {env.ns}}}\n"
        "environment: {image: busybox, command: [sleep, inf]}\n"
        f"resources: {{pool: {env.pool}, gpu: 1, cpu: 1, memory: 1Gi}}\n"
        f"storage: {{workdirs: [{host}]}}\n"
    )
    p = env.member.gpuctl("create", "-f", str(spec))
    assert p.returncode != 0 and "storage.workdirs[0].path" in p.stderr, p.stderr
    assert "system location" in p.stderr, p.stderr
    charged_equals_held(env, host)


def test_writable_host_paths_only_under_the_data_roots(env: Env) -> None:
    """A writable mount outside the data roots (HOST_PATH_ROOTS) is refused; read-only it runs, charged."""
    obj = job(env, "rw", volumes=[{"name": "h", "hostPath": {"path": "/mnt/shared"}}])
    mount = {"name": "h", "mountPath": "/h"}
    obj["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [mount]
    refused(env.kubectl(env.member, "create", "-f", "-", obj=obj), "host-path")
    mount["readOnly"] = True
    obj["metadata"]["name"] = "ro"
    p = env.kubectl(env.member, "create", "-f", "-", obj=obj)
    assert p.returncode == 0, p.stderr
    wait_until(lambda: held(env.kube, env.ns) == 1 or None, 90, what="the read-only job running")
    charged_equals_held(env, "read-only host path")
    env.kube.delete(path("Job", "ro", env.ns), propagation="Background")
    wait_until(lambda: held(env.kube, env.ns) == 0 or None, 90, what="its pod gone")


# ---------------------------------------------------------------------------------------------------------
# 2 (admission's half). Long termination grace.


def test_a_termination_grace_beyond_the_bound_is_refused(env: Env, tmp_path: Path) -> None:
    """Before: a job with terminationGracePeriodSeconds 7200, stopped or deleted, kept its GPUs for two
    hours after Kueue freed its quota (a team capped at 8 held 14)."""
    obj = job(env, "grace", terminationGracePeriodSeconds=7200)
    for who in (env.member, env.editor):
        p = env.kubectl(who, "create", "-f", "-", obj=obj)
        refused(p, "termination-grace")
        assert "terminationGracePeriodSeconds is 7200" in p.stderr, p.stderr
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"kind: training\njob: {{name: grace, namespace: {env.ns}, terminationGracePeriodSeconds: 7200}}\n"
        "environment: {image: busybox, command: [sleep, inf]}\n"
        f"resources: {{pool: {env.pool}, gpu: 1, cpu: 1, memory: 1Gi}}\n"
    )
    p = env.member.gpuctl("create", "-f", str(spec))
    assert p.returncode != 0 and "job.terminationGracePeriodSeconds" in p.stderr, p.stderr
    charged_equals_held(env, "long grace refused")
