"""AdmissionReview fixtures for the webhook tests, built from the real thing wherever possible.

The cluster state comes from the objects gpuctl itself creates (queues.objects: pool ResourceFlavors, the
budget flavor, team namespaces, ClusterQueues, LocalQueues) plus KWOK-style Nodes, reduced by the same
code the watch cache uses. gpuctl's own workloads come from gpuctl's builders, so "gpuctl's submissions
pass" is tested against what gpuctl actually sends. The few tests in this module check the fixtures
themselves, so that a wrong fixture fails here rather than making a rule test pass for the wrong reason.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from admission.state import ClusterState
from gpuctl.builders import build
from gpuctl.constants import GPU_RESOURCE, TAS_UNCONSTRAINED, Labels
from gpuctl.spec import load_text
from queues import TeamQuota, budget_flavor, cluster_queue, local_queue, resource_flavor, team_namespace

TEAM = "team-a"
OTHER_TEAM = "team-b"  # managed namespace without a LocalQueue
PLAIN = "plain"  # a namespace gpuctl does not manage
POOLS = ("a100", "a10", "empty")  # `empty` has no nodes
GPU_TYPE_A100 = "a100-80g"


def node(name: str, pool: str | None, gpus: int, **labels: str) -> dict:
    meta_labels = {"kubernetes.io/hostname": name, **labels}
    if pool is not None:
        meta_labels[Labels.POOL] = pool
    alloc = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    if gpus:
        alloc[GPU_RESOURCE] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": meta_labels},
        "status": {
            "capacity": dict(alloc),
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


NODES = (
    node("a100-1", "a100", 8, **{Labels.GPU_TYPE: GPU_TYPE_A100}),
    node("a100-2", "a100", 4, **{Labels.GPU_TYPE: GPU_TYPE_A100}),
    node("a10-1", "a10", 4, **{Labels.GPU_TYPE: "a10-24g"}),
    node("cpu-1", None, 0),
)


def cluster_objects() -> list[dict]:
    """Every object the cache would see on a small gpuctl cluster."""
    team = TeamQuota(namespace=TEAM, quota_name="q-a")
    objs: list[dict] = [budget_flavor(), *(resource_flavor(p) for p in POOLS), *copy.deepcopy(NODES)]
    objs += [team_namespace(team), cluster_queue(team, list(POOLS)), local_queue(TEAM)]
    objs.append(team_namespace(TeamQuota(namespace=OTHER_TEAM, quota_name="q-b")))
    objs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLAIN}})
    # A flavor someone else created is not a pool.
    objs.append(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "foreign"}}
    )
    return objs


def state(**overrides: Any) -> ClusterState:
    s = ClusterState.from_objects(cluster_objects())
    if not overrides:
        return s
    from dataclasses import replace

    return replace(s, **overrides)


def review(
    obj: dict,
    *,
    op: str = "CREATE",
    old: dict | None = None,
    dry_run: bool = False,
    namespace: str | None = None,
    options: dict | None = None,
    username: str = "alice",
) -> dict:
    """A full AdmissionReview v1 as the API server sends it for `obj`, sent by `username`."""
    api = obj.get("apiVersion", "v1")
    group, _, version = api.rpartition("/")
    kind = obj["kind"]
    plural = {
        "Pod": "pods",
        "Job": "jobs",
        "Deployment": "deployments",
        "StatefulSet": "statefulsets",
        "ReplicaSet": "replicasets",
        "Node": "nodes",
    }.get(kind, kind.lower() + "s")
    ns = namespace if namespace is not None else obj.get("metadata", {}).get("namespace", "")
    gvk = {"group": group, "version": version, "kind": kind}
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": gvk,
        "resource": {"group": group, "version": version, "resource": plural},
        "requestKind": gvk,
        "requestResource": {"group": group, "version": version, "resource": plural},
        "name": obj.get("metadata", {}).get("name", ""),
        "operation": op,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": options or {"kind": f"{op.title()}Options", "apiVersion": "meta.k8s.io/v1"},
    }
    if ns:
        request["namespace"] = ns
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


# ---------------------------------------------------------------------------------------------------------
# gpuctl's own workloads.

TRAINING = f"""
kind: training
job: {{name: train, priority: high}}
environment: {{image: pytorch/pytorch:2.2.0, command: [python, train.py]}}
resources: {{pool: a100, gpu: 4, gpuType: {GPU_TYPE_A100}, cpu: 8, memory: 32Gi}}
storage: {{workdirs: [/data/team-a]}}
"""
INFERENCE = """
kind: inference
job: {name: llm, priority: medium}
environment: {image: vllm/vllm-openai:v0.12.0}
service: {replicas: 2, port: 8000, healthCheck: /health}
resources: {pool: a10, gpu: 1, cpu: 8, memory: 32Gi}
"""
NOTEBOOK = """
kind: notebook
job: {name: nb, priority: low}
environment: {image: quay.io/jupyter/scipy-notebook}
service: {port: 8888}
resources: {pool: a100, gpu: 1, cpu: 2, memory: 8Gi}
"""
COMPUTE = """
kind: compute
job: {name: web}
environment: {image: nginx:latest}
service: {replicas: 1, port: 80}
resources: {pool: a10, gpu: 0, cpu: 1, memory: 512Mi}
"""
GPUCTL_SPECS = {"training": TRAINING, "inference": INFERENCE, "notebook": NOTEBOOK, "compute": COMPUTE}


def gpuctl_workload(kind: str, namespace: str = TEAM) -> dict:
    """The workload object (Job/Deployment/StatefulSet) gpuctl builds for a job of this kind."""
    spec = load_text(GPUCTL_SPECS[kind])[0].spec
    return build(spec, namespace)[0]


def training_job(namespace: str = TEAM) -> dict:
    return gpuctl_workload("training", namespace)


def pod_spec(obj: dict) -> dict:
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


def raw_pod(
    name: str = "p",
    namespace: str = TEAM,
    *,
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    **spec: Any,
) -> dict:
    """A Pod as a user would `kubectl apply` it."""
    res = {"cpu": "1", "memory": "1Gi"}
    if gpus:
        res[GPU_RESOURCE] = str(gpus)
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": res, "limits": dict(res)}}
            ],
            **spec,
        },
    }
    if node_selector is not None:
        pod["spec"]["nodeSelector"] = node_selector
    return pod


def queued_pod(name: str = "p", *, gpus: int = 1, pool: str = "a100", **kw: Any) -> dict:
    """A raw Pod that follows every rule: LocalQueue label, pool label and matching nodeSelector, a topology
    request (the topology MutatingAdmissionPolicy adds it on the API server)."""
    labels = {Labels.KUEUE_QUEUE: "default", Labels.POOL: pool, **kw.pop("labels", {})}
    pod = raw_pod(name, gpus=gpus, labels=labels, node_selector={Labels.POOL: pool}, **kw)
    pod["metadata"]["annotations"] = {TAS_UNCONSTRAINED: "true"}
    return pod


# ---------------------------------------------------------------------------------------------------------
# The fixtures checked.


def test_state_has_the_pools_gpuctl_created_and_no_other_flavor():
    s = state()
    assert s.synced
    assert s.pools == frozenset(POOLS)  # not the budget flavor, not the foreign flavor
    assert s.pool_max_gpu == {"a100": 8, "a10": 4}
    assert "empty" not in s.pool_nodes
    assert s.local_queues == {TEAM: {"default": TEAM}}
    assert s.namespaces == {TEAM: True, OTHER_TEAM: True, PLAIN: False}
    assert set(s.cluster_queues[TEAM]) >= set(POOLS)


def test_gpuctl_workloads_carry_the_labels_the_rules_read():
    job = training_job()
    labels = job["metadata"]["labels"]
    assert labels[Labels.KUEUE_QUEUE] == "default"
    assert labels[Labels.POOL] == "a100"
    assert labels[Labels.PRIORITY] == "high"
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {Labels.POOL: "a100"}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    # gpuType selects either GPU type key (runwhere.ai/gpuType is read as an alias of gpu-type).
    assert [t["matchExpressions"] for t in terms] == [
        [{"key": Labels.GPU_TYPE, "operator": "In", "values": [GPU_TYPE_A100]}],
        [{"key": Labels.GPU_TYPE_LEGACY, "operator": "In", "values": [GPU_TYPE_A100]}],
    ]
    assert gpuctl_workload("inference")["kind"] == "Deployment"
    assert gpuctl_workload("notebook")["kind"] == "StatefulSet"


def test_review_fixture_is_a_v1_admission_review():
    r = review(queued_pod())
    assert r["apiVersion"] == "admission.k8s.io/v1"
    assert r["request"]["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert r["request"]["namespace"] == TEAM
    assert review(training_job())["request"]["kind"]["group"] == "batch"
