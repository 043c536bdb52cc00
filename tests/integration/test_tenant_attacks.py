"""Every attack a tenant can try with kubectl inside its own team namespace (issue 26), tried as the tenant.

Setup (module): the four pools of examples/pools.yaml; team A, the attacker (4 GPUs, borrowingLimit 0), with
4 GPUs of admitted work running (Job `fill`, gpuctl-high), and team B (12 GPUs) whose admitted work fills
the rest of training-pool (3 pods x 4 GPUs), so training-pool is full; gpuctl's admission stack as it ships
(tests/integration/admission_stack.py: webhook, ValidatingAdmissionPolicies, MutatingAdmissionPolicies);
a team member of A with exactly the shipped roles (gpuctl-user + gpuctl-pool-viewer) and a namespace
`edit` user of A, both through exec-plugin kubeconfigs (tests/integration/tenancy.py). Nothing a tenant
does runs as the admin.

Each attack is tried by the member, and by the editor where the member's roles cannot even try it, then
watched for a few seconds (unless every step was refused and nothing of it exists: then nothing it made
can run, and it is looked at once) and recorded as: refused (with the message), queued by Kueue (admitted
only within quota), or ran outside quota (team A's pods hold more GPUs than Kueue counts for A, or a pod
reaches devices it was not charged for). After each: Kueue's count for A equals the GPUs A's pods hold (the
ClusterQueue's flavorsReservation against A's bound pods), and no admitted pod of A or B was evicted.
Then A's state is restored.

The attack table (attack | before | after) is written to build/tenant-attacks.md. "before" is what main
did before issue 26, recorded by this module on main's admission code (GPUCTL_ATTACKS_RECORD=before, which
records without asserting): tests/integration/tenant_attacks_before.json. GPUCTL_ATTACKS_DEBUG=1 prints the
team's Workloads, Jobs and pods after each attack.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from gpuctl.cli.main import main as gpuctl_main
from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import (
    AUDIT_ACTIVE_SET_BY_ANNOTATION,
    AUDIT_SUBMITTED_BY_ANNOTATION,
    GPU_RESOURCE,
    GPU_UNITS,
    PRIORITY_VALUE,
    QUOTA_GPU,
    TAS_UNCONSTRAINED,
    Labels,
    Priority,
)
from gpuctl.domain.gpus import pod_spec_gpus
from gpuctl.domain.history import active_manager
from tests.integration.admission_stack import AdmissionStack, has_module
from tests.integration.conftest import delete_namespaces, reset_gpuctl_state, wait_until
from tests.integration.tenancy import EDIT_ROLES, SHIPPED_ROLES, USER_ROLE, TeamMember, apply_caller_roles

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BEFORE_FILE = Path(__file__).with_name("tenant_attacks_before.json")
TABLE = ROOT / "build" / "tenant-attacks.md"
RECORD = os.environ.get("GPUCTL_ATTACKS_RECORD", "")  # "before": record only (main's admission code)
EARLIER_POLICY = has_module("policies/earlier_client")  # not on main before issue 26
DELAY = {"pod-complete.stage.kwok.x-k8s.io/delay": "3600s"}  # KWOK: pods keep running
QUOTA = 4  # team A's GPUs
WATCH = 8.0  # seconds an attack is watched for an escape
FULL, FREE = "training-pool", "inference-pool"  # full of admitted work / 8 GPUs free

REFUSED, QUEUED, ALLOWED, ESCAPED = (
    "refused",
    "queued by Kueue",
    "allowed, still counted",
    "ran outside quota",
)


@dataclass
class Env:
    kube: Cluster
    kubectl_bin: str
    a: str
    b: str
    member: TeamMember
    editor: TeamMember
    victims: dict[str, str] = field(default_factory=dict)  # uid -> "ns/pod" of admitted pods at baseline
    since: str = ""  # when the baseline was last restored (RFC 3339, the API server's clock format)
    results: dict[str, dict] = field(default_factory=dict)

    def run(self, who: TeamMember, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return who.kubectl(self.kubectl_bin, *args, input=input)

    def create(self, who: TeamMember, obj: dict) -> subprocess.CompletedProcess:
        return self.run(who, "create", "-f", "-", input=yaml.safe_dump(obj))

    def admin(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.kubectl_bin, "--kubeconfig", os.environ["KUBECONFIG"], *args],
            input=input,
            capture_output=True,
            text=True,
        )


# ---------------------------------------------------------------------------------------------------------
# Objects as a tenant writes them.


def _container(gpus: int, **extra) -> dict:
    res: dict = {"cpu": "100m", "memory": "128Mi"}
    if gpus:
        res[GPU_RESOURCE] = str(gpus)
    return {"name": "main", "image": "busybox", "resources": {"requests": res, "limits": dict(res)}, **extra}


def _pod_spec(gpus: int, pool: str | None, **spec) -> dict:
    s: dict = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [_container(gpus)]}
    if pool:
        s["nodeSelector"] = {Labels.POOL: pool}
    s.update(spec)
    return s


def job(
    ns: str, name: str, attack: str, gpus: int = 4, pool: str | None = FULL, *, labels=None, **spec
) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"attack": attack, **(labels or {})}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"attack": attack, **(labels or {})}, "annotations": dict(DELAY)},
                "spec": _pod_spec(gpus, pool, **spec),
            },
        },
    }


def pod(
    ns: str, name: str, attack: str, gpus: int = 4, pool: str | None = FREE, *, labels=None, **spec
) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"attack": attack, **(labels or {})},
            "annotations": dict(DELAY),
        },
        "spec": _pod_spec(gpus, pool, **spec),
    }


def _templated(kind: str, api: str, ns: str, name: str, attack: str, gpus: int, pool: str, **extra) -> dict:
    spec = _pod_spec(gpus, pool)
    spec["restartPolicy"] = "Always"
    sel = {"app": name}
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": name, "namespace": ns, "labels": {"attack": attack}},
        "spec": {
            **extra,
            "selector": sel if kind == "ReplicationController" else {"matchLabels": sel},
            "template": {
                "metadata": {"labels": {**sel, "attack": attack}, "annotations": dict(DELAY)},
                "spec": spec,
            },
        },
    }


# ---------------------------------------------------------------------------------------------------------
# What Kueue counts and what runs.


def kueue_gpus(kube: Cluster, ns: str) -> int:
    """GPUs Kueue has reserved for the team (its ClusterQueue's flavorsReservation of the GPU budget)."""
    cq = kube.get(path("ClusterQueue", ns))
    for fl in (cq.get("status") or {}).get("flavorsReservation") or []:
        for r in fl.get("resources") or []:
            if r["name"] == QUOTA_GPU:
                return int(r["total"]) // GPU_UNITS
    return 0


def held(kube: Cluster, ns: str) -> dict[str, int]:
    """pod -> GPUs, for the team's pods that hold a node's GPUs (bound, not finished, not deleted)."""
    out = {}
    for p in kube.list(path("Pod", namespace=ns)):
        if (
            p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        ):
            out[p["metadata"]["name"]] = pod_spec_gpus(p["spec"])
    return out


def _device_pods(kube: Cluster, ns: str) -> list[str]:
    """The team's bound pods that reach the node's devices behind their requests."""
    out = []
    for p in kube.list(path("Pod", namespace=ns)):
        spec = p["spec"]
        if not spec.get("nodeName") or p["metadata"].get("deletionTimestamp"):
            continue
        why = []
        if spec.get("hostPID") or spec.get("hostIPC"):
            why.append("hostPID/hostIPC")
        for c in [*spec.get("containers", []), *spec.get("initContainers", [])]:
            sc = c.get("securityContext") or {}
            if sc.get("privileged"):
                why.append("privileged")
            if (sc.get("capabilities") or {}).get("add"):
                why.append(f"capabilities {','.join(sc['capabilities']['add'])}")
            if any(e.get("name", "").startswith("NVIDIA_") for e in c.get("env") or []):
                why.append("NVIDIA_VISIBLE_DEVICES")
        if any(
            (v.get("hostPath") or {}).get("path", "").startswith("/dev") for v in spec.get("volumes") or []
        ):
            why.append("hostPath /dev")
        if why:
            gpus = pod_spec_gpus(spec)
            out.append(
                f"{p['metadata']['name']} on {spec['nodeName']} ({', '.join(why)}; charged {gpus} GPUs)"
            )
    return out


def _admitted_pods(kube: Cluster, ns: str) -> dict[str, str]:
    return {
        p["metadata"]["uid"]: f"{ns}/{p['metadata']['name']}"
        for p in kube.list(path("Pod", namespace=ns))
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }


def _component(e: dict) -> str:
    return e.get("reportingComponent") or (e.get("source") or {}).get("component") or "?"


def _evicted(env: Env) -> list[str]:
    """Baseline admitted pods that are gone or going, and who took them: the events since the attack began
    that name the pod (kube-scheduler's `Preempted` on the pod, a controller's `SuccessfulDelete`, Kueue's
    eviction of its Workload)."""
    now = {**_admitted_pods(env.kube, env.a), **_admitted_pods(env.kube, env.b)}
    gone = {uid: name for uid, name in env.victims.items() if uid not in now}
    if not gone:
        return []
    events = [
        e
        for ns in (env.a, env.b)
        for e in env.kube.list(path("Event", namespace=ns))
        if (e.get("lastTimestamp") or e.get("eventTime") or "") >= env.since
    ]
    out = []
    for uid, name in sorted(gone.items()):
        pod = name.split("/", 1)[1]
        why = [
            f"{_component(e)}: {e.get('reason')}"
            for e in events
            if e["involvedObject"].get("uid") == uid or pod in (e.get("message") or "")
        ]
        out.append(f"{name} ({', '.join(dict.fromkeys(why)) or 'no event'})")
    return out


def _admitted_owners(kube: Cluster, ns: str) -> set[str]:
    """uids of the objects (Jobs, pods) whose Workload Kueue has admitted."""
    out = set()
    for wl in kube.list(path("Workload", namespace=ns)):
        conds = (wl.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Admitted" and c["status"] == "True" for c in conds):
            out |= {o["uid"] for o in wl["metadata"].get("ownerReferences") or []}
    return out


def _uncovered(kube: Cluster, ns: str) -> list[str]:
    """The team's bound GPU pods that no admitted Workload covers (what gpuctl serve's backstop reports): not
    a pod of an admitted Job (its controller reference *and* the Job's own controller-uid label), nor a pod
    with an admitted Workload of its own."""
    owners = _admitted_owners(kube, ns)
    out = []
    for p in kube.list(path("Pod", namespace=ns)):
        if not p["spec"].get("nodeName") or p["metadata"].get("deletionTimestamp"):
            continue
        if p["status"].get("phase") in ("Succeeded", "Failed") or not pod_spec_gpus(p["spec"]):
            continue
        ctl = next((o for o in p["metadata"].get("ownerReferences") or [] if o.get("controller")), None)
        labels = p["metadata"].get("labels") or {}
        job_pod = ctl is not None and ctl.get("kind") == "Job"
        by_owner = ctl is not None and ctl.get("uid") in owners
        if job_pod and labels.get("batch.kubernetes.io/controller-uid") != ctl.get("uid"):
            by_owner = False  # a pod that only claims the Job
        if not (by_owner or p["metadata"]["uid"] in owners):
            out.append(f"{p['metadata']['name']} ({pod_spec_gpus(p['spec'])} GPUs, no admitted Workload)")
    return out


@dataclass
class Seen:
    kueue: int
    held: int
    devices: list[str]
    evicted: list[str]
    above: list[str] = field(default_factory=list)  # team A's Workloads ranked above gpuctl-high
    uncovered: list[str] = field(default_factory=list)  # bound GPU pods no admitted Workload covers

    @property
    def escaped(self) -> bool:
        return self.held > self.kueue or bool(self.devices) or bool(self.uncovered)


def look(env: Env) -> Seen:
    return Seen(
        kueue_gpus(env.kube, env.a),
        sum(held(env.kube, env.a).values()),
        _device_pods(env.kube, env.a),
        _evicted(env),
        _above_high(env),
        _uncovered(env.kube, env.a),
    )


def _above_high(env: Env) -> list[str]:
    """Team A's Workloads that Kueue ranks above gpuctl-high (their priority and where it came from)."""
    out = []
    for wl in env.kube.list(path("Workload", namespace=env.a)):
        prio = (wl.get("spec") or {}).get("priority") or 0
        if prio > PRIORITY_VALUE[Priority.HIGH]:
            ref = (wl["spec"].get("priorityClassRef") or {}).get("name", "?")
            out.append(f"Workload {wl['metadata']['name']} at priority {prio} ({ref})")
    return out


def _left(env: Env) -> list[str]:
    """Every object of team A an attack made (labelled `attack`), pods included."""
    p = env.admin("get", f"{_KINDS},pods", "-n", env.a, "-l", "attack", "-o", "name")
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def watch(env: Env, seconds: float = WATCH) -> Seen:
    """Watch team A for `seconds`: stop early at an escape or an eviction."""
    end = time.monotonic() + seconds
    seen = look(env)
    while time.monotonic() < end and not (seen.escaped or seen.evicted):
        time.sleep(1)
        seen = look(env)
    if seen.escaped or seen.evicted:  # let Kueue's count catch up (a finished Workload, a bound pod)
        time.sleep(5)
        later = look(env)
        if later.escaped or not seen.escaped:
            later.evicted = list(dict.fromkeys([*seen.evicted, *later.evicted]))
            seen = later
    return seen


# ---------------------------------------------------------------------------------------------------------
# Outcomes.


def refusal(p: subprocess.CompletedProcess) -> str:
    """What refused a kubectl command, in one short line."""
    err = re.sub(r" \(uid [0-9a-f-]+\)", "", " ".join(p.stderr.split()))
    if "breaks [" in err:
        rule = err[err.index("breaks [") + 8 :].split("]", 1)[0]
        said = err[err.index("breaks [") :].split("]: ", 1)[-1].split(". Fix:")[0].split("; ")[0]
        who = "policy" if "ValidatingAdmissionPolicy" in err else "webhook"
        return f"[{rule}] ({who}) {said[:110]}"
    if "cannot " in err and "forbidden" in err:
        i = err.index("cannot ")
        return f"RBAC: {err[i : i + 110].split(' in API group')[0].split(' in the namespace')[0]}"
    for marker in ("denied the request:", "Invalid value", "Forbidden:", "forbidden:"):
        if marker in err:
            i = err.index(marker)
            return err[i : i + 130]
    return err[:130]


@dataclass
class Outcome:
    kind: str  # REFUSED | QUEUED | ALLOWED | ESCAPED
    text: str
    seen: Seen | None = None

    def line(self) -> str:
        return f"{self.kind}: {self.text}" if self.text else self.kind


def judge(
    env: Env, seconds: float, attempts: list[tuple[str, subprocess.CompletedProcess]], what: str = ""
) -> Outcome:
    """The outcome of an attack from the commands it ran (the last is the attack itself, the others set it
    up or are the member's try before the editor's) and what then ran in the next `seconds`. (The
    arguments are evaluated in order: the attack has run when the watch begins.)"""
    refused = [(who, p) for who, p in attempts if p.returncode != 0]
    if len(refused) == len(attempts) and not _left(env):
        seconds = 0  # every step refused and nothing of the attack exists: nothing it made can run
    seen = watch(env, seconds) if seconds else look(env)
    parts = []
    if seen.escaped:
        text = f"team A's pods hold {seen.held} GPUs, Kueue counts {seen.kueue}"
        if seen.uncovered:
            text += f"; {', '.join(seen.uncovered)}"
        if seen.devices:
            text = f"{'; '.join(seen.devices)}: on real hardware it sees every GPU of the node"
        parts.append(text)
    if seen.evicted:
        parts.append(f"evicted {', '.join(seen.evicted)}")
    if seen.above and attempts[-1][1].returncode == 0:
        parts.append(f"{'; '.join(seen.above)}: above gpuctl-high, Kueue preempts for it")
    if seen.escaped or any("default-scheduler" in e for e in seen.evicted):  # kube-scheduler preempted for it
        kind = ESCAPED
    elif attempts[-1][1].returncode != 0:  # the attack's own step (the last; earlier ones set it up)
        kind = REFUSED
        parts.insert(0, "; ".join(f"{who}: {refusal(p)}" for who, p in refused))
    else:
        kind = QUEUED if not what else ALLOWED
        if what:
            parts.insert(0, what)
        for who, p in refused:
            parts.append(f"{who}: {refusal(p)}")
    return Outcome(kind, "; ".join(parts), seen)


# ---------------------------------------------------------------------------------------------------------
# The attacks: each returns its Outcome. `expect`: the outcomes allowed after issue 26.


@dataclass
class Attack:
    id: str
    title: str
    fn: Callable[[Env], Outcome]
    expect: tuple[str, ...]


ATTACKS: list[Attack] = []


def attack(title: str, *expect: str) -> Callable[[Callable[[Env], Outcome]], Callable[[Env], Outcome]]:
    def reg(fn: Callable[[Env], Outcome]) -> Callable[[Env], Outcome]:
        ATTACKS.append(Attack(fn.__name__.removeprefix("attack_").replace("_", "-"), title, fn, expect))
        return fn

    return reg


def _m(env: Env, obj: dict) -> list[tuple[str, subprocess.CompletedProcess]]:
    return [("member", env.create(env.member, obj))]


def _pod_attack(env: Env, obj: dict) -> list[tuple[str, subprocess.CompletedProcess]]:
    """A Pod: the member's roles cannot create one (recorded); the editor tries it."""
    return [("member", env.create(env.member, obj)), ("editor", env.create(env.editor, obj))]


def _fill_pod(env: Env) -> dict:
    (p,) = [
        x
        for x in env.kube.list(path("Pod", namespace=env.a), label_selector="job-name=fill")
        if x["status"].get("phase") == "Running"
    ]
    return p


def _uid(env: Env, kind: str, name: str) -> str:
    return env.kube.get(path(kind, name, env.a))["metadata"]["uid"]


@attack("raw GPU Job without a queue label", QUEUED)
def attack_job_without_queue_label(env: Env) -> Outcome:
    return judge(env, WATCH, _m(env, job(env.a, "noq", "job-without-queue-label")))


@attack("raw GPU Pod without a queue label", QUEUED)
def attack_pod_without_queue_label(env: Env) -> Outcome:
    return judge(env, WATCH, _pod_attack(env, pod(env.a, "noq", "pod-without-queue-label")))


@attack("spec.nodeName on a pool node (Job template; Pod)", QUEUED, REFUSED)
def attack_node_name(env: Env) -> Outcome:
    tries = _m(env, job(env.a, "pinned", "node-name", pool=None, nodeName="gpu-node-3"))
    tries += [
        (
            "editor",
            env.create(env.editor, pod(env.a, "pinned", "node-name", pool=None, nodeName="gpu-node-4")),
        )
    ]
    return judge(env, WATCH, tries)


@attack("nodeSelector for a pool with free GPUs", QUEUED)
def attack_node_selector(env: Env) -> Outcome:
    return judge(env, WATCH, _m(env, job(env.a, "sel", "node-selector", pool=FREE)))


@attack("required node affinity for a pool with free GPUs", QUEUED)
def attack_node_affinity(env: Env) -> Outcome:
    term = {"matchExpressions": [{"key": Labels.POOL, "operator": "In", "values": [FREE]}]}
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    return judge(env, WATCH, _m(env, job(env.a, "aff", "node-affinity", pool=None, affinity=aff)))


@attack("tolerations for the pool taint", QUEUED)
def attack_tolerations(env: Env) -> Outcome:
    tol = [{"key": Labels.POOL, "operator": "Exists", "effect": "NoSchedule"}]
    return judge(env, WATCH, _m(env, job(env.a, "tol", "tolerations", pool=FREE, tolerations=tol)))


@attack("un-suspending its own queued Job", REFUSED)
def attack_unsuspend(env: Env) -> Outcome:
    tries = _m(env, job(env.a, "unsus", "unsuspend", pool=FREE))
    wait_until(
        lambda: env.kube.get(path("Job", "unsus", env.a))["spec"].get("suspend"),
        20,
        what="suspended by Kueue",
    )
    tries.append(
        (
            "member",
            env.run(env.member, "patch", "job", "unsus", "--type=merge", "-p", '{"spec":{"suspend":false}}'),
        )
    )
    return judge(env, WATCH, tries)


@attack("raising the parallelism of its admitted Job", QUEUED, REFUSED)
def attack_scale_admitted_job(env: Env) -> Outcome:
    p = env.run(env.member, "patch", "job", "fill", "--type=merge", "-p", '{"spec":{"parallelism":3}}')
    return judge(env, 15, [("member", p)])


@attack("un-gating its own queued Pod (removing Kueue's scheduling gates)", REFUSED)
def attack_ungate(env: Env) -> Outcome:
    tries = _pod_attack(env, pod(env.a, "ungate", "ungate", labels={Labels.KUEUE_QUEUE: "default"}))
    wait_until(
        lambda: (
            (p := env.kube.get_or_none(path("Pod", "ungate", env.a))) and p["spec"].get("schedulingGates")
        ),
        20,
        what="gated by Kueue",
    )
    patch = json.dumps({"spec": {"schedulingGates": []}})
    tries.append(("editor", env.run(env.editor, "patch", "pod", "ungate", "--type=merge", "-p", patch)))
    return judge(env, WATCH, tries)


@attack("removing the queue label of its admitted Job", REFUSED)
def attack_remove_queue_label(env: Env) -> Outcome:
    p = env.run(env.member, "label", "job", "fill", f"{Labels.KUEUE_QUEUE}-")
    return judge(env, 4, [("member", p)])


@attack("a LocalQueue of its own pointing at team B's ClusterQueue", REFUSED)
def attack_foreign_local_queue(env: Env) -> Outcome:
    lq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "borrowed", "namespace": env.a, "labels": {"attack": "foreign-local-queue"}},
        "spec": {"clusterQueue": env.b},
    }
    return judge(env, 0, [("member", env.create(env.member, lq)), ("editor", env.create(env.editor, lq))])


@attack("priority escalation: kueue.x-k8s.io/priority-class gpuctl-high", QUEUED)
def attack_kueue_class_high(env: Env) -> Outcome:
    labels = {Labels.KUEUE_PRIORITY: "gpuctl-high"}
    return judge(env, WATCH, _m(env, job(env.a, "hi", "kueue-class-high", labels=labels)))


@attack("priority escalation: runwhere.ai/priority high (no Kueue class)", QUEUED, REFUSED)
def attack_runwhere_priority_high(env: Env) -> Outcome:
    return judge(
        env, WATCH, _m(env, job(env.a, "rwhi", "runwhere-priority-high", labels={Labels.PRIORITY: "high"}))
    )


@attack("priority escalation: priorityClassName system-cluster-critical on a Job", REFUSED)
def attack_system_cluster_critical(env: Env) -> Outcome:
    obj = job(env.a, "crit", "system-cluster-critical", priorityClassName="system-cluster-critical")
    return judge(env, 30, _m(env, obj))


@attack("priority escalation: another Kueue user's WorkloadPriorityClass (value 2e9)", REFUSED)
def attack_foreign_workload_class(env: Env) -> Outcome:
    obj = job(env.a, "urgent", "foreign-workload-class", labels={Labels.KUEUE_PRIORITY: URGENT})
    return judge(env, 30, _m(env, obj))


def _claim(env: Env, name: str, attack_id: str, owner: tuple[str, str, str, str], **kw) -> dict:
    api, kind, oname, uid = owner
    obj = pod(env.a, name, attack_id, labels={Labels.KUEUE_QUEUE: "default"}, **kw)
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": api, "kind": kind, "name": oname, "uid": uid, "controller": True}
    ]
    return obj


@attack("forged ownerReference: a Pod claiming its own Job, system-node-critical, in the full pool", REFUSED)
def attack_claim_job_critical(env: Env) -> Outcome:
    owner = ("batch/v1", "Job", "fill", _uid(env, "Job", "fill"))
    obj = _claim(env, "crit", "claim-job-critical", owner, priorityClassName="system-node-critical")
    obj["spec"]["nodeSelector"] = {Labels.POOL: FULL}
    return judge(env, 30, _pod_attack(env, obj))


@attack("forged ownerReference: a Pod claiming its own Job", REFUSED)
def attack_claim_job(env: Env) -> Outcome:
    owner = ("batch/v1", "Job", "fill", _uid(env, "Job", "fill"))
    return judge(env, WATCH, _pod_attack(env, _claim(env, "claim", "claim-job", owner)))


@attack("forged ownerReference: a Pod claiming its Deployment's ReplicaSet", REFUSED)
def attack_claim_replicaset(env: Env) -> Outcome:
    dep = _templated("Deployment", "apps/v1", env.a, "web", "claim-replicaset", 4, FREE, replicas=1)
    tries = [("member", env.create(env.member, dep))]
    rs = wait_until(
        lambda: env.kube.list(path("ReplicaSet", namespace=env.a), label_selector="app=web"), 30, what="rs"
    )[0]
    owner = ("apps/v1", "ReplicaSet", rs["metadata"]["name"], rs["metadata"]["uid"])
    tries += [("editor", env.create(env.editor, _claim(env, "claim", "claim-replicaset", owner)))]
    return judge(env, WATCH, tries)


@attack("forged ownerReference: a Pod claiming another of its pods", REFUSED)
def attack_claim_pod(env: Env) -> Outcome:
    fp = _fill_pod(env)
    owner = ("v1", "Pod", fp["metadata"]["name"], fp["metadata"]["uid"])
    return judge(env, WATCH, _pod_attack(env, _claim(env, "claim", "claim-pod", owner)))


@attack("forged ownerReference: a ghost owner (no such object)", REFUSED)
def attack_ghost_owner(env: Env) -> Outcome:
    owner = ("batch/v1", "Job", "ghost", str(uuid.uuid4()))
    return judge(env, WATCH, _pod_attack(env, _claim(env, "ghost", "ghost-owner", owner)))


@attack("taking its running Job pod's ownerReference away, then deleting the Job", REFUSED)
def attack_drop_owner_reference(env: Env) -> Outcome:
    name = _fill_pod(env)["metadata"]["name"]
    patch = '[{"op": "remove", "path": "/metadata/ownerReferences"}]'
    tries = [
        ("member", env.run(env.member, "patch", "pod", name, "--type=json", "-p", patch)),
        ("editor", env.run(env.editor, "patch", "pod", name, "--type=json", "-p", patch)),
    ]
    if tries[-1][1].returncode == 0:  # released: now the Job (and its Workload) can go, the pod stays
        env.run(env.member, "delete", "job", "fill")
    return judge(env, WATCH, tries)


@attack("relabelling its running Job pod (the Job releases it), then deleting the Job", REFUSED)
def attack_relabel_job_pod(env: Env) -> Outcome:
    name = _fill_pod(env)["metadata"]["name"]
    args = ("label", "pod", name, "--overwrite", "batch.kubernetes.io/controller-uid=x", "controller-uid=x")
    tries = [("member", env.run(env.member, *args)), ("editor", env.run(env.editor, *args))]
    if tries[-1][1].returncode == 0:
        wait_until(
            lambda: not env.kube.get(path("Pod", name, env.a))["metadata"].get("ownerReferences"),
            20,
            what="released",
        )
        env.run(env.member, "delete", "job", "fill")
    return judge(env, WATCH, tries)


@attack("DaemonSet GPU pods", QUEUED)
def attack_daemonset(env: Env) -> Outcome:
    ds = _templated("DaemonSet", "apps/v1", env.a, "ds", "daemonset", 1, FREE)
    return judge(env, WATCH, [("member", env.create(env.member, ds)), ("editor", env.create(env.editor, ds))])


@attack("CronJob GPU Jobs", QUEUED)
def attack_cronjob(env: Env) -> Outcome:
    j = job(env.a, "x", "cronjob", pool=FREE)
    cj = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "cj", "namespace": env.a, "labels": {"attack": "cronjob"}},
        "spec": {"schedule": "0 0 1 1 *", "jobTemplate": {"metadata": j["metadata"], "spec": j["spec"]}},
    }
    del cj["spec"]["jobTemplate"]["metadata"]["name"], cj["spec"]["jobTemplate"]["metadata"]["namespace"]
    tries = [("member", env.create(env.member, cj)), ("editor", env.create(env.editor, cj))]
    tries.append(("editor", env.run(env.editor, "create", "job", "cj-now", "--from=cronjob/cj")))
    return judge(env, WATCH, tries)


@attack("ReplicationController GPU pods", QUEUED)
def attack_replication_controller(env: Env) -> Outcome:
    rc = _templated("ReplicationController", "v1", env.a, "rc", "replication-controller", 4, FREE, replicas=1)
    return judge(env, WATCH, [("member", env.create(env.member, rc)), ("editor", env.create(env.editor, rc))])


@attack("bare ReplicaSet GPU pods", QUEUED, REFUSED)
def attack_bare_replicaset(env: Env) -> Outcome:
    rs = _templated("ReplicaSet", "apps/v1", env.a, "rs", "bare-replicaset", 4, FREE, replicas=1)
    return judge(env, WATCH, [("member", env.create(env.member, rs)), ("editor", env.create(env.editor, rs))])


@attack("GPUs in limits only", QUEUED)
def attack_gpu_limits_only(env: Env) -> Outcome:
    obj = job(env.a, "lim", "gpu-limits-only", pool=FREE)
    del obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"][GPU_RESOURCE]
    return judge(env, WATCH, _m(env, obj))


@attack("GPUs in an init container", QUEUED)
def attack_gpu_init_container(env: Env) -> Outcome:
    obj = job(env.a, "init", "gpu-init-container", gpus=0, pool=FREE)
    obj["spec"]["template"]["spec"]["initContainers"] = [_container(4, name="init")]
    return judge(env, WATCH, _m(env, obj))


@attack("GPUs in an ephemeral container; a privileged debug container", REFUSED)
def attack_ephemeral_container(env: Env) -> Outcome:
    name = _fill_pod(env)["metadata"]["name"]
    eph = {
        "spec": {
            "ephemeralContainers": [
                {"name": "dbg", "image": "busybox", "resources": {"limits": {GPU_RESOURCE: "4"}}}
            ]
        }
    }
    args = (
        "patch",
        "pod",
        name,
        "--subresource=ephemeralcontainers",
        "--type=strategic",
        "-p",
        json.dumps(eph),
    )
    debug = ("debug", name, "--image=busybox", "--profile=sysadmin", "-c", "dbg2", "--", "sleep", "1")
    tries = [("member", env.run(env.member, *args)), ("editor", env.run(env.editor, *args))]
    tries += [("editor", env.run(env.editor, *debug))]
    return judge(env, 4, tries)


@attack("GPUs added by in-place resize of a running pod", REFUSED)
def attack_resize(env: Env) -> Outcome:
    name = _fill_pod(env)["metadata"]["name"]
    patch = json.dumps(
        {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "resources": {"requests": {GPU_RESOURCE: "8"}, "limits": {GPU_RESOURCE: "8"}},
                    }
                ]
            }
        }
    )
    tries = [
        ("editor", env.run(env.editor, "patch", "pod", name, "--subresource=resize", "-p", patch)),
        ("editor", env.run(env.editor, "patch", "pod", name, "-p", patch)),
    ]
    return judge(env, 4, tries)


@attack("tampering with its namespace's labels", REFUSED)
def attack_namespace_labels(env: Env) -> Outcome:
    args = ("label", "namespace", env.a, f"{Labels.NAMESPACE}-")
    return judge(env, 0, [("member", env.run(env.member, *args)), ("editor", env.run(env.editor, *args))])


@attack("orphaning delete of its admitted Job: kubectl delete job --cascade=orphan", REFUSED)
def attack_orphan_delete_job(env: Env) -> Outcome:
    p = env.run(env.member, "delete", "job", "fill", "--cascade=orphan")
    return judge(env, 30, [("member", p)])


@attack(
    "orphaning delete of its admitted Job: a DELETE without propagationPolicy (client libraries)", REFUSED
)
def attack_delete_without_policy(env: Env) -> Outcome:
    p = env.run(env.member, "delete", "--raw", f"/apis/batch/v1/namespaces/{env.a}/jobs/fill")
    return judge(env, 30, [("member", p)])


def _free_quota(env: Env) -> None:
    """Give A's quota back (the team deletes its fill) so that an attack's own object is admitted first."""
    env.kube.delete(path("Job", "fill", env.a))
    wait_until(lambda: kueue_gpus(env.kube, env.a) == 0 and not held(env.kube, env.a), 60, what="quota free")
    env.victims = {uid: n for uid, n in env.victims.items() if not n.startswith(f"{env.a}/")}


def _running(env: Env, selector: str) -> bool:
    return any(
        p["status"].get("phase") == "Running"
        for p in env.kube.list(path("Pod", namespace=env.a), label_selector=selector)
    )


@attack("orphaning delete of its admitted StatefulSet", ALLOWED)
def attack_orphan_delete_statefulset(env: Env) -> Outcome:
    _free_quota(env)
    sts = _templated(
        "StatefulSet",
        "apps/v1",
        env.a,
        "nb",
        "orphan-delete-statefulset",
        4,
        FULL,
        replicas=1,
        serviceName="nb",
    )
    tries = [("member", env.create(env.member, sts))]
    wait_until(lambda: _running(env, "app=nb"), 60, what="statefulset running")
    tries.append(("member", env.run(env.member, "delete", "statefulset", "nb", "--cascade=orphan")))
    return judge(env, WATCH, tries, "its pods stay counted by Kueue (the pod group's Workload is theirs)")


@attack("orphaning delete of its Deployment's ReplicaSet", ALLOWED)
def attack_orphan_delete_replicaset(env: Env) -> Outcome:
    _free_quota(env)
    dep = _templated("Deployment", "apps/v1", env.a, "web", "orphan-delete-replicaset", 4, FULL, replicas=1)
    tries = [("member", env.create(env.member, dep))]
    wait_until(lambda: _running(env, "app=web"), 60, what="deployment running")
    rs = env.kube.list(path("ReplicaSet", namespace=env.a), label_selector="app=web")[0]["metadata"]["name"]
    args = ("delete", "replicaset", rs, "--cascade=orphan")
    tries += [("member", env.run(env.member, *args)), ("editor", env.run(env.editor, *args))]
    return judge(env, WATCH, tries, "its pods stay counted by Kueue (each is its own Workload)")


def _privileged(spec: dict) -> dict:
    spec = copy.deepcopy(spec)
    c = spec["containers"][0]
    c["securityContext"] = {"privileged": True}
    c["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    c["volumeMounts"] = [{"name": "dev", "mountPath": "/dev"}]
    spec["volumes"] = [{"name": "dev", "hostPath": {"path": "/dev"}}]
    return spec


@attack("CPU-only privileged pod with hostPath /dev and NVIDIA_VISIBLE_DEVICES=all on a pool node", REFUSED)
def attack_privileged_device_pod(env: Env) -> Outcome:
    obj = job(env.a, "priv", "privileged-device-pod", gpus=0, pool=FULL)
    obj["spec"]["template"]["spec"] = _privileged(obj["spec"]["template"]["spec"])
    p = pod(env.a, "priv", "privileged-device-pod", gpus=0, pool=FULL)
    p["spec"] = _privileged(p["spec"])
    return judge(env, 15, [("member", env.create(env.member, obj)), ("editor", env.create(env.editor, p))])


@attack("hostPID and SYS_ADMIN on a pool node", REFUSED)
def attack_host_pid(env: Env) -> Outcome:
    obj = job(env.a, "hostpid", "host-pid", gpus=0, pool=FULL, hostPID=True, hostIPC=True)
    obj["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {
        "capabilities": {"add": ["SYS_ADMIN"]}
    }
    return judge(env, 15, _m(env, obj))


def _other_gpus(env: Env, name: str, resource: str, n: str) -> Outcome:
    """A namespace editor's raw Job asking a GPU resource other than nvidia.com/gpu, on the free pool, while
    the team's budget is spent (issue 33: before, Kueue admitted these charged 0 and they ran)."""
    obj = job(env.a, name, name, gpus=0, pool=FREE)
    res = obj["spec"]["template"]["spec"]["containers"][0]["resources"]
    res["requests"][resource] = res["limits"][resource] = n
    out = judge(env, 15, [("editor", env.create(env.editor, obj))])
    made = env.kube.get_or_none(path("Job", name, env.a))
    if made is not None and made["spec"].get("suspend") is not True:
        # Admitted by Kueue beyond the spent budget (the test nodes advertise no such resource, so its pods
        # could not start here: the GPU count of `held` cannot see them, Kueue's admission can).
        return Outcome(ESCAPED, f"Kueue admitted it ({resource}: {n}) with the team's budget spent", out.seen)
    return out


@attack("amd.com/gpu: 4 beyond the team's budget (raw Job of a namespace editor)", QUEUED)
def attack_amd_gpus(env: Env) -> Outcome:
    return _other_gpus(env, "amd-gpus", "amd.com/gpu", "4")


@attack("a MIG instance nvidia.com/mig-1g.10gb beyond the team's budget", QUEUED)
def attack_mig_instance(env: Env) -> Outcome:
    return _other_gpus(env, "mig-instance", "nvidia.com/mig-1g.10gb", "1")


@attack("nvidia.com/gpu.shared: 16 time-slicing replicas beyond the team's budget", QUEUED)
def attack_shared_replicas(env: Env) -> Outcome:
    return _other_gpus(env, "shared-replicas", "nvidia.com/gpu.shared", "16")


@attack("a GPU resource Kueue does not charge (HAMi's nvidia.com/gpumem)", REFUSED)
def attack_uncharged_gpu_resource(env: Env) -> Outcome:
    return _other_gpus(env, "gpumem", "nvidia.com/gpumem", "4000")


URGENT = "urgent-t"  # a WorkloadPriorityClass another Kueue user made (value 2e9)
_KINDS = "jobs,cronjobs,deployments,statefulsets,replicasets,daemonsets,replicationcontrollers,localqueues"


def _fill(ns: str) -> dict:
    """Team A's admitted work. backoffLimit: a pod evicted by an attack is replaced, as any Job's would be."""
    obj = job(ns, "fill", "", pool=FULL, labels={Labels.KUEUE_PRIORITY: "gpuctl-high"})
    obj["spec"]["backoffLimit"] = 100
    for m in (obj["metadata"], obj["spec"]["template"]["metadata"]):
        del m["labels"]["attack"]
        m["labels"]["role"] = "fill"
    return obj


def _victims(ns: str, n: int) -> dict:
    """Team B's admitted work: n pods of 4 GPUs."""
    obj = job(ns, "victim", "", pool=FULL, labels={Labels.KUEUE_PRIORITY: "gpuctl-medium"})
    obj["spec"] |= {"parallelism": n, "completions": n, "backoffLimit": 100}
    for m in (obj["metadata"], obj["spec"]["template"]["metadata"]):
        del m["labels"]["attack"]
    return obj


def _healthy(obj: dict | None) -> bool:
    """A baseline Job that still runs as made: queued, not finished."""
    if obj is None or obj["metadata"]["labels"].get(Labels.KUEUE_QUEUE) is None:
        return False
    return not any(
        c["type"] in ("Failed", "Complete") for c in (obj.get("status") or {}).get("conditions") or []
    )


def _renew(env: Env, ns: str, name: str, make: Callable[[], dict]) -> str:
    """The baseline Job `name` as made, re-created when an attack broke it; its uid."""
    obj = env.kube.get_or_none(path("Job", name, ns))
    scaled = obj is not None and obj["spec"].get("parallelism", 1) != make()["spec"].get("parallelism", 1)
    if obj is not None and (scaled or not _healthy(obj)):
        env.kube.delete(path("Job", name, ns))
        wait_until(lambda: env.kube.get_or_none(path("Job", name, ns)) is None, 60, what=f"old {name} gone")
        obj = None
    if obj is None:
        obj = env.kube.create(make())
    return obj["metadata"]["uid"]


def _strays(env: Env, ns: str, job_uid: str) -> list[str]:
    """The namespace's pods that are not its baseline Job's own."""
    out = []
    for p in env.kube.list(path("Pod", namespace=ns)):
        owners = [o.get("uid") for o in p["metadata"].get("ownerReferences") or []]
        if (
            job_uid not in owners
            or p["metadata"]["labels"].get("batch.kubernetes.io/controller-uid") != job_uid
        ):
            out.append(p["metadata"]["name"])
    return out


def restore(env: Env) -> None:
    """Back to the baseline: in A only `fill` runs (4 GPUs, admitted), in B the 3 victim pods; every object
    and pod an attack left (orphans included) is gone. Raises when it cannot be reached."""
    env.admin("delete", _KINDS, "-n", env.a, "-l", "attack", "--cascade=background", "--wait=false")
    with contextlib.suppress(ApiError):
        env.kube.delete(path("Job", "cj-now", env.a))
    fill_uid = _renew(env, env.a, "fill", lambda: _fill(env.a))
    victim_uid = _renew(env, env.b, "victim", lambda: _victims(env.b, 3))
    for ns, uid in ((env.a, fill_uid), (env.b, victim_uid)):
        for name in _strays(env, ns, uid):
            env.kube.delete(path("Pod", name, ns), grace_seconds=0)
    wait_until(
        lambda: not _strays(env, env.a, fill_uid) and not _strays(env, env.b, victim_uid),
        90,
        what="every attack's pods gone",
    )
    alone = lambda: _running(env, "job-name=fill") and sum(held(env.kube, env.a).values()) == QUOTA  # noqa: E731
    try:
        wait_until(alone, 45, what="fill running alone")
    except AssertionError:
        # An evicted pod's replacement can stay gated (Kueue's TAS ungater counted the pods it placed):
        # the team re-submits its work, as a user would.
        env.kube.delete(path("Job", "fill", env.a))
        wait_until(lambda: env.kube.get_or_none(path("Job", "fill", env.a)) is None, 60, what="fill gone")
        env.kube.create(_fill(env.a))
        wait_until(alone, 120, what="fill running alone")
    wait_until(lambda: kueue_gpus(env.kube, env.a) == QUOTA, 60, what="Kueue counts the fill")
    b_running = lambda: len(_admitted_pods(env.kube, env.b)) == 3  # noqa: E731
    try:
        wait_until(b_running, 45, what="team B's pods running")
    except AssertionError:
        env.kube.delete(path("Job", "victim", env.b))
        wait_until(lambda: env.kube.get_or_none(path("Job", "victim", env.b)) is None, 60, what="victim gone")
        env.kube.create(_victims(env.b, 3))
        wait_until(b_running, 120, what="team B's pods running")
    env.victims = {**_admitted_pods(env.kube, env.a), **_admitted_pods(env.kube, env.b)}
    env.since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@pytest.fixture(scope="module")
def env(cluster: str, kube: Cluster, kubectl_bin: str, tmp_path_factory) -> Iterator[Env]:
    sfx = uuid.uuid4().hex[:5]
    a, b = f"atk-{sfx}", f"vic-{sfx}"
    tmp = tmp_path_factory.mktemp("attacks")
    reset_gpuctl_state(kube)
    stack = None
    members: list[TeamMember] = []
    try:
        assert (
            gpuctl_main(["create", "-f", str(ROOT / "examples" / "pools.yaml"), "--kubeconfig", cluster]) == 0
        )
        q = tmp / "quota.yaml"
        q.write_text(
            f"kind: quota\nquota: {{name: q-{sfx}}}\nnamespace:\n"
            f"  {a}: {{cpu: 64, memory: 256Gi, gpu: {QUOTA}, borrowingLimit: 0}}\n"
            f"  {b}: {{cpu: 64, memory: 256Gi, gpu: 12, borrowingLimit: 0}}\n"
        )
        assert gpuctl_main(["create", "-f", str(q), "--kubeconfig", cluster]) == 0
        kube.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": URGENT},
                "value": 2_000_000_000,
            }
        )
        stack = AdmissionStack.install(kube, kubectl_bin, cluster, [a, b], tmp)
        probe = pod(
            a, "probe", "probe", gpus=0, pool=None, volumes=[{"name": "h", "hostPath": {"path": "/etc"}}]
        )
        stack.wait_active(probe, "[host-path]")
        cpu = pod(a, "probe", "probe", gpus=0, pool=None)
        stack.wait_mutating(
            cpu, lambda o: TAS_UNCONSTRAINED in o["metadata"].get("annotations", {}), "topology policy"
        )
        if EARLIER_POLICY:
            labelled = pod(a, "probe", "probe", gpus=0, pool=None, labels={Labels.PRIORITY: "low"})
            stack.wait_mutating(
                labelled, lambda o: Labels.KUEUE_PRIORITY in o["metadata"]["labels"], "earlier-client policy"
            )
        apply_caller_roles(kube)
        member = TeamMember.create(kube, a, roles=SHIPPED_ROLES)
        editor = TeamMember.create(kube, a, roles=EDIT_ROLES)
        members += [member, editor]
        e = Env(kube, kubectl_bin, a, b, member, editor)
        # A's own admitted work, submitted by the member; B's fills the rest of the pool.
        assert e.create(member, _fill(a)).returncode == 0
        wait_until(lambda: _running(e, "job-name=fill"), 90, what="team A's fill running")
        kube.create(_victims(b, 3))
        restore(e)
        yield e
    finally:
        for m in members:
            with contextlib.suppress(ApiError):
                m.delete()
        if stack is not None:
            stack.remove()
        gpuctl_main(["delete", "quota", f"q-{sfx}", "--delete-namespace", "--kubeconfig", cluster])
        with contextlib.suppress(ApiError):
            kube.delete(path("WorkloadPriorityClass", URGENT))
        delete_namespaces(kube, [a, b])  # gone before the next module looks (it counts namespaces)
        reset_gpuctl_state(kube)


def _before() -> dict[str, str]:
    if not BEFORE_FILE.exists():
        return {}
    return json.loads(BEFORE_FILE.read_text())["attacks"]


@pytest.mark.parametrize("a", ATTACKS, ids=[a.id for a in ATTACKS])
def test_attack(env: Env, a: Attack) -> None:
    out = a.fn(env)
    env.results[a.id] = {"title": a.title, "outcome": out.line(), "kind": out.kind}
    if os.environ.get("GPUCTL_ATTACKS_DEBUG"):  # what the team had when the attack was judged
        for args in (("get", "workloads,jobs,pods", "-o", "wide"), ("describe", "workloads")):
            print(env.admin(*args, "-n", env.a).stdout[-6000:], file=sys.stderr)
    _write(env)
    try:
        if RECORD != "before":
            assert out.kind in a.expect, f"{a.title}: {out.line()}"
            assert not out.seen or not out.seen.escaped, out.line()
            assert not out.seen or not out.seen.evicted, out.line()
            # Kueue's count is what the team's pods hold (once pods being started or stopped settle).
            settled(env)
    finally:
        restore(env)


def settled(env: Env) -> Seen:
    """Wait until Kueue's count equals the GPUs team A's pods hold, within quota, with no pod uncovered and
    no admitted pod evicted; fail with what was seen last."""
    last: list[Seen] = []

    def ok() -> bool:
        last[:] = [look(env)]
        x = last[0]
        return x.held == x.kueue <= QUOTA and not x.uncovered and not x.evicted and not x.devices

    try:
        wait_until(ok, 30, what="Kueue's count equal to the GPUs the team holds")
    except AssertionError as e:
        raise AssertionError(f"{e}: {last[0]}") from None
    return last[0]


def _write(env: Env) -> None:
    before = _before()
    rows = [
        "| attack | before (main, without issue 26) | after |",
        "|---|---|---|",
    ]
    for a in ATTACKS:
        r = env.results.get(a.id)
        if r is None:
            continue
        cell = lambda s: s.replace("|", "\\|")  # noqa: E731
        rows.append(f"| {a.title} | {cell(before.get(a.id, '(not recorded)'))} | {cell(r['outcome'])} |")
    TABLE.parent.mkdir(exist_ok=True)
    TABLE.write_text("\n".join(rows) + "\n")
    if RECORD == "before":
        out = ROOT / "build" / "tenant-attacks-before.json"
        out.write_text(
            json.dumps({"attacks": {k: v["outcome"] for k, v in env.results.items()}}, indent=1) + "\n"
        )
    print("\n".join(rows))


def test_the_submitter_is_the_requester_not_what_the_object_says(env: Env, tmp_path: Path) -> None:
    """runwhere.ai/submitted-by (the audit trail's submitter) is the API server's word (the submitted-by
    MutatingAdmissionPolicy): a namespace editor's forged value is overwritten on create and kept on update,
    and `gpuctl create` (which no longer asks a SelfSubjectReview) gets its caller's name."""
    key = AUDIT_SUBMITTED_BY_ANNOTATION
    forged = job(env.a, "forged", "forged-submitter", gpus=0, pool=None)
    forged["metadata"]["annotations"] = {key: env.member.username}
    p = env.create(env.editor, forged)
    assert p.returncode == 0, p.stderr
    said = lambda name: env.kube.get(path("Job", name, env.a))["metadata"]["annotations"].get(key)  # noqa: E731
    assert said("forged") == env.editor.username
    p = env.run(env.editor, "annotate", "job", "forged", f"{key}=someone-else", "--overwrite")
    assert p.returncode == 0, p.stderr
    assert said("forged") == env.editor.username  # restored: the update cannot rewrite it
    spec = tmp_path / "mine.yaml"
    spec.write_text(
        f"kind: training\njob: {{name: mine, namespace: {env.a}}}\n"
        "environment: {image: busybox, env: [{GPUCTL_FAKE_RUNTIME: 30m}]}\n"
        f"resources: {{pool: {FREE}, gpu: 1, cpu: 1, memory: 1Gi}}\n"
    )
    r = env.member.gpuctl("create", "-f", str(spec))
    assert r.returncode == 0, r.stdout + r.stderr
    assert said("mine") == env.member.username  # queued behind the team's fill; who submitted it is known
    env.member.gpuctl("delete", "job", "mine", "-n", env.a)
    env.admin("delete", "job", "forged", "-n", env.a, "--cascade=background", "--wait=false")


def test_the_stop_and_resume_actor_is_the_requester_not_what_the_patch_says(env: Env, tmp_path: Path) -> None:
    """runwhere.ai/active-set-by (the trail's stop/resume actor) is the API server's word too (the
    gpuctl-active-set-by MutatingAdmissionPolicy): `gpuctl stop` by a team member names the member; a
    namespace admin (edit + gpuctl-user, a team lead) who resumes with a forged annotation and
    `--field-manager=kueue` is named; an annotation-only patch is undone; and `gpuctl history` shows the
    stamped name without "(unverified)"."""
    key = AUDIT_ACTIVE_SET_BY_ANNOTATION
    lead = TeamMember.create(env.kube, env.a, roles=(*EDIT_ROLES, USER_ROLE))
    try:
        spec = tmp_path / "held.yaml"
        spec.write_text(
            f"kind: training\njob: {{name: held, namespace: {env.a}}}\n"
            "environment: {image: busybox, env: [{GPUCTL_FAKE_RUNTIME: 30m}]}\n"
            f"resources: {{pool: {FREE}, gpu: 1, cpu: 1, memory: 1Gi}}\n"
        )
        r = env.member.gpuctl("create", "-f", str(spec))
        assert r.returncode == 0, r.stdout + r.stderr

        def workload() -> dict | None:
            return next(
                (w for w in env.kube.list(path("Workload", namespace=env.a))
                 if any(o.get("name") == "held" for o in w["metadata"].get("ownerReferences") or [])),
                None,
            )  # fmt: skip

        wl = wait_until(workload, 60, what="held's Workload")
        name = wl["metadata"]["name"]
        said = lambda: (workload() or {}).get("metadata", {}).get("annotations", {}).get(key)  # noqa: E731
        r = env.member.gpuctl("stop", "held", "-n", env.a)
        assert r.returncode == 0, r.stdout + r.stderr
        assert said() == env.member.username
        forged = {"metadata": {"annotations": {key: env.member.username}}, "spec": {"active": True}}
        p = env.run(lead, "patch", "workload", name, "--type=merge", "--field-manager=kueue",
                    "-p", json.dumps(forged))  # fmt: skip
        assert p.returncode == 0, p.stderr
        assert said() == lead.username  # the requester, not the forged name nor the field manager
        p = env.run(lead, "annotate", "workload", name, f"{key}={env.member.username}", "--overwrite")
        assert p.returncode == 0, p.stderr
        assert said() == lead.username  # restored: without a change of spec.active it keeps its value
        # The plain editor cannot touch Workloads at all (RBAC), forged or not.
        p = env.run(env.editor, "patch", "workload", name, "--type=merge", "-p", json.dumps(forged))
        assert p.returncode != 0 and "forbidden" in p.stderr.lower(), p.stderr
        # What `gpuctl history` reads from the Workload: the stamped name, unmarked.
        assert active_manager(workload() or {})[0] == lead.username
    finally:
        env.member.gpuctl("delete", "job", "held", "-n", env.a)
        lead.delete()
