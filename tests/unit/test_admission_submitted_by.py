"""The submitted-by MutatingAdmissionPolicy is generated (admission/policies/submitted_by.py) and the
checked-in file is it. What it does on the API server (a forged submitter overwritten, `gpuctl create`
as a team member) is tests/integration/test_tenant_attacks.py's."""

from __future__ import annotations

from pathlib import Path

import yaml

from admission.policies import submitted_by
from admission.policies.catalog import GENERATED
from gpuctl.constants import AUDIT_SUBMITTED_BY_ANNOTATION

DIR = Path(__file__).resolve().parents[2] / "manifests" / "admission"


def test_the_shipped_policy_is_the_generators_output_and_installed() -> None:
    assert (DIR / "submitted-by.yaml").read_text() == submitted_by.render_manifest(), (
        "stale: python -m admission.policies.submitted_by > manifests/admission/submitted-by.yaml"
    )
    assert "submitted-by.yaml" in yaml.safe_load((DIR / "kustomization.yaml").read_text())["resources"]
    assert GENERATED["submitted-by.yaml"] is submitted_by.render_manifest


def test_it_sets_the_requester_on_create_and_keeps_the_value_on_update() -> None:
    mpa, binding = submitted_by.policies()
    spec = mpa["spec"]
    kinds = {r for rule in spec["matchConstraints"]["resourceRules"] for r in rule["resources"]}
    assert kinds == {"pods", "jobs", "deployments", "statefulsets"}
    pods = next(r for r in spec["matchConstraints"]["resourceRules"] if r["resources"] == ["pods"])
    assert pods["operations"] == ["CREATE"]
    (want,) = spec["variables"]
    assert (
        "request.userInfo.username" in want["expression"]
        and "oldObject.metadata.annotations" in want["expression"]
    )
    for proxy in submitted_by.SUBMITTER_PROXIES:  # only gpuctl's REST API may name its caller
        assert f"'{proxy}'" in want["expression"]
    assert AUDIT_SUBMITTED_BY_ANNOTATION in spec["mutations"][0]["applyConfiguration"]["expression"]
    assert "runwhere.ai~1submitted-by" in spec["mutations"][1]["jsonPatch"]["expression"]
    assert [c["name"] for c in spec["matchConditions"]][:3] == [
        "not-kueue",
        "not-made-by-its-controller",
        "not-a-deployments-replicaset-from-its-controller",
    ]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"] == ["true"]
