"""The earlier client's MutatingAdmissionPolicies are generated (admission/policies/earlier_client.py) and the
checked-in file is it. What they do to the earlier client's own objects is checked on the API server
(tests/integration/test_earlier_client.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from admission.policies import earlier_client as earlier
from gpuctl.constants import PRIORITY_CLASS, Labels, Priority

DIR = Path(__file__).resolve().parents[2] / "manifests" / "admission"


def test_checked_in_file_is_the_generators_output_and_kustomize_installs_it():
    assert (DIR / "earlier-client.yaml").read_text() == earlier.render_manifest(), (
        "earlier-client.yaml is stale: python -m admission.earlier > manifests/admission/earlier-client.yaml"
    )
    assert "earlier-client.yaml" in yaml.safe_load((DIR / "kustomization.yaml").read_text())["resources"]


def _by_name() -> dict[str, dict]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(earlier.render_manifest())}


def test_the_mapping_is_gpuctls_and_only_where_no_kueue_class_is_set():
    docs = _by_name()
    for name in (earlier.TEMPLATES, earlier.PODS):
        spec = docs[f"MutatingAdmissionPolicy/{name}"]["spec"]
        conds = {c["name"]: c["expression"] for c in spec["matchConditions"]}
        assert "not-kueue" in conds and "not-made-by-its-controller" in conds
        assert f"'{Labels.KUEUE_PRIORITY}'" in conds["no-kueue-class"]
        for p in Priority:
            assert f"'{p.value}': '{PRIORITY_CLASS[p]}'" in conds["gpuctl-priority"]
        apply = spec["mutations"][0]["applyConfiguration"]["expression"]
        assert f"'{Labels.KUEUE_PRIORITY}': variables.cls" in apply
        assert spec["failurePolicy"] == "Fail" and spec["reinvocationPolicy"] == "IfNeeded"
    tmpl = docs[f"MutatingAdmissionPolicy/{earlier.TEMPLATES}"]["spec"]
    # Object and pod template both get the label; the template's priorityClassName goes when it is the
    # same gpuctl class, never on an UPDATE of an object that had it from the start (immutable Job templates).
    assert tmpl["mutations"][0]["applyConfiguration"]["expression"].count("variables.cls") == 2
    strip = tmpl["mutations"][1]["jsonPatch"]["expression"]
    assert "'/spec/template/spec/priorityClassName'" in strip and "oldObject" in strip
    assert {"template-agrees", "created-with-it"} <= {c["name"] for c in tmpl["matchConditions"]}
    # A Pod's PriorityClass was resolved by the Priority plugin before any policy: only the label is added.
    pods = docs[f"MutatingAdmissionPolicy/{earlier.PODS}"]["spec"]
    assert [m["patchType"] for m in pods["mutations"]] == ["ApplyConfiguration"]
    assert [r["operations"] for r in pods["matchConstraints"]["resourceRules"]] == [["CREATE"]]


def test_bindings_cover_the_webhooks_team_namespaces():
    vwc = next(
        x
        for x in yaml.safe_load_all((DIR / "webhook.yaml").read_text())
        if x["kind"] == "ValidatingWebhookConfiguration"
    )
    pods = next(w for w in vwc["webhooks"] if w["name"] == "pods.admission.runwhere.ai")
    docs = _by_name()
    for name in (earlier.TEMPLATES, earlier.PODS):
        binding = docs[f"MutatingAdmissionPolicyBinding/{name}"]
        assert binding["spec"]["policyName"] == name
        assert binding["spec"]["matchResources"]["namespaceSelector"] == pods["namespaceSelector"]
