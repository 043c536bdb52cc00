"""What the Helm chart (charts/gpuctl) reads from manifests/ is there and agrees with the code.

The chart's objects come from manifests/ through the symlinks under charts/gpuctl/files/ (see
charts/gpuctl/README.md); the rendering itself is tested with the real helm binary in
tests/integration/test_chart.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

import gpuctl

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts/gpuctl"
_spec = importlib.util.spec_from_file_location("kueue_bootstrap", ROOT / "hack/kueue_bootstrap.py")
assert _spec and _spec.loader
bootstrap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bootstrap)


def test_files_are_symlinks_into_manifests() -> None:
    links = sorted((CHART / "files").iterdir())
    assert [p.name for p in links] == ["admission", "api", "grafana", "kueue", "prometheus", "serve"]
    for p in links:
        assert p.is_symlink(), f"{p} must be a symlink into manifests/ (one source of truth)"
        assert p.resolve() == (ROOT / "manifests" / p.name).resolve()


def test_bootstrap_file_is_what_queues_objects_builds() -> None:
    path = ROOT / "manifests/kueue/bootstrap.yaml"
    assert path.read_text() == bootstrap.render(), "run: python hack/kueue_bootstrap.py > " + str(path)
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs == bootstrap.objects()
    assert sorted(d["kind"] for d in docs) == ["ResourceFlavor", "Topology"] + ["WorkloadPriorityClass"] * 5


def test_chart_app_version_is_gpuctls() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == gpuctl.__version__
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["tag"] == gpuctl.__version__


def test_manifests_run_the_images_one_entrypoint() -> None:
    """Every Deployment runs `gpuctl ...` (the image has no `python` on PATH by that name)."""
    commands = {}
    for f in ["admission/deployment.yaml", "serve/deployment.yaml", "api/deployment.yaml"]:
        for d in yaml.safe_load_all((ROOT / "manifests" / f).read_text()):
            if d and d["kind"] == "Deployment":
                for c in d["spec"]["template"]["spec"]["containers"]:
                    commands[d["metadata"]["name"]] = c["command"]
    assert commands == {
        "gpuctl-admission": ["gpuctl", "admission", "serve"],
        "gpuctl-serve": ["gpuctl", "serve"],
        "gpuctl-api": ["gpuctl", "api", "serve"],
    }


def test_api_certificate_names_the_services_and_the_deployment_mounts_its_secret() -> None:
    """manifests/api/tls/certificate.yaml (cert-manager; the chart reads it) makes the Secret the HTTPS-only
    standalone API mounts, for both Services that serve the API (gpuctl-api, and gpuctl of serve --api)."""
    from gpuctl.server.api.__main__ import build_parser

    def docs(f: str) -> list[dict]:
        return [d for d in yaml.safe_load_all((ROOT / "manifests" / f).read_text()) if d]

    (cert,) = [
        d
        for d in docs("api/tls/certificate.yaml")
        if d["kind"] == "Certificate" and not d["spec"].get("isCA")
    ]
    both = [*docs("api/deployment.yaml"), *docs("serve/deployment.yaml")]
    services = {d["metadata"]["name"] for d in both if d["kind"] == "Service"}
    assert services == {"gpuctl-api", "gpuctl"}
    assert set(cert["spec"]["dnsNames"]) == {
        f"{svc}.gpuctl-system.svc{suffix}" for svc in services for suffix in ("", ".cluster.local")
    }
    (dep,) = [d for d in docs("api/deployment.yaml") if d["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args = build_parser().parse_args(c["args"])
    mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "tls")
    assert (args.tls_cert, args.tls_key) == (f"{mount}/tls.crt", f"{mount}/tls.key")
    secret = next(v["secret"] for v in pod["volumes"] if v["name"] == "tls")
    assert secret == {"secretName": cert["spec"]["secretName"]}  # not optional: no clear-text fallback
    assert {c["readinessProbe"]["httpGet"]["scheme"], c["livenessProbe"]["httpGet"]["scheme"]} == {"HTTPS"}
    assert f"--port={c['ports'][0]['containerPort']}" in c["args"]
