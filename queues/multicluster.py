"""The MultiKueue objects of a manager cluster (kueue.x-k8s.io/v1beta2, Kueue v0.19.2). Pure builders.

docs/multicluster.md explains the layout: each worker cluster is a MultiKueueCluster whose kubeconfig is
a Secret in kueue-system; one MultiKueueConfig lists them all; one AdmissionCheck (controller
kueue.x-k8s.io/multikueue) names that config and every team ClusterQueue of the manager carries it.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable

from gpuctl.constants import (
    CLUSTER_SECRET_PREFIX,
    KUEUE_API_VERSION,
    KUEUE_GROUP,
    KUEUE_NAMESPACE,
    MANAGED_BY_VALUE,
    MULTIKUEUE_CHECK,
    MULTIKUEUE_CONFIG,
    MULTIKUEUE_CONTROLLER,
    MULTIKUEUE_SECRET_KEY,
    Labels,
)

MANAGED = {Labels.MANAGED_BY: MANAGED_BY_VALUE}


def cluster_secret_name(cluster: str) -> str:
    return f"{CLUSTER_SECRET_PREFIX}{cluster}"


def cluster_secret(cluster: str, kubeconfig: bytes) -> dict:
    """The worker's kubeconfig, where Kueue reads it (locationType Secret: its own namespace, key
    `kubeconfig`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": cluster_secret_name(cluster),
            "namespace": KUEUE_NAMESPACE,
            "labels": dict(MANAGED),
        },
        "type": "Opaque",
        "data": {MULTIKUEUE_SECRET_KEY: base64.b64encode(kubeconfig).decode()},
    }


def multikueue_cluster(cluster: str) -> dict:
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "MultiKueueCluster",
        "metadata": {"name": cluster, "labels": dict(MANAGED)},
        "spec": {
            "clusterSource": {
                "kubeConfig": {"locationType": "Secret", "location": cluster_secret_name(cluster)}
            }
        },
    }


def multikueue_config(clusters: Iterable[str]) -> dict:
    """Every worker cluster, sorted: Kueue's default dispatcher (AllAtOnce) offers a job to all of them
    and keeps it where it is admitted first."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "MultiKueueConfig",
        "metadata": {"name": MULTIKUEUE_CONFIG, "labels": dict(MANAGED)},
        "spec": {"clusters": sorted(set(clusters))},
    }


def admission_check() -> dict:
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "AdmissionCheck",
        "metadata": {"name": MULTIKUEUE_CHECK, "labels": dict(MANAGED)},
        "spec": {
            "controllerName": MULTIKUEUE_CONTROLLER,
            "parameters": {"apiGroup": KUEUE_GROUP, "kind": "MultiKueueConfig", "name": MULTIKUEUE_CONFIG},
        },
    }


def admission_checks_strategy() -> dict:
    """A team ClusterQueue's spec.admissionChecksStrategy on a manager: the one MultiKueue check, on every
    flavor (Kueue v0.19.2 refuses a MultiKueue check per flavor)."""
    return {"admissionChecks": [{"name": MULTIKUEUE_CHECK}]}
