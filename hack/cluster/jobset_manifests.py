"""Render the JobSet controller's own manifests for an off-cluster JobSet process (up.sh with
GPUCTL_TESTBED_JOBSET=1), as kueue_manifests.py does for Kueue.

    jobset_manifests.py crds JOBSET_DIR                 the JobSet CRD (one version, v1alpha2: no conversion)
    jobset_manifests.py webhooks JOBSET_DIR URL CA_B64  its admission webhooks by URL, with the pod
        webhooks' objectSelector of its kustomization (only pods of a JobSet)
    jobset_manifests.py config PORT CERTDIR HEALTH      its Configuration: webhook on loopback with the
        testbed's certificate, no internal cert manager, no leader election, no metrics server
    jobset_manifests.py rbac JOBSET_DIR                 its ServiceAccount and roles as its kustomization
        names them (jobset-system/jobset-controller-manager): it runs as that identity, as installed

Everything else (names, rules, failurePolicy) is JobSet's, read from the module (sigs.k8s.io/jobset).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml
from kueue_manifests import TESTBED_LABEL, kustomize_rbac

NAMESPACE = "jobset-system"
PREFIX = "jobset-"
RBAC_FILES = ("rbac/service_account.yaml", "rbac/role.yaml", "rbac/role_binding.yaml")


def _docs(f: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(f.read_text()) if d]


def crds(jobset_dir: str) -> list[dict]:
    return [_docs(f)[0] for f in sorted((Path(jobset_dir) / "config/components/crd/bases").glob("*.yaml"))]


def webhooks(jobset_dir: str, url: str, ca: str) -> list[dict]:
    return kubebuilder_webhooks(Path(jobset_dir) / "config/components/webhook", "jobset", url, ca)


def kubebuilder_webhooks(
    base: Path, prefix: str, url: str, ca: str, patch_dir: str = "patches"
) -> list[dict]:
    """A kubebuilder controller's webhook configurations (`base`: its config's webhook directory, with
    manifests.yaml and, under `patch_dir`, the two patches its kustomization applies), named
    `<prefix>-mutating-...` and `<prefix>-validating-webhook-configuration`, every clientConfig by URL
    with the testbed's CA."""
    docs = _docs(base / "manifests.yaml")
    # The kustomization's patches replace each configuration's pod webhook with one that has an
    # objectSelector (only the controller's own pods, e.g. labelled jobset.sigs.k8s.io/jobset-name):
    # apply them the same way.
    patches = {
        "MutatingWebhookConfiguration": _docs(base / patch_dir / "mutating-patch.yaml")[0],
        "ValidatingWebhookConfiguration": _docs(base / patch_dir / "validating-patch.yaml")[0],
    }
    for d in docs:
        for op in patches[d["kind"]]:
            assert op["op"] == "replace", op
            d["webhooks"][int(op["path"].rsplit("/", 1)[1])] = op["value"]
        which = "mutating" if d["kind"].startswith("Mutating") else "validating"
        d["metadata"] = {"name": f"{prefix}-{which}-webhook-configuration", "labels": dict(TESTBED_LABEL)}
        for w in d["webhooks"]:
            w["clientConfig"] = {"url": f"{url}{w['clientConfig']['service']['path']}", "caBundle": ca}
    return docs


def config(
    port: str, cert_dir: str, health: str, api_version: str = "config.jobset.x-k8s.io/v1alpha1"
) -> dict:
    """The controller's Configuration (JobSet's and LeaderWorkerSet's have the same fields)."""
    return {
        "apiVersion": api_version,
        "kind": "Configuration",
        "webhook": {"host": "127.0.0.1", "port": int(port), "certDir": cert_dir},
        "health": {"healthProbeBindAddress": health},
        "metrics": {"bindAddress": "0"},  # off: nothing scrapes it here
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }


def rbac(jobset_dir: str) -> list[dict]:
    return kustomize_rbac(jobset_dir, RBAC_FILES, PREFIX, NAMESPACE)


def run(argv: list[str], render: dict, configure) -> None:
    """The command line of a controller's manifests script: `config PORT CERTDIR HEALTH` through
    `configure`, the other commands through `render` (name -> function of the arguments)."""
    cmd, *args = argv
    if cmd == "config":
        yaml.safe_dump(configure(*args), sys.stdout, sort_keys=False)
    elif cmd in render:
        yaml.safe_dump_all(render[cmd](*args), sys.stdout, sort_keys=False)
    else:
        raise SystemExit(f"unknown command {cmd!r}")


if __name__ == "__main__":
    run(sys.argv[1:], {"crds": crds, "webhooks": webhooks, "rbac": rbac}, config)
