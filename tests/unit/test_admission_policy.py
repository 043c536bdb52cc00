"""The ValidatingAdmissionPolicy is generated from admission/validators' tables and the checked-in file is it.

Whether the CEL says what the Python rules say is checked on the API server itself
(tests/integration/test_admission_policy.py feeds both the same objects).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from admission.identities import CONTROLLER_USERS, KUEUE_OWNER_KINDS, KUEUE_USER, POD_MAKERS
from admission.policies import deletes, priority_classes, skeleton, team
from admission.policies.cel import cel_list
from admission.validators.labels import JOB_TYPES, KNOWN_KEYS, PRIORITY_VALUES
from admission.validators.orphan_delete import ORPHAN_KINDS
from admission.validators.priority_class import ALLOWED_WORKLOAD_CLASSES
from gpuctl.constants import (
    BASELINE_CAPABILITIES,
    DEFAULT_ALLOWED_EXTENDED_RESOURCES,
    DENIED_HOST_PATHS,
    DEVICE_HOST_PATHS,
    GC_USER,
    GRACE_ENV,
    MAX_TERMINATION_GRACE_SECONDS,
    NVIDIA_DEVICE_ENV,
    PRIORITY_CLASS,
    PRIORITY_CLASS_PREEMPTION,
)

DIR = Path(__file__).resolve().parents[2] / "manifests" / "admission"


def test_checked_in_policy_is_the_generators_output():
    assert (DIR / "policy.yaml").read_text() == team.render_manifest(), (
        "policy.yaml is stale: python -m admission.policy > manifests/admission/policy.yaml"
    )


def _docs() -> dict[str, dict]:
    """The main policy and its binding by kind (the other two policies: _named)."""
    return {
        d["kind"]: d for d in yaml.safe_load_all(team.render_manifest()) if d["metadata"]["name"] == team.NAME
    }


def _named() -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(team.render_manifest())}


def test_policy_carries_the_python_tables():
    spec = _docs()["ValidatingAdmissionPolicy"]["spec"]
    text = yaml.safe_dump(spec, width=10_000)
    for value in (*DENIED_HOST_PATHS, *JOB_TYPES, *KNOWN_KEYS, *PRIORITY_VALUES, *PRIORITY_CLASS.values()):
        assert f"'{value}'" in text, value
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert KUEUE_USER in conditions["not-kueue"]
    for (_, kind), user in CONTROLLER_USERS.items():
        where = (
            "not-a-deployments-replicaset-from-its-controller"
            if kind == "Deployment"
            else "not-made-by-its-controller"
        )
        assert f"'{user}'" in conditions[where], kind
    assert [
        v["messageExpression"].count(f"[{r}]")
        for v, r in zip(spec["validations"], team.POLICY_RULES, strict=True)
    ] == [1] * len(team.POLICY_RULES)


def test_policy_fails_closed_and_binds_to_team_namespaces():
    d = _docs()
    vap, binding = d["ValidatingAdmissionPolicy"], d["ValidatingAdmissionPolicyBinding"]
    assert vap["spec"]["failurePolicy"] == "Fail" and "paramKind" not in vap["spec"]
    assert binding["spec"]["policyName"] == vap["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    # Same namespaces as the webhook.
    vwc = next(
        x
        for x in yaml.safe_load_all((DIR / "webhook.yaml").read_text())
        if x["kind"] == "ValidatingWebhookConfiguration"
    )
    pods = next(w for w in vwc["webhooks"] if w["name"] == "pods.admission.runwhere.ai")
    assert binding["spec"]["matchResources"]["namespaceSelector"] == pods["namespaceSelector"]


def _allowed_in(text: str) -> str:
    spec = next(
        d
        for d in yaml.safe_load_all(text)
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == team.NAME
    )["spec"]
    return next(v["expression"] for v in spec["variables"] if v["name"] == "allowedHostPaths")


def test_allowed_host_paths_are_compiled_in_and_agree_with_the_webhook_deployment():
    assert _allowed_in(team.render_manifest(("/data/", "//scratch"))) == "['/data', '/scratch']"
    dep = next(
        x
        for x in yaml.safe_load_all((DIR / "deployment.yaml").read_text())
        if x and x["kind"] == "Deployment"
    )
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    shipped = tuple(p for p in env["GPUCTL_ALLOWED_HOST_PATHS"]["value"].split(":") if p)
    assert _allowed_in((DIR / "policy.yaml").read_text()) == cel_list(shipped)


def test_generator_cli_refuses_relative_paths(capsys):
    with pytest.raises(SystemExit):
        team.main(["--allowed-host-path", "data"])
    assert "must be absolute" in capsys.readouterr().err


def test_the_tenant_rules_carry_their_tables():
    """priority-class, device-access and owner-claim read the same tables as admission.rules."""
    spec = _docs()["ValidatingAdmissionPolicy"]["spec"]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    for value in ALLOWED_WORKLOAD_CLASSES:
        assert f"'{value}'" in variables["priorityClass"], value
    for value in (*BASELINE_CAPABILITIES, *NVIDIA_DEVICE_ENV, *DEVICE_HOST_PATHS):
        assert f"'{value}'" in variables["deviceAccess"], value
    for group, kind in KUEUE_OWNER_KINDS:
        assert f"'{group}/{kind}'" in variables["ownerClaim"], kind
        assert f"'{group}/{kind}'" in variables["ownerDropped"], kind
    for (group, kind), user in POD_MAKERS.items():
        assert f"'{group}/{kind}': '{user}'" in variables["ownerDropped"]
    assert f"'{GC_USER}'" in variables["ownerDropped"]
    # kubectl debug's ephemeral containers are judged too (device-access).
    rules = spec["matchConstraints"]["resourceRules"]
    assert {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/ephemeralcontainers"],
            "operations": ["UPDATE"]} in rules  # fmt: skip


def test_orphaning_deletes_have_their_own_policy_bound_to_team_namespaces():
    d = _named()
    vap = d[("ValidatingAdmissionPolicy", deletes.NAME)]["spec"]
    binding = d[("ValidatingAdmissionPolicyBinding", deletes.NAME)]["spec"]
    assert vap["failurePolicy"] == "Fail" and binding["validationActions"] == ["Deny"]
    assert binding["matchResources"]["namespaceSelector"] == skeleton.team_namespaces()
    covered = {
        (r["apiGroups"][0], res) for r in vap["matchConstraints"]["resourceRules"] for res in r["resources"]
    }
    # orphan-delete's kinds, and Pods for delete-grace (a DELETE naming its own grace)
    assert covered == {(g, f"{k.lower()}s") for g, k in ORPHAN_KINDS} | {("", "pods")}
    assert all(r["operations"] == ["DELETE"] for r in vap["matchConstraints"]["resourceRules"])
    # Kueue is never refused; nothing reads `object` (null on DELETE).
    assert [c["name"] for c in vap["matchConditions"]] == ["not-kueue"]
    text = yaml.safe_dump(vap, width=10_000)
    assert "object." not in text.replace("oldObject.", "")
    assert "'Orphan'" in text and "'orphan'" in text and "'foregroundDeletion'" in text


def test_gpuctl_priority_classes_are_held_at_preemption_never_cluster_wide():
    d = _named()
    vap = d[("ValidatingAdmissionPolicy", priority_classes.NAME)]["spec"]
    binding = d[("ValidatingAdmissionPolicyBinding", priority_classes.NAME)]["spec"]
    assert "matchResources" not in binding  # cluster-scoped objects: every one
    (cond,) = vap["matchConditions"]
    for name in PRIORITY_CLASS.values():
        assert f"'{name}'" in cond["expression"]
    assert f"'{PRIORITY_CLASS_PREEMPTION}'" in vap["validations"][0]["expression"]


def _variable(text: str, name: str, policy: str = team.NAME) -> str:
    spec = next(
        d
        for d in yaml.safe_load_all(text)
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == policy
    )["spec"]
    return next(v["expression"] for v in spec["variables"] if v["name"] == name)


def _container(deployment: Path) -> dict:
    dep = next(x for x in yaml.safe_load_all(deployment.read_text()) if x and x["kind"] == "Deployment")
    return dep["spec"]["template"]["spec"]["containers"][0]


def _args(deployment: Path) -> list[str]:
    return _container(deployment)["args"]


def _flag(args: list[str], flag: str) -> list[str]:
    return [a.split("=", 1)[1] for a in args if a.startswith(f"{flag}=")]


def test_the_termination_bound_and_extended_resources_are_compiled_in_as_the_webhook_deployment_says():
    """One bound in every place of the plain manifests: the webhook's --max-termination-grace, both policies
    that judge it (the team policy's pods, the delete policy's `kubectl delete --grace-period`), serve's
    --termination-allowance (a pod within the cap is never cut short by the backstop) and the standalone
    API's $GPUCTL_MAX_TERMINATION_GRACE (gpuctl's own check of a job's grace)."""
    rendered = team.render_manifest((), 60, ("rdma/*",))
    assert _variable(rendered, "maxTerminationGrace") == "60"
    assert _variable(rendered, "maxTerminationGrace", deletes.NAME) == "60"
    assert _variable(rendered, "allowedExtendedResources") == "['rdma/*']"
    args = _args(DIR / "deployment.yaml")
    grace = _flag(args, "--max-termination-grace")
    extended = _flag(args, "--allowed-extended-resource")
    shipped = (DIR / "policy.yaml").read_text()
    assert grace == [_variable(shipped, "maxTerminationGrace")] == [str(MAX_TERMINATION_GRACE_SECONDS)]
    assert grace == [_variable(shipped, "maxTerminationGrace", deletes.NAME)]
    assert grace == _flag(_args(DIR.parent / "serve" / "deployment.yaml"), "--termination-allowance")
    env = _container(DIR.parent / "api" / "deployment.yaml")["env"]
    assert grace == [e["value"] for e in env if e["name"] == GRACE_ENV]  # gpuctl create in the API
    assert cel_list(extended) == _variable(shipped, "allowedExtendedResources")
    assert tuple(extended) == DEFAULT_ALLOWED_EXTENDED_RESOURCES
