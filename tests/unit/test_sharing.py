"""gpuctl.domain.sharing: MIG tables, a node's sharing mode, gpu-share, the one quota rule."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from gpuctl.constants import GPU_UNITS, SHARED_REPLICAS_CHARGED, SLICES_USED_ANNOTATION
from gpuctl.domain import explain as ex
from gpuctl.domain import gpus, sharing
from gpuctl.domain.sharing import Mode, ShareError
from gpuctl.spec.share import parse_share
from queues import TeamQuota, cluster_queue, resource_flavor
from tests.unit.test_metrics import feed, node_obj, populated_cache, scrape, val

ROOT = Path(__file__).resolve().parents[2]


def node(labels: dict | None = None, alloc: dict | None = None) -> dict:
    return {"metadata": {"name": "n", "labels": labels or {}}, "status": {"allocatable": alloc or {}}}


def mig_node(**profiles: int) -> dict:
    alloc = {f"nvidia.com/mig-{p}": str(n) for p, n in profiles.items()}
    return {
        "metadata": {
            "name": "m",
            "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8"},
        },
        "status": {"allocatable": {"nvidia.com/gpu": "6", "cpu": "96", **alloc}},
    }


# --- the tables -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "names"),
    [
        ("A100-40GB", ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]),
        ("A100-80GB", ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
        ("H100-80GB", ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
        ("H200-141GB", ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]),
        ("H100-NVL", ["1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"]),
    ],
)
def test_profiles_per_model(model, names):
    m = next(x for x in sharing.MODELS if x.name == model)
    assert [p.name for p in m.profiles] == names


def test_instances_per_gpu_on_80gb():
    m = sharing.model_named("NVIDIA-A100-SXM4-80GB")
    assert {p.name: p.per_gpu for p in m.profiles} == {
        "1g.10gb": 7,
        "1g.10gb+me": 1,
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    }


@pytest.mark.parametrize(
    ("product", "model"),
    [
        ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA-A100-SXM4-40GB", "A100-40GB"),
        ("A100-80G", "A100-80GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),
        ("NVIDIA-H100-NVL", "H100-NVL"),
        ("NVIDIA-H200", "H200-141GB"),
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "A100-80GB"),
    ],
)
def test_model_from_product(product, model):
    assert sharing.model_named(product).name == model


def test_unknown_product_is_no_model():
    assert sharing.model_named("Tesla-T4") is None
    assert sharing.model_named("") is None


# --- the quota rule ---------------------------------------------------------------------------------


def test_every_full_layout_of_an_80gb_gpu_costs_about_one_gpu():
    m = sharing.model_named("A100-80GB")
    for p in m.profiles:
        if not p.media:
            assert p.per_gpu * p.share <= 1, p.name
    p = {x.name: x for x in m.profiles}
    assert 7 * p["1g.10gb"].share == 1
    assert 4 * p["1g.20gb"].share == 1
    assert 2 * p["3g.40gb"].share == 1
    assert 3 * p["2g.20gb"].share == Fraction(6, 7)
    assert p["7g.80gb"].share == 1


def test_units_are_exact_for_every_share():
    for p in sharing.PROFILES.values():
        assert (p.share * GPU_UNITS).denominator == 1, p.name
    for replicas in (2, 3, 4, 5, 6, 7, 8, 10, 12, 14):
        assert GPU_UNITS % replicas == 0


@pytest.mark.parametrize(
    ("resource", "units"),
    [
        ("nvidia.com/gpu", 840),
        ("amd.com/gpu", 840),
        ("nvidia.com/mig-1g.10gb", 120),
        ("nvidia.com/mig-1g.10gb.me", 120),
        ("nvidia.com/mig-1g.20gb", 210),
        ("nvidia.com/mig-3g.40gb", 420),
        ("nvidia.com/mig-4g.40gb", 480),
        ("nvidia.com/mig-7g.80gb", 840),
        ("nvidia.com/gpu.shared", 840 // SHARED_REPLICAS_CHARGED),
        ("nvidia.com/mig-2g.99gb", 240),  # a profile not in the table: its compute share
        ("nvidia.com/gpumem", None),
        ("cpu", None),
    ],
)
def test_resource_units(resource, units):
    assert sharing.resource_units(resource) == units


def test_ambiguous_1g10gb_is_charged_as_on_the_larger_gpu():
    # A100-40GB's 1g.10gb holds 2 memory slices (1/4 GPU); the 80 GB GPUs' holds 1 (1/7).
    assert sharing.model_named("A100-40GB").profile("1g.10gb").share == Fraction(1, 4)
    assert sharing.PROFILES["1g.10gb"].share == Fraction(1, 7)


def test_seven_small_slices_fill_one_gpu_and_an_eighth_does_not_fit():
    u = sharing.resource_units("nvidia.com/mig-1g.10gb")
    assert 7 * u == GPU_UNITS
    assert 8 * u > GPU_UNITS


def test_units_as_gpus():
    assert sharing.units_as_gpus(840) == "1"
    assert sharing.units_as_gpus(7 * 120) == "1"
    assert sharing.units_as_gpus(120) == "0.14"
    assert sharing.units_as_gpus("1680") == "2"
    assert sharing.units_as_gpus(420) == "0.5"
    assert sharing.units_as_gpus("junk") == "0"


def test_kueue_configuration_has_exactly_the_gpu_transformations():
    config = yaml.safe_load((ROOT / "manifests" / "kueue" / "configuration.yaml").read_text())
    gpu = [t for t in config["resources"]["transformations"] if t["input"] not in ("cpu", "memory")]
    assert gpu == sharing.quota_transformations()


def test_transformations_cover_every_profile_and_whole_gpu_once():
    ts = sharing.quota_transformations()
    inputs = [t["input"] for t in ts]
    assert len(inputs) == len(set(inputs))
    assert "nvidia.com/gpu" in inputs and "nvidia.com/gpu.shared" in inputs
    for p in sharing.PROFILES.values():
        assert p.resource in inputs
    assert all(t["strategy"] == "Retain" for t in ts)


# --- what a node advertises -------------------------------------------------------------------------


def test_mig_mixed_node():
    s = sharing.node_sharing(mig_node(**{"1g.10gb": 14}))
    assert s.mode is Mode.MIG_MIXED
    assert s.model.name == "A100-80GB"
    assert s.whole == 6
    assert s.slices == {"1g.10gb": 14}
    assert s.shared_gpus == 2
    assert s.shared_resources == {"nvidia.com/mig-1g.10gb": 14}


def test_mig_mixed_without_count_label_counts_gpus_from_the_slices():
    n = mig_node(**{"1g.10gb": 7, "3g.40gb": 2})
    del n["metadata"]["labels"]["nvidia.com/gpu.count"]
    assert sharing.node_sharing(n).shared_gpus == 2


def test_mig_single_node():
    n = node(
        {"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"},
        {"nvidia.com/gpu": "56"},
    )
    s = sharing.node_sharing(n)
    assert s.mode is Mode.MIG_SINGLE
    assert s.whole == 0
    assert s.slices == {"1g.10gb": 56}
    assert s.shared_resources == {"nvidia.com/gpu": 56}


def test_time_sliced_node():
    n = node(
        {
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
            "nvidia.com/gpu.replicas": "4",
            "nvidia.com/gpu.count": "2",
            "nvidia.com/gpu.product": "NVIDIA-L4",
        },
        {"nvidia.com/gpu.shared": "8"},
    )
    s = sharing.node_sharing(n)
    assert (s.mode, s.replicas, s.shared_gpus, s.slices) == (Mode.TIME_SLICING, 4, 2, {"shared": 8})
    assert not s.mode.isolated


def test_mps_node():
    n = node(
        {"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "2"},
        {"nvidia.com/gpu.shared": "2"},
    )
    s = sharing.node_sharing(n)
    assert (s.mode, s.replicas, s.shared_gpus) == (Mode.MPS, 2, 1)
    assert s.mode.isolated


def test_plain_node():
    s = sharing.node_sharing(
        node({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, {"nvidia.com/gpu": "8"})
    )
    assert (s.mode, s.whole, s.slices) == (Mode.NONE, 8, {})


# --- gpu-share --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10Gi", (None, 10 * 2**30)),
        ("2Gi", (None, 2 * 2**30)),
        ("10G", (None, 10 * 10**9)),
        ("10gb", (None, 10 * 10**9)),
        ("1g.10gb", ("1g.10gb", None)),
        ("1G.10GB", ("1g.10gb", None)),
        ("1g.10gb+me", ("1g.10gb+me", None)),
    ],
)
def test_parse_share(value, expected):
    assert parse_share(value)[1:] == expected and parse_share(value).text == value


@pytest.mark.parametrize("value", ["half", "0", "-1Gi", "9g.10gb", "", "banana", "50%"])
def test_parse_share_refuses(value):
    with pytest.raises(ValueError, match="neither a GPU memory size"):
        parse_share(value)


@pytest.mark.parametrize(
    ("memory", "profile"),
    [("1Gi", "1g.10gb"), ("10Gi", "1g.10gb"), ("11Gi", "1g.20gb"), ("30Gi", "3g.40gb"), ("80Gi", "7g.80gb")],
)
def test_smallest_profile_on_a100_80(memory, profile):
    m = sharing.model_named("A100-80GB")
    size = parse_share(memory).memory
    assert sharing.smallest_profile(m, size).name == profile


def test_smallest_profile_none_when_too_big():
    assert sharing.smallest_profile(sharing.model_named("A100-40GB"), 41 * 2**30) is None


def test_choose_slice_mig_mixed():
    m = sharing.model_named("A100-80GB")
    s = sharing.choose_slice(parse_share("10Gi"), "dev", Mode.MIG_MIXED, m, {"1g.10gb", "3g.40gb"})
    assert (s.resource, s.profile, s.units) == ("nvidia.com/mig-1g.10gb", "1g.10gb", 120)
    s = sharing.choose_slice(parse_share("30Gi"), "dev", Mode.MIG_MIXED, m, {"1g.10gb", "3g.40gb"})
    assert s.resource == "nvidia.com/mig-3g.40gb"


def test_choose_slice_profile_the_pool_lacks_names_what_it_has():
    m = sharing.model_named("A100-80GB")
    with pytest.raises(ShareError, match=r"no 1g.20gb MIG instances \(it has 1g.10gb, 3g.40gb\)"):
        sharing.choose_slice(parse_share("15Gi"), "dev", Mode.MIG_MIXED, m, {"1g.10gb", "3g.40gb"})


def test_choose_slice_time_slicing_is_one_replica():
    s = sharing.choose_slice(parse_share("10Gi"), "ts", Mode.TIME_SLICING, None, {"shared"})
    assert (s.resource, s.profile, s.memory) == ("nvidia.com/gpu.shared", "shared", 10 * 2**30)


def test_choose_slice_no_sharing():
    with pytest.raises(ShareError, match="pool plain does not share its GPUs"):
        sharing.choose_slice(parse_share("10Gi"), "plain", Mode.NONE, None, set())


def test_choose_slice_mig_single():
    m = sharing.model_named("A100-80GB")
    s = sharing.choose_slice(parse_share("10Gi"), "single", Mode.MIG_SINGLE, m, {"1g.10gb"})
    assert (s.resource, s.profile) == ("nvidia.com/gpu", "1g.10gb")
    with pytest.raises(ShareError, match="MIG single"):
        sharing.choose_slice(parse_share("30Gi"), "single", Mode.MIG_SINGLE, m, {"1g.10gb"})


def test_choose_slice_memory_needs_a_model():
    with pytest.raises(ShareError, match="name the profile"):
        sharing.choose_slice(parse_share("10Gi"), "dev", Mode.MIG_MIXED, None, {"1g.10gb"})


# --- gpus: the one matcher and GPU equivalents --------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "gpu"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/gpu.shared", True),
        ("nvidia.com/mig-1g.10gb", True),
        ("nvidia.com/gpumem", True),
        ("amd.com/gpu", True),
        ("gpu.intel.com/i915", True),
        ("cpu", False),
        ("example.com/gpu", False),
        ("nvidia.com/mellanox", False),
    ],
)
def test_is_gpu_resource(name, gpu):
    assert gpus.is_gpu_resource(name) is gpu


def test_pod_gpu_requests_and_units():
    spec = {
        "initContainers": [
            {
                "name": "side",
                "restartPolicy": "Always",
                "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}},
            }
        ],
        "containers": [
            {"name": "a", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "2", "cpu": "1"}}},
            {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        ],
    }
    assert gpus.pod_spec_gpu_requests(spec) == {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 3}
    assert gpus.pod_spec_gpu_units(spec) == 840 + 3 * 120
    assert gpus.pod_spec_gpus(spec) == 1  # nvidia.com/gpu only: what pools and nodes count


def test_pod_gpu_units_of_a_pod_without_gpus():
    assert gpus.pod_spec_gpu_units({"containers": [{"resources": {"requests": {"cpu": "1"}}}]}) == 0
    assert gpus.pod_spec_gpu_requests(None) == {}


def test_pod_gpu_requests_bad_shape():
    with pytest.raises(gpus.ShapeError, match=r"containers\[0\] must be an object"):
        gpus.pod_spec_gpu_requests({"containers": ["x"]})


def test_pool_sharing_sums_nodes_and_says_it_in_one_line():
    a = mig_node(**{"1g.10gb": 14})
    b = mig_node(**{"1g.10gb": 7, "3g.40gb": 2})
    ps = sharing.pool_sharing([a, b])
    assert (ps.mode, ps.whole, ps.shared_gpus) == (Mode.MIG_MIXED, 12, 4)
    assert ps.slices == {"1g.10gb": 21, "3g.40gb": 2}
    assert sharing.describe_pool_sharing(ps) == "12 GPUs + 4 as 21 x 1g.10gb, 2 x 3g.40gb"
    view = sharing.slice_view(ps, {"nvidia.com/mig-1g.10gb": 3})
    assert view["1g.10gb"] == {"resource": "nvidia.com/mig-1g.10gb", "total": 21, "used": 3, "free": 18}
    assert view["3g.40gb"]["used"] == 0
    assert sharing.slice_view(ps, None)["1g.10gb"]["used"] is None


def test_time_sliced_pool_line_says_memory_is_not_isolated():
    n = node(
        {
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
            "nvidia.com/gpu.replicas": "4",
            "nvidia.com/gpu.count": "2",
        },
        {"nvidia.com/gpu.shared": "8"},
    )
    ps = sharing.pool_sharing([n])
    assert sharing.describe_pool_sharing(ps) == "2 GPUs as 8 x shared (time-slicing, memory not isolated)"
    assert ps.resource("shared") == "nvidia.com/gpu.shared"


def test_pool_without_sharing():
    ps = sharing.pool_sharing([node({}, {"nvidia.com/gpu": "8"})])
    assert (ps.mode, sharing.describe_pool_sharing(ps)) == (Mode.NONE, "8 GPUs")


def test_pool_slices_metric_per_profile():
    cache, registry = populated_cache()
    n = node_obj("m1", "inference-pool", 6, gpu_type="NVIDIA-A100-SXM4-80GB", tainted=True)
    n["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "14"
    ts = node_obj("t1", "inference-pool", 0, gpu_type="NVIDIA-L4", tainted=True)
    ts["metadata"]["labels"]["nvidia.com/gpu.sharing-strategy"] = "time-slicing"
    ts["status"]["allocatable"]["nvidia.com/gpu.shared"] = "8"
    feed(cache, "Node", n, ts)
    m = scrape(registry)
    mig = {"pool": "inference-pool", "profile": "1g.10gb", "resource": "nvidia.com/mig-1g.10gb"}
    assert val(m, "gpuctl_pool_slices", **mig) == 14
    shared = {"pool": "inference-pool", "profile": "shared", "resource": "nvidia.com/gpu.shared"}
    assert val(m, "gpuctl_pool_slices", **shared) == 8
    assert val(m, "gpuctl_pool_slices", pool="training-pool", profile="1g.10gb", resource="x") is None
    # In use: what serve's reconciler last wrote on the pool's flavor; no series before it has.
    assert val(m, "gpuctl_pool_slices_used", **mig) is None
    flavor = resource_flavor("inference-pool")
    flavor["metadata"]["annotations"] = {SLICES_USED_ANNOTATION: '{"nvidia.com/mig-1g.10gb":3}'}
    feed(cache, "ResourceFlavor", flavor)
    m = scrape(registry)
    assert val(m, "gpuctl_pool_slices_used", **mig) == 3
    assert val(m, "gpuctl_pool_slices_used", **shared) == 0


def _pod(ns: str, name: str, node: str, resource: str) -> dict:
    res = {"requests": {resource: "1"}, "limits": {resource: "1"}}
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"u-{name}"},
        "spec": {"nodeName": node, "containers": [{"name": "main", "resources": res}]},
        "status": {"phase": "Running"},
    }


def test_explain_names_the_missing_slice_and_who_holds_them():
    n = mig_node(**{"1g.10gb": 3})
    n["metadata"]["labels"]["runwhere.ai/pool"] = "dev-pool"
    n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    r = "nvidia.com/mig-1g.10gb"
    pods = [_pod("team-b", f"b{i}", "m", r) for i in range(3)]
    cqs = [
        cluster_queue(TeamQuota("team-a", "q", gpu=4), ["dev-pool"]),
        cluster_queue(TeamQuota("team-b", "q", gpu=4), ["dev-pool"]),
    ]
    snap = ex.Snapshot.build(nodes=[n], pods=pods, workloads=[], cluster_queues=cqs, cohort=None)
    tmpl = {
        "metadata": {"labels": {"runwhere.ai/pool": "dev-pool"}},
        "spec": _pod("team-a", "a", "", r)["spec"],
    }
    d = ex.demand_of_pod_template("team-a", tmpl, 1, 500_000, label="team-a/a")
    assert (d.slice, d.total_units) == (r, 120)
    v = snap.verdict(d)
    assert (v.starts, v.cause) == (False, "capacity")
    assert v.message == "no free 1g.10gb in dev-pool (3 in all; 3 in use by team-b)"
    # One slice freed: it would start.
    snap = ex.Snapshot.build(nodes=[n], pods=pods[:2], workloads=[], cluster_queues=cqs, cohort=None)
    assert snap.verdict(d).starts
    # A team-a member (by count: its own pods only) reads team-b's use from what gpuctl serve published.
    own = [_pod("team-a", "a0", "m", r)]
    by_count = {
        "nodes": [n], "pods": own, "workloads": [], "cluster_queues": cqs, "cohort": None,
        "pool_reserved": {"dev-pool": 0},
    }  # fmt: skip
    snap = ex.Snapshot.build(**by_count, slices_published={"dev-pool": {r: 3}})
    assert (
        snap.verdict(d).message
        == "no free 1g.10gb in dev-pool (3 in all; 2 in use by other teams, 1 in use by team-a)"
    )
    snap = ex.Snapshot.build(**by_count, slices_published={"dev-pool": {r: 2}, "other": None})
    assert snap.verdict(d).starts


def test_slices_used_annotation_round_trip_and_bad_text():
    ps = sharing.pool_sharing([mig_node(**{"1g.10gb": 14, "3g.40gb": 2})])
    text = sharing.slices_used_text(ps, {"nvidia.com/mig-1g.10gb": 3, "nvidia.com/gpu": 5})
    assert text == '{"nvidia.com/mig-1g.10gb":3,"nvidia.com/mig-3g.40gb":0}'
    assert sharing.slices_used(text) == {"nvidia.com/mig-1g.10gb": 3, "nvidia.com/mig-3g.40gb": 0}
    assert sharing.slice_view(ps, sharing.slices_used(text))["1g.10gb"]["free"] == 11
    assert sharing.slices_used_text(sharing.pool_sharing([]), {}) is None
    for bad in (None, "", "{", "[1]"):
        assert sharing.slices_used(bad) is None, bad
    assert sharing.slices_used('{"a": true, "b": -1}') == {}
    assert sharing.slices_used('{"a": true, "b": -1, "c": 2}') == {"c": 2}


def test_gpu_share_on_time_sliced_mig_takes_a_replica_only_where_no_instance_is_offered():
    a100 = sharing.model_named("NVIDIA-A100-SXM4-80GB")
    s = sharing.choose_slice(parse_share("10Gi"), "p", Mode.MIG_MIXED, a100, {"1g.10gb.shared"})
    assert (s.resource, s.profile, s.units) == ("nvidia.com/mig-1g.10gb.shared", "1g.10gb.shared", 30)
    s = sharing.choose_slice(parse_share("10Gi"), "p", Mode.MIG_MIXED, a100, {"1g.10gb", "1g.10gb.shared"})
    assert s.resource == "nvidia.com/mig-1g.10gb"  # the isolated instance first
