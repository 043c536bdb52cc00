"""The topology MutatingAdmissionPolicies are generated (admission/policies/topology.py) and the checked-in
file is it. What they do to raw Jobs and Pods is checked on the API server
(tests/integration/test_raw_kubectl.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from admission.policies import topology
from gpuctl.constants import LOCAL_QUEUE_NAME, TAS_REQUEST_KEYS, TAS_UNCONSTRAINED

DIR = Path(__file__).resolve().parents[2] / "manifests" / "admission"


def test_checked_in_file_is_the_generators_output_and_kustomize_installs_it():
    assert (DIR / "topology.yaml").read_text() == topology.render_manifest(), (
        "topology.yaml is stale: python -m admission.topology > manifests/admission/topology.yaml"
    )
    assert "topology.yaml" in yaml.safe_load((DIR / "kustomization.yaml").read_text())["resources"]


def _by_name() -> dict[str, dict]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(topology.render_manifest())}


def test_every_topology_key_leaves_the_object_alone_and_only_gpuctls_queue_is_touched():
    docs = _by_name()
    for name in (topology.TEMPLATES, topology.PODS):
        spec = docs[f"MutatingAdmissionPolicy/{name}"]["spec"]
        conds = {c["name"]: c["expression"] for c in spec["matchConditions"]}
        for key in TAS_REQUEST_KEYS:
            assert f"'{key}'" in conds["no-topology-request"], (name, key)
        assert f"== '{LOCAL_QUEUE_NAME}'" in conds["gpuctl-queue"]
        assert "not-kueue" in conds and "not-made-by-its-controller" in conds
        (mutation,) = spec["mutations"]
        assert f"'{TAS_UNCONSTRAINED}': 'true'" in mutation["applyConfiguration"]["expression"]
        assert spec["failurePolicy"] == "Fail"
    # Pods only on CREATE; templates also when an UPDATE rewrites the template.
    pods = docs[f"MutatingAdmissionPolicy/{topology.PODS}"]["spec"]["matchConstraints"]["resourceRules"]
    assert [r["operations"] for r in pods] == [["CREATE"]]
    tmpl = docs[f"MutatingAdmissionPolicy/{topology.TEMPLATES}"]["spec"]
    assert "template-written" in {c["name"] for c in tmpl["matchConditions"]}


def test_bindings_cover_the_webhooks_team_namespaces():
    vwc = next(
        x
        for x in yaml.safe_load_all((DIR / "webhook.yaml").read_text())
        if x["kind"] == "ValidatingWebhookConfiguration"
    )
    pods = next(w for w in vwc["webhooks"] if w["name"] == "pods.admission.runwhere.ai")
    docs = _by_name()
    for name in (topology.TEMPLATES, topology.PODS):
        binding = docs[f"MutatingAdmissionPolicyBinding/{name}"]
        assert binding["spec"]["policyName"] == name
        assert binding["spec"]["matchResources"]["namespaceSelector"] == pods["namespaceSelector"]
