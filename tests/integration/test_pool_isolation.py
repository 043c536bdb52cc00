# ruff: noqa: F811 - the gpuctl fixture is imported from test_cli_cluster and taken as a parameter
"""Pool GPUs run only Kueue-admitted work, from any namespace (issue 26), on the local cluster.

The platform as shipped: pools made by `gpuctl create` (nodes tainted runwhere.ai/pool=<pool>:NoSchedule,
flavors tolerating it), the webhook (every entry of manifests/admission/webhook.yaml, the isolation entry
included), the ValidatingAdmissionPolicy of manifests/admission/isolation.yaml and the topology
MutatingAdmissionPolicy. A pool full of Kueue-admitted work (gpuctl jobs in two team namespaces and a raw
`kubectl` Job of a namespace editor); then every way around Kueue a user outside team namespaces has,
each as a least-privilege `edit` user of `default` or of another namespace, and the earlier gpuctl client
run unchanged without -n. None may run on a pool node, and no admitted pod may be evicted or preempted
(same pods, same nodes, no restart; Kueue's usage equals the GPUs its pods hold). Each case's result is
printed as the attack table of the closing note (run with -s, or see the captured output).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from gpuctl.cluster import ApiError, path
from gpuctl.constants import GPU_RESOURCE, POOL_TAINT_KEY, Labels
from gpuctl.domain.pools import pool_taint, pool_toleration
from queues import resource_flavor
from tests.integration.conftest import delete_namespaces, reset_gpuctl_state, wait_until
from tests.integration.earlier_client import earlier_gpuctl
from tests.integration.tenancy import TeamMember, dump
from tests.integration.test_admission_webhook import _certs, _free_port, _start_server
from tests.integration.test_cli_cluster import gpuctl  # noqa: F401 - fixture

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests" / "admission"
TESTBED_LABEL = {"gpuctl.runwhere.ai/testbed": "true"}
VWC = "gpuctl-isolation-test"
TRAINING, INFERENCE = "training-pool", "inference-pool"
POOL_NODES = {"gpu-node-1": TRAINING, "gpu-node-2": TRAINING, "gpu-node-3": INFERENCE}
OFF_POOL_GPU_NODES = ("gpu-node-4", "gpu-node-5")  # 4 GPUs each, in no pool
CRITICAL = "iso-critical"  # a PriorityClass far above every gpuctl class
RUNTIME = [{"name": "GPUCTL_FAKE_RUNTIME", "value": "30m"}]

# (attack, result, detail) for the closing note's table; printed at the end of the module.
RESULTS: list[tuple[str, str, str]] = []


@dataclass
class Env:
    sfx: str
    team_a: str
    team_b: str
    other: str  # a namespace that is not a team namespace
    kubectl_bin: str
    kubeconfig: str
    in_default: TeamMember
    in_other: TeamMember
    in_team_a: TeamMember
    tmp: Path
    hook_url: str
    ca_b64: str
    cleanup: list[str] = field(default_factory=list)  # API paths to delete at the end


def _kubectl(bin_: str, kubeconfig: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [bin_, "--kubeconfig", kubeconfig, *args], input=input, capture_output=True, text=True, timeout=120
    )


def _webhooks(url: str, ca_b64: str) -> dict:
    """The shipped ValidatingWebhookConfiguration (every entry), pointed at the test's server by path."""
    vwc = yaml.safe_load((MANIFESTS / "webhook.yaml").read_text())
    vwc["metadata"] = {"name": VWC, "labels": dict(TESTBED_LABEL)}
    for w in vwc["webhooks"]:
        w["clientConfig"] = {"url": url + w["clientConfig"]["service"]["path"], "caBundle": ca_b64}
    return vwc


def _write(tmp: Path, name: str, doc: dict) -> str:
    f = tmp / f"{name}.yaml"
    f.write_text(yaml.safe_dump(doc))
    return str(f)


def _training(tmp: Path, name: str, ns: str, gpus: int, pool: str = TRAINING) -> str:
    return _write(
        tmp,
        name,
        {
            "kind": "training",
            "version": "v0.1",
            "job": {"name": name, "namespace": ns},
            "environment": {"image": "busybox", "env": RUNTIME},
            "resources": {"pool": pool, "gpu": gpus, "cpu": 1, "memory": "1Gi"},
        },
    )


def _container(gpus: int = 0) -> dict:
    c: dict = {"name": "c", "image": "busybox", "env": RUNTIME}
    if gpus:
        c["resources"] = {"limits": {GPU_RESOURCE: str(gpus)}}
    return c


def _pod(name: str, ns: str, gpus: int = 0, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [_container(gpus)], **spec},
    }


def _template(kind: str, name: str, ns: str, gpus: int, **spec) -> dict:
    pod_spec = {"containers": [_container(gpus)], **spec}
    tmpl = {"metadata": {"labels": {"app": name}}, "spec": pod_spec}
    if kind == "Job":
        pod_spec["restartPolicy"] = "Never"
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"template": tmpl},
        }
    body: dict = {"selector": {"matchLabels": {"app": name}}, "template": tmpl}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": ns}, "spec": body}


def _policy_denials(e: Env) -> int:
    """The API server's count of requests the isolation policy denied."""
    p = _kubectl(e.kubectl_bin, e.kubeconfig, "get", "--raw", "/metrics")
    total = 0
    for line in p.stdout.splitlines():
        if line.startswith("apiserver_validating_admission_policy_check_total{") and (
            'policy="gpuctl-isolation"' in line and 'enforcement_action="deny"' in line
        ):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def _gpu_pods_on(kube, nodes) -> list[dict]:
    out = []
    for n in nodes:
        out += kube.list(
            path("Pod"), field_selector=f"spec.nodeName={n},status.phase!=Succeeded,status.phase!=Failed"
        )
    return out


def _admitted(kube, env: Env) -> dict[str, tuple]:
    """Every pod of the team namespaces: uid -> (namespace/name, node, phase, restarts, being deleted)."""
    out = {}
    for ns in (env.team_a, env.team_b):
        for p in kube.list(path("Pod", namespace=ns)):
            st = p.get("status") or {}
            restarts = sum(c.get("restartCount", 0) for c in st.get("containerStatuses") or [])
            out[p["metadata"]["uid"]] = (
                f"{ns}/{p['metadata']['name']}",
                p["spec"].get("nodeName"),
                st.get("phase"),
                restarts,
                bool(p["metadata"].get("deletionTimestamp")),
            )
    return out


def _kueue_gpus(kube, ns: str) -> int:
    """GPUs Kueue counts as used by the team's ClusterQueue in training-pool."""
    cq = kube.get(path("ClusterQueue", ns))
    for fl in (cq.get("status") or {}).get("flavorsUsage") or []:
        if fl["name"] == TRAINING:
            for r in fl["resources"]:
                if r["name"] == GPU_RESOURCE:
                    return int(r["total"])
    return 0


def _held_gpus(kube, ns: str) -> int:
    held = 0
    for p in kube.list(path("Pod", namespace=ns)):
        if p["spec"].get("nodeName") in POOL_NODES and (p.get("status") or {}).get("phase") in (
            "Pending",
            "Running",
        ):
            for c in p["spec"]["containers"]:
                held += int(((c.get("resources") or {}).get("requests") or {}).get(GPU_RESOURCE, 0))
    return held


@pytest.fixture(scope="module")
def env(cluster: str, kube, kubectl_bin: str, tmp_path_factory) -> Iterator[Env]:
    sfx = uuid.uuid4().hex[:6]
    tmp = tmp_path_factory.mktemp("isolation")
    reset_gpuctl_state(kube)
    with contextlib.suppress(ApiError):
        kube.delete(path("ValidatingWebhookConfiguration", VWC))
    ca, crt, key = _certs(tmp)
    ca_b64 = base64.b64encode(ca.read_bytes()).decode()
    port = _free_port()
    proc = _start_server(port, crt, key, cluster, "enforce", tmp / "webhook.log")
    members: list[TeamMember] = []
    # kubectl for the policies and PriorityClasses: gpuctl's client knows only the kinds gpuctl uses.
    shipped = [str(MANIFESTS / "isolation.yaml"), str(MANIFESTS / "topology.yaml")]
    e: Env | None = None
    try:
        wait_until(lambda: _ready(port, ca), 30, 0.2, what="webhook ready")
        kube.apply(_webhooks(f"https://127.0.0.1:{port}", ca_b64))
        for f in shipped:
            p = _kubectl(kubectl_bin, cluster, "apply", "-f", f)
            assert p.returncode == 0, p.stderr
        team_a, team_b, other = f"iso-a-{sfx}", f"iso-b-{sfx}", f"iso-other-{sfx}"
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
        pools = tmp / "pools.yaml"
        pools.write_text(
            f"kind: pool\npool: {{name: {TRAINING}}}\nnodes: {{gpu-node-1: {{}}, gpu-node-2: {{}}}}\n---\n"
            f"kind: pool\npool: {{name: {INFERENCE}}}\nnodes: {{gpu-node-3: {{}}}}\n"
        )
        quota = tmp / "quota.yaml"
        quota.write_text(
            f"kind: quota\nquota: {{name: iso-{sfx}}}\nnamespace:\n"
            f"  {team_a}: {{gpu: 8, borrowingLimit: 0, pools: {{{TRAINING}: {{gpu: 8}}}}}}\n"
            f"  {team_b}: {{gpu: 8, borrowingLimit: 0, pools: {{{TRAINING}: {{gpu: 8}}}}}}\n"
        )
        from gpuctl.cli.main import main

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["create", "-f", str(pools), "-f", str(quota), "--kubeconfig", cluster])
        assert rc == 0, err.getvalue()
        in_default = TeamMember.create(kube, "default", roles=("edit",))
        members.append(in_default)
        in_other = TeamMember.create(kube, other, roles=("edit",))
        members.append(in_other)
        in_team_a = TeamMember.create(kube, team_a, roles=("edit",))
        members.append(in_team_a)
        e = Env(
            sfx,
            team_a,
            team_b,
            other,
            kubectl_bin,
            cluster,
            in_default,
            in_other,
            in_team_a,
            tmp,
            f"https://127.0.0.1:{port}",
            ca_b64,
        )
        # The API server picks the policy up asynchronously: wait until a side door is refused.
        probe = _pod(f"probe-{sfx}", other, tolerations=[{"operator": "Exists"}])
        wait_until(
            lambda: "gpuctl-isolation" in _apply(e, e.in_other, probe, "--dry-run=server").stderr,
            30,
            what="isolation policy active",
        )
        yield e
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(path("ValidatingWebhookConfiguration", VWC))
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        for f in shipped:
            _kubectl(kubectl_bin, cluster, "delete", "--ignore-not-found", "-f", f)
        for m in members:
            m.delete()
        if e is not None:
            for p in reversed(e.cleanup):
                with contextlib.suppress(ApiError):
                    kube.delete(p)
            delete_namespaces(kube, [e.team_a, e.team_b, e.other])
        _kubectl(kubectl_bin, cluster, "delete", "--ignore-not-found", "priorityclass", CRITICAL)
        reset_gpuctl_state(kube)
        log = tmp / "webhook.log"
        if log.exists():
            print(f"----- webhook log\n{log.read_text()[-3000:]}")
        print("\n===== attack table (issue 26, outside team namespaces) =====")
        for attack, result, detail in RESULTS:
            print(f"| {attack} | {result} | {detail[:300]} |")


def _ready(port: int, ca: Path) -> bool:
    from tests.integration.test_admission_webhook import _get

    try:
        return _get(port, ca, "/readyz")[0] == 200
    except OSError:
        return False


def _apply(e: Env, who: TeamMember, obj: dict, *extra: str) -> subprocess.CompletedProcess:
    return who.kubectl(e.kubectl_bin, "create", *extra, "-f", "-", input=yaml.safe_dump(obj))


def _refused(e: Env, who: TeamMember, attack: str, obj: dict, rule: str, via: str) -> str:
    """The attack is refused by `rule`, through `via` (the policy or the webhook); records it."""
    p = _apply(e, who, obj)
    assert p.returncode != 0, f"{attack}: expected a refusal, got {dump(p)}"
    assert f"[{rule}]" in p.stderr and "Fix: " in p.stderr, dump(p)
    assert ("-n <team>" in p.stderr) and via in p.stderr, dump(p)
    msg = p.stderr.strip().split("denied request: ")[-1].split("denied the request: ")[-1]
    RESULTS.append((attack, f"refused [{rule}] by the {via}", msg))
    return p.stderr


POLICY = "ValidatingAdmissionPolicy"
WEBHOOK = "isolation.admission.runwhere.ai"


def test_a_pool_full_of_admitted_work_survives_every_side_door(env: Env, kube, gpuctl, tmp_path) -> None:
    e = env
    # ---- pools made by gpuctl: nodes tainted, flavors created with the toleration (never re-created)
    flavors = {}
    for node, pool in POOL_NODES.items():
        n = kube.get(path("Node", node))
        assert pool_taint(pool) in [
            {k: t[k] for k in ("key", "value", "effect")} for t in n["spec"].get("taints") or []
        ], n["spec"]
        flavors[pool] = kube.get(path("ResourceFlavor", pool))
        assert flavors[pool]["spec"]["tolerations"][0] == pool_toleration(pool)
        assert flavors[pool]["metadata"]["generation"] == 1  # created with it, never changed
    for node in OFF_POOL_GPU_NODES:
        assert POOL_TAINT_KEY not in [
            t["key"] for t in kube.get(path("Node", node))["spec"].get("taints") or []
        ]

    # ---- fill training-pool (16 GPUs): gpuctl jobs in two teams, and a raw kubectl Job of team a's editor
    assert gpuctl("create", "-f", _training(tmp_path, "a-train", e.team_a, 4))[0] == 0
    assert gpuctl("create", "-f", _training(tmp_path, "b-train", e.team_b, 8))[0] == 0
    raw = _template("Job", "a-raw", e.team_a, 4, nodeSelector={Labels.POOL: TRAINING})
    p = _apply(e, e.in_team_a, raw)
    assert p.returncode == 0, dump(p)

    def all_running() -> dict:
        pods = _admitted(kube, e)
        ok = len(pods) == 3 and all(v[1] in POOL_NODES and v[2] == "Running" for v in pods.values())
        return pods if ok else {}

    before = wait_until(all_running, 180, 1, what="the pool full of admitted work")
    for ns in (e.team_a, e.team_b):
        for pod in kube.list(path("Pod", namespace=ns)):
            # Kueue added the flavor's toleration (the only way onto a pool node) and TAS placed it there.
            assert pool_toleration(TRAINING) in pod["spec"]["tolerations"], pod["spec"]
    assert _kueue_gpus(kube, e.team_a) == 8 and _kueue_gpus(kube, e.team_b) == 8
    RESULTS.append(
        (
            "gpuctl job and raw kubectl Job in a team namespace",
            "queued, admitted, ran on the tainted pool",
            "Kueue adds the flavor's toleration; TAS honours it",
        )
    )

    # ---- side doors from `default` (an editor of default)
    big = 8  # no node outside pools has 8 GPUs: only a pool node could take it
    d = e.in_default
    _refused(
        e,
        d,
        "GPU pod in default, nodeSelector pool",
        _pod(f"sel-{e.sfx}", "default", big, nodeSelector={Labels.POOL: TRAINING}),
        "pool-selection",
        POLICY,
    )
    _refused(
        e,
        d,
        "GPU pod in default, pool toleration",
        _pod(f"tol-{e.sfx}", "default", big, tolerations=[{"key": POOL_TAINT_KEY, "operator": "Exists"}]),
        "pool-toleration",
        POLICY,
    )
    _refused(
        e,
        d,
        "CPU pod in default, key-less Exists toleration",
        _pod(f"all-{e.sfx}", "default", tolerations=[{"operator": "Exists"}]),
        "pool-toleration",
        POLICY,
    )
    _refused(
        e,
        d,
        "GPU pod in default, nodeName of a pool node",
        _pod(f"nn-{e.sfx}", "default", 1, nodeName="gpu-node-1"),
        "pool-node-name",
        WEBHOOK,
    )
    _refused(
        e,
        d,
        "CPU pod in default, nodeName of a pool node",
        _pod(f"nn0-{e.sfx}", "default", nodeName="gpu-node-2"),
        "pool-node-name",
        WEBHOOK,
    )
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": Labels.POOL, "operator": "In", "values": [TRAINING]}]}
                ]
            }
        }
    }
    _refused(
        e,
        d,
        "GPU pod in default, node affinity to the pool",
        _pod(f"aff-{e.sfx}", "default", big, affinity=affinity),
        "pool-selection",
        POLICY,
    )
    # A high PriorityClass (as the earlier client creates its own): admitted by the API server, but the
    # pool nodes' taint is a filter kube-scheduler cannot preempt its way through.
    pc = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": CRITICAL},
        "value": 1_000_000_000,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    assert _kubectl(e.kubectl_bin, e.kubeconfig, "apply", "-f", "-", input=json.dumps(pc)).returncode == 0
    crit = _pod(f"crit-{e.sfx}", "default", big, priorityClassName=CRITICAL)
    p = _apply(e, d, crit)
    assert p.returncode == 0, dump(p)
    e.cleanup.append(path("Pod", crit["metadata"]["name"], "default"))

    # ---- side doors from another namespace (an editor of it)
    o = e.in_other
    _refused(
        e,
        o,
        "GPU Job in another namespace, key-less Exists toleration",
        _template("Job", f"j-{e.sfx}", e.other, 2, tolerations=[{"operator": "Exists"}]),
        "pool-toleration",
        POLICY,
    )
    _refused(
        e,
        o,
        "GPU Deployment in another namespace, nodeSelector pool",
        _template("Deployment", f"d-{e.sfx}", e.other, 1, nodeSelector={Labels.POOL: TRAINING}),
        "pool-selection",
        POLICY,
    )
    _refused(
        e,
        o,
        "GPU DaemonSet in another namespace tolerating pools",
        _template("DaemonSet", f"ds-{e.sfx}", e.other, 1, tolerations=[{"operator": "Exists"}]),
        "pool-toleration",
        POLICY,
    )
    _refused(
        e,
        o,
        "GPU pod in another namespace, high PriorityClass + pool toleration",
        _pod(
            f"crit2-{e.sfx}",
            e.other,
            big,
            priorityClassName=CRITICAL,
            tolerations=[{"key": POOL_TAINT_KEY, "operator": "Exists"}],
        ),
        "pool-toleration",
        POLICY,
    )
    forged = _pod(f"forged-{e.sfx}", e.other, 1, tolerations=[{"operator": "Exists"}])
    forged["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "x",
            "uid": str(uuid.uuid4()),
            "controller": True,
        }
    ]
    _refused(
        e, o, "GPU pod in another namespace claiming a DaemonSet owner", forged, "pool-toleration", POLICY
    )
    _refused(
        e,
        o,
        "Deployment in another namespace, nodeName of a pool node",
        _template("Deployment", f"dn-{e.sfx}", e.other, 0, nodeName="gpu-node-3"),
        "pool-node-name",
        WEBHOOK,
    )
    # Plain GPU work outside team namespaces still runs, off the pools: a Deployment's pods come from the
    # ReplicaSet controller (skipped by identity, their template was judged) and land on a node in no pool.
    plain = _template("Deployment", f"plain-{e.sfx}", e.other, 1)
    p = _apply(e, o, plain)
    assert p.returncode == 0, dump(p)

    def plain_running() -> str:
        for pod in kube.list(path("Pod", namespace=e.other), label_selector=f"app=plain-{e.sfx}"):
            if (pod.get("status") or {}).get("phase") == "Running":
                return pod["spec"]["nodeName"]
        return ""

    node = wait_until(plain_running, 90, 1, what="the plain GPU Deployment running off-pool")
    assert node in OFF_POOL_GPU_NODES
    RESULTS.append(("plain GPU Deployment in another namespace (no pool)", "ran off-pool", f"on {node}"))

    # ---- the earlier gpuctl client, unchanged, without -n (namespace default)
    client = earlier_gpuctl()
    # Its training-pool job, as its users write it (its own parser wants cpu as a string, so its shipped
    # examples with `cpu: 4` never leave the client). The client prints "Permission denied" for any 403,
    # so the API server's count of the policy's denials says who refused it.
    named = {
        "kind": "training",
        "version": "v0.1",
        "job": {"name": f"named-{e.sfx}", "priority": "high"},
        "environment": {"image": "busybox", "command": ["sleep", "1"]},
        "resources": {"pool": TRAINING, "gpu": 8, "cpu": "4", "memory": "16Gi"},
    }
    denials = _policy_denials(e)
    r = client.run(e.kubeconfig, "create", "-f", _write(tmp_path, "named", named))
    assert kube.get_or_none(path("Job", f"named-{e.sfx}", "default")) is None, r.stdout + r.stderr
    assert _policy_denials(e) == denials + 1, r.stdout + r.stderr
    printed = " ".join((r.stdout + r.stderr).split())[-160:]
    RESULTS.append(
        (
            "earlier client without -n: a high-priority training-pool job",
            "refused [pool-selection] by the ValidatingAdmissionPolicy",
            f"the client prints: {printed}",
        )
    )
    # Its job without a pool (required affinity runwhere.ai/pool DoesNotExist), priority high.
    for name, gpus in ((f"old-{e.sfx}", 8), (f"old1-{e.sfx}", 1)):
        doc = {
            "kind": "training",
            "version": "v0.1",
            "job": {"name": name, "priority": "high"},
            "environment": {"image": "busybox", "command": ["sleep", "1"]},
            "resources": {"gpu": gpus, "cpu": "1", "memory": "1Gi"},
        }
        r = client.run(e.kubeconfig, "create", "-f", _write(tmp_path, name, doc))
        assert kube.get_or_none(path("Job", name, "default")) is not None, r.stdout + r.stderr
        e.cleanup.append(path("Job", name, "default"))

    def earlier_pods() -> dict:
        pods = {}
        for name in (f"old-{e.sfx}", f"old1-{e.sfx}"):
            for pod in kube.list(path("Pod", namespace="default"), label_selector=f"job-name={name}"):
                pods[name] = pod
        return pods if len(pods) == 2 else {}

    def unschedulable(pod: dict) -> str:
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
                return c.get("message", "")
        return ""

    pods = wait_until(earlier_pods, 60, 1, what="the earlier client's pods")
    # ---- nothing from outside the teams runs on a pool node; the big ones wait, unschedulable
    crit_msg = wait_until(
        lambda: unschedulable(kube.get(path("Pod", f"crit-{e.sfx}", "default"))),
        90,
        1,
        what="the 1e9-priority pod judged unschedulable",
    )
    # kube-scheduler: the 3 pool nodes fail on their taint, which preemption cannot resolve.
    assert f"{len(POOL_NODES)} node(s) had untolerated taint" in crit_msg, crit_msg
    assert "Preemption is not helpful" in crit_msg, crit_msg
    RESULTS.append(
        (
            f"GPU pod in default, PriorityClass 1e9 PreemptLowerPriority, {big} GPUs",
            "pending, not placed",
            crit_msg,
        )
    )
    old_msg = wait_until(
        lambda: unschedulable(kube.get(path("Pod", pods[f"old-{e.sfx}"]["metadata"]["name"], "default"))),
        90,
        1,
        what="the earlier client's 8-GPU job unschedulable",
    )
    RESULTS.append(
        ("earlier client without -n: job without a pool, gpuctl-high, 8 GPUs", "pending off-pool", old_msg)
    )
    small = wait_until(
        lambda: kube.get(path("Pod", pods[f"old1-{e.sfx}"]["metadata"]["name"], "default"))["spec"].get(
            "nodeName"
        ),
        90,
        1,
        what="the earlier client's 1-GPU job placed",
    )
    assert small in OFF_POOL_GPU_NODES
    RESULTS.append(("earlier client without -n: job without a pool, 1 GPU", "ran off-pool", f"on {small}"))
    # Give kube-scheduler time for a preemption it must not make, then compare.
    time.sleep(5)
    for pod in kube.list(path("Pod", namespace="default")):
        assert not (pod.get("status") or {}).get("nominatedNodeName"), pod["metadata"]["name"]
    on_pools = _gpu_pods_on(kube, POOL_NODES)
    strangers = [
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in on_pools
        if p["metadata"]["namespace"] not in (e.team_a, e.team_b)
        and not any(r.get("kind") == "DaemonSet" for r in p["metadata"].get("ownerReferences") or [])
    ]
    assert strangers == [], strangers
    after = _admitted(kube, e)
    assert after == before, (before, after)  # same pods (UIDs), nodes, Running, no restart, none deleted
    for ns in (e.team_a, e.team_b):
        assert _kueue_gpus(kube, ns) == _held_gpus(kube, ns) == 8, ns
    RESULTS.append(
        (
            "(after every attack) admitted pods",
            "untouched",
            "same UIDs and nodes, 0 restarts, none "
            "evicted or preempted; Kueue's usage = GPUs its pods hold (8 + 8)",
        )
    )


def test_a_daemonset_without_gpus_still_runs_on_every_pool_node(env: Env, kube) -> None:
    e = env
    ds = _template("DaemonSet", f"agent-{e.sfx}", e.other, 0, tolerations=[{"operator": "Exists"}])
    p = _apply(e, e.in_other, ds)
    assert p.returncode == 0, dump(p)

    def placed() -> set:
        pods = kube.list(path("Pod", namespace=e.other), label_selector=f"app=agent-{e.sfx}")
        return {p["spec"].get("nodeName") for p in pods if (p.get("status") or {}).get("phase") == "Running"}

    nodes = wait_until(
        lambda: placed() >= set(POOL_NODES) and placed(), 120, 1, what="agent on every pool node"
    )
    RESULTS.append(
        (
            "DaemonSet without GPUs tolerating everything (another namespace)",
            "ran on every pool node",
            ", ".join(sorted(nodes)),
        )
    )


def test_while_the_webhook_is_down_only_user_made_nodename_pods_are_refused(env: Env, kube) -> None:
    e = env
    dead = _webhooks(f"https://127.0.0.1:{_free_port()}", e.ca_b64)
    dead["webhooks"] = [w for w in dead["webhooks"] if w["name"] == WEBHOOK]
    kube.apply(dead | {"metadata": {**dead["metadata"], "name": f"{VWC}-down"}})
    try:
        nn = _pod(f"down-nn-{e.sfx}", e.other, nodeName="gpu-node-4")  # not even a pool node
        wait_until(
            lambda: "failed calling webhook" in _apply(e, e.in_other, nn, "--dry-run=server").stderr,
            30,
            what="the dead webhook registered",
        )
        # A GPU pod without any pool in it never reaches the webhook; a pool toleration is refused by the
        # policy, which runs in the API server.
        p = _apply(e, e.in_other, _pod(f"down-gpu-{e.sfx}", e.other, 1), "--dry-run=server")
        assert p.returncode == 0, dump(p)
        p = _apply(
            e,
            e.in_other,
            _pod(f"down-tol-{e.sfx}", e.other, tolerations=[{"operator": "Exists"}]),
            "--dry-run=server",
        )
        assert "gpuctl-isolation" in p.stderr and "[pool-toleration]" in p.stderr, dump(p)
        p = _apply(
            e,
            e.in_other,
            _template("DaemonSet", f"down-ds-{e.sfx}", e.other, 0, tolerations=[{"operator": "Exists"}]),
            "--dry-run=server",
        )
        assert p.returncode == 0, dump(p)
        RESULTS.append(
            (
                "(webhook down) pod with nodeName outside team namespaces",
                "refused (failurePolicy Fail)",
                "plain GPU pods and CPU DaemonSets still admitted; tolerations still refused by the policy",
            )
        )
    finally:
        kube.delete(path("ValidatingWebhookConfiguration", f"{VWC}-down"))


def test_adopt_and_apply_bring_old_pools_to_the_tainted_state_without_evicting(
    env: Env, kube, gpuctl, tmp_path
) -> None:
    """Pools of an earlier gpuctl (flavor without the toleration, nodes labelled but never tainted) with a
    pod already running on them: `gpuctl apply` of the pool and `gpuctl adopt` say what they change, then
    taint the nodes and re-create the flavors with the toleration; the running pods stay."""
    e = env
    made: list[str] = []

    def old_pool(pool: str, node: str) -> tuple[str, str]:
        """An earlier gpuctl's pool of one node, and a CPU pod already running there: (pod name, uid)."""
        kube.apply(resource_flavor(pool))  # as gpuctl made it before issue 26: no toleration
        made.append(pool)
        kube.merge_patch(path("Node", node), {"metadata": {"labels": {Labels.POOL: pool}}})
        pod = _pod(f"squat-{pool}-{e.sfx}", e.other, nodeSelector={Labels.POOL: pool})
        assert _apply(e, e.in_other, pod).returncode == 0
        name = pod["metadata"]["name"]
        e.cleanup.append(path("Pod", name, e.other))

        def running() -> str:
            p = kube.get(path("Pod", name, e.other))
            return p["metadata"]["uid"] if (p.get("status") or {}).get("phase") == "Running" else ""

        return name, str(wait_until(running, 60, what=f"a pod already on {pool}"))

    def still_running(name: str, uid: str) -> None:
        pod = kube.get(path("Pod", name, e.other))
        assert (
            pod["metadata"]["uid"] == uid and pod["status"]["phase"] == "Running"
        )  # NoSchedule: not evicted

    try:
        # `gpuctl apply` of an old pool: a dry run says what changes, then the change.
        pod_a, uid_a = old_pool("old-a", "gpu-node-4")
        f = tmp_path / "old-a.yaml"
        f.write_text("kind: pool\npool: {name: old-a}\nnodes: {gpu-node-4: {}}\n")
        rc, out, err = gpuctl("apply", "-f", str(f), "--dry-run=client")
        assert rc == 0, err
        assert "resourceflavor/old-a tolerations set (re-created" in out, out
        assert "node/gpu-node-4 tainted runwhere.ai/pool=old-a:NoSchedule" in out, out
        assert kube.get(path("ResourceFlavor", "old-a"))["spec"].get("tolerations") is None
        rc, out, err = gpuctl("apply", "-f", str(f))
        assert rc == 0, err
        assert kube.get(path("ResourceFlavor", "old-a"))["spec"]["tolerations"] == [pool_toleration("old-a")]
        assert pool_taint("old-a") in kube.get(path("Node", "gpu-node-4"))["spec"]["taints"]
        still_running(pod_a, uid_a)

        # `gpuctl adopt`: the plan, then --yes.
        pod_b, uid_b = old_pool("old-b", "gpu-node-5")
        rc, out, err = gpuctl("adopt", "--no-default-pool")
        assert rc == 0, err
        assert "resourceflavor/old-b tolerates runwhere.ai/pool=old-b:NoSchedule" in out, out
        assert "node/gpu-node-5 tainted runwhere.ai/pool=old-b:NoSchedule" in out, out
        assert f"{e.other}/{pod_b} on gpu-node-5" in out, out  # said to keep running
        assert "dry run: nothing changed" in out
        assert kube.get(path("ResourceFlavor", "old-b"))["spec"].get("tolerations") is None
        rc, out, err = gpuctl("adopt", "--no-default-pool", "--yes")
        assert rc == 0, err
        assert kube.get(path("ResourceFlavor", "old-b"))["spec"]["tolerations"] == [pool_toleration("old-b")]
        assert pool_taint("old-b") in kube.get(path("Node", "gpu-node-5"))["spec"]["taints"]
        still_running(pod_b, uid_b)
        rc, out, err = gpuctl("adopt", "--no-default-pool")
        assert rc == 0 and "nothing to adopt" in out, out + err
        RESULTS.append(
            (
                "adopt / apply of pools made before issue 26",
                "tainted, flavors re-created tolerating",
                "plan first; the pod already on the old pool kept running (same UID)",
            )
        )
    finally:
        for pool in made:
            with contextlib.suppress(Exception):
                gpuctl("delete", "pool", pool, "--keep-running")
        for node in OFF_POOL_GPU_NODES:
            n = kube.get(path("Node", node))
            kept = [t for t in n["spec"].get("taints") or [] if t.get("key") != POOL_TAINT_KEY]
            kube.merge_patch(
                path("Node", node),
                {"metadata": {"labels": {Labels.POOL: None}}, "spec": {"taints": kept or None}},
            )


OPERATOR_NS = "gpu-operator"  # the GPU Operator's default namespace, exempt by default
# The GPU Operator's validator DaemonSet tolerations (nvidia.com/gpu NoSchedule) plus the pool toleration
# docs/adoption.md has the admin give the operator's DaemonSets.
OPERATOR_TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": POOL_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
]


def _operator_objects(sfx: str, node: str) -> tuple[dict, dict]:
    """A pod shaped like the GPU Operator's plugin validator (a bare Pod of its own ServiceAccount, nodeName
    set, the validator DaemonSet's tolerations, 1 GPU) and a DaemonSet shaped like its device plugin's
    (privileged, hostPath device-plugins, system-node-critical; kept to `node` by a hostname selector
    instead of the operator's nvidia.com/gpu.deploy.device-plugin label, which the test nodes lack)."""
    validator = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"nvidia-device-plugin-validator-{sfx}", "namespace": OPERATOR_NS},
        "spec": {
            "serviceAccountName": "nvidia-operator-validator",
            "nodeName": node,
            "tolerations": OPERATOR_TOLERATIONS,
            "restartPolicy": "OnFailure",
            "containers": [
                {
                    "name": "plugin-validation",
                    "image": "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.3.0",
                    "env": RUNTIME,
                    "resources": {"limits": {GPU_RESOURCE: "1"}},
                }
            ],
        },
    }
    labels = {"app": f"nvidia-device-plugin-{sfx}"}
    plugin = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": f"nvidia-device-plugin-daemonset-{sfx}", "namespace": OPERATOR_NS},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": "nvidia-device-plugin",
                    "priorityClassName": "system-node-critical",
                    "tolerations": OPERATOR_TOLERATIONS,
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [
                        {
                            "name": "nvidia-device-plugin",
                            "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                            "env": RUNTIME,
                            "securityContext": {"privileged": True},
                            "volumeMounts": [{"name": "dp", "mountPath": "/var/lib/kubelet/device-plugins"}],
                        }
                    ],
                    "volumes": [{"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}],
                },
            },
        },
    }
    return validator, plugin


def test_gpu_operator_pods_run_on_a_pool_node_and_tenants_cannot_use_the_exemption(env: Env, kube) -> None:
    """Issue 33: the GPU Operator's namespace is exempt (exemptNamespaces' default), so its
    validator and device plugin run on pool nodes; a tenant has no rights there, so the exemption is no
    side door: a team member and a team namespace's editor are refused by RBAC."""
    e = env
    node = "gpu-node-3"  # inference-pool
    made_ns = kube.get_or_none(path("Namespace", OPERATOR_NS)) is None
    if made_ns:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NS}})
    member = TeamMember.create(kube, e.team_a)  # gpuctl's shipped roles
    validator, plugin = _operator_objects(e.sfx, node)
    objs = [
        *(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": n, "namespace": OPERATOR_NS}}
            for n in ("nvidia-operator-validator", "nvidia-device-plugin")
        ),
        validator,
        plugin,
    ]
    try:
        for o in objs:  # kubectl: gpuctl's client knows only the kinds gpuctl writes (no DaemonSet)
            p = _kubectl(e.kubectl_bin, e.kubeconfig, "apply", "-f", "-", input=yaml.safe_dump(o))
            assert p.returncode == 0, dump(p)

        def running(selector: str = "", name: str = "") -> dict | None:
            pods = kube.list(path("Pod", namespace=OPERATOR_NS), label_selector=selector or None)
            for pod in pods:
                if (name in ("", pod["metadata"]["name"])) and (pod.get("status") or {}).get(
                    "phase"
                ) == "Running":
                    return pod
            return None

        v = wait_until(lambda: running(name=validator["metadata"]["name"]), 60, what="validator running")
        assert v["spec"]["nodeName"] == node and POOL_NODES[node] == INFERENCE
        d = wait_until(
            lambda: running(selector=f"app=nvidia-device-plugin-{e.sfx}"), 60, what="plugin running"
        )
        assert d["spec"]["nodeName"] == node
        RESULTS.append(
            (
                "GPU Operator validator (bare Pod, nodeName, 1 GPU) and device-plugin DaemonSet",
                "run on the pool node",
                f"{v['metadata']['name']} and {d['metadata']['name']} Running on {node} (exempt namespace)",
            )
        )
        # The exemption is the namespace's, and a tenant has no rights there.
        for who, role in ((member, "gpuctl-user"), (e.in_team_a, "edit of its team namespace")):
            pod = _pod(f"side-{e.sfx}", OPERATOR_NS, gpus=1, nodeName=node, tolerations=OPERATOR_TOLERATIONS)
            p = who.kubectl(e.kubectl_bin, "create", "-n", OPERATOR_NS, "-f", "-", input=yaml.safe_dump(pod))
            assert p.returncode != 0 and "forbidden" in p.stderr.lower(), dump(p)
            assert 'cannot create resource "pods"' in p.stderr, dump(p)
            RESULTS.append(
                (f"a tenant ({role}) creates a GPU pod in {OPERATOR_NS}", "refused by RBAC", p.stderr.strip())
            )
    finally:
        member.delete()
        for o in reversed(objs):
            _kubectl(
                e.kubectl_bin,
                e.kubeconfig,
                "delete",
                "--ignore-not-found",
                "--wait=false",
                "-f",
                "-",
                input=yaml.safe_dump(o),
            )
        if made_ns:
            with contextlib.suppress(ApiError):
                kube.delete(path("Namespace", OPERATOR_NS))
