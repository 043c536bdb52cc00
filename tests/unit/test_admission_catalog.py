"""admission.policies.catalog: every generated manifest is current and installed, and what hack/demo.sh makes
of the chart's rendering (the webhook configuration by URL, every policy as rendered)."""

from __future__ import annotations

from pathlib import Path

import yaml

from admission.policies import catalog

DIR = Path(__file__).resolve().parents[2] / "manifests" / "admission"


def test_every_generated_manifest_is_current_and_listed_for_the_chart() -> None:
    assert catalog.main(["--check", str(DIR)]) == 0
    listed = yaml.safe_load((DIR / "kustomization.yaml").read_text())["resources"]
    assert set(catalog.GENERATED) <= set(listed)


def test_chart_objects_point_the_webhook_at_the_process_and_keep_every_policy(tmp_path) -> None:
    vwc = yaml.safe_load((DIR / "webhook.yaml").read_text())
    policies = [d for f in catalog.GENERATED for d in yaml.safe_load_all((DIR / f).read_text()) if d]
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "gpuctl-admission"}}
    out = catalog.chart_objects([vwc, None, deployment, *policies], "https://127.0.0.1:9", b"CA")
    hook, *rest = out
    assert hook["kind"] == "ValidatingWebhookConfiguration"
    assert hook["metadata"] == {"name": "gpuctl-admission", "labels": catalog.TESTBED_LABEL}
    assert {w["clientConfig"]["url"] for w in hook["webhooks"]} == {
        "https://127.0.0.1:9/validate",
        "https://127.0.0.1:9/isolation",
    }
    assert all(w["clientConfig"]["caBundle"] == "Q0E=" for w in hook["webhooks"])
    assert rest == policies  # every policy and binding, as rendered; nothing else (no Deployment)
    assert {d["kind"] for d in rest} == catalog.POLICY_KINDS
