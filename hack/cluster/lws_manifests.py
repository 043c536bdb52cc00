"""Render the LeaderWorkerSet controller's own manifests for an off-cluster LWS process (up.sh with
GPUCTL_TESTBED_LWS=1), as jobset_manifests.py does for JobSet.

    lws_manifests.py crds LWS_DIR                  its CRDs (LeaderWorkerSet, DisaggregatedSet: one
        version each, v1, so no conversion webhook)
    lws_manifests.py webhooks LWS_DIR URL CA_B64   its admission webhooks by URL, with the pod webhooks'
        objectSelector of its kustomization (only pods of a LeaderWorkerSet)
    lws_manifests.py config PORT CERTDIR HEALTH    its Configuration: webhook on loopback with the
        testbed's certificate, no internal cert manager, no leader election, no metrics server
    lws_manifests.py rbac LWS_DIR                  its ServiceAccount and roles as its kustomization names
        them (lws-system/lws-controller-manager): it runs as that identity, as installed

Everything else (names, rules, failurePolicy) is LeaderWorkerSet's, read from the module (sigs.k8s.io/lws).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml
from jobset_manifests import config as controller_config
from jobset_manifests import kubebuilder_webhooks, run
from kueue_manifests import kustomize_rbac

NAMESPACE = "lws-system"
PREFIX = "lws-"
RBAC_FILES = ("service_account.yaml", "role.yaml", "role_binding.yaml")
CONFIG_API = "config.lws.x-k8s.io/v1alpha1"


def crds(lws_dir: str) -> list[dict]:
    return [
        yaml.safe_load(f.read_text()) for f in sorted((Path(lws_dir) / "config/crd/bases").glob("*.yaml"))
    ]


def webhooks(lws_dir: str, url: str, ca: str) -> list[dict]:
    return kubebuilder_webhooks(Path(lws_dir) / "config/webhook", "lws", url, ca, patch_dir=".")


def config(port: str, cert_dir: str, health: str) -> dict:
    return controller_config(port, cert_dir, health, api_version=CONFIG_API)


def rbac(lws_dir: str) -> list[dict]:
    return kustomize_rbac(lws_dir, RBAC_FILES, PREFIX, NAMESPACE, base="config/rbac")


if __name__ == "__main__":
    run(sys.argv[1:], {"crds": crds, "webhooks": webhooks, "rbac": rbac}, config)
