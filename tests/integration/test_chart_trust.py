"""The chart renders only what is installed, and keeps its services through disruptions (issue 33).

Alerts: the PrometheusRule carries a group of manifests/prometheus/rules.yaml only with the component it
watches (webhook.enabled, serve.enabled), so a component that is off leaves no alert firing forever on
its missing target. Disruptions: gpuctl serve and the standalone API have a PodDisruptionBudget and
spread their replicas over nodes, as the webhook does.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.test_chart import MANIFESTS, OPERATOR_APIS, by_key, render

RULES = yaml.safe_load((MANIFESTS / "prometheus/rules.yaml").read_text())["groups"]
WEBHOOK_ALERTS = {"GpuctlWebhookDown", "GpuctlWebhookReplicaDown", "GpuctlWebhookErrors"}
SERVE_ALERTS = {
    "GpuctlServiceDown",
    "GpuctlServiceReplicaDown",
    "GpuctlServeNoLeader",
    "GpuctlReconcileFailing",
}
API_VERSIONS = [a for api in OPERATOR_APIS for a in ("--api-versions", api)]


def rule_groups(*values: str) -> list[dict] | None:
    """The rendered PrometheusRule's groups (None: no PrometheusRule), the Operator's CRDs present."""
    docs = by_key(render("gpuctl-system", *API_VERSIONS, *[a for v in values for a in ("--set", v)]))
    rule = docs.get(("PrometheusRule", "gpuctl"))
    return None if rule is None else rule["spec"]["groups"]


def alerts(groups: list[dict]) -> set[str]:
    return {r["alert"] for g in groups for r in g["rules"] if "alert" in r}


def promtool_check(groups: list[dict], tmp_path: Path) -> None:
    """The rendered groups are a valid rule file (Prometheus itself reads it)."""
    if not shutil.which("promtool"):
        pytest.fail("promtool is missing: apt-get install prometheus (hack/test.sh does)")
    f = tmp_path / "rules.yaml"
    f.write_text(yaml.safe_dump({"groups": groups}))
    p = subprocess.run(["promtool", "check", "rules", str(f)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_everything_installed_renders_every_group_of_rules_yaml(tmp_path: Path) -> None:
    groups = rule_groups()
    assert groups == RULES
    assert alerts(groups) >= WEBHOOK_ALERTS | SERVE_ALERTS
    promtool_check(groups, tmp_path)


def test_webhook_disabled_renders_no_webhook_alert(tmp_path: Path) -> None:
    groups = rule_groups("webhook.enabled=false")
    assert groups is not None
    assert not alerts(groups) & WEBHOOK_ALERTS
    assert alerts(groups) >= SERVE_ALERTS
    assert [g["name"] for g in groups] == [g["name"] for g in RULES if g["name"] != "gpuctl.webhook"]
    promtool_check(groups, tmp_path)


def test_serve_disabled_renders_no_serve_alert_nor_its_recording_rules(tmp_path: Path) -> None:
    groups = rule_groups("serve.enabled=false")
    assert groups is not None
    assert alerts(groups) == WEBHOOK_ALERTS
    assert [g["name"] for g in groups] == ["gpuctl.webhook"]
    promtool_check(groups, tmp_path)


def test_neither_installed_renders_no_prometheus_rule() -> None:
    assert rule_groups("webhook.enabled=false", "serve.enabled=false") is None
    # The ServiceMonitors follow the same values (the alerts' targets are exactly what is scraped).
    docs = by_key(
        render(
            "gpuctl-system", *API_VERSIONS, "--set", "webhook.enabled=false", "--set", "serve.enabled=false"
        )
    )
    assert not [k for k in docs if k[0] == "ServiceMonitor"]


def _spread(dep: dict) -> tuple[dict, list[dict]]:
    spec = dep["spec"]["template"]["spec"]
    return spec["affinity"]["podAntiAffinity"], spec.get("topologySpreadConstraints", [])


@pytest.mark.parametrize(
    ("name", "values"),
    [("gpuctl-serve", []), ("gpuctl-api", ["--set", "api.enabled=true"])],
)
def test_serve_and_api_have_a_disruption_budget_and_spread_over_nodes(name: str, values: list[str]) -> None:
    docs = by_key(render("gpuctl-system", *values))
    dep, pdb = docs[("Deployment", name)], docs[("PodDisruptionBudget", name)]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    # The budget selects exactly the Deployment's pods and lets one go at a time, whatever the replicas.
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": pdb["spec"]["selector"]}
    anti, spread = _spread(dep)
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    (zone,) = spread
    assert (
        zone["topologyKey"] == "topology.kubernetes.io/zone" and zone["whenUnsatisfiable"] == "ScheduleAnyway"
    )


def test_serve_disabled_renders_no_serve_budget() -> None:
    docs = by_key(render("gpuctl-system", "--set", "serve.enabled=false"))
    assert ("PodDisruptionBudget", "gpuctl-serve") not in docs
    assert ("PodDisruptionBudget", "gpuctl-api") not in docs
    assert ("PodDisruptionBudget", "gpuctl-admission") in docs


def _confinement(*args: str) -> tuple[dict, dict]:
    docs = by_key(render(*args))
    return (
        docs[("ValidatingAdmissionPolicy", "gpuctl-service-confinement")],
        docs[("ValidatingAdmissionPolicyBinding", "gpuctl-service-confinement")],
    )


def test_the_service_confinement_follows_the_release_and_kueue_namespaces_and_never_only_warns() -> None:
    source = [d for d in yaml.safe_load_all((MANIFESTS / "serve/confinement.yaml").read_text()) if d]
    policy, binding = _confinement()
    assert policy["spec"] == source[0]["spec"] and binding["spec"] == source[1]["spec"]
    policy, binding = _confinement(
        "gpu-platform", "--set", "kueue.namespace=kueue", "--set", "webhook.mode=warn"
    )
    (identity,) = policy["spec"]["matchConditions"]
    assert "system:serviceaccount:gpu-platform:gpuctl-api" in identity["expression"]
    assert "system:serviceaccount:gpu-platform:gpuctl-serve" in identity["expression"]
    system = next(v for v in policy["spec"]["variables"] if v["name"] == "system")["expression"]
    assert "'kueue'" in system and "'gpu-platform'" in system and "kueue-system" not in system
    # Not a tenant rule: webhook.mode=warn (a first rollout of the tenant rules) leaves it refusing.
    assert binding["spec"]["validationActions"] == ["Deny"]
    # Installed with either identity, gone with neither.
    assert ("ValidatingAdmissionPolicy", "gpuctl-service-confinement") in by_key(
        render("gpuctl-system", "--set", "serve.enabled=false", "--set", "api.enabled=true")
    )
    assert ("ValidatingAdmissionPolicy", "gpuctl-service-confinement") not in by_key(
        render("gpuctl-system", "--set", "serve.enabled=false")
    )


def test_the_history_policies_name_the_releases_serve_and_the_values_kueue() -> None:
    docs = by_key(
        render("gpu-platform", "--set", "kueue.namespace=kueue", "--set", "kueue.serviceAccountName=kq")
    )
    writer = docs[("ValidatingAdmissionPolicy", "gpuctl-history-writer")]
    events = docs[("ValidatingAdmissionPolicy", "gpuctl-workload-events")]
    serve = "system:serviceaccount:gpu-platform:gpuctl-serve"
    assert any(serve in c["expression"] for c in writer["spec"]["matchConditions"])
    (who, _) = events["spec"]["validations"]
    assert "'system:serviceaccount:kueue:kq'" in who["expression"] and serve in who["expression"]
    assert ("ValidatingAdmissionPolicy", "gpuctl-history-writer") not in by_key(
        render("gpuctl-system", "--set", "serve.enabled=false")
    )
