"""workload-edit (admission/policies/workload_edit.py): the checked-in policy is the generator's output,
kustomize and the chart install it, and it leaves spec.active, and only it, to team members.
What the API server does with it is tests/integration/test_stop_estimate.py's."""

from __future__ import annotations

from pathlib import Path

import yaml

from admission.policies import workload_edit

DIR = Path(__file__).resolve().parents[2] / "manifests" / "admission"


def test_checked_in_file_is_the_generators_output_and_kustomize_installs_it():
    assert (DIR / "workload-edit.yaml").read_text() == workload_edit.render_manifest(), (
        "stale: python -m admission.workload_edit > manifests/admission/workload-edit.yaml"
    )
    assert "workload-edit.yaml" in yaml.safe_load((DIR / "kustomization.yaml").read_text())["resources"]


def test_every_field_but_active_is_frozen_for_everyone_but_kueue_and_the_gc():
    vap, binding = workload_edit.policies()
    changed = vap["spec"]["variables"][0]["expression"]
    for f in workload_edit.FROZEN_SPEC:
        assert f"['spec.{f}']" in changed
    assert "active" not in workload_edit.FROZEN_SPEC and "['spec.active']" not in changed
    # The stop/resume actor changes with spec.active only, to the requester (admission/policies/submitted_by).
    assert "['metadata.annotations[runwhere.ai/active-set-by]']" in changed
    assert "request.userInfo.username" in changed
    for f in ("labels", "annotations", "ownerReferences", "finalizers"):
        assert f"['metadata.{f}']" in changed
    conds = " ".join(c["expression"] for c in vap["spec"]["matchConditions"])
    assert "kueue-controller-manager" in conds and "generic-garbage-collector" in conds
    rule = vap["spec"]["matchConstraints"]["resourceRules"][0]
    assert (rule["resources"], rule["operations"]) == (["workloads"], ["UPDATE"])
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["key"] == (
        "runwhere.ai/namespace"
    )
