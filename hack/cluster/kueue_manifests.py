"""Render Kueue's own manifests for an off-cluster Kueue process (what envtest does in Go).

    kueue_manifests.py crds KUEUE_DIR URL CA_B64       CRDs, 5 with conversion webhooks by URL
    kueue_manifests.py webhooks KUEUE_DIR URL CA_B64   Kueue's admission webhooks by URL
    kueue_manifests.py config FILE PORT CERTDIR HEALTH METRICS VISPORT
        local overrides of gpuctl's Configuration
    kueue_manifests.py rbac KUEUE_DIR                   Kueue's ServiceAccount and its roles, as its
        kustomization names them (kueue-system/kueue-controller-manager): Kueue runs as that identity, as
        in a real install, so gpuctl's webhook sees Kueue's requests under Kueue's own username

Kueue ships webhook configurations that point at an in-cluster Service; the local cluster has no
Service networking, so every clientConfig becomes `url: https://127.0.0.1:<port><path>` with the
testbed CA. Everything else (names, rules, failurePolicy, selectors) is Kueue's, read from the module.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

# CRDs that Kueue's kustomization patches with a conversion webhook (config/components/crd).
CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
SYSTEM_NS_SELECTOR = {
    "matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]}
    ]
}
TESTBED_LABEL = {"gpuctl.runwhere.ai/testbed": "true"}


def crds(kueue_dir: str, url: str, ca: str) -> list[dict]:
    out = []
    for f in sorted((Path(kueue_dir) / "config/components/crd/bases").glob("*.yaml")):
        crd = yaml.safe_load(f.read_text())
        if crd["spec"]["names"]["plural"] in CONVERTED:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"url": f"{url}/convert", "caBundle": ca},
                    "conversionReviewVersions": ["v1"],
                },
            }
        out.append(crd)
    return out


def webhooks(kueue_dir: str, url: str, ca: str) -> list[dict]:
    docs = [
        d
        for d in yaml.safe_load_all(
            (Path(kueue_dir) / "config/components/webhook/manifests.yaml").read_text()
        )
        if d
    ]
    for d in docs:
        prefix = "kueue-mutating" if d["kind"].startswith("Mutating") else "kueue-validating"
        d["metadata"] = {"name": f"{prefix}-webhook-configuration", "labels": dict(TESTBED_LABEL)}
        for w in d["webhooks"]:
            path = w["clientConfig"]["service"]["path"]
            w["clientConfig"] = {"url": f"{url}{path}", "caBundle": ca}
            # Job-framework webhooks skip system namespaces (Kueue's webhook kustomization);
            # Kueue's own kinds (kueue.x-k8s.io) are cluster-wide.
            groups = {g for r in w.get("rules", []) for g in r.get("apiGroups", [])}
            if "kueue.x-k8s.io" not in groups:
                w["namespaceSelector"] = SYSTEM_NS_SELECTOR
    return docs


def config(
    path: str, port: str, cert_dir: str, health: str, metrics: str, vis_port: str, vis_host: str = "127.0.0.1"
) -> dict:
    cfg = yaml.safe_load(Path(path).read_text())
    cfg["webhook"] = {"host": "127.0.0.1", "port": int(port), "certDir": cert_dir}
    cfg["health"] = {"healthProbeBindAddress": health}
    cfg["metrics"] = {**cfg.get("metrics", {}), "bindAddress": metrics}
    cfg["leaderElection"] = {"leaderElect": False}
    cfg["internalCertManagement"] = {"enable": False}
    cfg["visibilityServer"] = {"bindAddress": vis_host, "bindPort": int(vis_port)}
    return cfg


def visibility(host_ip: str, port: str) -> list[dict]:
    """Kueue's visibility API behind the aggregation layer, as Kueue's own manifests register it, with
    the Service's endpoint set by hand to the visibility server on this machine. The server's
    certificate is self-signed by Kueue for localhost, hence insecureSkipTLSVerify (local cluster only)."""
    ns, name = "kueue-system", "kueue-visibility-server"
    docs: list[dict] = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": int(port)}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {"kubernetes.io/service-name": name},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [host_ip], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": int(port), "protocol": "TCP"}],
        },
    ]
    for version in ("v1beta1", "v1beta2"):
        docs.append(
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": f"{version}.visibility.kueue.x-k8s.io"},
                "spec": {
                    "group": "visibility.kueue.x-k8s.io",
                    "version": version,
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                    "insecureSkipTLSVerify": True,
                    "service": {"name": name, "namespace": ns, "port": 443},
                },
            }
        )
    return docs


# Kueue's config/components/rbac (and visibility) files the controller itself needs, kustomized by hand:
# namePrefix kueue-, namespace system -> kueue-system.
RBAC_FILES = (
    "rbac/service_account.yaml",
    "rbac/role.yaml",
    "rbac/role_binding.yaml",
    "rbac/leader_election_role.yaml",
    "rbac/leader_election_role_binding.yaml",
    "rbac/manager_secrets_role.yaml",
    "rbac/manager_secrets_role_binding.yaml",
    "rbac/metrics_auth_role.yaml",
    "rbac/metrics_auth_role_binding.yaml",
    "visibility/role_binding.yaml",
)
KUEUE_NAMESPACE = "kueue-system"
PREFIX = "kueue-"


def kustomize_rbac(
    module_dir: str, files: tuple[str, ...], prefix: str, namespace: str, base: str = "config/components"
) -> list[dict]:
    """A controller's RBAC files (under `base` in its module) as its kustomization installs them:
    namePrefix `prefix`, namespace `system` -> `namespace` (Kueue's, JobSet's and LeaderWorkerSet's
    kustomizations all do this)."""
    docs = [d for f in files for d in yaml.safe_load_all((Path(module_dir) / base / f).read_text()) if d]
    own = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for d in docs:
        meta = d["metadata"]
        meta["name"] = prefix + meta["name"]
        meta["labels"] = dict(TESTBED_LABEL)
        if meta.get("namespace") == "system":
            meta["namespace"] = namespace
        ref = d.get("roleRef")
        if ref and (ref["kind"], ref["name"]) in own:
            ref["name"] = prefix + ref["name"]
        for sub in d.get("subjects", []):
            if sub.get("namespace") == "system":
                sub["namespace"] = namespace
                sub["name"] = prefix + sub["name"]
    return docs


def rbac(kueue_dir: str) -> list[dict]:
    return kustomize_rbac(kueue_dir, RBAC_FILES, PREFIX, KUEUE_NAMESPACE)


def main(argv: list[str]) -> None:
    cmd, *args = argv
    if cmd == "crds":
        yaml.safe_dump_all(crds(*args), sys.stdout, sort_keys=False)
    elif cmd == "webhooks":
        yaml.safe_dump_all(webhooks(*args), sys.stdout, sort_keys=False)
    elif cmd == "config":
        yaml.safe_dump(config(*args), sys.stdout, sort_keys=False)
    elif cmd == "visibility":
        yaml.safe_dump_all(visibility(*args), sys.stdout, sort_keys=False)

    elif cmd == "rbac":
        yaml.safe_dump_all(rbac(*args), sys.stdout, sort_keys=False)
    else:
        raise SystemExit(f"unknown command {cmd!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
