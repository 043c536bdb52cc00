"""The rules outside team namespaces (admission/isolation.py), table-driven, and their generated manifests:
the ValidatingAdmissionPolicy (manifests/admission/isolation.yaml) and the webhook entry in webhook.yaml.
tests/integration/test_pool_isolation.py runs the same rules on the API server."""

from __future__ import annotations

import copy
from pathlib import Path

import orjson
import pytest
import yaml

from admission.identities import KCM_USER, KUEUE_USER
from admission.isolation import (
    ISOLATION_CONTROLLER_USERS,
    POOL_NODE_NAME,
    POOL_SELECTION,
    POOL_TOLERATION,
    review_isolation,
)
from admission.policies import isolation as isolation_policy
from admission.rules import AdmissionConfig, Malformed, Mode, Verdict
from admission.server import AdmissionApp
from admission.state import StaticState
from gpuctl.constants import GPU_RESOURCE, Labels
from tests.unit.test_admission_fixtures import PLAIN, review, state

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "manifests" / "admission"
STATE = state()
ENFORCE = AdmissionConfig()
POOL_TOL = {"key": Labels.POOL, "operator": "Equal", "value": "a100", "effect": "NoSchedule"}
EXISTS = {"operator": "Exists"}


def spec(gpus: int = 0, **fields) -> dict:
    res = {"requests": {GPU_RESOURCE: str(gpus)}, "limits": {GPU_RESOURCE: str(gpus)}} if gpus else {}
    return {"containers": [{"name": "c", "image": "busybox", "resources": res}], **fields}


def pod(s: dict, name: str = "p", owner: tuple[str, str] | None = None) -> dict:
    meta: dict = {"name": name, "namespace": PLAIN}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": owner[0], "kind": owner[1], "name": "o", "uid": "u", "controller": True}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": s}


def template(kind: str, s: dict, owner: tuple[str, str] | None = None) -> dict:
    api = {"Job": "batch/v1", "CronJob": "batch/v1", "ReplicationController": "v1"}.get(kind, "apps/v1")
    meta: dict = {"name": "w", "namespace": PLAIN}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": owner[0], "kind": owner[1], "name": "o", "uid": "u", "controller": True}
        ]
    tmpl = {"metadata": {"labels": {"app": "w"}}, "spec": s}
    body = {"jobTemplate": {"spec": {"template": tmpl}}, "schedule": "* * * * *"} if kind == "CronJob" else {}
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": body or {"template": tmpl}}


def judge(obj: dict, user: str = "alice", **kw) -> Verdict:
    return review_isolation(review(obj, username=user, **kw)["request"], STATE, ENFORCE)


POOL_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": Labels.POOL, "operator": "In", "values": ["a100"]}]}
            ]
        }
    }
}
NO_POOL_AFFINITY = copy.deepcopy(POOL_AFFINITY)
NO_POOL_AFFINITY["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
    "matchExpressions"
][0] = {"key": Labels.POOL, "operator": "DoesNotExist"}

# (case, object, rules it breaks); every case is a user's request from namespace `plain` (not a team).
TOL, SEL, NODE = POOL_TOLERATION, POOL_SELECTION, POOL_NODE_NAME
CASES = [
    ("plain GPU pod: runs off-pool, allowed", pod(spec(1)), ()),
    ("CPU pod", pod(spec()), ()),
    ("pool toleration", pod(spec(1, tolerations=[POOL_TOL])), (TOL,)),
    ("pool toleration on a CPU pod", pod(spec(tolerations=[POOL_TOL])), (TOL,)),
    ("key-less Exists", pod(spec(tolerations=[EXISTS])), (TOL,)),
    ("key-less Exists NoSchedule", pod(spec(tolerations=[{**EXISTS, "effect": "NoSchedule"}])), (TOL,)),
    ("key-less Exists NoExecute only", pod(spec(tolerations=[{**EXISTS, "effect": "NoExecute"}])), ()),
    ("pool key NoExecute only", pod(spec(tolerations=[{**POOL_TOL, "effect": "NoExecute"}])), ()),
    ("pool key Exists", pod(spec(tolerations=[{"key": Labels.POOL, "operator": "Exists"}])), (TOL,)),
    (
        "other taint tolerated",
        pod(spec(1, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])),
        (),
    ),
    ("GPU + pool nodeSelector", pod(spec(1, nodeSelector={Labels.POOL: "a100"})), (SEL,)),
    ("CPU + pool nodeSelector (the taint keeps it off)", pod(spec(nodeSelector={Labels.POOL: "a100"})), ()),
    ("GPU + pool affinity In", pod(spec(1, affinity=POOL_AFFINITY)), (SEL,)),
    ("GPU + affinity DoesNotExist (earlier client, no pool)", pod(spec(1, affinity=NO_POOL_AFFINITY)), ()),
    ("nodeName on a pool node", pod(spec(nodeName="a100-1")), (NODE,)),
    ("nodeName on a node in no pool", pod(spec(1, nodeName="cpu-1")), ()),
    ("nodeName on an unknown node", pod(spec(1, nodeName="nowhere")), ()),
    (
        "everything at once",
        pod(spec(1, nodeName="a10-1", tolerations=[EXISTS], nodeSelector={Labels.POOL: "a10"})),
        (TOL, SEL, NODE),
    ),
    ("Deployment template", template("Deployment", spec(1, tolerations=[POOL_TOL])), (TOL,)),
    ("Job template", template("Job", spec(2, nodeSelector={Labels.POOL: "a100"})), (SEL,)),
    ("CronJob template", template("CronJob", spec(1, tolerations=[EXISTS])), (TOL,)),
    ("StatefulSet template", template("StatefulSet", spec(nodeName="a100-2")), (NODE,)),
    ("bare ReplicaSet", template("ReplicaSet", spec(1, affinity=POOL_AFFINITY)), (SEL,)),
    ("RC", template("ReplicationController", spec(tolerations=[POOL_TOL])), (TOL,)),
    ("CPU DaemonSet tolerating all", template("DaemonSet", spec(tolerations=[EXISTS])), ()),
    ("CPU DaemonSet tolerating pools", template("DaemonSet", spec(tolerations=[POOL_TOL])), ()),
    ("GPU DaemonSet tolerating pools", template("DaemonSet", spec(1, tolerations=[EXISTS])), (TOL,)),
    (
        "GPU DaemonSet selecting a pool",
        template("DaemonSet", spec(1, nodeSelector={Labels.POOL: "a10"})),
        (SEL,),
    ),
]


@pytest.mark.parametrize(("case", "obj", "broken"), CASES, ids=[c[0] for c in CASES])
def test_rules_outside_team_namespaces(case: str, obj: dict, broken: tuple[str, ...]) -> None:
    v = judge(obj)
    assert v.rules == broken, v.message()
    assert v.allowed is not bool(broken)
    if broken:
        text = v.message()
        assert "Fix: " in text and ("-n <team>" in text)
        assert text.startswith(f"gpuctl: {obj['kind']} {PLAIN}/")


def test_messages_name_the_rule_and_the_fix() -> None:
    v = judge(pod(spec(tolerations=[EXISTS])))
    assert "key-less `operator: Exists` toleration (it tolerates every taint)" in v.message()
    assert "gpuctl create -f job.yaml -n <team>" in v.message() and "ask an admin for a quota" in v.message()
    v = judge(pod(spec(nodeName="a100-1")))
    assert (
        "spec.nodeName a100-1 is a node of pool a100" in v.message() and "remove spec.nodeName" in v.message()
    )
    v = judge(template("CronJob", spec(1, nodeSelector={Labels.POOL: "a100"})))
    assert "spec.jobTemplate.spec.template.spec.nodeSelector[runwhere.ai/pool]=a100" in v.message()


OWNED = [
    ("Pod", ("batch/v1", "Job")),
    ("Pod", ("apps/v1", "ReplicaSet")),
    ("Pod", ("apps/v1", "StatefulSet")),
    ("Pod", ("apps/v1", "DaemonSet")),
    ("Pod", ("v1", "ReplicationController")),
    ("ReplicaSet", ("apps/v1", "Deployment")),
    ("Job", ("batch/v1", "CronJob")),
]


@pytest.mark.parametrize(("kind", "owner"), OWNED, ids=[f"{k}-of-{o[1]}" for k, o in OWNED])
def test_made_by_its_controller_skips_only_for_that_controllers_identity(
    kind: str, owner: tuple[str, str]
) -> None:
    s = spec(1, tolerations=[EXISTS])
    obj = pod(s, owner=owner) if kind == "Pod" else template(kind, s, owner=owner)
    group = owner[0].rpartition("/")[0]
    user = ISOLATION_CONTROLLER_USERS[(group, owner[1])]
    for trusted in (user, KCM_USER):
        v = judge(obj, user=trusted)
        assert v.allowed and v.skipped.startswith("made by its controller"), v
    # The same object from a user (a forged controller reference) or another controller is judged.
    for other in ("alice", ISOLATION_CONTROLLER_USERS[("batch", "Job" if owner[1] != "Job" else "CronJob")]):
        v = judge(obj, user=other)
        assert v.rules == (POOL_TOLERATION,), (other, v)


def test_kueue_and_mirror_pods_are_trusted_by_identity() -> None:
    obj = pod(spec(1, tolerations=[EXISTS], nodeName="a100-1"))
    assert judge(obj, user=KUEUE_USER).skipped == "Kueue's own request"
    assert judge(obj, user="system:node:a100-1").skipped == "a kubelet's mirror pod"
    # A kubelet's identity does not cover templates (kubelets make only mirror pods).
    assert not judge(template("Deployment", spec(tolerations=[EXISTS])), user="system:node:a100-1").allowed


def test_update_denies_only_new_findings() -> None:
    old = pod(spec(1, tolerations=[POOL_TOL]))
    # Made before the policy: still updatable as long as nothing new is found.
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"x": "y"}
    assert judge(new, op="UPDATE", old=old).allowed
    # Adding a toleration to a pending pod (Kubernetes allows that on UPDATE) is a new finding.
    plain = pod(spec(1))
    added = pod(spec(1, tolerations=[EXISTS]))
    v = judge(added, op="UPDATE", old=plain)
    assert v.rules == (POOL_TOLERATION,)
    # A Deployment template re-pointed at a pool while it requests GPUs.
    d_old = template("Deployment", spec(1))
    d_new = template("Deployment", spec(1, nodeSelector={Labels.POOL: "a10"}))
    assert judge(d_new, op="UPDATE", old=d_old).rules == (POOL_SELECTION,)
    # A DaemonSet without GPUs that tolerates pools starts requesting GPUs: refused.
    ds_old = template("DaemonSet", spec(tolerations=[EXISTS]))
    ds_new = template("DaemonSet", spec(1, tolerations=[EXISTS]))
    assert judge(ds_new, op="UPDATE", old=ds_old).rules == (POOL_TOLERATION,)


def test_warn_mode_dry_run_delete_and_other_kinds() -> None:
    obj = pod(spec(tolerations=[EXISTS]))
    v = review_isolation(review(obj)["request"], STATE, AdmissionConfig(mode=Mode.WARN))
    assert v.allowed and v.violations and "gpuctl would deny" in v.warnings[0]
    assert not judge(obj, dry_run=True).allowed  # a dry run gets the real verdict
    assert judge(obj, op="DELETE").allowed
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": PLAIN}}
    assert judge(cm).skipped == "kind /ConfigMap is not reviewed"
    with pytest.raises(Malformed):
        judge({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"tolerations": "all"}})
    unsynced = review_isolation(review(obj)["request"], state(synced=False), ENFORCE)
    assert not unsynced.allowed and unsynced.code == 503


def test_the_server_answers_isolation_on_its_own_route() -> None:
    app = AdmissionApp(StaticState(STATE), ENFORCE)
    body = orjson.dumps(review(pod(spec(nodeName="a100-1"))))
    status, out, _ = app.handle(body, "/isolation")
    resp = orjson.loads(out)["response"]
    assert status == 200 and resp["allowed"] is False and "[pool-node-name]" in resp["status"]["message"]
    # The same request on /validate is a non-team namespace for the team rules: not theirs.
    status, out, _ = app.handle(body, "/validate")
    assert orjson.loads(out)["response"]["allowed"] is True


# ------------------------------------------------------------------ generated manifests


def test_the_shipped_policy_is_the_generators_output_and_installed_with_the_others() -> None:
    assert (DIR / "isolation.yaml").read_text() == isolation_policy.render_manifest(), (
        "isolation.yaml is stale: python -m admission.policies.isolation > manifests/admission/isolation.yaml"
    )
    assert "isolation.yaml" in yaml.safe_load((DIR / "kustomization.yaml").read_text())["resources"]
    vap, binding = yaml.safe_load_all((DIR / "isolation.yaml").read_text())
    assert [v["name"] for v in vap["spec"]["validations"] if "name" in v] == []
    rules = {r["messageExpression"].split("breaks [")[1].split("]")[0] for r in vap["spec"]["validations"]}
    assert rules == {POOL_TOLERATION, POOL_SELECTION}
    team, system, exempt = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert team == {"key": Labels.NAMESPACE, "operator": "NotIn", "values": ["true"]}
    assert system["key"] == "kubernetes.io/metadata.name" and system["operator"] == "NotIn"
    assert {"kube-system", "kueue-system", "gpuctl-system"} <= set(system["values"])
    # The admin's exempt namespaces, the last expression (the chart rewrites it): the GPU Operator's.
    assert exempt == {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["gpu-operator"]}
    assert binding["spec"]["validationActions"] == ["Deny"] and vap["spec"]["failurePolicy"] == "Fail"
    kinds = {(g, r) for rule in vap["spec"]["matchConstraints"]["resourceRules"] for g in rule["apiGroups"]
             for r in rule["resources"]}  # fmt: skip
    assert kinds == {
        ("", "pods"), ("", "replicationcontrollers"), ("batch", "jobs"), ("batch", "cronjobs"),
        ("apps", "deployments"), ("apps", "statefulsets"), ("apps", "replicasets"), ("apps", "daemonsets"),
    }  # fmt: skip


def test_the_webhook_entry_is_generated_and_only_for_non_team_namespaces() -> None:
    hooks = {w["name"]: w for w in yaml.safe_load((DIR / "webhook.yaml").read_text())["webhooks"]}
    entry = hooks[isolation_policy.WEBHOOK_NAME]
    assert entry == isolation_policy.webhook_entry(), (
        "webhook.yaml's isolation entry is stale: paste admission.policies.isolation.webhook_entry()"
    )
    assert entry["clientConfig"]["service"]["path"] == "/isolation" and entry["failurePolicy"] == "Fail"
    conditions = {c["name"] for c in entry["matchConditions"]}
    assert {"not-kueue", "not-made-by-its-controller", "changed", "relevant"} <= conditions
    # The team entries and this one never both match a namespace.
    team = hooks["pods.admission.runwhere.ai"]["namespaceSelector"]["matchExpressions"][0]
    mine = entry["namespaceSelector"]["matchExpressions"][0]
    assert (
        team["key"] == mine["key"]
        and team["values"] == mine["values"]
        and {team["operator"], mine["operator"]}
        == {
            "In",
            "NotIn",
        }
    )


def test_exempt_namespaces_are_the_admins_list_in_webhook_policy_and_generator(capsys) -> None:
    """Pods of an exempt namespace (default the GPU Operator's) may run on pool nodes: the webhook skips
    them (--exempt-namespace), the binding and the webhook entry never match them, the generator takes the
    admin's list and an empty one."""
    validator = pod(spec(1, nodeName="a100-1", tolerations=[EXISTS]), "nvidia-device-plugin-validator")
    validator["metadata"]["namespace"] = "gpu-operator"
    v = review_isolation(review(validator, namespace="gpu-operator")["request"], STATE, AdmissionConfig())
    assert v.allowed and v.skipped == "exempt namespace"
    other = AdmissionConfig(exempt_namespaces=("dcgm",))
    assert not review_isolation(review(validator, namespace="gpu-operator")["request"], STATE, other).allowed
    assert isolation_policy.policy(("a", "b"))[1]["spec"]["matchResources"]["namespaceSelector"][
        "matchExpressions"
    ][-1] == {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["a", "b"]}
    none = isolation_policy.webhook_entry(())["namespaceSelector"]["matchExpressions"]
    assert len(none) == 2 and all("gpu-operator" not in e["values"] for e in none)  # NotIn needs values
    assert isolation_policy.main(["--exempt-namespace", "nfd", "--exempt-namespace", "dcgm"]) == 0
    assert "values:\n        - nfd\n        - dcgm" in capsys.readouterr().out
    assert isolation_policy.main(["--exempt-namespace", ""]) == 0
    assert "gpu-operator" not in capsys.readouterr().out
