"""The webhook on the local cluster, registered by URL next to Kueue's own webhooks.

The module starts two webhook servers on 127.0.0.1 (one `enforce`, one `warn`) with a certificate from a CA
made here, and registers them with the shipped manifests' rules and matchConditions (only clientConfig and
selectors changed, so that they see only this module's namespaces and nodes and cannot disturb other
tests). Then: raw `kubectl apply` of each bad object is denied with its rule and fix, good objects and
gpuctl's own submissions pass (a gpuctl training Job runs to completion through Kueue), `--dry-run=server`
works, UPDATEs are judged against the old object, and warn mode lets objects through with kubectl warnings.
The webhook configurations are deleted first in teardown: a dangling failurePolicy=Fail webhook would
break the cluster for everyone (they also carry the testbed label that hack/cluster/down.sh cleans up).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import shutil
import socket
import ssl
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from admission.identities import CONTROLLER_USERS, KUEUE_USER
from gpuctl.cluster import ApiError, path
from gpuctl.constants import (
    COHORT_NAME,
    GPU_RESOURCE,
    KUEUE_API_VERSION,
    PRIORITY_CLASS,
    TAS_UNCONSTRAINED,
    Labels,
    Priority,
)
from gpuctl.spec import load_text
from queues import (
    PoolGuarantee,
    TeamQuota,
    budget_flavor,
    cluster_queue,
    local_queue,
    resource_flavor,
    team_namespace,
    topology,
    workload_priority_classes,
)
from tests.integration.conftest import wait_until
from tests.integration.fake_nodes import fake_node

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests" / "admission"
TESTBED_LABEL = {"gpuctl.runwhere.ai/testbed": "true"}
ALLOWED_HOST_PATH = "/scratch/gpuctl-test"  # a data root added by flag


@dataclass
class Env:
    sfx: str
    team: str  # managed, LocalQueue default, enforce webhook
    noq: str  # managed, no LocalQueue, enforce webhook
    warn: str  # managed, LocalQueue default, warn webhook
    legacy: str  # made unmanaged (objects created without review), then marked managed; enforce webhook
    big: str  # pool with an 8-GPU node
    small: str  # pool with a 4-GPU node
    nodes: tuple[str, str, str]  # in pool big, in pool small, in no pool
    kubectl_bin: str
    kubeconfig: str
    configs: tuple[str, ...]
    logs: Path = Path()  # the webhook servers' logs (enforce.log, warn.log)

    def enforce_denied(self, what: str) -> bool:
        """The enforce server logged a denial of `what` ("Job ns/name"): it denied, whoever answered first."""
        return f"deny {what} " in (self.logs / "enforce.log").read_text()

    @property
    def user(self) -> str:
        """A team member: `edit` in the team namespaces, nothing cluster-wide but reading nodes."""
        return f"alice-{self.sfx}"

    def as_user(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return self.kubectl(f"--as={self.user}", *args, input=input)

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.kubectl_bin, "--kubeconfig", self.kubeconfig, *args],
            input=input,
            capture_output=True,
            text=True,
        )

    def apply(self, obj: dict | list[dict], *extra: str) -> subprocess.CompletedProcess:
        docs = obj if isinstance(obj, list) else [obj]
        return self.kubectl("apply", *extra, "-f", "-", input=yaml.safe_dump_all(docs))


def _openssl(*args: object) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def _certs(d: Path) -> tuple[Path, Path, Path]:
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    _openssl(
        "req",
        "-x509",
        *ec,
        "-days",
        "2",
        "-subj",
        "/CN=gpuctl-admission-test-ca",
        "-keyout",
        d / "ca.key",
        "-out",
        d / "ca.crt",
    )
    _openssl("req", *ec, "-subj", "/CN=127.0.0.1", "-keyout", d / "tls.key", "-out", d / "tls.csr")
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        d / "tls.csr",
        "-CA",
        d / "ca.crt",
        "-CAkey",
        d / "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        d / "ext",
        "-out",
        d / "tls.crt",
    )
    return d / "ca.crt", d / "tls.crt", d / "tls.key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, ca: Path, route: str) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}{route}", context=ctx, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _start_server(port: int, crt: Path, key: Path, kubeconfig: str, mode: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "admission",
            "serve",
            "--tls-cert",
            str(crt),
            "--tls-key",
            str(key),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--mode",
            mode,
            "--kubeconfig",
            kubeconfig,
            "--allowed-host-path",
            ALLOWED_HOST_PATH,
        ],
        cwd=ROOT,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )


def _webhook_config(
    name: str, url: str, ca_b64: str, namespaces: list[str], node_label: dict, prefix: str
) -> dict:
    """The shipped configuration, pointed at `url` and narrowed to this module's namespaces and nodes."""
    vwc = yaml.safe_load((MANIFESTS / "webhook.yaml").read_text())
    vwc["metadata"] = {"name": name, "labels": dict(TESTBED_LABEL)}
    for w in vwc["webhooks"]:
        w["name"] = prefix + w["name"]
        w["clientConfig"] = {"url": url, "caBundle": ca_b64}
        if "namespaceSelector" in w:
            w["namespaceSelector"] = copy.deepcopy(w["namespaceSelector"])
            w["namespaceSelector"]["matchExpressions"].append(
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}
            )
        else:
            w["objectSelector"] = {"matchLabels": node_label}
    return vwc


def _fake_node(name: str, pool: str | None, gpus: int, sfx: str) -> dict:
    labels = {"admission-test": sfx, **({Labels.POOL: pool} if pool else {})}
    return fake_node(name, labels, {GPU_RESOURCE: str(gpus)})


@pytest.fixture(scope="module")
def env(cluster: str, kube, kubectl_bin: str, tmp_path_factory) -> Iterator[Env]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make the webhook's certificate")
    sfx = uuid.uuid4().hex[:6]
    tmp = tmp_path_factory.mktemp("admission")
    ca, crt, key = _certs(tmp)
    ca_b64 = base64.b64encode(ca.read_bytes()).decode()
    e = Env(
        sfx,
        f"adm-{sfx}",
        f"adm-{sfx}-noq",
        f"adm-{sfx}-warn",
        f"adm-{sfx}-legacy",
        f"adm-{sfx}-big",
        f"adm-{sfx}-small",
        (f"adm-{sfx}-n1", f"adm-{sfx}-n2", f"adm-{sfx}-n3"),
        kubectl_bin,
        cluster,
        (),
        tmp,
    )
    created: list[str] = []  # API paths to delete, in reverse
    procs: list[subprocess.Popen] = []
    try:
        # the node Topology too: pool flavors are TAS flavors (issue 15), inactive without it
        for obj in [*workload_priority_classes(), budget_flavor(), topology()]:
            if kube.get_or_none(path(obj["kind"], obj["metadata"]["name"])) is None:
                kube.apply(obj)
                created.append(path(obj["kind"], obj["metadata"]["name"]))
        # gpuctl's pool creation (a test below) writes the root Cohort; remove it after if it is new.
        if kube.get_or_none(path("Cohort", COHORT_NAME)) is None:
            created.append(path("Cohort", COHORT_NAME))
        for pool in (e.big, e.small):
            kube.apply(resource_flavor(pool))
            created.append(path("ResourceFlavor", pool))
        for name, pool, gpus in ((e.nodes[0], e.big, 8), (e.nodes[1], e.small, 4), (e.nodes[2], None, 2)):
            node = _fake_node(name, pool, gpus, sfx)
            if (
                pool == e.big
            ):  # GPU feature discovery's model label: mig-profile reads the pool's GPUs from it
                node["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
            kube.create(node)
            created.append(path("Node", name))
        pools = {
            e.big: PoolGuarantee(gpu=8, cpu="96", memory="1Ti"),
            e.small: PoolGuarantee(gpu=4, cpu="96", memory="1Ti"),
        }
        for ns, with_queue in ((e.team, True), (e.noq, False), (e.warn, True), (e.legacy, True)):
            team = TeamQuota(namespace=ns, quota_name=f"q-{sfx}", pools=pools)
            nsobj = team_namespace(team)
            if ns == e.legacy:  # not managed yet: its objects are made without review (see the test)
                del nsobj["metadata"]["labels"][Labels.NAMESPACE]
            kube.apply(nsobj)
            created.append(path("Namespace", ns))
            if with_queue:
                kube.apply(cluster_queue(team, [e.big, e.small]))
                created.append(path("ClusterQueue", ns))
                kube.apply(local_queue(ns))
                kube.apply(_held_queue(ns))
            kube.apply(_edit_binding(ns, e.user))
        for obj in _node_reader(e.user, sfx):
            kube.apply(obj)
            created.append(path(obj["kind"], obj["metadata"]["name"]))

        servers = {}
        for mode in ("enforce", "warn"):
            port = _free_port()
            procs.append(_start_server(port, crt, key, cluster, mode, tmp / f"{mode}.log"))
            servers[mode] = port
        for mode, port in servers.items():
            wait_until(lambda p=port: _ready(p, ca), 30, 0.2, what=f"{mode} webhook ready")

        configs = []
        for mode, port, namespaces, prefix in (
            ("enforce", servers["enforce"], [e.team, e.noq, e.legacy], ""),
            ("warn", servers["warn"], [e.warn], "warn-"),
        ):
            name = f"gpuctl-admission-test-{mode}-{sfx}"
            vwc = _webhook_config(
                name,
                f"https://127.0.0.1:{port}/validate",
                ca_b64,
                namespaces,
                {"admission-test": sfx} if mode == "enforce" else {"admission-test": "none"},
                prefix,
            )
            kube.apply(vwc)
            configs.append(name)
        e.configs = tuple(configs)
        # The API server picks webhook configurations up asynchronously: wait until a bad object is denied.
        probe = _pod(
            "probe",
            e.team,
            gpus=1,
            labels={Labels.KUEUE_QUEUE: "default", Labels.POOL: "nope"},
            selector={Labels.POOL: "nope"},
        )
        wait_until(
            lambda: "[pool-exists]" in e.apply(probe, "--dry-run=server").stderr,
            30,
            0.5,
            what="webhook registered with the API server",
        )
        yield e
    finally:
        for name in e.configs:  # first: nothing else may run while a Fail webhook points at a dead server
            kube.delete(path("ValidatingWebhookConfiguration", name))
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:  # still clean up below; the exit time is tested elsewhere
                p.kill()
                p.wait(5)
        for api_path in reversed(created):
            with contextlib.suppress(ApiError):
                kube.delete(api_path)
        for log in tmp.glob("*.log"):
            print(f"----- {log.name}\n{log.read_text()[-3000:]}")


def _held_queue(ns: str) -> dict:
    """LocalQueue `held`: Kueue admits nothing from it, so its Jobs stay suspended (template mutable)."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": "held", "namespace": ns},
        "spec": {"clusterQueue": ns, "stopPolicy": "Hold"},
    }


def _edit_binding(ns: str, user: str) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"{user}-edit", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def _node_reader(user: str, sfx: str) -> list[dict]:
    """`kubectl debug node/...` reads the node first."""
    name = f"adm-{sfx}-node-reader"
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": dict(TESTBED_LABEL)},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": dict(TESTBED_LABEL)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    ]


def _ready(port: int, ca: Path) -> bool:
    try:
        return _get(port, ca, "/readyz")[0] == 200
    except OSError:
        return False


def _pod(
    name: str, ns: str, *, gpus: int = 0, labels: dict | None = None, selector: dict | None = None, **spec
) -> dict:
    res = {"cpu": "1", "memory": "1Gi"}
    if gpus:
        res[GPU_RESOURCE] = str(gpus)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": res, "limits": dict(res)}}
            ],
            **spec,
        },
    }
    if selector:
        pod["spec"]["nodeSelector"] = selector
    if gpus:  # a topology request, as the topology MutatingAdmissionPolicy adds it (Kubernetes >= 1.36)
        pod["metadata"]["annotations"] = {TAS_UNCONSTRAINED: "true"}
    return pod


def _job(
    name: str,
    ns: str,
    *,
    gpus: int = 1,
    labels: dict | None = None,
    selector: dict | None = None,
    tmpl_labels: dict | None = None,
) -> dict:
    pod = _pod(name, ns, gpus=gpus, selector=selector)
    pod["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
        "spec": {
            "suspend": True,
            # Pool flavors are TAS-only (issue 15): a pod set asks for a topology assignment, as gpuctl's
            # builders do; without it Kueue never admits the Job.
            "template": {
                "metadata": {"labels": tmpl_labels or {}, "annotations": {TAS_UNCONSTRAINED: "true"}},
                "spec": pod["spec"],
            },
        },
    }


def _good_labels(e: Env, pool: str | None = None) -> dict:
    return {Labels.KUEUE_QUEUE: "default", Labels.POOL: pool or e.big}


def _bad_objects(e: Env) -> dict[str, tuple[dict, str]]:
    """rule -> (object, webhook name that must deny it)."""
    good = _good_labels(e)
    sel = {Labels.POOL: e.big}
    return {
        "gpu-queue": (_pod("no-queue", e.noq, gpus=1), "pods.admission.runwhere.ai"),
        "gpu-queue(missing)": (
            _job("wrong-queue", e.team, labels={**good, Labels.KUEUE_QUEUE: "fast"}, selector=sel),
            "workloads.admission.runwhere.ai",
        ),
        "pool-exists": (
            _job("no-pool", e.team, labels=_good_labels(e, f"{e.big}x"), selector={Labels.POOL: f"{e.big}x"}),
            "workloads.admission.runwhere.ai",
        ),
        "pool-placement": (
            _pod("elsewhere", e.team, gpus=1, labels=good, selector={Labels.POOL: e.small}),
            "pods.admission.runwhere.ai",
        ),
        "priority": (
            _job(
                "prio",
                e.team,
                labels={**good, Labels.PRIORITY: "high", Labels.KUEUE_PRIORITY: PRIORITY_CLASS[Priority.LOW]},
                selector=sel,
            ),
            "workloads.admission.runwhere.ai",
        ),
        "job-type": (
            _job("jt", e.team, labels={**good, Labels.JOB_TYPE: "trainig"}, selector=sel),
            "workloads.admission.runwhere.ai",
        ),
        "unknown-key": (
            _pod("typo", e.team, gpus=1, labels={**good, "runwhere.ai/gpu_type": "a100"}, selector=sel),
            "pods.admission.runwhere.ai",
        ),
        "gpu-fits-node": (
            _pod("huge", e.team, gpus=16, labels=good, selector=sel),
            "pods.admission.runwhere.ai",
        ),
        "mig-profile": (_mig_job("a100-lacks-1g5gb", e.team, good, sel, "nvidia.com/mig-1g.5gb"), WORKLOADS),
        "host-path": (
            _pod(
                "etc",
                e.team,
                labels=good,
                selector=sel,
                volumes=[{"name": "h", "hostPath": {"path": "/etc/kubernetes"}}],
            ),
            "pods.admission.runwhere.ai",
        ),
    }


WORKLOADS = "workloads.admission.runwhere.ai"


def _mig_job(name: str, ns: str, labels: dict, selector: dict, resource: str) -> dict:
    """A raw Job asking one MIG instance (an A100-40GB profile, on the A100-80GB pool: mig-profile)."""
    job = _job(name, ns, gpus=0, labels=labels, selector=selector)
    res = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    res["requests"][resource] = res["limits"][resource] = "1"
    job["spec"]["template"]["metadata"]["annotations"] = {TAS_UNCONSTRAINED: "true"}
    return job


RULE_CASES = [
    "gpu-queue",
    "gpu-queue(missing)",
    "pool-exists",
    "pool-placement",
    "priority",
    "job-type",
    "unknown-key",
    "gpu-fits-node",
    "mig-profile",
    "host-path",
]


@pytest.mark.parametrize("case", RULE_CASES)
def test_raw_kubectl_apply_of_a_bad_object_is_denied_with_its_rule_and_fix(env, case):
    obj, webhook = _bad_objects(env)[case]
    rule = case.split("(")[0]
    p = env.apply(obj)
    assert p.returncode != 0, p.stdout
    assert f'admission webhook "{webhook}" denied the request' in p.stderr, p.stderr
    assert f"[{rule}]" in p.stderr and "Fix: " in p.stderr
    kind, name, ns = obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"]
    assert env.kubectl("get", kind.lower(), name, "-n", ns).returncode != 0  # nothing was created


def test_node_label_naming_a_missing_pool_is_denied(env):
    p = env.kubectl("label", "node", env.nodes[0], f"{Labels.POOL}={env.big}-typo", "--overwrite")
    assert p.returncode != 0
    assert 'admission webhook "nodes.admission.runwhere.ai" denied the request' in p.stderr
    assert "[node-pool]" in p.stderr and f'did you mean "{env.big}"' in p.stderr
    # Moving a node between existing pools, or touching other labels, is fine.
    assert env.kubectl("label", "node", env.nodes[1], "example.com/x=1", "--overwrite").returncode == 0


def test_a_pool_created_just_before_its_node_is_labelled_is_not_refused(env, kube):
    # gpuctl creates the flavor and labels the nodes right after: the webhook's watch may lag behind.
    pool = f"adm-{env.sfx}-fresh"
    kube.apply(resource_flavor(pool))
    try:
        p = env.kubectl("label", "node", env.nodes[1], f"{Labels.POOL}={pool}", "--overwrite")
        assert p.returncode == 0, p.stderr
    finally:
        env.kubectl("label", "node", env.nodes[1], f"{Labels.POOL}={env.small}", "--overwrite")
        kube.delete(path("ResourceFlavor", pool))


def test_gpuctl_creates_a_pool_through_the_webhook_dry_run_and_for_real(env, kube):
    # gpuctl creates the flavor, then labels the nodes; in a server dry run the flavor is not persisted,
    # so the node label names a pool that does not exist yet: the webhook must not refuse gpuctl's plan.
    from gpuctl.domain.dryrun import DryRun
    from gpuctl.service.pools import apply_pool

    name = f"adm-{env.sfx}-svc"
    spec = load_text(f"kind: pool\npool: {{name: {name}}}\nnodes:\n  {env.nodes[2]}: {{}}\n")[0].spec
    try:
        apply_pool(kube, spec, create=True, dry_run=DryRun.SERVER)
        assert kube.get_or_none(path("ResourceFlavor", name)) is None
        apply_pool(kube, spec, create=True)
        node = kube.get(path("Node", env.nodes[2]))
        assert node["metadata"]["labels"][Labels.POOL] == name
        # The same label from kubectl, for a pool that does not exist, is still refused in a dry run.
        p = env.kubectl(
            "label", "node", env.nodes[2], f"{Labels.POOL}={name}-x", "--overwrite", "--dry-run=server"
        )
        assert p.returncode != 0 and "[node-pool]" in p.stderr
    finally:
        kube.merge_patch(path("Node", env.nodes[2]), {"metadata": {"labels": {Labels.POOL: None}}})
        with contextlib.suppress(ApiError):
            kube.delete(path("ResourceFlavor", name))


def test_good_raw_objects_pass(env):
    sel = {Labels.POOL: env.big}
    pod = _pod("ok-pod", env.team, gpus=2, labels=_good_labels(env), selector=sel)
    cpu_pod = _pod("ok-cpu", env.team)  # no GPU, no gpuctl label: the API server does not even call
    job = _job(
        "ok-job", env.team, gpus=8, labels={Labels.POOL: env.big}, selector=sel
    )  # Kueue adds the queue
    for obj in (pod, cpu_pod, job):
        p = env.apply(obj)
        assert p.returncode == 0, p.stderr
    # Kueue's defaulting ran before this webhook: the Job got LocalQueue default.
    got = json.loads(env.kubectl("get", "job", "ok-job", "-n", env.team, "-o", "json").stdout)
    assert got["metadata"]["labels"][Labels.KUEUE_QUEUE] == "default"


def test_gpuctl_submissions_pass_and_a_training_job_runs_to_completion(env, kube):
    specs = {
        "training": f"""
kind: training
job: {{name: g-train, priority: high}}
environment: {{image: busybox, command: [sh, -c, "true"], env: [{{GPUCTL_FAKE_RUNTIME: 1s}}]}}
resources: {{pool: {env.big}, gpu: 4, cpu: 4, memory: 16Gi}}
storage: {{workdirs: [/data/{env.team}]}}
""",
        "inference": f"""
kind: inference
job: {{name: g-llm, priority: medium}}
environment: {{image: vllm/vllm-openai:v0.12.0}}
service: {{replicas: 1, port: 8000}}
resources: {{pool: {env.small}, gpu: 1, cpu: 8, memory: 32Gi}}
""",
        "notebook": f"""
kind: notebook
job: {{name: g-nb, priority: low}}
environment: {{image: quay.io/jupyter/scipy-notebook}}
service: {{port: 8888}}
resources: {{pool: {env.big}, gpu: 1, cpu: 2, memory: 8Gi}}
""",
        "compute": f"""
kind: compute
job: {{name: g-web}}
environment: {{image: nginx:latest}}
service: {{replicas: 1, port: 80}}
resources: {{pool: {env.small}, gpu: 0, cpu: 1, memory: 512Mi}}
""",
    }
    # Through gpuctl's own submission path (what `gpuctl create -f` runs): builders, the spec-hash
    # annotation, field manager gpuctl.
    from gpuctl.service.lifecycle import submit

    docs = [doc for text in specs.values() for doc in load_text(text)]
    results = submit(kube, docs, env.team, action="create", dry_run="server")
    assert [r.error for r in results] == [None] * 4, [r.as_dict() for r in results]
    results = submit(kube, docs, env.team, action="create")
    assert [r.error for r in results] == [None] * 4, [r.as_dict() for r in results]
    # Kueue admits the Job, the Job controller makes its pod (not reviewed again), KWOK runs it.
    try:
        wait_until(
            lambda: any(
                c["type"] == "Complete" and c["status"] == "True"
                for c in (kube.get(path("Job", "g-train", env.team)).get("status") or {}).get(
                    "conditions", []
                )
            ),
            90,
            what="gpuctl training Job Complete",
        )
    except AssertionError as exc:
        diag = env.kubectl("get", "workloads,jobs,pods", "-n", env.team, "-o", "yaml").stdout
        raise AssertionError(f"{exc}\n{diag[-6000:]}") from None
    pods = kube.list(path("Pod", namespace=env.team), label_selector="job-name=g-train")
    assert pods and pods[0]["spec"]["nodeName"] == env.nodes[0]
    # The Deployments' ReplicaSets and pods were created (checked once, at the Deployment).
    wait_until(
        lambda: kube.list(path("Pod", namespace=env.team), label_selector="app=g-web"),
        30,
        what="compute pod created",
    )
    wait_until(
        lambda: kube.list(path("Pod", namespace=env.team), label_selector="app=g-nb"),
        30,
        what="notebook pod created",
    )


def test_dry_run_server_runs_the_webhook_and_persists_nothing(env):
    obj, _ = _bad_objects(env)["gpu-fits-node"]
    p = env.apply(obj, "--dry-run=server")
    assert p.returncode != 0 and "[gpu-fits-node]" in p.stderr
    good = _pod("dry-ok", env.team, gpus=1, labels=_good_labels(env), selector={Labels.POOL: env.big})
    p = env.apply(good, "--dry-run=server")
    assert p.returncode == 0 and "(server dry run)" in p.stdout, p.stderr
    assert env.kubectl("get", "pod", "dry-ok", "-n", env.team).returncode != 0


def test_update_is_judged_against_the_old_object(env):
    pod = _pod("upd", env.team, gpus=1, labels=_good_labels(env), selector={Labels.POOL: env.big})
    assert env.apply(pod).returncode == 0
    bad = env.kubectl("label", "pod", "upd", "-n", env.team, "runwhere.ai/poool=x")
    assert bad.returncode != 0 and "[unknown-key]" in bad.stderr
    assert env.kubectl("label", "pod", "upd", "-n", env.team, "app=x").returncode == 0


def test_advisory_warnings_reach_kubectl(env):
    pod = _pod(
        "warned",
        env.team,
        gpus=1,
        labels=_good_labels(env),
        selector={Labels.POOL: env.big, Labels.GPU_TYPE: "h100"},
    )
    p = env.apply(pod)
    assert p.returncode == 0, p.stderr
    assert f'Warning: no node of pool "{env.big}" matches the nodeSelector/affinity' in p.stderr


def test_warn_mode_lets_bad_objects_through_with_warnings(env):
    obj = _pod(
        "warn-me",
        env.warn,
        gpus=16,
        labels={**_good_labels(env), "runwhere.ai/poool": "x"},
        selector={Labels.POOL: env.big},
    )
    p = env.apply(obj)
    assert p.returncode == 0, p.stderr
    assert "Warning: gpuctl would deny Pod" in p.stderr
    assert "[gpu-fits-node]" in p.stderr and "[unknown-key]" in p.stderr
    assert env.kubectl("get", "pod", "warn-me", "-n", env.warn).returncode == 0


def test_api_server_reports_this_webhook_next_to_kueues(env, kube):
    # The numbers bench/webhook.py compares: both webhooks appear in the API server's own histogram.
    text = kube.request("GET", "/metrics", raw=True).data.decode()
    series = [
        line
        for line in text.splitlines()
        if line.startswith("apiserver_admission_webhook_admission_duration_seconds_count")
    ]
    assert any('name="pods.admission.runwhere.ai"' in s and 'rejected="true"' in s for s in series)
    assert any('name="vpod.kb.io"' in s for s in series)


# ---------------------------------------------------------------------------------------------------------
# Bypasses, tried as a team member would (kubectl --as alice, `edit` in the team namespace).


def _denied(p: subprocess.CompletedProcess, *rules: str, webhook: str = "") -> None:
    assert p.returncode != 0, f"expected a denial, got: {p.stdout}"
    if webhook:
        assert f'admission webhook "{webhook}" denied the request' in p.stderr, p.stderr
    for rule in rules:
        assert f"[{rule}]" in p.stderr, p.stderr


def _controller_ref(obj: dict) -> list[dict]:
    return [
        {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"],
            "controller": True,
        }
    ]


def test_the_job_controller_sends_pods_as_its_own_service_account(env):
    # kube-controller-manager runs with --use-service-account-credentials (hack/cluster/up.sh), and the API
    # server's RBAC bootstrap gives those accounts their roles.
    for user, verb, resource in (
        (CONTROLLER_USERS[("batch", "Job")], "create", "pods"),
        (CONTROLLER_USERS[("apps", "ReplicaSet")], "create", "pods"),
        (CONTROLLER_USERS[("apps", "StatefulSet")], "create", "pods"),
        (CONTROLLER_USERS[("apps", "Deployment")], "create", "replicasets.apps"),
    ):
        p = env.kubectl("auth", "can-i", verb, resource, "-n", env.team, f"--as={user}")
        assert p.stdout.strip() == "yes", (user, p.stdout, p.stderr)
        sa = user.rsplit(":", 1)[1]
        assert env.kubectl("get", "serviceaccount", sa, "-n", "kube-system").returncode == 0, sa
    p = env.kubectl("auth", "can-i", "create", "pods", "-n", env.team, f"--as={env.user}")
    assert p.stdout.strip() == "yes"  # the attacker may create pods: that is the point


def test_pods_of_a_job_are_made_unreviewed_but_the_same_pod_from_a_user_is_reviewed(env, kube):
    # The template says priority high without Kueue's class on the pod itself: fine for the Job's pods (the
    # Job carries the class), a finding for a pod of its own. The Job runs to completion, so the job
    # controller's pod creates were not reviewed; a user forging the same pod with the Job as its
    # controller is reviewed and denied.
    sel = {Labels.POOL: env.big}
    labels = {
        **_good_labels(env),
        Labels.PRIORITY: "high",
        Labels.KUEUE_PRIORITY: PRIORITY_CLASS[Priority.HIGH],
    }
    job = _job("ctl-made", env.team, labels=labels, selector=sel, tmpl_labels={Labels.PRIORITY: "high"})
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "GPUCTL_FAKE_RUNTIME", "value": "1s"}]
    p = env.as_user("apply", "-f", "-", input=yaml.safe_dump(job))
    assert p.returncode == 0, p.stderr
    wait_until(
        lambda: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in (kube.get(path("Job", "ctl-made", env.team)).get("status") or {}).get("conditions", [])
        ),
        90,
        what="Job ctl-made Complete (its pod made by the job-controller, unreviewed)",
    )
    owner = kube.get(path("Job", "ctl-made", env.team))
    forged = _pod(
        "forged-prio", env.team, gpus=1, labels={Labels.PRIORITY: "high", **_good_labels(env)}, selector=sel
    )
    forged["metadata"]["ownerReferences"] = _controller_ref(owner)
    _denied(env.as_user("apply", "-f", "-", input=yaml.safe_dump(forged)), "priority")


def test_a_forged_owner_reference_does_not_skip_review(env, kube):
    # alice creates a harmless suspended Job of her own, then a pod claiming that Job as its controller (so
    # the garbage collector keeps it) mounting the host's root, asking for GPUs outside any queue, pinned to
    # a pool it has no business on.
    owner = _job("decoy", env.team, gpus=0, labels={Labels.KUEUE_QUEUE: "held"})
    assert env.as_user("apply", "-f", "-", input=yaml.safe_dump(owner)).returncode == 0
    owner = kube.get(path("Job", "decoy", env.team))
    pod = _pod(
        "forged",
        env.noq,
        gpus=2,
        volumes=[{"name": "root", "hostPath": {"path": "/"}}],
    )
    pod["metadata"]["namespace"] = env.team
    pod["metadata"]["ownerReferences"] = _controller_ref(owner)
    _denied(
        env.as_user("apply", "-f", "-", input=yaml.safe_dump(pod)),
        "host-path",
        webhook="pods.admission.runwhere.ai",
    )
    pod["spec"]["volumes"] = []
    _denied(env.as_user("apply", "-f", "-", input=yaml.safe_dump(pod)), "gpu-queue")
    pod["metadata"]["labels"] = {Labels.KUEUE_QUEUE: "default", Labels.POOL: f"{env.big}-other"}
    pod["spec"]["nodeSelector"] = {Labels.POOL: f"{env.big}-other"}
    _denied(env.as_user("apply", "-f", "-", input=yaml.safe_dump(pod)), "pool-exists")
    assert env.kubectl("get", "pod", "forged", "-n", env.team).returncode != 0


def test_a_forged_deployment_owner_does_not_skip_a_replicasets_review(env, kube):
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "decoy", "namespace": env.team},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "decoy"}},
            "template": {"metadata": {"labels": {"app": "decoy"}}, "spec": _pod("x", env.team)["spec"]},
        },
    }
    assert env.as_user("apply", "-f", "-", input=yaml.safe_dump(dep)).returncode == 0
    owner = kube.get(path("Deployment", "decoy", env.team))
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "forged-rs", "namespace": env.team, "ownerReferences": _controller_ref(owner)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "forged-rs"}},
            "template": {
                "metadata": {"labels": {"app": "forged-rs"}},
                "spec": {
                    **_pod("x", env.team)["spec"],
                    "volumes": [{"name": "h", "hostPath": {"path": "/etc"}}],
                },
            },
        },
    }
    _denied(
        env.as_user("apply", "-f", "-", input=yaml.safe_dump(rs)),
        "host-path",
        webhook="workloads.admission.runwhere.ai",
    )


def test_removing_the_queue_label_of_a_suspended_gpu_job_is_denied(env):
    # Without its queue label Kueue lets go of the Job; unsuspended, it would hold GPUs outside any quota.
    # Kueue's own webhook refuses an empty queue where a LocalQueue `default` exists; gpuctl's refuses it
    # everywhere. Both are called (in parallel): the API server reports one, gpuctl's log shows its own.
    job = _job(
        "unqueue",
        env.team,
        labels={Labels.KUEUE_QUEUE: "held", Labels.POOL: env.big},
        selector={Labels.POOL: env.big},
    )
    assert env.as_user("apply", "-f", "-", input=yaml.safe_dump(job)).returncode == 0
    p = env.as_user("label", "job", "unqueue", "-n", env.team, f"{Labels.KUEUE_QUEUE}-")
    assert p.returncode != 0, p.stdout
    wait_until(lambda: env.enforce_denied(f"Job {env.team}/unqueue"), 10, 0.2, what="gpuctl's denial logged")
    got = json.loads(env.kubectl("get", "job", "unqueue", "-n", env.team, "-o", "json").stdout)
    assert got["metadata"]["labels"][Labels.KUEUE_QUEUE] == "held"
    # The same on a pod: a gated GPU pod losing its queue label.
    pod = _pod(
        "unqueue-pod",
        env.team,
        gpus=1,
        labels={Labels.KUEUE_QUEUE: "held", Labels.POOL: env.big},
        selector={Labels.POOL: env.big},
    )
    assert env.as_user("apply", "-f", "-", input=yaml.safe_dump(pod)).returncode == 0
    p = env.as_user("label", "pod", "unqueue-pod", "-n", env.team, f"{Labels.KUEUE_QUEUE}-")
    assert p.returncode != 0, p.stdout
    wait_until(lambda: env.enforce_denied(f"Pod {env.team}/unqueue-pod"), 10, 0.2, what="gpuctl's denial")


def test_patching_a_suspended_jobs_pod_template_is_reviewed(env):
    job = _job(
        "repin",
        env.team,
        labels={Labels.KUEUE_QUEUE: "held", Labels.POOL: env.big},
        selector={Labels.POOL: env.big},
    )
    assert env.as_user("apply", "-f", "-", input=yaml.safe_dump(job)).returncode == 0
    other = json.dumps({"spec": {"template": {"spec": {"nodeSelector": {Labels.POOL: env.small}}}}})
    _denied(
        env.as_user("patch", "job", "repin", "-n", env.team, "--type=merge", "-p", other), "pool-placement"
    )
    prio = json.dumps({"spec": {"template": {"metadata": {"labels": {Labels.PRIORITY: "urgent"}}}}})
    _denied(env.as_user("patch", "job", "repin", "-n", env.team, "--type=merge", "-p", prio), "priority")
    # A change the rules accept still goes through (the template is mutable while suspended).
    ok = json.dumps({"spec": {"template": {"metadata": {"annotations": {"example.com/note": "x"}}}}})
    p = env.as_user("patch", "job", "repin", "-n", env.team, "--type=merge", "-p", ok)
    assert p.returncode == 0, p.stderr


def test_kubectl_debug_node_mounting_the_hosts_root_is_denied(env):
    # `kubectl debug node/...` makes a Pod with hostPath / on that node. In a team namespace Kueue gates
    # every pod, and a gated pod may not name its node, so the API server refuses it outright...
    p = env.as_user("debug", f"node/{env.nodes[2]}", "-n", env.team, "--image=busybox", "--", "true")
    assert p.returncode != 0, p.stdout
    assert not [
        line
        for line in env.kubectl("get", "pods", "-n", env.team, "-o", "name").stdout.split()
        if "debugger" in line
    ]
    # ... and the same pod pinned by nodeSelector instead (what an attacker would write next) meets the rule.
    debug = _pod("node-debugger", env.team, volumes=[{"name": "host-root", "hostPath": {"path": "/"}}])
    debug["spec"].update(
        hostPID=True, hostNetwork=True, nodeSelector={"kubernetes.io/hostname": env.nodes[2]}
    )
    debug["spec"]["containers"][0]["volumeMounts"] = [{"name": "host-root", "mountPath": "/host"}]
    p = env.as_user("apply", "-f", "-", input=yaml.safe_dump(debug))
    _denied(p, "host-path", webhook="pods.admission.runwhere.ai")
    assert "host path / is a system location" in p.stderr, p.stderr


def test_objects_made_before_the_webhook_stay_updatable_but_gain_no_new_finding(env, kube):
    # env.legacy was not a team namespace when these were made: nothing reviewed them (the same holds for
    # objects made while the webhook ran in warn mode). A Job labelled with a pool but not pinned to it.
    job = _job("legacy", env.legacy, labels={Labels.KUEUE_QUEUE: "held", Labels.POOL: env.big})
    pod = _pod(
        "legacy-etc", env.legacy, volumes=[{"name": "h", "hostPath": {"path": "/etc"}}], labels={"app": "x"}
    )
    for obj in (job, pod):
        p = env.as_user("apply", "-f", "-", input=yaml.safe_dump(obj))
        assert p.returncode == 0 and "Warning" not in p.stderr, p.stderr
    assert env.kubectl("label", "namespace", env.legacy, f"{Labels.NAMESPACE}=true").returncode == 0
    probe = _pod("probe", env.legacy, volumes=[{"name": "h", "hostPath": {"path": "/proc"}}])
    wait_until(
        lambda: "[host-path]" in env.apply(probe, "--dry-run=server").stderr,
        30,
        0.5,
        what="legacy ns reviewed",
    )
    # Updating what they already were is allowed, with a warning naming the finding.
    p = env.as_user("label", "pod", "legacy-etc", "-n", env.legacy, "app=y", "--overwrite")
    assert p.returncode == 0 and "not denied because the object already had it" in p.stderr, p.stderr
    p = env.as_user("label", "job", "legacy", "-n", env.legacy, "app=y")
    assert p.returncode == 0 and "[pool-placement]" in p.stderr, p.stderr
    # A different finding of the same rule is new: pinning the Job to another pool than its label says.
    other = json.dumps({"spec": {"template": {"spec": {"nodeSelector": {Labels.POOL: env.small}}}}})
    _denied(
        env.as_user("patch", "job", "legacy", "-n", env.legacy, "--type=merge", "-p", other), "pool-placement"
    )
    # Kueue (by its ServiceAccount) may still pin it: the API server does not call the webhook for it.
    p = env.kubectl(
        f"--as={KUEUE_USER}", "patch", "job", "legacy", "-n", env.legacy, "--type=merge", "-p", other
    )
    assert p.returncode == 0, p.stderr


@pytest.fixture(scope="module")
def system_ns(env, kube) -> Iterator[str]:
    """gpuctl-system, Active (namespaced objects cannot be dry-run into a namespace that does not exist)."""
    name = "gpuctl-system"
    wait_until(
        lambda: (
            (kube.get_or_none(path("Namespace", name)) or {}).get("status", {}).get("phase") != "Terminating"
        ),
        60,
        0.5,
        what=f"{name} not terminating",
    )
    created = kube.get_or_none(path("Namespace", name)) is None
    if created:
        assert env.kubectl("apply", "-f", str(MANIFESTS / "namespace.yaml")).returncode == 0
    yield name
    if created:
        env.kubectl("delete", "namespace", name, "--wait=false")


def test_shipped_manifests_pass_server_side_dry_run(env, system_ns):
    files = ["rbac.yaml", "deployment.yaml", "webhook.yaml"]
    args = [a for f in files for a in ("-f", str(MANIFESTS / f))]
    p = env.kubectl("apply", "--dry-run=server", *args)
    assert p.returncode == 0, p.stderr
    for kind in (
        "serviceaccount",
        "clusterrole.rbac.authorization.k8s.io",
        "clusterrolebinding.rbac.authorization.k8s.io",
        "deployment.apps",
        "poddisruptionbudget.policy",
        "service",
        "validatingwebhookconfiguration.admissionregistration.k8s.io",
    ):
        assert f"{kind}/gpuctl-admission created (server dry run)" in p.stdout, p.stdout


def _cert_manager_crds() -> list[Path]:
    """cert-manager's Certificate and Issuer CRDs from the Go module cache, if a cert-manager module is there
    (`go mod download github.com/cert-manager/cert-manager@v1.21.2` puts them there; nothing is fetched)."""
    try:
        cache = subprocess.run(
            ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return []
    dirs = sorted(Path(cache, "github.com", "cert-manager").glob("cert-manager@v1.*/deploy/crds"))
    if not dirs:
        return []
    return [dirs[-1] / f"cert-manager.io_{n}.yaml" for n in ("certificates", "issuers")]


def test_cert_manager_manifests_pass_server_side_dry_run(env, system_ns):
    installed: list[Path] = []
    if env.kubectl("get", "crd", "certificates.cert-manager.io", "issuers.cert-manager.io").returncode != 0:
        crds = _cert_manager_crds()
        if not crds:
            pytest.skip("cert-manager's CRDs are neither installed nor in the Go module cache")
        for crd in crds:
            p = env.kubectl("apply", "--server-side", "-f", str(crd))
            assert p.returncode == 0, p.stderr
            installed.append(crd)
        env.kubectl(
            "wait",
            "--for=condition=Established",
            "crd/certificates.cert-manager.io",
            "crd/issuers.cert-manager.io",
            "--timeout=30s",
        )
    try:
        p = env.kubectl("apply", "--dry-run=server", "-f", str(MANIFESTS / "certificate.yaml"))
        assert p.returncode == 0, p.stderr
        assert p.stdout.count("(server dry run)") == 4
    finally:
        for crd in installed:
            env.kubectl("delete", "-f", str(crd), "--wait=false")


def test_a_mig_profile_the_pools_gpus_lack_names_the_field_and_the_profiles(env):
    """mig-profile (issue 32): an H200 profile on the A100-80GB pool, asked by a namespace admin's raw Job."""
    job = _mig_job(
        "h200-on-a100", env.team, _good_labels(env), {Labels.POOL: env.big}, "nvidia.com/mig-1g.18gb"
    )
    p = env.apply(job)
    assert p.returncode != 0, p.stdout
    assert "spec.template.spec.containers[0].resources.requests asks for nvidia.com/mig-1g.18gb" in p.stderr
    assert (
        f"the GPUs of pool {env.big} (A100-80GB) have no MIG profile 1g.18gb; they have 1g.10gb" in p.stderr
    )
    # The A100's own profile passes.
    ok = _mig_job(
        "a100-1g10gb", env.team, _good_labels(env), {Labels.POOL: env.big}, "nvidia.com/mig-1g.10gb"
    )
    assert env.apply(ok, "--dry-run=server").returncode == 0
