"""The ValidatingAdmissionPolicy is generated from admission/rules.py's tables and the checked-in file is it.

Whether the CEL says what the Python rules say is checked on the API server itself
(tests/integration/test_admission_policy.py feeds both the same objects).
"""

from __future__ import annotations

from pathlib import Path

import pytest
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
    spec = next(d for d in yaml.safe_load_all(text) if d["kind"] == "ValidatingAdmissionPolicy")["spec"]
    return next(v["expression"] for v in spec["variables"] if v["name"] == "allowedHostPaths")


def test_allowed_host_paths_are_compiled_in_and_agree_with_the_webhook_deployment():
    assert _allowed_in(policy.render(("/data/", "//scratch"))) == "['/data', '/scratch']"
    dep = next(
        x
        for x in yaml.safe_load_all((DIR / "deployment.yaml").read_text())
        if x and x["kind"] == "Deployment"
    )
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    shipped = tuple(p for p in env["GPUCTL_ALLOWED_HOST_PATHS"]["value"].split(":") if p)
    assert _allowed_in((DIR / "policy.yaml").read_text()) == policy.cel_list(shipped)


def test_generator_cli_refuses_relative_paths(capsys):
    with pytest.raises(SystemExit):
        policy.main(["--allowed-host-path", "data"])
    assert "must be absolute" in capsys.readouterr().err
