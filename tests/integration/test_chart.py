"""charts/gpuctl with the real helm binary (hack/cluster/build.sh caches it): lint, render, and a
server-side dry run of the rendered chart against the local cluster's API server.

The chart's objects come from manifests/ (charts/gpuctl/README.md); these tests check that every
object of manifests/ reaches the rendered chart with only the documented changes, so an object added
to or edited in manifests/ is either installed by the chart as it is or a test names it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts/gpuctl"
MANIFESTS = ROOT / "manifests"
CACHE = Path(os.environ.get("GPUCTL_TESTBED_CACHE", Path.home() / ".cache" / "gpuctl-testbed"))
VERSIONS = dict(
    line.split("=", 1)
    for line in (ROOT / "hack/cluster/versions.env").read_text().splitlines()
    if "=" in line and not line.startswith("#")
)
HELM = CACHE / "bin" / f"helm-{VERSIONS['HELM_VERSION']}" / "helm"
DIGEST = "sha256:" + "ab" * 32
OPERATOR_APIS = ["monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule"]
SERVE_TLS_ARGS = ["--tls-cert=/etc/gpuctl/tls/tls.crt", "--tls-key=/etc/gpuctl/tls/tls.key"]
TLS_MOUNT = {"name": "tls", "mountPath": "/etc/gpuctl/tls", "readOnly": True}
TLS_VOLUME = {"name": "tls", "secret": {"secretName": "gpuctl-api-tls"}}
# What the chart changes in an object of manifests/ (charts/gpuctl/README.md, "What the chart changes").
CHART_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/version",
}


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    if not HELM.exists():
        pytest.fail(f"{HELM} is missing: run hack/cluster/build.sh (CI does before the tests)")
    p = subprocess.run([str(HELM), *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return p


def render(namespace: str = "gpuctl-system", *args: str) -> list[dict]:
    out = helm("template", "gpuctl", str(CHART), "-n", namespace, "--set", f"image.digest={DIGEST}", *args)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_key(docs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def manifest_objects() -> list[dict]:
    """The objects of manifests/ the chart installs by default (webhook, serve, the API's RBAC)."""
    files = [
        MANIFESTS / "admission" / f
        for f in yaml.safe_load((MANIFESTS / "admission/kustomization.yaml").read_text())["resources"]
    ]
    files += [
        MANIFESTS / "serve/rbac.yaml",
        MANIFESTS / "serve/deployment.yaml",
        MANIFESTS / "serve/rbac-api.yaml",
    ]
    files += [MANIFESTS / "api/rbac.yaml"]
    files += [MANIFESTS / "kueue/bootstrap.yaml"]
    docs = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
    return [
        d for d in docs if d["kind"] != "Namespace" and not d["apiVersion"].startswith("cert-manager.io/")
    ]


def test_helm_lint() -> None:
    p = helm("lint", "--strict", str(CHART), "--set", f"image.digest={DIGEST}")
    assert "1 chart(s) linted, 0 chart(s) failed" in p.stdout


def test_every_manifest_object_is_rendered_with_only_the_documented_changes() -> None:
    rendered = by_key(render())
    missing = []
    for want in manifest_objects():
        key = (want["kind"], want["metadata"]["name"])
        got = rendered.get(key)
        if got is None:
            missing.append(key)
            continue
        got = json.loads(json.dumps(got))
        labels = got["metadata"].pop("labels")
        assert set(labels) - set(want["metadata"].get("labels", {})) <= CHART_LABELS, key
        assert {k: labels[k] for k in want["metadata"].get("labels", {})} == want["metadata"].get(
            "labels", {}
        )
        want = json.loads(json.dumps(want))
        want["metadata"].pop("labels", None)
        if key[0] == "ValidatingWebhookConfiguration":
            # Self-signed fallback by default: caBundle set, cert-manager's annotation gone.
            assert "annotations" not in got["metadata"]
            want["metadata"].pop("annotations")
            for w in got["webhooks"]:
                assert base64.b64decode(w["clientConfig"].pop("caBundle")).startswith(
                    b"-----BEGIN CERTIFICATE"
                )
        if key[0] == "Deployment":
            tpl = got["spec"]["template"]
            assert tpl["metadata"]["labels"].pop("app.kubernetes.io/instance") == "gpuctl"
            for c, w in zip(
                tpl["spec"]["containers"], want["spec"]["template"]["spec"]["containers"], strict=True
            ):
                assert c["image"] == f"ghcr.io/runwhere/gpuctl:0.1.0@{DIGEST}"
                w["image"] = c["image"]
            if key[1] == "gpuctl-serve":  # serve.api: --api, the API's env and a writable /tmp; TLS
                c = tpl["spec"]["containers"][0]
                assert c["args"][-3:] == ["--api", *SERVE_TLS_ARGS]
                del c["args"][-3:]
                own = want["spec"]["template"]["spec"]["containers"][0].pop("env", [])  # POD_NAMESPACE
                assert c.pop("env") == [
                    *own,
                    {"name": "GPUCTL_ALLOWED_HOST_PATHS", "value": ""},
                    {"name": "GPUCTL_MAX_TERMINATION_GRACE", "value": "300"},
                ]
                assert c.pop("volumeMounts") == [{"name": "tmp", "mountPath": "/tmp"}, TLS_MOUNT]
                assert tpl["spec"].pop("volumes") == [{"name": "tmp", "emptyDir": {}}, TLS_VOLUME]
                for probe in ("readinessProbe", "livenessProbe"):  # the port speaks HTTPS
                    assert c[probe]["httpGet"].pop("scheme") == "HTTPS"
        if key == ("Service", "gpuctl"):  # Prometheus without the Operator scrapes it over HTTPS
            assert got["metadata"]["annotations"].pop("prometheus.io/scheme") == "https"
        if key[0] == "ClusterRoleBinding" and key[1].startswith("gpuctl-api"):
            assert got["subjects"].pop() == {
                "kind": "ServiceAccount",
                "name": "gpuctl-serve",
                "namespace": "gpuctl-system",
            }
        if "annotations" in got["metadata"] and got["metadata"]["annotations"].get("helm.sh/resource-policy"):
            assert got["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
        assert got == want, key
    assert missing == []


def test_self_signed_fallback_certificate_serves_the_webhook_service(tmp_path: Path) -> None:
    docs = by_key(render("platform"))
    secret = docs[("Secret", "gpuctl-admission-tls")]
    vwc = docs[("ValidatingWebhookConfiguration", "gpuctl-admission")]
    assert {w["clientConfig"]["caBundle"] for w in vwc["webhooks"]} == {secret["data"]["ca.crt"]}
    for k in ("ca.crt", "tls.crt"):
        (tmp_path / k).write_bytes(base64.b64decode(secret["data"][k]))
    v = subprocess.run(
        ["openssl", "verify", "-CAfile", tmp_path / "ca.crt", tmp_path / "tls.crt"],
        capture_output=True,
        text=True,
    )
    assert v.returncode == 0, v.stderr
    san = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", tmp_path / "tls.crt"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert (
        "DNS:gpuctl-admission.platform.svc" in san
        and "DNS:gpuctl-admission.platform.svc.cluster.local" in san
    )
    assert {w["clientConfig"]["service"]["namespace"] for w in vwc["webhooks"]} == {"platform"}


def test_release_namespace_replaces_gpuctl_system_everywhere() -> None:
    out = helm("template", "gpuctl", str(CHART), "-n", "platform", "--set", f"image.digest={DIGEST}").stdout
    assert "gpuctl-system" not in out
    docs = [d for d in yaml.safe_load_all(out) if d]
    namespaced = [d for d in docs if "namespace" in d["metadata"]]
    assert namespaced and {d["metadata"]["namespace"] for d in namespaced} == {"platform"}
    vwc = by_key(docs)[("ValidatingWebhookConfiguration", "gpuctl-admission")]
    excluded = vwc["webhooks"][0]["namespaceSelector"]["matchExpressions"][1]["values"]
    assert "platform" in excluded  # the webhook never reviews its own namespace


def test_operator_and_cert_manager_objects_follow_the_clusters_apis() -> None:
    plain = by_key(render())
    assert not [k for k in plain if k[0] in ("ServiceMonitor", "PrometheusRule", "Certificate", "Issuer")]
    apis = [a for api in [*OPERATOR_APIS, "cert-manager.io/v1"] for a in ("--api-versions", api)]
    full = by_key(render("gpuctl-system", *apis))
    rules = yaml.safe_load((MANIFESTS / "prometheus/rules.yaml").read_text())
    assert full[("PrometheusRule", "gpuctl")]["spec"]["groups"] == rules["groups"]
    sm = full[("ServiceMonitor", "gpuctl")]
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    svc_labels = full[("Service", "gpuctl")]["metadata"]["labels"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc_labels.items()
    assert {("Issuer", "gpuctl-admission-selfsigned"), ("Certificate", "gpuctl-admission")} <= set(full)
    assert ("Secret", "gpuctl-admission-tls") not in full
    vwc = full[("ValidatingWebhookConfiguration", "gpuctl-admission")]
    assert vwc["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "gpuctl-system/gpuctl-admission"
    }
    assert not [w for w in vwc["webhooks"] if "caBundle" in w["clientConfig"]]
    # Forced off even when the APIs exist.
    off = by_key(
        render(
            "gpuctl-system",
            *apis,
            "--set",
            "prometheus.serviceMonitor.enabled=false",
            "--set",
            "prometheus.prometheusRule.enabled=false",
            "--set",
            "certManager.enabled=false",
        )
    )
    assert not [k for k in off if k[0] in ("ServiceMonitor", "PrometheusRule", "Certificate", "Issuer")]


def test_topology_policies_follow_the_kubernetes_version() -> None:
    """MutatingAdmissionPolicy is GA from 1.36: installed there (helm template assumes a recent version),
    left out on older clusters unless forced, and never when switched off."""
    maps = {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}

    def names(*args: str) -> set[str]:
        return {k[1] for k in by_key(render("gpuctl-system", *args) if args else render()) if k[0] in maps}

    # The submitted-by and active-set-by policies (issue 33) come and go with the topology ones.
    topology = {
        "gpuctl-topology-templates",
        "gpuctl-topology-pods",
        "gpuctl-topology-gangs",
        "gpuctl-submitted-by",
        "gpuctl-active-set-by",
    }
    earlier = {"gpuctl-earlier-client-templates", "gpuctl-earlier-client-pods"}
    assert names() == topology | earlier  # each a policy and its binding
    assert len([k for k in by_key(render()) if k[0] in maps]) == 14
    assert not names("--kube-version", "1.35.0")
    assert names("--kube-version", "1.35.0", "--set", "topologyPolicy.enabled=true") == topology
    assert names("--kube-version", "1.35.0", "--set", "earlierClientPolicy.enabled=true") == earlier
    assert names("--set", "topologyPolicy.enabled=false") == earlier
    assert names("--set", "earlierClientPolicy.enabled=false") == topology


def test_dashboards_are_configmaps_for_grafanas_sidecar() -> None:
    docs = by_key(render())
    files = sorted((MANIFESTS / "grafana").glob("*.json"))
    assert files
    for f in files:
        cm = docs[("ConfigMap", f"gpuctl-dashboard-{f.stem}")]
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert json.loads(cm["data"][f"gpuctl-{f.name}"]) == json.loads(f.read_text())


def test_values_change_what_they_say() -> None:
    docs = by_key(
        render(
            "gpuctl-system",
            "--set",
            "webhook.mode=warn",
            "--set",
            "webhook.replicas=3",
            "--set",
            "allowedHostPaths={/data,/scratch}",
            "--set",
            "serve.apiKeysSecret=keys",
            "--set",
            "api.enabled=true",
        )
    )
    hook = docs[("Deployment", "gpuctl-admission")]
    assert hook["spec"]["replicas"] == 3
    c = hook["spec"]["template"]["spec"]["containers"][0]
    assert "--mode=warn" in c["args"] and "--mode=enforce" not in c["args"]
    assert {"name": "GPUCTL_ALLOWED_HOST_PATHS", "value": "/data:/scratch"} in c["env"]
    serve = docs[("Deployment", "gpuctl-serve")]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in serve["containers"][0]["env"]}
    vap = docs[("ValidatingAdmissionPolicy", "gpuctl-admission")]["spec"]
    allowed = next(v["expression"] for v in vap["variables"] if v["name"] == "allowedHostPaths")
    assert allowed == "['/data', '/scratch']"  # the policy allows what the webhook allows
    assert env["GPUCTL_API_KEYS_FILE"] == "/etc/gpuctl/api-keys/api-keys.yaml"
    assert {"name": "api-keys", "secret": {"secretName": "keys"}} in serve["volumes"]
    assert docs[("Deployment", "gpuctl-api")]["spec"]["replicas"] == 2
    no_api = by_key(render("gpuctl-system", "--set", "serve.api=false"))
    assert (
        "--api"
        not in no_api[("Deployment", "gpuctl-serve")]["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    assert ("ClusterRole", "gpuctl-api") not in no_api
    assert ("ClusterRole", "gpuctl-serve-api") not in no_api and ("ClusterRole", "gpuctl-serve-api") in docs


@pytest.mark.parametrize(
    ("digest", "message"),
    [("", "image.digest is required"), ("latest", "at '/image/digest'")],
)
def test_image_must_be_pinned_by_digest(digest: str, message: str) -> None:
    p = helm("template", "gpuctl", str(CHART), "--set", f"image.digest={digest}", check=False)
    assert p.returncode != 0
    assert message in p.stderr


def test_server_side_dry_run_of_the_rendered_chart(kubectl, namespace: str) -> None:
    """The API server validates every object (schemas, CRDs of Kueue, CEL of matchConditions) and
    persists nothing."""
    out = helm("template", "gpuctl", str(CHART), "-n", namespace, "--set", f"image.digest={DIGEST}").stdout
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(out)
        f.flush()
        p = kubectl("apply", "--dry-run=server", "-f", f.name, check=False)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert len(lines) == len([d for d in yaml.safe_load_all(out) if d])
    assert all(ln.endswith("(server dry run)") for ln in lines), lines
    got = kubectl("get", "validatingwebhookconfiguration", "gpuctl-admission", check=False)
    assert got.returncode != 0 and "NotFound" in got.stderr
    got = kubectl("-n", namespace, "get", "deployment", "gpuctl-serve", check=False)
    assert got.returncode != 0 and "NotFound" in got.stderr


KIND_VALIDATE = CACHE / "bin" / f"kind-validate-{VERSIONS['KIND_VERSION']}" / "kind-validate"


def test_kind_config_passes_kinds_own_loader_and_validation(tmp_path: Path) -> None:
    """hack/kind.sh's cluster config, through kind's strict loader and Validate (no Docker needed)."""
    if not KIND_VALIDATE.exists():
        pytest.fail(f"{KIND_VALIDATE} is missing: run hack/cluster/build.sh")
    p = subprocess.run(
        [str(KIND_VALIDATE), str(ROOT / "hack/kind/cluster.yaml")], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    assert 'cluster "gpuctl", 2 nodes' in p.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: worker\n  lables: {a: b}\n"
    )
    p = subprocess.run([str(KIND_VALIDATE), str(bad)], capture_output=True, text=True)
    assert p.returncode == 1 and "field lables not found" in p.stderr


def test_kind_values_render_and_pass_server_side_dry_run(kubectl, namespace: str) -> None:
    """What hack/kind.sh installs: the chart with hack/kind/values.yaml."""
    values = ROOT / "hack/kind/values.yaml"
    docs = render(namespace, "-f", str(values))
    platform = {"gpuctl.runwhere.ai/platform": "true"}
    for name in ("gpuctl-admission", "gpuctl-serve"):
        assert by_key(docs)[("Deployment", name)]["spec"]["template"]["spec"]["nodeSelector"] == platform
    kind_cfg = yaml.safe_load((ROOT / "hack/kind/cluster.yaml").read_text())
    assert [n.get("labels") for n in kind_cfg["nodes"]].count(platform) == 1
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(yaml.safe_dump_all(docs))
        f.flush()
        p = kubectl("apply", "--dry-run=server", "-f", f.name, check=False)
    assert p.returncode == 0, p.stderr


# ------------------------------------------------------------- the REST API's TLS, the backstop, policies
def _verify_certificate(secret: dict, tmp_path: Path, names: list[str]) -> None:
    for k in ("ca.crt", "tls.crt"):
        (tmp_path / k).write_bytes(base64.b64decode(secret["data"][k]))
    v = subprocess.run(
        ["openssl", "verify", "-CAfile", tmp_path / "ca.crt", tmp_path / "tls.crt"],
        capture_output=True,
        text=True,
    )
    assert v.returncode == 0, v.stderr
    san = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", tmp_path / "tls.crt"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for n in names:
        assert f"DNS:{n}" in san, (n, san)


def test_api_tls_self_signed_fallback_names_both_services_and_serve_mounts_it(tmp_path: Path) -> None:
    docs = by_key(render("platform"))
    secret = docs[("Secret", "gpuctl-api-tls")]
    _verify_certificate(
        secret,
        tmp_path,
        [
            f"{svc}.platform.svc{suffix}"
            for svc in ("gpuctl-api", "gpuctl")
            for suffix in ("", ".cluster.local")
        ],
    )
    assert (
        docs[("Secret", "gpuctl-api-tls")]["data"]["ca.crt"]
        != docs[("Secret", "gpuctl-admission-tls")]["data"]["ca.crt"]
    )  # its own CA: the webhook's and the API's trust do not mix
    c = docs[("Deployment", "gpuctl-serve")]["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][-2:] == SERVE_TLS_ARGS and TLS_MOUNT in c["volumeMounts"]


def test_api_tls_through_cert_manager_and_the_servicemonitor_scrapes_https() -> None:
    apis = [a for api in [*OPERATOR_APIS, "cert-manager.io/v1"] for a in ("--api-versions", api)]
    docs = by_key(render("platform", *apis))
    assert ("Secret", "gpuctl-api-tls") not in docs
    cert = docs[("Certificate", "gpuctl-api")]
    assert cert["spec"]["secretName"] == "gpuctl-api-tls"
    assert "gpuctl.platform.svc.cluster.local" in cert["spec"]["dnsNames"]
    assert {
        ("Issuer", "gpuctl-api-selfsigned"),
        ("Issuer", "gpuctl-api-ca"),
        ("Certificate", "gpuctl-api-ca"),
    } <= set(docs)
    (ep,) = docs[("ServiceMonitor", "gpuctl")]["spec"]["endpoints"]
    assert ep["scheme"] == "https"
    assert ep["tlsConfig"] == {
        "ca": {"secret": {"name": "gpuctl-api-tls", "key": "ca.crt"}},
        "serverName": "gpuctl.platform.svc",
    }
    # Without the API in serve, serve's port is plain HTTP (metrics only): no certificate, no https scrape.
    plain = by_key(render("platform", *apis, "--set", "serve.api=false"))
    assert ("Certificate", "gpuctl-api") not in plain
    assert "scheme" not in plain[("ServiceMonitor", "gpuctl")]["spec"]["endpoints"][0]


def test_standalone_api_is_https_and_api_tls_off_takes_tls_out() -> None:
    docs = by_key(render("gpuctl-system", "--set", "api.enabled=true"))
    want = next(
        d
        for d in yaml.safe_load_all((MANIFESTS / "api/deployment.yaml").read_text())
        if d and d["kind"] == "Deployment"
    )
    api = docs[("Deployment", "gpuctl-api")]["spec"]["template"]["spec"]
    assert api["containers"][0]["args"] == want["spec"]["template"]["spec"]["containers"][0]["args"]
    assert TLS_VOLUME in api["volumes"]
    assert docs[("Service", "gpuctl-api")]["spec"]["ports"][0]["port"] == 443
    off = by_key(render("gpuctl-system", "--set", "api.enabled=true", "--set", "apiTls.enabled=false"))
    assert ("Secret", "gpuctl-api-tls") not in off
    for name in ("gpuctl-api", "gpuctl-serve"):
        spec = off[("Deployment", name)]["spec"]["template"]["spec"]
        c = spec["containers"][0]
        assert not [a for a in c["args"] if a.startswith("--tls-")], name
        assert "tls" not in {v["name"] for v in spec.get("volumes") or []}, name
        assert c["readinessProbe"]["httpGet"].get("scheme", "HTTP") == "HTTP", name
    assert "prometheus.io/scheme" not in off[("Service", "gpuctl")]["metadata"]["annotations"]


def test_backstop_values_become_flags_and_eviction_brings_its_rbac() -> None:
    plain = by_key(render())
    args = plain[("Deployment", "gpuctl-serve")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if "uncovered" in a or "backstop" in a or "evict" in a]  # gpuctl's defaults
    # Issue 43: ending terminations past the bound is on by default and brings the eviction right with it.
    assert ("ClusterRole", "gpuctl-serve-evict") in plain
    report_only = by_key(
        render("gpuctl-system", "--set", "serve.backstop.evictTerminating=false",
               "--set", "serve.backstop.terminationAllowance=120")
    )  # fmt: skip
    args = report_only[("Deployment", "gpuctl-serve")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"--no-evict-terminating", "--termination-allowance=120"} <= set(args)
    assert ("ClusterRole", "gpuctl-serve-evict") not in report_only
    docs = by_key(
        render("gpuctl-system", "--set", "serve.backstop.evict=true", "--set", "serve.backstop.grace=0",
               "--set", "serve.backstop.evictAfter=300")
    )  # fmt: skip
    args = docs[("Deployment", "gpuctl-serve")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"--uncovered-grace=0", "--evict-uncovered", "--evict-after=300"} <= set(args)
    evict = docs[("ClusterRole", "gpuctl-serve-evict")]
    assert evict["rules"] == [{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}]
    assert docs[("ClusterRoleBinding", "gpuctl-serve-evict")]["subjects"][0]["name"] == "gpuctl-serve"
    off = by_key(
        render("gpuctl-system", "--set", "serve.backstop.enabled=false", "--set", "serve.backstop.evict=true",
               "--set", "serve.backstop.evictTerminating=true")
    )  # fmt: skip
    args = off[("Deployment", "gpuctl-serve")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-backstop" in args and "--evict-uncovered" not in args
    assert ("ClusterRole", "gpuctl-serve-evict") not in off


def test_serve_cluster_becomes_the_cluster_flag() -> None:
    """serve.cluster labels serve's series (--cluster); empty, the default, adds no flag and no label."""
    serve = ("Deployment", "gpuctl-serve")
    args = by_key(render())[serve]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--cluster")]
    docs = by_key(render("gpuctl-system", "--set", "serve.cluster=eu-west"))
    args = docs[serve]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--cluster=eu-west" in args


def test_network_policies_are_off_by_default_and_admit_what_the_values_say() -> None:
    assert not [k for k in by_key(render()) if k[0] == "NetworkPolicy"]
    clients = '{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"console"}}}'
    docs = by_key(
        render("gpuctl-system", "--set", "networkPolicy.enabled=true", "--set", "api.enabled=true",
               "--set-json", f"networkPolicy.apiFrom=[{clients}]")
    )  # fmt: skip
    serve = docs[("NetworkPolicy", "gpuctl-serve")]["spec"]
    (rule,) = serve["ingress"]
    assert serve["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "gpuctl-serve"}
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert [p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for p in rule["from"]] == [
        "monitoring",
        "console",
    ]
    api = docs[("NetworkPolicy", "gpuctl-api")]["spec"]
    assert api["ingress"][0]["ports"] == [{"port": "https", "protocol": "TCP"}]
    assert len(api["ingress"][0]["from"]) == 1
    # No clients named: the API's pods take no ingress at all (serve still lets Prometheus scrape).
    closed = by_key(
        render("gpuctl-system", "--set", "networkPolicy.enabled=true", "--set", "api.enabled=true")
    )
    assert closed[("NetworkPolicy", "gpuctl-api")]["spec"]["ingress"] == []
    assert len(closed[("NetworkPolicy", "gpuctl-serve")]["spec"]["ingress"][0]["from"]) == 1


def test_server_side_dry_run_with_every_option_on(kubectl, namespace: str) -> None:
    """The standalone API, eviction, the NetworkPolicies and TLS pass the API server's validation."""
    out = helm(
        "template", "gpuctl", str(CHART), "-n", namespace, "--set", f"image.digest={DIGEST}",
        "--set", "api.enabled=true", "--set", "serve.backstop.evict=true",
        "--set", "networkPolicy.enabled=true",
        "--set-json", 'networkPolicy.apiFrom=[{"podSelector":{"matchLabels":{"app":"console"}}}]',
    ).stdout  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(out)
        f.flush()
        p = kubectl("apply", "--dry-run=server", "-f", f.name, check=False)
    assert p.returncode == 0, p.stderr
    for obj in (
        "networkpolicy.networking.k8s.io/gpuctl-serve",
        "networkpolicy.networking.k8s.io/gpuctl-api",
        "secret/gpuctl-api-tls",
        "clusterrole.rbac.authorization.k8s.io/gpuctl-serve-evict",
        "deployment.apps/gpuctl-api",
    ):
        assert f"{obj} " in p.stdout, (obj, p.stdout)


# ------------------------------------------------------------------------- issue 25: what an admin hits
VAP_BINDING = "ValidatingAdmissionPolicyBinding"
# Every ValidatingAdmissionPolicyBinding the chart installs from manifests/ (isolation's, the delete and
# PriorityClass policies' too): a binding added to manifests/admission gets its own case here.
BINDINGS = sorted(d["metadata"]["name"] for d in manifest_objects() if d["kind"] == VAP_BINDING)


def test_the_chart_installs_every_policy_binding_of_manifests() -> None:
    assert {
        "gpuctl-admission",
        "gpuctl-admission-delete",
        "gpuctl-priority-classes",
        "gpuctl-isolation",
    } <= set(BINDINGS)
    # Plus gpuctl's own identities' confinement (manifests/serve, tests/integration/test_chart_trust.py).
    # And the audit trail's (manifests/serve/history-policy.yaml, tests/integration/test_history_trust.py).
    want = sorted(
        [*BINDINGS, "gpuctl-service-confinement", "gpuctl-history-writer", "gpuctl-workload-events"]
    )
    assert sorted(k[1] for k in by_key(render()) if k[0] == VAP_BINDING) == want


@pytest.mark.parametrize("binding", BINDINGS)
def test_warn_mode_warns_in_every_policy_binding(binding: str) -> None:
    """webhook.mode=warn used to change only the webhook's flag: the policies still refused (issue 25)."""
    enforce = by_key(render())[(VAP_BINDING, binding)]
    assert enforce["spec"]["validationActions"] == ["Deny"]
    warn = by_key(render("gpuctl-system", "--set", "webhook.mode=warn"))
    assert warn[(VAP_BINDING, binding)]["spec"]["validationActions"] == ["Warn", "Audit"]
    # Nothing else of the binding changes; the webhook warns too.
    got = json.loads(json.dumps(warn[(VAP_BINDING, binding)]))
    got["spec"]["validationActions"] = ["Deny"]
    assert got == enforce
    args = warn[("Deployment", "gpuctl-admission")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--mode=warn" in args


# The values that broke (issue 25) and typos: `helm lint` and `helm template` refuse them, naming the value.
BAD_VALUES = [
    (["--set", "webhook.replicas=abc"], "at '/webhook/replicas': got string, want integer"),
    (["--set", "webhook.replicas=0"], "at '/webhook/replicas': minimum: got 0, want 1"),
    (["--set", "webhook.minAvailable=0"], "at '/webhook/minAvailable'"),
    (["--set", "webhook.minAvailable=150%"], "at '/webhook/minAvailable'"),
    (["--set", "webhook.replicaz=3"], "at '/webhook': additional properties 'replicaz' not allowed"),
    (["--set", "webhok.mode=warn"], "additional properties 'webhok' not allowed"),
    (["--set", "serve.backstop.evictafter=300"], "at '/serve/backstop': additional properties 'evictafter'"),
    (["--set", "webhook.mode=warm"], "at '/webhook/mode': value must be one of 'enforce', 'warn'"),
    (["--set", "webhook.failurePolicy=fail"], "at '/webhook/failurePolicy'"),
    (["--set", "certManager.enabled=yes"], "at '/certManager/enabled'"),
    (["--set", "image.digest=sha256:abc"], "at '/image/digest'"),
    (["--set", "api.replicas=two"], "at '/api/replicas'"),
    (["--set", "serve.cluster=eu west"], "at '/serve/cluster'"),
]


@pytest.mark.parametrize(("args", "message"), BAD_VALUES, ids=[" ".join(a[1:]) for a, _ in BAD_VALUES])
def test_values_schema_refuses_what_used_to_render_silently(args: list[str], message: str) -> None:
    t = helm("template", "gpuctl", str(CHART), "--set", f"image.digest={DIGEST}", *args, check=False)
    assert t.returncode != 0 and message in t.stderr, t.stderr
    lint = helm("lint", "--strict", str(CHART), "--set", f"image.digest={DIGEST}", *args, check=False)
    assert lint.returncode != 0 and message in lint.stdout + lint.stderr, lint.stdout + lint.stderr


# A PodDisruptionBudget that keeps every replica blocks node drains; a schema cannot compare two values, so
# the template refuses it. (`helm lint` only logs a template's fail() and passes: install and template fail.)
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2", "webhook.minAvailable (2, 2 of 2 pods) must stay below webhook.replicas (2)"),
        ("51%", "webhook.minAvailable (51%, 2 of 2 pods) must stay below webhook.replicas (2)"),
    ],
)
def test_min_available_that_blocks_every_eviction_is_refused(value: str, message: str) -> None:
    t = helm("template", "gpuctl", str(CHART), "--set", f"image.digest={DIGEST}",
             "--set", f"webhook.minAvailable={value}", check=False)  # fmt: skip
    assert t.returncode != 0 and message in t.stderr, t.stderr
    assert "raise webhook.replicas or lower webhook.minAvailable" in t.stderr


def test_min_available_takes_a_percentage_and_replicas_a_number() -> None:
    """minAvailable=50% used to render 0 (int of a string): it stays a percentage now."""
    docs = by_key(render("gpuctl-system", "--set", "webhook.minAvailable=50%", "--set", "webhook.replicas=3"))
    assert docs[("PodDisruptionBudget", "gpuctl-admission")]["spec"]["minAvailable"] == "50%"
    assert docs[("Deployment", "gpuctl-admission")]["spec"]["replicas"] == 3
    docs = by_key(render("gpuctl-system", "--set", "webhook.minAvailable=2", "--set", "webhook.replicas=3"))
    assert docs[("PodDisruptionBudget", "gpuctl-admission")]["spec"]["minAvailable"] == 2
    # Every values file the project ships passes the schema.
    for f in (ROOT / "hack/kind/values.yaml", CHART / "values.yaml"):
        render("gpuctl-system", "-f", str(f))


def test_no_default_image_digest_and_the_error_says_where_to_get_one() -> None:
    """A default digest went stale with every change (issue 25): the chart ships none, and says so."""
    assert yaml.safe_load((CHART / "values.yaml").read_text())["image"]["digest"] == ""
    p = helm("template", "gpuctl", str(CHART), check=False)
    assert p.returncode != 0
    assert "image.digest is required" in p.stderr and "hack/image.sh prints it" in p.stderr


KUEUE_ARGS = ["--set", "kueue.namespace=kueue-prod", "--set", "kueue.serviceAccountName=kueue-ctrl"]
KUEUE_USER = "system:serviceaccount:kueue-prod:kueue-ctrl"
DEFAULT_KUEUE_USER = "system:serviceaccount:kueue-system:kueue-controller-manager"


def test_kueue_namespace_and_service_account_follow_the_values_everywhere() -> None:
    """Every place the default Kueue identity or namespace appears takes the values instead: the
    matchConditions of the webhook configuration and of every policy, the system namespaces they never
    judge, and the webhook's --kueue-user."""
    default = helm("template", "gpuctl", str(CHART), "--set", f"image.digest={DIGEST}").stdout
    other = helm("template", "gpuctl", str(CHART), "--set", f"image.digest={DIGEST}", *KUEUE_ARGS).stdout
    assert "kueue-system" not in other and "kueue-controller-manager" not in other
    assert other.count(KUEUE_USER) == default.count(DEFAULT_KUEUE_USER) >= 10
    assert other.count("kueue-prod") == default.count("kueue-system")
    docs = by_key([d for d in yaml.safe_load_all(other) if d])
    args = docs[("Deployment", "gpuctl-admission")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--kueue-user={KUEUE_USER}" in args
    vwc = docs[("ValidatingWebhookConfiguration", "gpuctl-admission")]
    for w in vwc["webhooks"]:
        conds = {c["name"]: c["expression"] for c in w.get("matchConditions") or []}
        if w["name"] != "nodes.admission.runwhere.ai":
            assert conds["not-kueue"] == f"request.userInfo.username != '{KUEUE_USER}'", w["name"]
        if "namespaceSelector" in w:
            excluded = next(
                e["values"] for e in w["namespaceSelector"]["matchExpressions"] if e["operator"] == "NotIn"
                and e["key"] == "kubernetes.io/metadata.name"
            )  # fmt: skip
            assert "kueue-prod" in excluded and "kueue-system" not in excluded, w["name"]


# ------------------------------------------------------------------------- certificates
def _tls_objects(docs: list[dict]) -> list[dict]:
    return [
        d
        for d in docs
        if d["kind"] in ("Secret", "ValidatingWebhookConfiguration", "Deployment", "ServiceMonitor")
        or d["apiVersion"].startswith("cert-manager.io/")
    ]


EXISTING = [
    "--set", "webhook.tls.existingSecret=corp-webhook-tls",
    "--set", "webhook.tls.caBundle=" + base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode(),
    "--set", "apiTls.existingSecret=corp-api-tls",
    "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
]  # fmt: skip


def test_existing_secrets_render_the_same_on_every_render_and_are_mounted() -> None:
    """GitOps renderers run `helm template` on every sync: with Secrets of your own (or cert-manager) the
    output is identical each time, so nothing is rotated behind your back."""
    first = helm("template", "gpuctl", str(CHART), "--set", f"image.digest={DIGEST}", *EXISTING).stdout
    again = helm("template", "gpuctl", str(CHART), "--set", f"image.digest={DIGEST}", *EXISTING).stdout
    assert first == again
    docs = by_key([d for d in yaml.safe_load_all(first) if d])
    assert not [k for k in docs if k[0] == "Secret"]  # the chart makes none: they are yours
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    vwc = docs[("ValidatingWebhookConfiguration", "gpuctl-admission")]
    assert {w["clientConfig"]["caBundle"] for w in vwc["webhooks"]} == {ca}
    assert "annotations" not in vwc["metadata"]  # no cert-manager injection

    def secrets(name: str) -> set[str]:
        vols = docs[("Deployment", name)]["spec"]["template"]["spec"]["volumes"]
        return {v["secret"]["secretName"] for v in vols if "secret" in v}

    assert secrets("gpuctl-admission") == {"corp-webhook-tls"}
    assert secrets("gpuctl-serve") == {"corp-api-tls"}
    sm = {k[1]: v for k, v in docs.items() if k[0] == "ServiceMonitor"}
    assert sm["gpuctl"]["spec"]["endpoints"][0]["tlsConfig"]["ca"]["secret"]["name"] == "corp-api-tls"
    assert (
        sm["gpuctl-admission"]["spec"]["endpoints"][0]["tlsConfig"]["ca"]["secret"]["name"]
        == "corp-webhook-tls"
    )
    # Without the CA the API server could not verify the webhook: refused, naming the value.
    p = helm(
        "template", "gpuctl", str(CHART), "--set", f"image.digest={DIGEST}",
        "--set", "webhook.tls.existingSecret=corp-webhook-tls", check=False,
    )  # fmt: skip
    assert (
        p.returncode != 0 and "webhook.tls.caBundle is required with webhook.tls.existingSecret" in p.stderr
    )


def test_cert_manager_renders_the_same_every_time_and_takes_an_issuer_ref() -> None:
    apis = ["--api-versions", "cert-manager.io/v1"]
    assert render("gpuctl-system", *apis) == render("gpuctl-system", *apis)
    ref = ["--set", "certManager.issuerRef.name=corp-ca", "--set", "certManager.issuerRef.kind=ClusterIssuer"]
    docs = render("gpuctl-system", *apis, *ref)
    cm = {
        (d["kind"], d["metadata"]["name"]): d for d in docs if d["apiVersion"].startswith("cert-manager.io/")
    }
    # Only the serving certificates, issued by your issuer: no self-signed root, no CA of the chart's own.
    assert set(cm) == {("Certificate", "gpuctl-admission"), ("Certificate", "gpuctl-api")}
    for c in cm.values():
        assert c["spec"]["issuerRef"] == {
            "name": "corp-ca",
            "kind": "ClusterIssuer",
            "group": "cert-manager.io",
        }
    assert cm[("Certificate", "gpuctl-admission")]["spec"]["secretName"] == "gpuctl-admission-tls"
    vwc = by_key(docs)[("ValidatingWebhookConfiguration", "gpuctl-admission")]
    assert vwc["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "gpuctl-system/gpuctl-admission"
    }
    bad = helm("template", "gpuctl", str(CHART), "--set", f"image.digest={DIGEST}", *apis,
               "--set", "certManager.issuerRef.kind=Vault", check=False)  # fmt: skip
    assert bad.returncode != 0 and "/certManager/issuerRef" in bad.stderr


def _readme_section(title: str) -> str:
    text = (CHART / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _fenced(section: str, lang: str) -> list[str]:
    blocks, parts = [], section.split("```")
    for i in range(1, len(parts), 2):
        head, _, body = parts[i].partition("\n")
        if head.strip() == lang:
            blocks.append(body)
    return blocks


def _sans(pem: Path) -> set[str]:
    out = subprocess.run(
        ["openssl", "x509", "-in", str(pem), "-noout", "-ext", "subjectAltName"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {n.strip().removeprefix("DNS:") for n in out.splitlines()[1].split(",")}


def test_the_readmes_gitops_values_render_the_same_every_time(tmp_path: Path, kubectl_bin: str) -> None:
    """charts/gpuctl/README.md, "Certificates": the values it tells `helm template` users (Argo CD, ...) to
    set, rendered twice with no cluster, give the same output: nothing is rotated on a re-sync. Its openssl
    recipe makes Secrets the rendered objects accept (names, CA). The defaults render differently each
    time (test_self_signed_certificates_differ_per_render_without_a_cluster): why these values exist."""
    section = _readme_section("Certificates")
    cert_manager, own = [yaml.safe_load(b) for b in _fenced(section, "yaml")]
    (recipe,) = _fenced(section, "bash")
    # The recipe, with kubectl writing the Secrets it would create.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(
        f'#!/bin/sh\n{kubectl_bin} "$@" --dry-run=client -o yaml --kubeconfig=/dev/null >>secrets.yaml\n'
        "echo ---  >>secrets.yaml\n"
    )
    (bin_dir / "kubectl").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    made = subprocess.run(["bash", "-euo", "pipefail", "-c", recipe], cwd=tmp_path, env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert made.returncode == 0, made.stderr
    ca_bundle = made.stdout.strip().splitlines()[-1]
    assert base64.b64decode(ca_bundle) == (tmp_path / "ca.crt").read_bytes()
    secrets = {
        d["metadata"]["name"]: d for d in yaml.safe_load_all((tmp_path / "secrets.yaml").read_text()) if d
    }
    own["webhook"]["tls"]["caBundle"] = ca_bundle

    renders = {}
    for name, values in (("cert-manager", cert_manager), ("own", own)):
        f = tmp_path / f"{name}.yaml"
        f.write_text(yaml.safe_dump(values))
        first, again = (
            helm("template", "gpuctl", str(CHART), "-n", "gpuctl-system", "--set", f"image.digest={DIGEST}",
                 "-f", str(f)).stdout
            for _ in range(2)
        )  # fmt: skip
        assert first == again, f"{name}: two renders differ"
        docs = by_key([d for d in yaml.safe_load_all(first) if d])
        assert not [k for k in docs if k[0] == "Secret"], f"{name}: the render holds a Secret"
        assert "PRIVATE KEY" not in first
        renders[name] = docs

    docs = renders["cert-manager"]
    vwc = docs[("ValidatingWebhookConfiguration", "gpuctl-admission")]
    assert vwc["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "gpuctl-system/gpuctl-admission"
    }
    certs = {k[1]: d for k, d in docs.items() if k[0] == "Certificate"}
    assert {certs[n]["spec"]["secretName"] for n in ("gpuctl-admission", "gpuctl-api")} == {
        "gpuctl-admission-tls", "gpuctl-api-tls"
    }  # fmt: skip

    docs = renders["own"]
    vwc = docs[("ValidatingWebhookConfiguration", "gpuctl-admission")]
    assert {w["clientConfig"]["caBundle"] for w in vwc["webhooks"]} == {ca_bundle}

    # The Secrets the recipe made are the ones the pods mount, with the keys they read, for the names
    # the API server (the webhook's Service) and clients and Prometheus (serve's Service) dial.
    def secret_volumes(deployment: str) -> set[str]:
        vols = docs[("Deployment", deployment)]["spec"]["template"]["spec"]["volumes"]
        return {v["secret"]["secretName"] for v in vols if "secret" in v}

    mounted = {name: secret_volumes(name) for name in ("gpuctl-admission", "gpuctl-serve")}
    assert mounted == {"gpuctl-admission": {own["webhook"]["tls"]["existingSecret"]},
                       "gpuctl-serve": {own["apiTls"]["existingSecret"]}}  # fmt: skip
    hook_svc = {w["clientConfig"]["service"]["name"] for w in vwc["webhooks"]}
    for deployment, services in (("gpuctl-admission", hook_svc), ("gpuctl-serve", {"gpuctl", "gpuctl-api"})):
        (secret_name,) = mounted[deployment]
        assert secret_name in secrets, (
            f"the values name Secret {secret_name}, the recipe makes {set(secrets)}"
        )
        secret = secrets[secret_name]
        assert secret["type"] == "kubernetes.io/tls" and set(secret["data"]) == {
            "tls.crt",
            "tls.key",
            "ca.crt",
        }
        crt = tmp_path / f"{secret_name}.crt"
        crt.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
        verify = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), str(crt)],
                                capture_output=True, text=True)  # fmt: skip
        assert verify.returncode == 0, verify.stdout + verify.stderr
        for svc in services:
            assert {f"{svc}.gpuctl-system.svc", f"{svc}.gpuctl-system.svc.cluster.local"} <= _sans(crt), svc


def test_self_signed_certificates_differ_per_render_without_a_cluster() -> None:
    """Why the two options above exist: `helm template` cannot look the Secrets up, so Helm's self-signed
    fallback makes new ones on every render (install and upgrade keep them: the next test)."""
    a, b = by_key(render()), by_key(render())
    for name in ("gpuctl-admission-tls", "gpuctl-api-tls"):
        assert a[("Secret", name)]["data"]["ca.crt"] != b[("Secret", name)]["data"]["ca.crt"], name


@pytest.fixture
def rbac_set_aside(kubectl, namespace: str) -> Iterator[None]:
    """The chart's ClusterRoles and ClusterRoleBindings that other tests applied from manifests/ without
    Helm's ownership (tests/integration/test_metrics.py's serve identity, the team roles) make `helm
    --dry-run=server` refuse ("exists and cannot be imported into the current release"), so this test
    failed whenever it ran after them on the same cluster. They are set aside for the test and put back."""
    saved = []
    for d in render(namespace):
        if d["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            continue
        ref = f"{d['kind'].lower()}/{d['metadata']['name']}"
        got = kubectl("get", ref, "-o", "json", check=False)
        if got.returncode != 0:
            continue
        obj = json.loads(got.stdout)
        if (obj["metadata"].get("annotations") or {}).get("meta.helm.sh/release-name"):
            continue
        for k in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
            obj["metadata"].pop(k, None)
        saved.append(obj)
        kubectl("delete", ref)
    try:
        yield
    finally:
        for obj in saved:
            kubectl("apply", "-f", "-", input=json.dumps(obj))


def test_self_signed_certificates_are_kept_when_rendered_against_the_cluster(
    kubectl, namespace: str, rbac_set_aside: None
) -> None:
    """Install and upgrade (and `helm template --dry-run=server`) look the Secrets up: the first install's
    certificate is rendered again, every time, for the webhook and the REST API alike."""
    first = by_key(render(namespace))
    for name in ("gpuctl-admission-tls", "gpuctl-api-tls"):
        secret = json.loads(json.dumps(first[("Secret", name)]))
        # As `helm install` leaves them: owned by the release.
        secret["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "Helm"
        secret["metadata"]["annotations"] = {
            "meta.helm.sh/release-name": "gpuctl",
            "meta.helm.sh/release-namespace": namespace,
        }
        kubectl("apply", "-f", "-", input=yaml.safe_dump(secret))
    renders = [by_key(render(namespace, "--dry-run=server")) for _ in range(2)]
    for name in ("gpuctl-admission-tls", "gpuctl-api-tls"):
        for r in renders:
            assert r[("Secret", name)]["data"] == first[("Secret", name)]["data"], name
    ca = first[("Secret", "gpuctl-admission-tls")]["data"]["ca.crt"]
    for r in renders:
        vwc = r[("ValidatingWebhookConfiguration", "gpuctl-admission")]
        assert {w["clientConfig"]["caBundle"] for w in vwc["webhooks"]} == {ca}


# ------------------------------------------------------------------------- monitoring
def test_servicemonitors_honor_labels_and_scrape_the_webhook_over_https() -> None:
    docs = by_key(render("platform", "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"))
    serve = docs[("ServiceMonitor", "gpuctl")]["spec"]["endpoints"][0]
    hook = docs[("ServiceMonitor", "gpuctl-admission")]["spec"]["endpoints"][0]
    assert serve["honorLabels"] is True and hook["honorLabels"] is True
    assert hook["scheme"] == "https" and hook["port"] == "https"
    assert hook["tlsConfig"] == {
        "ca": {"secret": {"name": "gpuctl-admission-tls", "key": "ca.crt"}},
        "serverName": "gpuctl-admission.platform.svc",
    }
    ann = docs[("Service", "gpuctl-admission")]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/scheme"] == "https"
    assert docs[("ServiceMonitor", "gpuctl-admission")]["spec"]["namespaceSelector"]["matchNames"] == [
        "platform"
    ]
    off = by_key(render("platform", "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
                        "--set", "webhook.enabled=false"))  # fmt: skip
    assert ("ServiceMonitor", "gpuctl-admission") not in off and ("ServiceMonitor", "gpuctl") in off


# ------------------------------------------------------------------------- the rendered policies, enforced
TESTBED_LABEL = {"gpuctl.runwhere.ai/testbed": "true"}


def _bad_job(ns: str) -> dict:
    """A raw Job a user could kubectl apply: mounts the host's /etc (rule host-path)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "bad", "namespace": ns, "labels": {"app": "bad"}},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "c", "image": "busybox", "volumeMounts": [{"name": "h", "mountPath": "/h"}]}
                    ],
                    "volumes": [{"name": "h", "hostPath": {"path": "/etc"}}],
                }
            }
        },
    }


def _bad_pod_outside_teams(ns: str) -> dict:
    """A GPU pod outside team namespaces that tolerates the pool taint (rule pool-toleration)."""
    gpu = {"nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bad", "namespace": ns},
        "spec": {
            "tolerations": [{"key": "runwhere.ai/pool", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": gpu, "limits": gpu}}],
        },
    }


class _Policies:
    """The chart's rendered ValidatingAdmissionPolicies and their bindings, created on the cluster under test
    names, each binding's namespace selector narrowed to the test's namespaces (the rest as rendered)."""

    def __init__(self, kube, sfx: str) -> None:
        self.kube, self.sfx, self.created = kube, sfx, []

    def install(self, docs: dict, names: list[str], namespaces: list[str]) -> None:
        from gpuctl.cluster import path

        for name in names:
            vap = json.loads(json.dumps(docs[("ValidatingAdmissionPolicy", name)]))
            binding = json.loads(json.dumps(docs[(VAP_BINDING, name)]))
            test_name = f"{name}-chart-{self.sfx}"
            vap["metadata"] = {"name": test_name, "labels": dict(TESTBED_LABEL)}
            binding["metadata"] = {"name": test_name, "labels": dict(TESTBED_LABEL)}
            binding["spec"]["policyName"] = test_name
            binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"].append(
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}
            )
            for doc in (vap, binding):
                self.kube.apply(doc)
                self.created.append(path(doc["kind"], test_name))

    def set_actions(self, name: str, actions: list[str]) -> None:
        from gpuctl.cluster import path

        self.kube.merge_patch(
            path(VAP_BINDING, f"{name}-chart-{self.sfx}"), {"spec": {"validationActions": actions}}
        )

    def remove(self) -> None:
        import contextlib

        from gpuctl.cluster import ApiError

        for p in reversed(self.created):
            with contextlib.suppress(ApiError):
                self.kube.delete(p)


def _team_and_plain(kube, sfx: str) -> tuple[str, str]:
    team, plain = f"chart-team-{sfx}", f"chart-plain-{sfx}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": team, "labels": {"runwhere.ai/namespace": "true"}}})  # fmt: skip
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": plain}})
    return team, plain


def _dry_apply(kubectl, obj: dict, *extra: str):
    return kubectl(*extra, "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(obj), check=False)


def _dry_apply_until(kubectl, obj: dict, ok, what: str):
    """_dry_apply until ok(result) (a policy or webhook takes effect a moment after it is created)."""
    from tests.integration.conftest import wait_until

    return wait_until(lambda: (lambda r: r if ok(r) else None)(_dry_apply(kubectl, obj)), 60, 0.5, what=what)


def test_warn_mode_admits_a_bad_raw_job_with_a_warning(kube, kubectl) -> None:
    """webhook.mode=warn, as rendered, on the API server: the bad Job is admitted and kubectl prints the
    policy's finding as a warning, in a team namespace (gpuctl-admission) and outside (gpuctl-isolation).
    The same bindings with the enforce rendering's actions refuse it: the test can fail."""
    import uuid

    from gpuctl.cluster import path

    sfx = uuid.uuid4().hex[:6]
    team, plain = _team_and_plain(kube, sfx)
    policies = _Policies(kube, sfx)
    try:
        warn = by_key(render("gpuctl-system", "--set", "webhook.mode=warn"))
        policies.install(warn, ["gpuctl-admission", "gpuctl-isolation"], [team, plain])
        cases = [("gpuctl-admission", _bad_job(team), "[host-path]"),
                 ("gpuctl-isolation", _bad_pod_outside_teams(plain), "[pool-toleration]")]  # fmt: skip
        for name, obj, rule in cases:
            p = _dry_apply_until(
                kubectl, obj, lambda r, rule=rule: rule in r.stderr, f"{name} warning about {rule}"
            )
            assert p.returncode == 0, (name, p.stderr)  # admitted
            assert "Warning:" in p.stderr and f"breaks {rule}" in p.stderr and "Fix: " in p.stderr, p.stderr
        enforce = by_key(render())
        for name, obj, rule in cases:
            policies.set_actions(name, enforce[(VAP_BINDING, name)]["spec"]["validationActions"])
            p = _dry_apply_until(kubectl, obj, lambda r: r.returncode != 0, f"{name} refusing once enforced")
            assert f"breaks {rule}" in p.stderr and "denied request" in p.stderr, p.stderr
    finally:
        policies.remove()
        for ns in (team, plain):
            kube.delete(path("Namespace", ns))


def test_a_non_default_kueue_identity_is_trusted_and_the_default_one_no_longer_is(kube, kubectl) -> None:
    """kueue.namespace/serviceAccountName on the API server: the rendered policy skips the configured
    Kueue's requests and judges the default identity like anybody's; the rendered webhook configuration
    (pointed at an address where nothing listens, failurePolicy Fail) is not even called for the configured
    Kueue, and is for the default identity."""
    import uuid

    from gpuctl.cluster import path

    sfx = uuid.uuid4().hex[:6]
    team, plain = _team_and_plain(kube, sfx)
    # Both identities may create Jobs in the namespace (RBAC): only who they are differs.
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "both-kueues", "namespace": team},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [
            {"kind": "ServiceAccount", "name": "kueue-ctrl", "namespace": "kueue-prod"},
            {"kind": "ServiceAccount", "name": "kueue-controller-manager", "namespace": "kueue-system"},
        ],
    }
    kube.apply(binding)
    policies = _Policies(kube, sfx)
    hook_name = f"gpuctl-admission-kueue-{sfx}"
    try:
        docs = by_key(render("gpuctl-system", *KUEUE_ARGS))
        policies.install(docs, ["gpuctl-admission"], [team])
        bad = _bad_job(team)
        _dry_apply_until(kubectl, bad, lambda r: "[host-path]" in r.stderr, "the policy enforced")
        assert _dry_apply(kubectl, bad, f"--as={KUEUE_USER}").returncode == 0
        p = _dry_apply(kubectl, bad, f"--as={DEFAULT_KUEUE_USER}")
        assert p.returncode != 0 and "breaks [host-path]" in p.stderr, p.stderr
        policies.remove()
        # The webhook's matchConditions: rendered, pointed at nothing, bound to the test's namespace only.
        vwc = json.loads(json.dumps(docs[("ValidatingWebhookConfiguration", "gpuctl-admission")]))
        hooks = [w for w in vwc["webhooks"] if w["name"].startswith("workloads.")]
        for w in hooks:
            w["clientConfig"] = {"url": "https://127.0.0.1:1/validate"}
            w["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": team}}
        meta = {"name": hook_name, "labels": dict(TESTBED_LABEL)}
        kube.apply(
            {"apiVersion": vwc["apiVersion"], "kind": vwc["kind"], "metadata": meta, "webhooks": hooks}
        )
        good = _bad_job(team)
        good["spec"]["template"]["spec"]["volumes"] = []
        good["spec"]["template"]["spec"]["containers"][0].pop("volumeMounts")
        good["metadata"]["labels"] = {"runwhere.ai/pool": "x"}  # relevant: the webhook would be called
        _dry_apply_until(
            kubectl, good, lambda r: "failed calling webhook" in r.stderr, "the webhook registered"
        )
        p = _dry_apply(kubectl, good, f"--as={KUEUE_USER}")
        assert p.returncode == 0, p.stderr  # never sent to the (dead) webhook
        p = _dry_apply(kubectl, good, f"--as={DEFAULT_KUEUE_USER}")
        assert p.returncode != 0 and "failed calling webhook" in p.stderr, p.stderr
    finally:
        kube.delete(path("ValidatingWebhookConfiguration", hook_name))
        policies.remove()
        for ns in (team, plain):
            kube.delete(path("Namespace", ns))


def test_exempt_namespaces_reach_the_webhook_the_binding_and_its_entry(tmp_path: Path) -> None:
    """exemptNamespaces (default the GPU Operator's) is one list in three places: the webhook's
    --exempt-namespace, the isolation binding's and the isolation webhook entry's last NotIn; [] drops it."""

    def places(docs: dict) -> tuple[list[str], list, list]:
        args = docs[("Deployment", "gpuctl-admission")]["spec"]["template"]["spec"]["containers"][0]["args"]
        binding = docs[("ValidatingAdmissionPolicyBinding", "gpuctl-isolation")]["spec"]["matchResources"]
        (vwc,) = [d for k, d in docs.items() if k[0] == "ValidatingWebhookConfiguration"]
        (entry,) = [w for w in vwc["webhooks"] if w["name"] == "isolation.admission.runwhere.ai"]
        flags = [a for a in args if a.startswith("--exempt-namespace=")]
        return (
            flags,
            binding["namespaceSelector"]["matchExpressions"],
            entry["namespaceSelector"]["matchExpressions"],
        )

    name = "kubernetes.io/metadata.name"
    flags, binding, entry = places(by_key(render()))
    assert flags == ["--exempt-namespace=gpu-operator"]
    assert binding == entry and binding[-1] == {"key": name, "operator": "NotIn", "values": ["gpu-operator"]}
    flags, binding, entry = places(by_key(render("gpuctl-system", "--set", "exemptNamespaces={nfd,dcgm}")))
    assert flags == ["--exempt-namespace=nfd", "--exempt-namespace=dcgm"]
    assert binding == entry and binding[-1]["values"] == ["nfd", "dcgm"] and len(binding) == 3
    values = tmp_path / "none.yaml"
    values.write_text("exemptNamespaces: []\n")
    flags, binding, entry = places(by_key(render("gpuctl-system", "-f", str(values))))
    assert flags == ["--exempt-namespace="]  # none: not the webhook's default
    assert binding == entry and len(binding) == 2 and all("gpu-operator" not in e["values"] for e in binding)


def test_the_termination_bound_and_extended_resources_reach_webhook_and_policy(tmp_path: Path) -> None:
    """maxTerminationGraceSeconds and allowedExtendedResources (issue 43) are one value each in two places:
    the webhook's flags and the team policy's compiled variables; [] allows no extended resource."""

    def places(docs: dict) -> tuple[list[str], list[str], dict[str, str]]:
        args = docs[("Deployment", "gpuctl-admission")]["spec"]["template"]["spec"]["containers"][0]["args"]
        policy = docs[("ValidatingAdmissionPolicy", "gpuctl-admission")]["spec"]["variables"]
        return (
            [a for a in args if a.startswith("--max-termination-grace=")],
            [a for a in args if a.startswith("--allowed-extended-resource=")],
            {v["name"]: v["expression"] for v in policy},
        )

    def bound_elsewhere(docs: dict) -> tuple[list[str], list[str], list[str]]:
        """The delete policy's compiled bound (`kubectl delete --grace-period`), serve's allowance, and the
        bound gpuctl's own check reads in serve's API and the standalone API (`gpuctl create` there)."""
        deletes = docs[("ValidatingAdmissionPolicy", "gpuctl-admission-delete")]["spec"]["variables"]
        serve = docs[("Deployment", "gpuctl-serve")]["spec"]["template"]["spec"]["containers"][0]
        api = docs[("Deployment", "gpuctl-api")]["spec"]["template"]["spec"]["containers"][0]
        return (
            [v["expression"] for v in deletes if v["name"] == "maxTerminationGrace"],
            [a for a in serve["args"] if a.startswith("--termination-allowance=")],
            [
                e["value"]
                for c in (serve, api)
                for e in c["env"]
                if e["name"] == "GPUCTL_MAX_TERMINATION_GRACE"
            ],
        )

    docs = by_key(render("gpuctl-system", "--set", "api.enabled=true"))
    grace, extended, variables = places(docs)
    assert grace == ["--max-termination-grace=300"] and variables["maxTerminationGrace"] == "300"
    assert bound_elsewhere(docs) == (["300"], ["--termination-allowance=300"], ["300", "300"])
    assert extended == ["--allowed-extended-resource=rdma/*", "--allowed-extended-resource=hugepages-*"]
    assert variables["allowedExtendedResources"] == "['rdma/*', 'hugepages-*']"
    values = tmp_path / "v.yaml"
    values.write_text("maxTerminationGraceSeconds: 600\nallowedExtendedResources: []\n")
    docs = by_key(render("gpuctl-system", "-f", str(values), "--set", "api.enabled=true"))
    grace, extended, variables = places(docs)
    assert grace == ["--max-termination-grace=600"] and variables["maxTerminationGrace"] == "600"
    # A cap the admin raised is the backstop's allowance too (a pod within it is never cut short), and
    # gpuctl's own check in both APIs no longer refuses what the webhook admits.
    assert bound_elsewhere(docs) == (["600"], ["--termination-allowance=600"], ["600", "600"])
    assert extended == ["--allowed-extended-resource="] and variables["allowedExtendedResources"] == "[]"
    own = by_key(
        render("gpuctl-system", "-f", str(values), "--set", "serve.backstop.terminationAllowance=120",
               "--set", "api.enabled=true")
    )  # fmt: skip
    assert bound_elsewhere(own) == (["600"], ["--termination-allowance=120"], ["600", "600"])
