"""Pools across clusters (issue 24): the pure rules and builders (gpuctl.domain.multicluster,
queues.multicluster) and the pool document's `clusters`."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from gpuctl.constants import MULTIKUEUE_CHECK, POOL_CLUSTERS_ANNOTATION, Kind
from gpuctl.domain.multicluster import (
    kubeconfig_problem,
    placement,
    pool_clusters,
    pools_in,
    refused_kind,
    remote_pools,
    team_checks,
    worker_clusters,
)
from gpuctl.spec import SpecError, load_text
from queues import TeamQuota, cluster_queue
from queues.multicluster import admission_check, cluster_secret, multikueue_cluster, multikueue_config

ROOT = Path(__file__).resolve().parents[2]


def flavor(name: str, clusters: str | None = None) -> dict:
    meta: dict = {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpuctl"}}
    if clusters is not None:
        meta["annotations"] = {POOL_CLUSTERS_ANNOTATION: clusters}
    return {"metadata": meta, "spec": {"nodeLabels": {"runwhere.ai/pool": name}}}


def kubeconfig(**user: object) -> dict:
    return {
        "clusters": [
            {
                "name": "w",
                "cluster": {"server": "https://10.0.0.1:6443", "certificate-authority-data": "Q0E="},
            }
        ],
        "users": [{"name": "u", "user": user or {"token": "t"}}],
        "contexts": [{"name": "w", "context": {"cluster": "w", "user": "u"}}],
        "current-context": "w",
    }


def test_pool_clusters_from_the_flavor_annotation():
    fl = [flavor("a100", "worker-b, worker-a"), flavor("h100", "worker-c"), flavor("local")]
    assert pool_clusters(fl[0]) == ["worker-a", "worker-b"]
    assert pool_clusters(fl[2]) == [] and pool_clusters(None) == []
    assert remote_pools(fl) == {"a100": ["worker-a", "worker-b"], "h100": ["worker-c"]}
    assert worker_clusters(fl) == ["worker-a", "worker-b", "worker-c"]
    assert pools_in(fl, "worker-a") == ["a100"] and pools_in(fl, "worker-z") == []


def test_team_queue_carries_the_one_check_only_on_a_manager():
    team = TeamQuota(namespace="t", quota_name="q", gpu=8)
    assert team_checks([flavor("local")]) is None
    checks = team_checks([flavor("a100", "worker-a")])
    assert checks == {"admissionChecks": [{"name": MULTIKUEUE_CHECK}]}  # no onFlavors: Kueue refuses them
    assert "admissionChecksStrategy" not in cluster_queue(team, ["local"])["spec"]
    assert cluster_queue(team, ["a100"], checks=checks)["spec"]["admissionChecksStrategy"] == checks


def test_only_training_goes_to_another_cluster():
    assert refused_kind(Kind.TRAINING) is None
    for k in (Kind.INFERENCE, Kind.COMPUTE):
        assert "no Deployment adapter" in (refused_kind(k) or "")
    assert "StatefulSet" in (refused_kind(Kind.NOTEBOOK) or "")


@pytest.mark.parametrize(
    ("user", "cluster", "words"),
    [
        ({"tokenFile": "/var/run/token"}, {}, "tokenFile"),
        ({"exec": {"command": "aws"}}, {}, "exec plugin"),
        ({"username": "a", "password": "b"}, {}, "basic auth"),
        ({"client-certificate": "a.crt", "client-key": "a.key"}, {}, "client-certificate"),
        ({}, {"insecure-skip-tls-verify": True}, "skips TLS"),
        ({}, {"certificate-authority": "/ca.crt"}, "certificate-authority file"),
    ],
)
def test_kubeconfigs_kueue_would_refuse(user, cluster, words):
    doc = kubeconfig(**user)
    doc["clusters"][0]["cluster"].update(cluster)
    assert words in (kubeconfig_problem(doc) or "")


def test_kubeconfig_kueue_accepts():
    assert kubeconfig_problem(kubeconfig()) is None
    assert kubeconfig_problem(kubeconfig(**{"client-certificate-data": "x", "client-key-data": "y"})) is None
    assert "not a kubeconfig" in (kubeconfig_problem("text") or "")
    assert "current-context" in (kubeconfig_problem({**kubeconfig(), "current-context": "nope"}) or "")


def test_placement_of_a_manager_workload():
    assert placement(None) is None
    assert placement({"status": {"admissionChecks": [{"name": "other", "state": "Ready"}]}}) is None
    waiting = placement(
        {
            "status": {
                "nominatedClusterNames": ["worker-a", "worker-b"],
                "admissionChecks": [{"name": MULTIKUEUE_CHECK, "state": "Pending", "message": ""}],
            }
        }
    )
    assert waiting is not None and waiting.cluster is None and waiting.text == "offered to worker-a, worker-b"
    running = placement(
        {
            "status": {
                "clusterName": "worker-b",
                "admissionChecks": [
                    {
                        "name": MULTIKUEUE_CHECK,
                        "state": "Ready",
                        "message": 'The workload was admitted on "worker-b"',
                    }
                ],
            }
        }
    )
    assert running is not None and (running.cluster, running.text, running.state) == (
        "worker-b",
        "worker-b",
        "Ready",
    )


def test_multikueue_objects():
    s = cluster_secret("worker-a", b"apiVersion: v1\n")
    assert s["metadata"] == {
        "name": "gpuctl-cluster-worker-a",
        "namespace": "kueue-system",
        "labels": {"app.kubernetes.io/managed-by": "gpuctl"},
    }
    assert base64.b64decode(s["data"]["kubeconfig"]) == b"apiVersion: v1\n"
    assert multikueue_cluster("worker-a")["spec"] == {
        "clusterSource": {"kubeConfig": {"locationType": "Secret", "location": "gpuctl-cluster-worker-a"}}
    }
    assert multikueue_config(["b", "a", "b"])["spec"] == {"clusters": ["a", "b"]}
    ac = admission_check()
    assert ac["metadata"]["name"] == MULTIKUEUE_CHECK
    assert ac["spec"]["controllerName"] == "kueue.x-k8s.io/multikueue"
    assert ac["spec"]["parameters"] == {
        "apiGroup": "kueue.x-k8s.io",
        "kind": "MultiKueueConfig",
        "name": "gpuctl",
    }


@pytest.mark.parametrize(
    ("text", "clusters"),
    [
        ("cluster: worker-a", {"worker-a": None}),
        ("clusters: [worker-a, worker-b]", {"worker-a": None, "worker-b": None}),
        (
            "clusters: {worker-a: {kubeconfig: a.kubeconfig}, worker-b: null}",
            {"worker-a": "a.kubeconfig", "worker-b": None},
        ),
    ],
)
def test_pool_document_names_its_clusters(text, clusters):
    doc = load_text(
        f"kind: pool\nversion: v0.1\npool:\n  name: a100\n  {text}\nnodes: {{gpu-node-1: {{}}}}\n"
    )[0]
    assert {k: v.kubeconfig for k, v in doc.spec.pool.clusters.items()} == clusters


def test_pool_document_cluster_name_is_checked():
    with pytest.raises(SpecError, match=r"pool\.clusters\.Worker_A"):
        load_text("kind: pool\nversion: v0.1\npool: {name: a100, clusters: [Worker_A]}\n")


def test_manager_kueue_config_lists_only_what_workers_serve():
    """MultiKueue watches every enabled framework with an adapter in every worker: the manager's overlay
    lists only the kinds of the local workers (whose clusters have no MPIJob, RayJob, ... CRDs)."""
    over = yaml.safe_load((ROOT / "manifests/kueue/multikueue-manager.yaml").read_text())
    assert over["integrations"]["frameworks"] == ["batch/job", "pod", "deployment", "statefulset"]
    assert set(over["multiKueue"]) == {"gcInterval", "origin", "workerLostTimeout"}
