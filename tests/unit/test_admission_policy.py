"""The ValidatingAdmissionPolicy is generated from admission/rules.py's tables and the checked-in file is it.

Whether the CEL says what the Python rules say is checked on the API server itself
(tests/integration/test_admission_policy.py feeds both the same objects).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from admission import policy
from admission.rules import CONTROLLER_USERS, JOB_TYPES, KNOWN_KEYS, KUEUE_USER, PRIORITY_VALUES
from gpuctl.constants import DENIED_HOST_PATHS, PRIORITY_CLASS

DIR = Path(__file__).resolve().parents[2] / "manifests" / "admission"


def test_checked_in_policy_is_the_generators_output():
    assert (DIR / "policy.yaml").read_text() == policy.render(), (
        "policy.yaml is stale: python -m admission.policy > manifests/admission/policy.yaml"
    )


def _docs() -> dict[str, dict]:
    return {d["kind"]: d for d in yaml.safe_load_all(policy.render())}


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
        for v, r in zip(spec["validations"], policy.POLICY_RULES, strict=True)
    ] == [1] * 4


def test_policy_fails_closed_and_binds_to_team_namespaces_with_its_params():
    d = _docs()
    vap, binding, params = (
        d["ValidatingAdmissionPolicy"],
        d["ValidatingAdmissionPolicyBinding"],
        d["ConfigMap"],
    )
    assert vap["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"]["policyName"] == vap["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    ref = binding["spec"]["paramRef"]
    assert (ref["name"], ref["namespace"]) == (params["metadata"]["name"], params["metadata"]["namespace"])
    assert ref["parameterNotFoundAction"] == "Deny"
    assert policy.PARAMS_KEY in params["data"]
    # Same namespaces as the webhook.
    vwc = next(
        x
        for x in yaml.safe_load_all((DIR / "webhook.yaml").read_text())
        if x["kind"] == "ValidatingWebhookConfiguration"
    )
    pods = next(w for w in vwc["webhooks"] if w["name"] == "pods.admission.runwhere.ai")
    assert binding["spec"]["matchResources"]["namespaceSelector"] == pods["namespaceSelector"]


def test_webhook_deployment_reads_the_allowed_host_paths_from_the_policys_params():
    dep = next(
        x
        for x in yaml.safe_load_all((DIR / "deployment.yaml").read_text())
        if x and x["kind"] == "Deployment"
    )
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    ref = env["GPUCTL_ALLOWED_HOST_PATHS"]["valueFrom"]["configMapKeyRef"]
    assert ref == {"name": policy.PARAMS_NAME, "key": policy.PARAMS_KEY}
