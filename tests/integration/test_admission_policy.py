"""The ValidatingAdmissionPolicy (manifests/admission/policy.yaml) on the local cluster's API server.

The shipped policy (allowing one host path) is installed under a test name, bound only to this module's
namespaces; no gpuctl webhook serves those namespaces (as after an emergency
`kubectl delete validatingwebhookconfiguration`), except `down`, where a failurePolicy=Fail webhook points
at a server that is not running. Then:

- the CEL and the Python rules agree: every object of a corpus is judged by `admission.rules.review`
  (restricted to the policy's rules) and by the API server (`kubectl apply --dry-run=server`), and both
  must deny the same objects for the same rule;
- UPDATE: findings the old object had are kept, new ones denied; Kueue's and the controllers' requests
  are not evaluated;
- with the webhook down, a bad object is still denied by the policy with its rule and fix.
"""

from __future__ import annotations

import contextlib
import copy
import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from admission.policies import deletes, team
from admission.rules import AdmissionConfig, review
from gpuctl.cluster import ApiError, path
from gpuctl.constants import PRIORITY_CLASS, SET_ASIDE_TAINT_KEY, Labels, Priority
from gpuctl.domain.gang import set_aside_tolerations
from tests.integration.conftest import wait_until
from tests.integration.test_admission_webhook import TESTBED_LABEL, _job, _pod
from tests.unit.test_admission_fixtures import gpuctl_workload, state
from tests.unit.test_admission_fixtures import review as admission_review

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = "/scratch/gpuctl-test"  # a data root the admin adds (system locations it cannot: issue 43)
PY_CONFIG = AdmissionConfig(allowed_host_paths=(ALLOWED,))
OWNER = "corpus-owner"


@dataclass
class Env:
    ns: str  # bound to the policy, no webhook
    down: str  # bound to the policy, a Fail webhook that is not running
    kubectl_bin: str
    kubeconfig: str

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.kubectl_bin, "--kubeconfig", self.kubeconfig, *args],
            input=input,
            capture_output=True,
            text=True,
        )

    def apply(self, obj: dict, *extra: str, user: str = "") -> subprocess.CompletedProcess:
        as_user = (f"--as={user}",) if user else ()
        return self.kubectl(*as_user, "apply", *extra, "-f", "-", input=yaml.safe_dump(obj))


def _test_policy(sfx: str, namespaces: list[str], docs: list[dict] | None = None) -> list[dict]:
    vap, binding = copy.deepcopy(docs if docs is not None else team.policy((ALLOWED,)))
    name = f"{vap['metadata']['name']}-test-{sfx}"
    vap["metadata"] = {"name": name, "labels": dict(TESTBED_LABEL)}
    binding["metadata"] = {"name": name, "labels": dict(TESTBED_LABEL)}
    binding["spec"]["policyName"] = name
    binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"].append(
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}
    )
    return [vap, binding]


def _dead_webhook(sfx: str, ns: str) -> dict:
    vwc = next(
        d
        for d in yaml.safe_load_all((ROOT / "manifests/admission/webhook.yaml").read_text())
        if d["kind"] == "ValidatingWebhookConfiguration"
    )
    hooks = [w for w in vwc["webhooks"] if w["name"] != "nodes.admission.runwhere.ai"]
    for w in hooks:
        w["name"] = f"down-{sfx}-{w['name']}"
        w["clientConfig"] = {"url": "https://127.0.0.1:1/validate"}  # nothing listens
        w["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": ns}}
    return {
        "apiVersion": vwc["apiVersion"],
        "kind": vwc["kind"],
        "metadata": {"name": f"gpuctl-admission-down-{sfx}", "labels": dict(TESTBED_LABEL)},
        "webhooks": hooks,
    }


@pytest.fixture(scope="module")
def env(cluster: str, kube, kubectl_bin: str) -> Iterator[Env]:
    sfx = uuid.uuid4().hex[:6]
    e = Env(f"vap-{sfx}", f"vap-{sfx}-down", kubectl_bin, cluster)
    created: list[str] = []
    try:
        for ns in (e.ns, e.down):
            kube.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ns, "labels": {Labels.NAMESPACE: "true"}},
                }
            )
            created.append(path("Namespace", ns))
        vap, binding = _test_policy(sfx, [e.ns, e.down])
        kube.apply(vap)
        created.append(path("ValidatingAdmissionPolicy", vap["metadata"]["name"]))
        kube.apply(binding)
        created.append(path("ValidatingAdmissionPolicyBinding", binding["metadata"]["name"]))
        # orphan-delete: its own policy (nothing in it reads `object`, null on DELETE)
        for doc in _test_policy(sfx, [e.ns, e.down], deletes.policy()):
            kube.apply(doc)
            created.append(path(doc["kind"], doc["metadata"]["name"]))
        owner = _job(OWNER, e.ns, gpus=0)
        owner["spec"]["suspend"] = True
        kube.apply(owner)  # what owner-claim's corpus cases claim (deleted with the namespace)
        hook = _dead_webhook(sfx, e.down)
        kube.apply(hook)
        created.append(path("ValidatingWebhookConfiguration", hook["metadata"]["name"]))
        got = kube.get(path("ValidatingAdmissionPolicy", vap["metadata"]["name"]))
        # kube-controller-manager type-checks the CEL and reports problems in status.typeChecking. The
        # API server enforces the policy within seconds, but type-checking this policy (~50 KB of CEL,
        # every expression against each matched kind's schema) took 46 s on a loaded 2-core machine
        # (load 10): the status may lag, the check must wait for it.
        wait_until(
            lambda: (
                kube.get(path("ValidatingAdmissionPolicy", vap["metadata"]["name"]))
                .get("status", {})
                .get("observedGeneration")
                == got["metadata"]["generation"]
            ),
            240,
            what="policy type-checked",
        )
        warnings = (
            kube.get(path("ValidatingAdmissionPolicy", vap["metadata"]["name"]))["status"]
            .get("typeChecking", {})
            .get("expressionWarnings", [])
        )
        assert not warnings, warnings
        probe = _pod("probe", e.ns, volumes=[{"name": "h", "hostPath": {"path": "/"}}])
        wait_until(
            lambda: "[host-path]" in e.apply(probe, "--dry-run=server").stderr,
            60,
            0.5,
            what="policy enforced by the API server",
        )
        yield e
    finally:
        for p in reversed(created):  # the dead webhook first of all (it is last in the list)
            with contextlib.suppress(ApiError):
                kube.delete(p)


def _vol(p: str) -> dict:
    return {"volumes": [{"name": "h", "hostPath": {"path": p}}]}


def _mounted(ns: str, p: str, read_only: bool) -> dict:
    pod = _pod("a", ns, **_vol(p))
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "h", "mountPath": "/h", "readOnly": read_only}]
    return pod


def _resources(ns: str, **extra: str) -> dict:
    pod = _pod("a", ns)
    for m in pod["spec"]["containers"][0]["resources"].values():
        m.update(extra)
    return pod


def _corpus(ns: str) -> dict[str, dict]:
    hi = {Labels.PRIORITY: "high", Labels.KUEUE_PRIORITY: PRIORITY_CLASS[Priority.HIGH]}
    c: dict[str, dict] = {
        "hostpath-root": _pod("a", ns, **_vol("/")),
        "hostpath-double-slash": _pod("a", ns, **_vol("//etc/")),
        "hostpath-dot": _pod("a", ns, **_vol("/etc/./kubernetes")),
        "hostpath-kubelet": _pod("a", ns, **_vol("/var/lib/kubelet/pods")),
        "hostpath-data": _pod("a", ns, **_vol("/data/team")),
        "hostpath-allowed": _pod("a", ns, **_vol(f"{ALLOWED}/x")),
        "hostpath-run-other": _pod("a", ns, **_vol("/var/run/docker.sock")),
        "hostpath-relative": _pod("a", ns, **_vol("data")),
        "hostpath-etcetera": _pod("a", ns, **_vol("/etcetera")),
        # issue 43: system locations whatever the list says; writable only under a data root
        "hostpath-cni-read-only": _mounted(ns, "/opt/cni/bin", True),
        "hostpath-pod-logs": _mounted(ns, "/var/log/pods", False),
        "hostpath-writable-outside-roots": _mounted(ns, "/mnt/x", False),
        "hostpath-read-only-outside-roots": _mounted(ns, "/mnt/x", True),
        "hostpath-writable-allowed-root": _mounted(ns, f"{ALLOWED}/x", False),
        "hostpath-writable-data": _mounted(ns, "/data/team-a", False),
        # issue 43: extended resources Kueue does not charge; termination grace
        "extended-gaudi": _resources(ns, **{"habana.ai/gaudi": "8"}),
        "extended-passthrough": _resources(ns, **{"nvidia.com/GA100_A100_SXM4_80GB": "2"}),
        "extended-rdma-allowed": _resources(ns, **{"rdma/hca_shared_devices_a": "1"}),
        "termination-grace-long": _pod("a", ns, terminationGracePeriodSeconds=7200),
        "termination-grace-ok": _pod("a", ns, terminationGracePeriodSeconds=300),
        "priority-bad": _pod("a", ns, labels={Labels.PRIORITY: "urgent"}),
        "priority-ok": _pod("a", ns, labels=hi),
        "priority-no-class": _pod("a", ns, labels={Labels.PRIORITY: "high"}),
        "priority-class-mismatch": _pod(
            "a", ns, labels={Labels.PRIORITY: "high", Labels.KUEUE_PRIORITY: PRIORITY_CLASS[Priority.LOW]}
        ),
        "priority-class-typo": _pod("a", ns, labels={Labels.KUEUE_PRIORITY: "gpuctl-hihg"}),
        "priority-foreign-class": _pod("a", ns, labels={Labels.KUEUE_PRIORITY: "batch-low"}),
        "priority-job-template-disagrees": _job(
            "a", ns, gpus=0, labels=hi, tmpl_labels={Labels.PRIORITY: "medium"}
        ),
        "priority-job-template-agrees": _job(
            "a", ns, gpus=0, labels=hi, tmpl_labels={Labels.PRIORITY: "high"}
        ),
        "priority-job-template-class-wrong": _job(
            "a", ns, gpus=0, labels=hi, tmpl_labels={Labels.KUEUE_PRIORITY: "gpuctl-low"}
        ),
        # An autoscaled service's tiers (docs/serving.md): a serving class goes with its tier, and back.
        "priority-serving-floor-job": _job(
            "a",
            ns,
            gpus=0,
            labels={Labels.SERVING_TIER: "floor", Labels.KUEUE_PRIORITY: "gpuctl-serving-floor"},
            tmpl_labels={Labels.SERVING_TIER: "floor"},
        ),
        "priority-serving-class-without-tier": _pod(
            "a", ns, labels={Labels.KUEUE_PRIORITY: "gpuctl-serving-floor"}
        ),
        "priority-serving-tier-typo": _pod("a", ns, labels={Labels.SERVING_TIER: "flor"}),
        "priority-serving-tier-other-class": _job(
            "a",
            ns,
            gpus=0,
            labels={Labels.SERVING_TIER: "burst", **hi},
            tmpl_labels={Labels.SERVING_TIER: "burst"},
        ),
        "priority-serving-template-tier-differs": _job(
            "a",
            ns,
            gpus=0,
            labels={Labels.SERVING_TIER: "burst", Labels.KUEUE_PRIORITY: "gpuctl-serving-burst"},
            tmpl_labels={Labels.SERVING_TIER: "floor", Labels.KUEUE_PRIORITY: "gpuctl-serving-burst"},
        ),
        "job-type-bad": _job("a", ns, gpus=0, labels={Labels.JOB_TYPE: "trainig"}),
        "job-type-template-bad": _job("a", ns, gpus=0, tmpl_labels={Labels.JOB_TYPE: "batch"}),
        "job-type-ok": _job("a", ns, gpus=0, labels={Labels.JOB_TYPE: "training"}),
        "unknown-label": _pod("a", ns, labels={"runwhere.ai/gpu_type": "a100"}),
        "known-keys": _pod("a", ns, labels={Labels.POOL: "p1", Labels.GPU_TYPE: "a100", Labels.TEAM: "t1"}),
    }
    ann = _pod("a", ns)
    ann["metadata"]["annotations"] = {"runwhere.ai/nope": "1", "runwhere.ai/spec-hash": "abc"}
    c["unknown-annotation"] = ann
    tmpl_ann = _job("a", ns, gpus=0)
    tmpl_ann["spec"]["template"]["metadata"]["annotations"] = {"runwhere.ai/descripton": "typo"}
    c["unknown-template-annotation"] = tmpl_ann
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "a", "namespace": ns},
        "spec": {
            "serviceName": "a",
            "replicas": 0,
            "selector": {"matchLabels": {"app": "a"}},
            "template": {
                "metadata": {"labels": {"app": "a"}},
                "spec": {**_pod("a", ns)["spec"], **_vol("/proc")},
            },
        },
    }
    c["statefulset-proc"] = sts
    for kind in ("training", "inference", "notebook"):
        objs = gpuctl_workload(kind, ns)
        c[f"gpuctl-{kind}"] = objs
    c.update(_tenant_corpus(ns, hi))
    return c


def _tenant_corpus(ns: str, hi: dict) -> dict[str, dict]:
    """priority-class, device-access and owner-claim (issue 26)."""

    def pod_with(name: str = "a", **container) -> dict:
        p = _pod(name, ns)
        p["spec"]["containers"][0].update(container)
        return p

    def job_with(labels: dict | None = None, **spec) -> dict:
        j = _job("a", ns, gpus=0, labels=labels, tmpl_labels=labels)
        j["spec"]["template"]["spec"].update(spec)
        return j

    owned = _pod("a", ns)
    owned["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": OWNER,  # made by the env fixture; the test fills in its uid
            "uid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
            "controller": True,
        }
    ]
    set_aside = [{"key": SET_ASIDE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]

    def gang_with(tolerations: list) -> dict:
        g = job_with(tolerations=tolerations)
        g["spec"].update(completionMode="Indexed", parallelism=2, completions=2)
        return g

    by_daemonset = copy.deepcopy(owned)
    by_daemonset["metadata"]["ownerReferences"][0].update(apiVersion="apps/v1", kind="DaemonSet")
    return {
        "priority-class-system-cluster-critical-pod": _pod(
            "a", ns, priorityClassName="system-cluster-critical"
        ),
        "priority-class-system-node-critical-job": job_with(priorityClassName="system-node-critical"),
        "priority-class-gpuctl-matching-job": job_with(hi, priorityClassName="gpuctl-high"),
        "priority-class-gpuctl-mismatch-job": job_with(hi, priorityClassName="gpuctl-low"),
        "priority-class-gpuctl-without-priority-job": job_with(priorityClassName="gpuctl-medium"),
        "device-privileged": pod_with(securityContext={"privileged": True}),
        "device-sys-admin": pod_with(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
        "device-cap-prefix-lowercase": pod_with(securityContext={"capabilities": {"add": ["cap_sys_rawio"]}}),
        "device-baseline-caps": pod_with(
            securityContext={"capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"]}}
        ),
        "device-visible-devices": pod_with(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
        "device-driver-capabilities": pod_with(env=[{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}]),
        "device-dev": _pod("a", ns, **_vol("/dev")),
        "device-dev-nvidia0": _pod("a", ns, **_vol("//dev/./nvidia0")),
        "device-devices-dir": _pod("a", ns, **_vol("/devices")),
        "device-host-pid": _pod("a", ns, hostPID=True),
        "device-host-ipc-job": job_with(hostIPC=True),
        "device-privileged-init-job": job_with(
            initContainers=[{"name": "i", "image": "busybox", "securityContext": {"privileged": True}}]
        ),
        "owner-claim-job": owned,
        "owner-daemonset": by_daemonset,
        # gpu-resource (issue 33): charged GPU resources pass, uncharged ones are refused.
        "gpu-resource-gpumem": pod_with(resources={"limits": {"nvidia.com/gpumem": "4000"}}),
        "gpu-resource-millicores-init-job": job_with(
            initContainers=[
                {
                    "name": "i",
                    "image": "busybox",
                    "resources": {"limits": {"gpu.intel.com/millicores": "100"}},
                }
            ]
        ),
        "gpu-resource-amd-charged": pod_with(resources={"limits": {"amd.com/gpu": "1"}}),
        "gpu-resource-mig-charged": pod_with(resources={"limits": {"nvidia.com/mig-1g.10gb": "1"}}),
        # set-aside-toleration (issue 31): only a gang may tolerate the set-aside taint.
        "set-aside-pod": _pod("a", ns, tolerations=set_aside),
        "set-aside-every-taint-job": job_with(tolerations=[{"operator": "Exists"}]),
        # Issue 43: a gang tolerates its own set-aside only (its namespace and its name, job "a").
        "set-aside-gang": gang_with(set_aside),
        "set-aside-gang-own": gang_with(set_aside_tolerations(ns, "a")),
        "set-aside-gang-other-team": gang_with(set_aside_tolerations("other-team", "a")),
        "set-aside-gang-other-job": gang_with(set_aside_tolerations(ns, "b")),
        "set-aside-other-taint": _pod("a", ns, tolerations=[{"key": "example.com/x", "operator": "Exists"}]),
    }


def _python_rules(obj: dict, ns: str, **kw) -> set[str]:
    v = review(admission_review(obj, namespace=ns, **kw)["request"], state(), PY_CONFIG)
    return {r for r in v.rules if r in team.POLICY_RULES}


def _policy_rules(stderr: str) -> set[str]:
    return {r for r in team.POLICY_RULES if f"breaks [{r}]" in stderr}


@pytest.mark.parametrize("case", list(_corpus("x")))
def test_cel_and_python_deny_the_same_objects_for_the_same_rule(env, kube, case):
    obj = _corpus(env.ns)[case]
    for ref in obj["metadata"].get("ownerReferences", []):
        if ref["name"] == OWNER:  # a real Job: Kueue's pod webhook looks a Job owner up before any policy
            ref["uid"] = kube.get(path("Job", OWNER, env.ns))["metadata"]["uid"]
    want = _python_rules(obj, env.ns)
    p = env.apply(obj, "--dry-run=server")
    got = _policy_rules(p.stderr)
    if want:
        assert p.returncode != 0, f"{case}: Python denies {want}, the API server allowed it"
        # The API server reports the first failing validation; it must be one Python names.
        assert got and got <= want, (case, want, p.stderr)
        assert "ValidatingAdmissionPolicy" in p.stderr and "Fix: " in p.stderr, p.stderr
    else:
        assert p.returncode == 0, f"{case}: Python allows it, the API server said: {p.stderr}"


def _python_update(old: dict, new: dict, ns: str, user: str = "system:admin") -> set[str]:
    return _python_rules(new, ns, op="UPDATE", old=old, username=user)


def test_tenant_update_rules_agree_on_the_api_server(env, kube):
    """owner-claim's and kueue-gate's UPDATE checks (what changed, not findings), on real objects."""
    # A pod its Job's controller made (no LocalQueue here: Kueue leaves the Job alone and it runs).
    j = _job("made", env.ns, gpus=0)
    j["spec"]["suspend"] = False
    assert env.apply(j).returncode == 0
    made = wait_until(
        lambda: kube.list(path("Pod", namespace=env.ns), label_selector="job-name=made"), 30, what="its pod"
    )[0]
    # Read it once kube-scheduler has bound it: a copy read before the binding, replaced after it, would
    # take spec.nodeName away, which the API server refuses for that reason ("pod updates may not change
    # fields other than ...") instead of the policy's.
    made_path = path("Pod", made["metadata"]["name"], env.ns)

    def bound() -> dict | None:
        pod = kube.get(made_path)  # with its kind (list items have none)
        return pod if pod["spec"].get("nodeName") else None

    made = wait_until(bound, 60, what="its pod bound to a node")
    dropped = copy.deepcopy(made)
    del dropped["metadata"]["ownerReferences"]
    relabelled = copy.deepcopy(made)
    relabelled["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = "x"
    annotated = copy.deepcopy(made)
    annotated["metadata"].setdefault("annotations", {})["note"] = "x"
    # A queued (suspended) Job and a gated pod.
    queued = _job("queued", env.ns, gpus=0, labels={Labels.KUEUE_QUEUE: "absent"})
    assert env.apply(queued).returncode == 0
    queued = kube.get(path("Job", "queued", env.ns))
    started = copy.deepcopy(queued)
    started["spec"]["suspend"] = False
    gated = _pod("gated", env.ns, schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    assert env.apply(gated).returncode == 0
    gated = kube.get(path("Pod", "gated", env.ns))
    ungated = copy.deepcopy(gated)
    del ungated["spec"]["schedulingGates"]
    cases = {
        "owner-dropped": (made, dropped, {"owner-claim"}),
        "job-pod-relabelled": (made, relabelled, {"owner-claim"}),
        "job-pod-annotated": (made, annotated, set()),
        "job-unsuspended": (queued, started, {"kueue-gate"}),
        "pod-ungated": (gated, ungated, {"kueue-gate"}),
    }
    for case, (old, new, want) in cases.items():
        assert _python_update(old, new, env.ns) == want, case
        unconditional = copy.deepcopy(new)  # KWOK and the controllers keep writing status meanwhile
        unconditional["metadata"].pop("resourceVersion", None)
        p = env.kubectl("replace", "--dry-run=server", "-f", "-", input=json.dumps(unconditional))
        got = _policy_rules(p.stderr)
        assert got == want, (case, p.stderr)
        assert (p.returncode == 0) == (not want), (case, p.stderr)


def test_orphaning_deletes_agree_on_the_api_server(env, kube):
    j = _job("orph", env.ns, gpus=0, labels={Labels.KUEUE_QUEUE: "absent"})
    assert env.apply(j).returncode == 0
    job = kube.get(path("Job", "orph", env.ns))
    for cascade, want in (("orphan", {"orphan-delete"}), ("background", set()), ("foreground", set())):
        p = env.kubectl("delete", "job", "orph", "-n", env.ns, f"--cascade={cascade}", "--dry-run=server")
        got = {r for r in ("orphan-delete",) if f"breaks [{r}]" in p.stderr}
        assert got == want and (p.returncode == 0) == (not want), (cascade, p.stderr)
        options = {"propagationPolicy": {"orphan": "Orphan"}.get(cascade, cascade.title())}
        r = admission_review(job, namespace=env.ns, op="DELETE", options=options)["request"]
        r["oldObject"], r["object"] = job, None
        assert set(review(r, state(), PY_CONFIG).rules) == want, cascade
    # No policy at all (a client library's default): batch/v1 orphans, so both refuse.
    p = env.kubectl("delete", "--raw", f"/apis/batch/v1/namespaces/{env.ns}/jobs/orph?dryRun=All")
    assert p.returncode != 0 and "breaks [orphan-delete]" in p.stderr, p.stderr
    r = admission_review(job, namespace=env.ns, op="DELETE")["request"]
    r["oldObject"], r["object"], r["options"] = job, None, {"kind": "DeleteOptions"}
    assert review(r, state(), PY_CONFIG).rules == ("orphan-delete",)


def test_update_keeps_old_findings_and_denies_new_ones(env):
    pod = _pod("upd", env.ns, labels={"app": "x"})
    assert env.apply(pod).returncode == 0
    p = env.kubectl("label", "pod", "upd", "-n", env.ns, f"{Labels.PRIORITY}=hihg")
    assert p.returncode != 0 and "breaks [priority]" in p.stderr, p.stderr
    assert env.kubectl("label", "pod", "upd", "-n", env.ns, "app=y", "--overwrite").returncode == 0
    # An object made before the policy bound its namespace (unbound for a moment by removing the team label)
    # keeps its finding but gains no new one.
    assert env.kubectl("label", "namespace", env.ns, f"{Labels.NAMESPACE}-").returncode == 0
    try:
        wait_until(
            lambda: env.apply(_pod("legacy", env.ns, labels={"runwhere.ai/old": "1"})).returncode == 0,
            30,
            0.5,
            what="namespace unbound",
        )
    finally:
        assert env.kubectl("label", "namespace", env.ns, f"{Labels.NAMESPACE}=true").returncode == 0
    probe = _pod("probe", env.ns, **_vol("/"))
    wait_until(lambda: "[host-path]" in env.apply(probe, "--dry-run=server").stderr, 30, 0.5, what="rebound")
    p = env.kubectl("label", "pod", "legacy", "-n", env.ns, "app=z")
    assert p.returncode == 0, p.stderr
    p = env.kubectl("label", "pod", "legacy", "-n", env.ns, "runwhere.ai/newer=1")
    assert p.returncode != 0 and "breaks [unknown-key]" in p.stderr and "runwhere.ai/newer" in p.stderr


def test_kueue_and_the_controllers_are_not_evaluated(env):
    pod = _pod("upd2", env.ns, labels={"app": "x"})
    assert env.apply(pod).returncode == 0
    kueue = "system:serviceaccount:kueue-system:kueue-controller-manager"
    p = env.kubectl(f"--as={kueue}", "label", "pod", "upd2", "-n", env.ns, "runwhere.ai/by-kueue=1")
    assert p.returncode == 0, p.stderr
    # A user is evaluated even with a forged controller reference (to a real Job of his own).
    assert env.apply(_job("owner", env.ns, gpus=0)).returncode == 0
    uid = json.loads(env.kubectl("get", "job", "owner", "-n", env.ns, "-o", "json").stdout)["metadata"]["uid"]
    bad = _pod("forged", env.ns, **_vol("/"))
    bad["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "owner", "uid": uid, "controller": True}
    ]
    p = env.apply(bad, "--dry-run=server")
    assert p.returncode != 0 and "breaks [host-path]" in p.stderr, p.stderr


def test_with_the_webhook_down_the_policy_still_denies_with_its_rule_and_fix(env):
    bad = _pod("bad", env.down, **_vol("/etc"))
    p = env.apply(bad, "--dry-run=server")
    assert p.returncode != 0 and "breaks [host-path]" in p.stderr and "Fix: " in p.stderr, p.stderr
    # A good object meets the dead webhook: refused (failurePolicy Fail), with the webhook named.
    good = _pod("good", env.down, labels={Labels.POOL: "x"})
    p = env.apply(good, "--dry-run=server")
    assert p.returncode != 0 and "failed calling webhook" in p.stderr, p.stderr
