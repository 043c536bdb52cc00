"""Coexistence with other Kueue users: with gpuctl's Configuration, its pools and team quotas in
place, a plain Kueue user's namespace, ResourceFlavor, ClusterQueue, LocalQueue, suspended Job and
Deployment work as with stock Kueue (docs/queueing.md, "Sharing Kueue with other users"). Since issue 26
gpuctl's pool nodes are tainted for gpuctl's Kueue work only, so the other user's flavor names a node
outside every pool (gpu-node-5, taken out of dev-pool as an admin would)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gpuctl.cluster import path
from gpuctl.constants import Labels
from gpuctl.service.nodes import label_nodes
from tests.integration.conftest import delete_namespaces, wait_until
from tests.integration.test_cli_cluster import gpuctl, pools, teams  # noqa: F401 - fixtures

KUEUE = "kueue.x-k8s.io/v1beta2"


FOREIGN_NODE = "gpu-node-5"


@pytest.fixture
def foreign(kube) -> Iterator[dict]:
    """A namespace gpuctl does not manage, with its own flavor (on a node in no gpuctl pool),
    ClusterQueue (no cohort) and LocalQueue, written as a plain Kueue user would."""
    tag = uuid.uuid4().hex[:6]
    names = {"ns": f"other-{tag}", "rf": f"other-rf-{tag}", "cq": f"other-cq-{tag}", "lq": "jobs"}
    node = kube.get(path("Node", FOREIGN_NODE))
    if Labels.POOL in (node["metadata"].get("labels") or {}):  # out of its pool: untainted
        label_nodes(kube, [FOREIGN_NODE], {Labels.POOL: None}, overwrite=True)
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names["ns"]}})
    kube.create(
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": names["rf"]},
            "spec": {"nodeLabels": {"kubernetes.io/hostname": FOREIGN_NODE}},
        }
    )
    kube.create(
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": names["cq"]},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": names["ns"]}},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": names["rf"],
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "8"},
                                    {"name": "memory", "nominalQuota": "32Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": "2"},
                                ],
                            }
                        ],
                    }
                ],
            },
        }
    )
    kube.create(
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": names["lq"], "namespace": names["ns"]},
            "spec": {"clusterQueue": names["cq"]},
        }
    )
    yield names
    delete_namespaces(kube, [names["ns"]], 90)
    for kind, n in (("ClusterQueue", names["cq"]), ("ResourceFlavor", names["rf"])):
        obj = kube.get_or_none(path(kind, n))
        if obj and obj["metadata"].get("finalizers"):
            kube.merge_patch(path(kind, n), {"metadata": {"finalizers": None}})
        kube.delete(path(kind, n))


def _job(ns: str, name: str, gpus: int, queue: str = "jobs") -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "3s"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)},
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                },
            },
        },
    }


def _workloads(kube, ns: str) -> list[dict]:
    return kube.list(path("Workload", namespace=ns))


def _admitted(wl: dict) -> bool:
    conds = (wl.get("status") or {}).get("conditions", [])
    return any(c["type"] == "Admitted" and c["status"] == "True" for c in conds)


def test_foreign_job_and_deployment_run_as_with_stock_kueue(pools, teams, foreign, kube):  # noqa: F811
    ns = foreign["ns"]
    kube.create(_job(ns, "plain-job", 1))
    wl = wait_until(
        lambda: next((w for w in _workloads(kube, ns) if _admitted(w)), None), 60, what="foreign Job admitted"
    )
    assert wl["status"]["admission"]["clusterQueue"] == foreign["cq"]
    flavors = wl["status"]["admission"]["podSetAssignments"][0]["flavors"]
    assert set(flavors.values()) == {foreign["rf"]}
    # Kueue unsuspends it and the pod runs to completion.
    wait_until(
        lambda: (kube.get(path("Job", "plain-job", namespace=ns)).get("status") or {}).get("succeeded") == 1,
        90,
        what="foreign Job succeeded",
    )
    # A job beyond the foreign ClusterQueue's own quota (2 GPUs) waits, as with stock Kueue.
    kube.create(_job(ns, "too-big", 3))
    wl = wait_until(
        lambda: next((w for w in _workloads(kube, ns) if "too-big" in w["metadata"]["name"]), None),
        30,
        what="Workload of too-big",
    )
    assert (kube.get(path("Job", "too-big", namespace=ns))["spec"]["suspend"]) is True

    # Pod-based integrations are managed outside gpuctl's namespaces too (no namespace selector
    # narrowed to runwhere.ai/namespace=true): the Deployment's pod gets a Workload and is admitted.
    kube.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "jobs"}},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "web",
                                "image": "nginx",
                                "resources": {
                                    "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                                    "limits": {"nvidia.com/gpu": "1"},
                                },
                            }
                        ]
                    },
                },
            },
        }
    )
    wait_until(
        lambda: any(
            _admitted(w) and [o["kind"] for o in w["metadata"].get("ownerReferences", [])] == ["Pod"]
            for w in _workloads(kube, ns)
        ),
        60,
        what="Deployment pod admitted",
    )
    wait_until(
        lambda: any(
            p["status"].get("phase") == "Running"
            for p in kube.list(path("Pod", namespace=ns), label_selector="app=web")
        ),
        60,
        what="Deployment pod Running",
    )


def test_foreign_queue_in_a_labelled_namespace_still_admits(pools, teams, foreign, kube):  # noqa: F811
    """The issue's second symptom: the same namespace labelled runwhere.ai/namespace=true; the global
    resource transformations must not make the foreign ClusterQueue reject the Job."""
    ns = foreign["ns"]
    kube.merge_patch(path("Namespace", ns), {"metadata": {"labels": {"runwhere.ai/namespace": "true"}}})
    kube.create(_job(ns, "labelled", 2))
    wl = wait_until(
        lambda: next((w for w in _workloads(kube, ns) if _admitted(w)), None), 60, what="foreign Job admitted"
    )
    usage = wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
    assert usage["nvidia.com/gpu"] == "2"
