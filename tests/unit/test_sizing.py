"""Issue 44: `resources.gpuMemory` (how many GPUs, or which MIG slice, hold it) and
`placementConstraints.nodeTypes` (which pools have those GPU models): the node labels read
(gpuctl.domain.gpumodels), the rule (gpuctl.domain.sizing), and a create through lifecycle.submit on a
recording fake of the API server (tests/unit/test_submit_reads.py): what is built, and that a refusal
writes nothing. The real API server: tests/integration/test_sizing.py."""

from __future__ import annotations

import pytest

from gpuctl.builders import TargetPool, build
from gpuctl.domain.gpumodels import GIB, model_named, names_model, node_gpu
from gpuctl.domain.sizing import SizingError, pool_gpus, pools_of_types, size, size_any
from gpuctl.quantity import parse_quantity
from gpuctl.service.lifecycle import submit
from gpuctl.service.plan import plan_documents
from gpuctl.spec import SpecError, load_text
from tests.integration.fake_nodes import fake_node
from tests.unit.test_submit_reads import NS, POOL, cluster, managed

A100_80 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920"}
A10G = {"nvidia.com/gpu.product": "NVIDIA-A10G", "nvidia.com/gpu.memory": "23028"}


def gpu_node(name: str, pool: str, labels: dict, gpus: int = 8, **extra: str) -> dict:
    return fake_node(name, {"runwhere.ai/pool": pool, **labels}, {"nvidia.com/gpu": str(gpus), **extra})


def mig_node(name: str = "m1", **profiles: int) -> dict:
    alloc = {f"nvidia.com/mig-{p}": str(n) for p, n in profiles.items()}
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8"}
    return gpu_node(name, POOL, labels, 6, **alloc)


# --- what a node's labels say ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "gib", "model"),
    [
        (A100_80, 80, "A100-80GB"),  # GFD's memory label first
        (A10G, 22.5, "A10G"),  # the driver's 23028 MiB, not the data sheet's 24 GB
        ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}, 40, "A100-40GB"),
        ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, 80, "H100-80GB"),
        ({"nvidia.com/gpu.product": "NVIDIA-L40S"}, 48, "L40S"),
        ({"runwhere.ai/gpu-type": "A10-24G"}, 24, "A10"),  # a size written in the name, at its word
        ({"runwhere.ai/gpu-type": "RTX4090-24G"}, 24, "RTX-4090"),
        ({"nvidia.com/gpu.product": "A100", "runwhere.ai/gpu-type": "A100-100G"}, 100, "A100"),
        ({"nvidia.com/gpu.product": "A100"}, None, "A100"),  # 40 or 80 GB: unknown
        ({"runwhere.ai/gpu-type": "mystery-gpu"}, None, "mystery-gpu"),
    ],
)
def test_memory_per_gpu_from_labels(labels, gib, model):
    g = node_gpu(labels)
    assert (None if g.memory is None else g.memory / GIB) == (
        None if gib is None else pytest.approx(gib, 0.01)
    )
    assert g.model == model


def test_longest_name_wins():
    assert model_named("NVIDIA-A10G").name == "A10G"
    assert model_named("A10").name == "A10"
    assert model_named("NVIDIA-GH200-480GB") is None  # not an H200


@pytest.mark.parametrize(
    ("node_type", "labels", "named"),
    [
        ("a10g", A10G, True),
        ("a10", A10G, False),  # an A10 is not an A10G
        ("a100", A100_80, True),
        ("A100-80GB", A100_80, True),
        ("a100-40gb", A100_80, False),
        ("a100-80gb", {"nvidia.com/gpu.product": "A100"}, False),  # size unknown: not claimed
        ("h100", A100_80, False),
        ("rtx4090", {"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090"}, True),
        ("rtx-4090", {"runwhere.ai/gpu-type": "RTX4090-24G"}, True),
    ],
)
def test_node_types_name_models(node_type, labels, named):
    assert names_model(node_type, node_gpu(labels)) is named


# --- the rule -------------------------------------------------------------------------------------


def pool80(n: int = 2, gpus: int = 8):
    return pool_gpus(POOL, [gpu_node(f"n{i}", POOL, A100_80, gpus) for i in range(n)])


@pytest.mark.parametrize(
    ("memory", "gpus"), [("140Gi", 2), ("13Gi", 1), ("80Gi", 1), ("81Gi", 2), ("640Gi", 8)]
)
def test_whole_gpus_that_hold_it(memory, gpus):
    assert size(int(parse_quantity(memory)), memory, pool80()).gpus == gpus


def test_more_than_a_node_holds_is_refused_with_the_fix():
    with pytest.raises(SizingError) as e:
        size(700 * GIB, "700Gi", pool80(), more="or run each replica on several nodes")
    assert "700Gi needs 9 GPUs of 80 GiB (A100-80GB) per pod" in e.value.message
    assert "the largest node of pool training-pool has 8" in e.value.message
    assert "several nodes" in e.value.fix


def test_a_count_given_too_must_hold_it_and_wins_when_it_does():
    with pytest.raises(SizingError, match=r"gpu: 1 GPU.* hold 80 GiB, less than 140Gi"):
        size(140 * GIB, "140Gi", pool80(), gpus=1)
    assert size(140 * GIB, "140Gi", pool80(), gpus=4).gpus == 4


def test_unknown_memory_is_refused_naming_the_fix():
    facts = pool_gpus(POOL, [gpu_node("n", POOL, {"nvidia.com/gpu.product": "A100"})])
    with pytest.raises(SizingError) as e:
        size(13 * GIB, "13Gi", facts)
    assert "A100 is made with 40 or 80 GB" in e.value.message
    assert "gpu-type: A100-80GB" in e.value.fix


def test_a_heterogeneous_pool_is_sized_by_its_smallest_gpus():
    facts = pool_gpus(POOL, [gpu_node("a", POOL, A100_80), gpu_node("b", POOL, A10G, 4)])
    assert size(40 * GIB, "40Gi", facts).gpus == 2  # 22.5 GiB each: what every node guarantees


def test_cpu_nodes_do_not_count():
    facts = pool_gpus(POOL, [gpu_node("a", POOL, A100_80), fake_node("cpu", {"runwhere.ai/pool": POOL})])
    assert size(13 * GIB, "13Gi", facts).gpus == 1
    with pytest.raises(SizingError, match="has no GPUs"):
        size(13 * GIB, "13Gi", pool_gpus(POOL, [fake_node("cpu", {"runwhere.ai/pool": POOL})]))


def test_mig_pool_gives_one_slice_that_holds_it_the_gpu_share_rule():
    facts = pool_gpus(POOL, [mig_node(**{"1g.20gb": 8, "3g.40gb": 4})])
    s = size(13 * GIB, "13Gi", facts)
    assert (s.gpus, s.slice.resource) == (0, "nvidia.com/mig-1g.20gb")
    assert size(30 * GIB, "30Gi", facts).slice.resource == "nvidia.com/mig-3g.40gb"
    # No slice holds 50Gi: whole GPUs (the node has 6 uncut).
    s = size(50 * GIB, "50Gi", facts)
    assert (s.gpus, s.slice) == (1, None)
    # A count given: whole GPUs, as asked.
    assert size(13 * GIB, "13Gi", facts, gpus=1).slice is None


def test_mig_single_pool_without_a_slice_that_holds_it_is_refused():
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        "nvidia.com/mig.strategy": "single",
    }
    facts = pool_gpus(POOL, [gpu_node("s", POOL, labels, 56)])
    with pytest.raises(SizingError, match="whole GPUs"):
        size(30 * GIB, "30Gi", facts)


def test_time_sliced_gpus_are_never_counted():
    labels = {**A100_80, "nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}
    facts = pool_gpus(POOL, [gpu_node("t", POOL, labels, 32)])  # 8 GPUs x 4 replicas as nvidia.com/gpu
    with pytest.raises(SizingError, match="no whole GPUs with memory of their own"):
        size(13 * GIB, "13Gi", facts)


def test_any_pool_one_count_and_the_pools_that_hold_it():
    a10 = pool_gpus("inference-pool", [gpu_node("a", "inference-pool", A10G, 4)])
    sized, pools = size_any(40 * GIB, "40Gi", [a10, pool80()])
    assert (sized.gpus, pools) == (2, ["inference-pool", POOL])
    sized, pools = size_any(140 * GIB, "140Gi", [a10, pool80()])  # 7 A10Gs: no node has them
    assert (sized.gpus, pools) == (2, [POOL])
    with pytest.raises(SizingError, match="no pool it may run in holds it"):
        size_any(700 * GIB, "700Gi", [a10, pool80()])


def test_pools_of_types_every_gpu_node_listed():
    mixed = pool_gpus("mixed", [gpu_node("a", "mixed", A100_80), gpu_node("b", "mixed", A10G)])
    pools = [pool80(), pool_gpus("inf", [gpu_node("c", "inf", A10G)]), mixed]
    assert pools_of_types(["a100"], pools) == [POOL]
    assert pools_of_types(["a10g", "a100"], pools) == ["inf", "mixed", POOL]
    assert pools_of_types(["h100"], pools) == []


# --- the spec --------------------------------------------------------------------------------------


def _doc(resources: str, extra: str = "", kind: str = "inference"):
    (doc,) = load_text(
        f"kind: {kind}\njob: {{name: llm, namespace: {NS}}}\nenvironment: {{image: vllm}}\n"
        f"resources: {{{resources}, cpu: 1, memory: 1Gi}}\n{extra}",
        "svc.yaml",
    )
    return doc


@pytest.mark.parametrize(
    ("resources", "extra", "message"),
    [
        ("gpuMemory: 13Gi, gpu-share: 1g.10gb", "", "both size the GPU"),
        ("gpuMemory: lots", "", "not a Kubernetes quantity"),
        ("gpu-type: A100", "placementConstraints: {nodeTypes: [a100]}", "both choose GPU models"),
        ("gpu: 1", "placementConstraints: {nodeTypes: [a100], schedulingClass: high}", "job.priority"),
        ("gpu: 1", "placementConstraints: {nodeTypes: ['-']}", "names no GPU model"),
    ],
)
def test_spec_refusals(resources, extra, message):
    with pytest.raises(SpecError, match=message):
        _doc(resources, extra)


def test_every_job_kind_takes_gpu_memory_and_node_types():
    for kind in ("training", "inference", "compute", "notebook"):
        doc = _doc("gpuMemory: 13Gi", "placementConstraints: {nodeTypes: a10g}", kind)
        assert doc.spec.resources.gpu_memory == "13Gi"
        assert doc.spec.resources.node_types == ("a10g",)
        assert doc.spec.resources.any_pool


def test_an_unsized_builder_call_is_an_error_not_a_pod_without_gpus():
    spec = _doc(f"pool: {POOL}, gpuMemory: 13Gi").spec
    with pytest.raises(ValueError, match="not sized"):
        build(spec, NS, TargetPool(name=POOL))


# --- create through the service (recording fake API server) ----------------------------------------


def _limits(objs: list[dict]) -> dict:
    dep = next(o for o in objs if o["kind"] == "Deployment")
    return dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]


def _create(resources: str, *nodes: dict, extra: str = "", kind: str = "inference"):
    c = cluster(*nodes, managed("ResourceFlavor", "inference-pool"))
    docs = [_doc(resources, extra, kind)]
    (r,) = submit(c, docs, NS, action="create")
    return r, c


def test_create_140gi_on_80gb_gpus_is_two_gpus():
    r, c = _create(f"pool: {POOL}, gpuMemory: 140Gi", gpu_node("n1", POOL, A100_80))
    assert r.error is None
    assert _limits(r.objects)["nvidia.com/gpu"] == "2"
    assert c.writes() == ["create Deployment", "create Service"]


def test_create_13gi_is_one_gpu_or_a_slice_on_a_sharing_pool():
    r, _ = _create(f"pool: {POOL}, gpuMemory: 13Gi", gpu_node("n1", POOL, A100_80))
    assert _limits(r.objects)["nvidia.com/gpu"] == "1"
    r, _ = _create(f"pool: {POOL}, gpuMemory: 13Gi", mig_node(**{"1g.20gb": 8}))
    assert _limits(r.objects) == {"cpu": "1", "memory": "1Gi", "nvidia.com/mig-1g.20gb": "1"}


def test_create_too_big_is_refused_and_nothing_is_written():
    r, c = _create(f"pool: {POOL}, gpuMemory: 700Gi", gpu_node("n1", POOL, A100_80))
    assert r.error.startswith("svc.yaml: job llm: resources.gpuMemory: 700Gi needs 9 GPUs")
    assert c.writes() == []


def test_create_on_a_pool_of_unknown_model_is_refused():
    r, c = _create(f"pool: {POOL}, gpuMemory: 13Gi", gpu_node("n1", POOL, {"nvidia.com/gpu.product": "A100"}))
    assert "is unknown" in r.error and "gpu-type: A100-80GB" in r.error
    assert c.writes() == []


def test_a_multi_node_job_is_sized_per_node():
    r, _ = _create(
        f"pool: {POOL}, gpuMemory: 300Gi, nodes: 2", gpu_node("n1", POOL, A100_80), kind="training"
    )
    job = r.objects[0]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert {"name": "PET_NPROC_PER_NODE", "value": "4"} in container["env"]


def _pool_affinity(objs: list[dict]) -> list[str] | None:
    spec = next(o for o in objs if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    if "nodeSelector" in spec:
        return [spec["nodeSelector"]["runwhere.ai/pool"]]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]


NODES = (gpu_node("n1", POOL, A100_80), gpu_node("a1", "inference-pool", A10G, 4))


def test_node_types_are_the_pools_of_those_models():
    r, _ = _create("gpu: 1", *NODES, extra="placementConstraints: {nodeTypes: [a10g, a100]}")
    assert _pool_affinity(r.objects) == ["inference-pool", POOL]
    r, _ = _create("gpu: 1", *NODES, extra="placementConstraints: {nodeTypes: [a100-80gb]}")
    assert _pool_affinity(r.objects) == [POOL]  # one pool: pinned to it
    r, c = _create("gpu: 1", *NODES, extra="placementConstraints: {nodeTypes: [h100]}")
    assert "no pool has only GPUs of h100" in r.error and "inference-pool (A10G)" in r.error
    assert c.writes() == []


def test_node_types_and_gpu_memory_keep_the_pools_that_hold_it():
    r, _ = _create("gpuMemory: 140Gi", *NODES, extra="placementConstraints: {nodeTypes: [a10g, a100]}")
    assert _pool_affinity(r.objects) == [POOL]
    assert _limits(r.objects)["nvidia.com/gpu"] == "2"


def test_client_dry_run_says_what_happens_when_applied():
    plan = plan_documents(
        [_doc(f"pool: {POOL}, gpuMemory: 140Gi", "placementConstraints: {nodeTypes: a100}")], NS
    )
    assert any("gpuMemory 140Gi becomes the GPUs" in n for n in plan.notes)
    assert any("nodeTypes a100 become the pools" in n for n in plan.notes)
