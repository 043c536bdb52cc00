"""The earlier gpuctl's client in a team namespace (issue 26): its own YAML, unchanged, queues through Kueue.

The client (tests/integration/earlier_client.py: its public source, installed unchanged) is run by a team
member with exactly the shipped roles (and the shipped gpuctl-earlier-client role: its quota check lists
namespaces), through an exec-plugin kubeconfig, with `-n <team>`, on its own example YAML (`cpu` quoted: the
client refuses its own unquoted numbers, a known quirk). gpuctl's
admission stack is installed as it ships (tests/integration/admission_stack.py), the earlier-client
MutatingAdmissionPolicy among it. The cluster starts as one the earlier gpuctl ran on before `gpuctl adopt`:
its PriorityClasses exist as the client makes them (gpuctl-high and -medium with PreemptLowerPriority).

- its training (high, low), inference (medium) and notebook (medium) YAMLs are admitted, queue as Kueue
  Workloads of WorkloadPriorityClass gpuctl-high|-low|-medium (the Workload's priorityClassRef and
  priority), run within the team's quota, and their pods carry no PriorityClass;
- a further high job (its GPU notebook) in a full pool is ordered by Kueue alone: nothing is preempted
  through kube-scheduler, no pod of another team is touched, and the team's GPUs stay within quota;
- `get jobs` and `delete job` by that client work;
- `gpuctl adopt` re-creates the two preempting PriorityClasses with preemptionPolicy Never, and the
  client's own create/replace (run by an admin) cannot turn them back.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuctl.cli.main import main as gpuctl_main
from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import PRIORITY_CLASS, PRIORITY_VALUE, TAS_UNCONSTRAINED, Labels, Priority
from gpuctl.service import priority_classes
from tests.integration.admission_stack import AdmissionStack
from tests.integration.conftest import reset_gpuctl_state, wait_until
from tests.integration.earlier_client import EarlierClient, earlier_gpuctl
from tests.integration.tenancy import (
    EARLIER_CLIENT_ROLE,
    SHIPPED_ROLES,
    TeamMember,
    apply_caller_roles,
    dump,
)
from tests.integration.test_tenant_attacks import _admitted_pods, held, job, kueue_gpus

pytestmark = pytest.mark.integration

POOL = "training-pool"
POOL_NODES = ("gpu-node-1", "gpu-node-2")
GPU_TYPE = "a10-24g"  # what the client's YAML asks for (resources.gpuType)
QUOTA = 4
# The client's own examples (tests/yamls/ of its source) and what each is called.
YAMLS = {
    "high-priority-training-job": ("training/high-priority-training.yaml", Priority.HIGH),
    "low-priority-training-job": ("training/low-priority-training.yaml", Priority.LOW),
    "basic-inference": ("inference/basic-inference.yaml", Priority.MEDIUM),
    "basic-notebook": ("notebook/basic-notebook.yaml", Priority.MEDIUM),
}
LATER = ("gpu-notebook", "notebook/gpu-notebook.yaml", Priority.HIGH)
# The PriorityClasses as the earlier client creates them (gpuctl/client/priority_client.py).
EARLIER_CLASSES = {"gpuctl-high": 1_000_000, "gpuctl-medium": 500_000}


@dataclass
class Env:
    kube: Cluster
    client: EarlierClient
    member: TeamMember
    team: str
    other: str
    admin_kubeconfig: str

    def earlier(self, *args: str, admin: bool = False):
        return self.client.run(self.admin_kubeconfig if admin else self.member.kubeconfig, *args)

    def example(self, rel: str, tmp: Path) -> str:
        """Its example YAML as a user would pass it. One change: `cpu: 4` quoted, because the client itself
        refuses an unquoted number ("Input should be a valid string": its pinned kubernetes client's models;
        the known quirk in ../shared/fixtures/README.md). Everything else as the client's source has it."""
        text = (self.client.examples / rel).read_text()
        out = tmp / rel.replace("/", "-")
        out.write_text(re.sub(r"^(\s*cpu:\s*)(\d+)\s*$", r'\1"\2"', text, flags=re.M))
        return str(out)


def _pools(tmp: Path) -> Path:
    f = tmp / "pools.yaml"
    f.write_text(
        f"kind: pool\npool: {{name: {POOL}}}\n"
        "nodes: {" + ", ".join(f"{n}: {{gpu-type: {GPU_TYPE}}}" for n in POOL_NODES) + "}\n"
    )
    return f


@pytest.fixture(scope="module")
def env(cluster: str, kube: Cluster, kubectl_bin: str, tmp_path_factory) -> Iterator[Env]:
    client = earlier_gpuctl()
    sfx = uuid.uuid4().hex[:5]
    team, other = f"old-{sfx}", f"oth-{sfx}"
    tmp = tmp_path_factory.mktemp("earlier")
    reset_gpuctl_state(kube)
    made_classes: list[str] = []
    stack = None
    member = None
    try:
        # A cluster the earlier gpuctl ran on: its PriorityClasses preempt.
        for name, value in EARLIER_CLASSES.items():
            if kube.get_or_none(path("PriorityClass", name)) is None:
                kube.create(
                    {
                        "apiVersion": "scheduling.k8s.io/v1",
                        "kind": "PriorityClass",
                        "metadata": {"name": name},
                        "value": value,
                        "preemptionPolicy": "PreemptLowerPriority",
                    }
                )
                made_classes.append(name)
        assert gpuctl_main(["create", "-f", str(_pools(tmp)), "--kubeconfig", cluster]) == 0
        # The client's jobs select `runwhere.ai/gpuType` (its Labels.GPU_TYPE) while its own pools write
        # `runwhere.ai/gpu-type`: its users labelled GPU nodes with the older key by hand, as here.
        for n in POOL_NODES:
            kube.merge_patch(path("Node", n), {"metadata": {"labels": {Labels.GPU_TYPE_LEGACY: GPU_TYPE}}})
        q = tmp / "quota.yaml"
        q.write_text(
            f"kind: quota\nquota: {{name: q-{sfx}}}\nnamespace:\n"
            f"  {team}: {{cpu: 64, memory: 256Gi, gpu: {QUOTA}, borrowingLimit: 0}}\n"
            f"  {other}: {{cpu: 64, memory: 256Gi, gpu: 12, borrowingLimit: 0}}\n"
        )
        assert gpuctl_main(["create", "-f", str(q), "--kubeconfig", cluster]) == 0
        stack = AdmissionStack.install(kube, kubectl_bin, cluster, [team, other], tmp)
        probe = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", "namespace": team, "labels": {Labels.PRIORITY: "low"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
        stack.wait_mutating(
            probe, lambda o: Labels.KUEUE_PRIORITY in o["metadata"]["labels"], "earlier-client policy"
        )
        stack.wait_mutating(
            probe, lambda o: TAS_UNCONSTRAINED in o["metadata"].get("annotations", {}), "topology policy"
        )
        apply_caller_roles(kube)
        # The client checks that the namespace "has quota" by listing every namespace labelled
        # runwhere.ai/namespace=true (gpuctl/client/quota_client.py namespace_has_quota): without the shipped
        # gpuctl-earlier-client role (list namespaces) it says "Permission denied for check namespace".
        member = TeamMember.create(kube, team, roles=(*SHIPPED_ROLES, EARLIER_CLIENT_ROLE))
        yield Env(kube, client, member, team, other, cluster)
    finally:
        if member is not None:
            with contextlib.suppress(ApiError):
                member.delete()
        if stack is not None:
            stack.remove()
        gpuctl_main(["delete", "quota", f"q-{sfx}", "--delete-namespace", "--kubeconfig", cluster])
        for ns in (team, other):
            with contextlib.suppress(ApiError):
                kube.delete(path("Namespace", ns))
        for name in PRIORITY_CLASS.values():  # leave no class behind that this module made or changed
            if name in made_classes or kube.get_or_none(path("PriorityClass", name)) is not None:
                with contextlib.suppress(ApiError):
                    kube.delete(path("PriorityClass", name))
        for n in POOL_NODES:
            kube.merge_patch(path("Node", n), {"metadata": {"labels": {Labels.GPU_TYPE_LEGACY: None}}})
        reset_gpuctl_state(kube)


def _workloads(env: Env) -> list[dict]:
    return env.kube.list(path("Workload", namespace=env.team))


def _by_job(env: Env) -> dict[str, list[dict]]:
    """The team's Workloads by the earlier job they belong to (their owner: the Job, the StatefulSet and its
    pods, a Deployment's pods)."""
    out: dict[str, list[dict]] = {}
    for wl in _workloads(env):
        owners = [o["name"] for o in wl["metadata"].get("ownerReferences") or []]
        for name in [*YAMLS, LATER[0]]:
            if any(o == name or o.startswith(f"{name}-") for o in owners):
                out.setdefault(name, []).append(wl)
    return out


def _state(env: Env) -> str:
    """The team's objects, Workloads and pods, for a failure message."""
    lines = []
    for kind in ("Job", "Deployment", "StatefulSet", "Pod"):
        for o in env.kube.list(path(kind, namespace=env.team)):
            lines.append(f"{kind} {o['metadata']['name']}: {json.dumps(o.get('status', {}))[:300]}")
    for wl in _workloads(env):
        conds = [
            (c["type"], c["status"], c.get("message", "")[:200])
            for c in (wl.get("status") or {}).get("conditions", [])
        ]
        owners = [o["name"] for o in wl["metadata"].get("ownerReferences") or []]
        lines.append(
            f"Workload {wl['metadata']['name']} owners={owners} prio={wl['spec'].get('priority')} {conds}"
        )
    return "\n".join(lines)


def _admitted(wl: dict) -> bool:
    return any(
        c["type"] == "Admitted" and c["status"] == "True"
        for c in (wl.get("status") or {}).get("conditions", [])
    )


def _scheduler_preemptions(env: Env) -> list[str]:
    return [
        f"{e['involvedObject'].get('namespace')}/{e['involvedObject'].get('name')}: {e.get('message')}"
        for ns in (env.team, env.other)
        for e in env.kube.list(path("Event", namespace=ns))
        if e.get("reason") == "Preempted" and (e.get("source") or {}).get("component") == "default-scheduler"
    ]


def test_its_own_yaml_queues_as_gpuctl_priorities_and_runs_within_quota(env: Env, tmp_path):
    # Another team's admitted medium work fills the rest of the pool.
    other = job(env.other, "theirs", "", gpus=4, pool=POOL, labels={Labels.KUEUE_PRIORITY: "gpuctl-medium"})
    other["spec"] |= {"parallelism": 3, "completions": 3}
    env.kube.create(other)
    wait_until(
        lambda: len(_admitted_pods(env.kube, env.other)) == 3, 90, what="the other team's pods running"
    )

    for name, (yaml_path, _) in YAMLS.items():
        p = env.earlier("create", "-f", env.example(yaml_path, tmp_path), "-n", env.team)
        assert p.returncode == 0 and "Successfully created" in p.stdout, f"{name}: {dump(p)}"
    try:
        wls = wait_until(
            lambda: (
                (w := _by_job(env))
                and len(w) == len(YAMLS)
                and all(_admitted(x) for v in w.values() for x in v)
                and w
            ),
            120,
            what="every earlier job admitted",
        )
    except AssertionError as e:
        raise AssertionError(f"{e}\n{_state(env)}") from None
    for name, (_, prio) in YAMLS.items():
        for wl in wls[name]:
            spec = wl["spec"]
            assert spec["priorityClassRef"] == {
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": PRIORITY_CLASS[prio],
            }, (name, spec.get("priorityClassRef"))
            assert spec["priority"] == PRIORITY_VALUE[prio], name
    # What the policy changed: the Kueue class on object and pod template, the template's PriorityClass gone.
    checked = (
        ("Job", "high-priority-training-job"),
        ("Deployment", "basic-inference"),
        ("StatefulSet", "basic-notebook"),
    )
    for kind, name in checked:
        obj = env.kube.get(path(kind, name, env.team))
        prio = YAMLS[name][1]
        assert obj["metadata"]["labels"][Labels.KUEUE_PRIORITY] == PRIORITY_CLASS[prio], kind
        assert obj["spec"]["template"]["metadata"]["labels"][Labels.KUEUE_PRIORITY] == PRIORITY_CLASS[prio], (
            kind
        )
        assert obj["metadata"]["labels"][Labels.PRIORITY] == prio.value  # its own label, kept
        assert "priorityClassName" not in obj["spec"]["template"]["spec"], kind
    # Within quota, and the pods carry no PriorityClass (kube-scheduler ranks them all alike).
    wait_until(lambda: sum(held(env.kube, env.team).values()) == QUOTA, 90, what="the team's 4 GPUs in use")
    assert kueue_gpus(env.kube, env.team) == QUOTA
    for pod in env.kube.list(path("Pod", namespace=env.team)):
        assert not pod["spec"].get("priorityClassName") and not pod["spec"].get("priority"), pod["metadata"][
            "name"
        ]
    # The client's listing shows them.
    p = env.earlier("get", "jobs", "-n", env.team, "--json")
    assert p.returncode == 0, dump(p)
    listed = json.dumps(json.loads(p.stdout))
    for name in YAMLS:
        assert name in listed, (name, p.stdout[-2000:])


def test_a_further_high_job_in_a_full_pool_preempts_nothing_through_kube_scheduler(env: Env, tmp_path):
    theirs = dict(_admitted_pods(env.kube, env.other))
    assert len(theirs) == 3
    name, yaml_path, prio = LATER
    p = env.earlier("create", "-f", env.example(yaml_path, tmp_path), "-n", env.team)
    assert p.returncode == 0, dump(p)
    wl = wait_until(lambda: _by_job(env).get(name), 60, what="its Workload")[0]
    assert wl["spec"]["priorityClassRef"]["name"] == PRIORITY_CLASS[prio]
    # Kueue alone decides: it may take back the team's own low job for it (withinClusterQueue), never
    # another team's pods, and never kube-scheduler.
    for _ in range(3):
        wait_until(lambda: sum(held(env.kube, env.team).values()) <= QUOTA, 30, what="within quota")
        assert kueue_gpus(env.kube, env.team) <= QUOTA
    wait_until(
        lambda: (w := _by_job(env).get(name)) and _admitted(w[0]), 90, what="the high job admitted by Kueue"
    )
    wait_until(
        lambda: sum(held(env.kube, env.team).values()) == kueue_gpus(env.kube, env.team) == QUOTA,
        90,
        what="Kueue's count and the team's GPUs agree",
    )
    assert _admitted_pods(env.kube, env.other) == theirs, "another team's admitted pods were touched"
    assert _scheduler_preemptions(env) == []


def test_get_and_delete_by_the_earlier_client(env: Env):
    for name in [*YAMLS, LATER[0]]:
        p = env.earlier("delete", "job", name, "-n", env.team, "--force")
        assert p.returncode == 0 and "Permission denied" not in p.stdout, f"{name}: {dump(p)}"
    for kind in ("Job", "Deployment", "StatefulSet"):
        wait_until(
            lambda kind=kind: not env.kube.list(path(kind, namespace=env.team)), 60, what=f"{kind}s gone"
        )
    wait_until(lambda: not held(env.kube, env.team), 60, what="no pod of the team left")


def test_adopt_makes_its_priority_classes_never_preempt_and_they_stay_so(env: Env, gpuctl_plan, tmp_path):
    plan = gpuctl_plan
    assert "priorityclass/gpuctl-high re-created with preemptionPolicy Never" in plan, plan
    assert "priorityclass/gpuctl-medium re-created with preemptionPolicy Never" in plan, plan
    changes = priority_classes.decide(priority_classes.read(env.kube))
    priority_classes.execute(env.kube, changes)
    for p in Priority:
        pc = env.kube.get(path("PriorityClass", PRIORITY_CLASS[p]))
        assert pc["preemptionPolicy"] == "Never" and pc["value"] == PRIORITY_VALUE[p]
    # The earlier client re-creates/replaces them on every create, here with an admin's rights: refused.
    name, (yaml_path, _) = next(iter(YAMLS.items()))
    p = env.earlier("create", "-f", env.example(yaml_path, tmp_path), "-n", env.team, admin=True)
    assert p.returncode == 0, dump(p)
    for p_ in Priority:
        assert env.kube.get(path("PriorityClass", PRIORITY_CLASS[p_]))["preemptionPolicy"] == "Never"
    env.earlier("delete", "job", name, "-n", env.team, "--force", admin=True)


@pytest.fixture
def gpuctl_plan(cluster, capsys) -> str:
    """`gpuctl adopt`'s plan (a dry run: nothing changes)."""
    capsys.readouterr()
    assert gpuctl_main(["adopt", "--kubeconfig", cluster]) == 0
    return capsys.readouterr().out
