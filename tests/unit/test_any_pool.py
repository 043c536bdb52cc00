"""Issue 23: `resources.pool` as a list, or omitted with a GPU type: the spec, the objects built, and where
such a job's pool is read from (gpuctl.domain.workload.job_pool)."""

from __future__ import annotations

import pytest

from gpuctl.builders import build
from gpuctl.domain.workload import job_pool
from gpuctl.spec import load_text


def _job(resources: str) -> dict:
    (doc,) = load_text(
        "kind: training\njob: {name: j, namespace: team-a}\nenvironment: {image: busybox}\n"
        f"resources: {{{resources}cpu: 1, memory: 1Gi}}\n",
        "test.yaml",
    )
    return build(doc.spec, "team-a")[0]


def _terms(obj: dict) -> list[list[dict]]:
    aff = obj["spec"]["template"]["spec"].get("affinity")
    if not aff:
        return []
    return [
        t["matchExpressions"]
        for t in aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    ]


def test_pinned_job_is_unchanged():
    obj = _job("pool: training-pool, gpu: 2, ")
    assert obj["metadata"]["labels"]["runwhere.ai/pool"] == "training-pool"
    assert obj["spec"]["template"]["spec"]["nodeSelector"] == {"runwhere.ai/pool": "training-pool"}
    assert _terms(obj) == []
    assert job_pool(obj) == "training-pool"


@pytest.mark.parametrize("text", ["pool: [training-pool], ", "pool: [training-pool, training-pool], "])
def test_a_list_of_one_pool_is_that_pool(text):
    obj = _job(text + "gpu: 1, ")
    assert obj["spec"]["template"]["spec"]["nodeSelector"] == {"runwhere.ai/pool": "training-pool"}


def test_a_list_of_pools_is_pool_affinity_and_no_selector():
    obj = _job("pool: [dev-pool, training-pool], gpu: 1, ")
    assert "runwhere.ai/pool" not in obj["metadata"]["labels"]
    assert "runwhere.ai/pool" not in obj["spec"]["template"]["metadata"]["labels"]
    assert "nodeSelector" not in obj["spec"]["template"]["spec"]
    assert _terms(obj) == [
        [{"key": "runwhere.ai/pool", "operator": "In", "values": ["dev-pool", "training-pool"]}]
    ]
    assert job_pool(obj) is None  # not admitted yet: no pool


def test_a_list_with_a_gpu_type_ands_both_in_every_term():
    obj = _job("pool: [a-pool, b-pool], gpu-type: A100, gpu: 1, ")
    pool = {"key": "runwhere.ai/pool", "operator": "In", "values": ["a-pool", "b-pool"]}
    assert _terms(obj) == [
        [pool, {"key": "runwhere.ai/gpu-type", "operator": "In", "values": ["A100"]}],
        [pool, {"key": "runwhere.ai/gpuType", "operator": "In", "values": ["A100"]}],
    ]


def test_no_pool_with_a_gpu_type_is_any_pool_of_that_type():
    obj = _job("gpu-type: A100, gpu: 1, ")
    assert "nodeSelector" not in obj["spec"]["template"]["spec"]
    assert "runwhere.ai/pool" not in obj["metadata"]["labels"]
    assert [e["key"] for t in _terms(obj) for e in t] == ["runwhere.ai/gpu-type", "runwhere.ai/gpuType"]


def test_no_pool_no_gpu_type_is_pool_default_as_before():
    obj = _job("gpu: 1, ")
    assert obj["spec"]["template"]["spec"]["nodeSelector"] == {"runwhere.ai/pool": "default"}


def test_pool_of_an_admitted_any_pool_workload_is_its_flavor():
    wl = {
        "metadata": {"labels": {}},
        "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {}}}]},
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True"},
                {"type": "Admitted", "status": "True"},
            ],
            "admission": {
                "clusterQueue": "team-a",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "flavors": {"nvidia.com/gpu": "dev-pool"},
                        "resourceUsage": {"nvidia.com/gpu": "1"},
                    }
                ],
            },
        },
    }
    assert job_pool(wl) == "dev-pool"
    # The Job once Kueue started it: its template carries the flavor's nodeLabels.
    job = _job("pool: [dev-pool, training-pool], gpu: 1, ")
    job["spec"]["template"]["spec"]["nodeSelector"] = {"runwhere.ai/pool": "dev-pool"}
    assert job_pool(job) == "dev-pool"


def test_a_bad_pool_name_in_the_list_is_refused_with_its_field():
    from gpuctl.spec import SpecError

    with pytest.raises(SpecError) as e:
        _job("pool: [dev-pool, Not_A_Pool], gpu: 1, ")
    assert "pool" in str(e.value)


# ----------------------------------------------------------------------------- explain
def _node(n: str, pool: str, gpus: int, gpu_type: str) -> dict:
    return {
        "metadata": {"name": n, "labels": {"runwhere.ai/pool": pool, "runwhere.ai/gpu-type": gpu_type}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "32", "memory": "256Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _busy_pod(node: str, gpus: int) -> dict:
    return {
        "metadata": {"name": f"busy-{node}", "namespace": "other"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


def test_explain_tries_the_listed_pools_in_order():
    from gpuctl.domain.explain import blocking_reason, demand_of_pod_template

    nodes = [_node("dev-1", "dev-pool", 4, "RTX"), _node("inf-1", "inference-pool", 4, "A10")]
    tmpl = _job("pool: [dev-pool, inference-pool], gpu: 4, ")["spec"]["template"]
    demand = demand_of_pod_template("team-a", tmpl, 1, 500_000)
    assert demand.pool == "" and demand.any_of == ("dev-pool", "inference-pool")
    from tests.unit.test_defrag import _cq

    kw = {"workloads": [], "cluster_queues": [_cq("team-a", 16, 0)], "cohort": None}
    v = blocking_reason(demand, nodes=nodes, pods=[], **kw)
    assert v.starts and v.pool == "dev-pool", v
    assert v.summary("") == "would start now on pool dev-pool, the first of its pools with room"
    v = blocking_reason(demand, nodes=nodes, pods=[_busy_pod("dev-1", 4)], **kw)
    assert v.starts and v.pool == "inference-pool", v
    v = blocking_reason(demand, nodes=nodes, pods=[_busy_pod("dev-1", 4), _busy_pod("inf-1", 2)], **kw)
    assert not v.starts and "dev-pool" in v.message and "inference-pool" in v.message, v
    # A GPU type alone: only pools with that type.
    tmpl = _job("gpu-type: A10, gpu: 4, ")["spec"]["template"]
    v = blocking_reason(demand_of_pod_template("team-a", tmpl, 1, 500_000), nodes=nodes, pods=[], **kw)
    assert v.starts and v.pool == "inference-pool", v
