"""mig-profile (issue 32): the webhook refuses a MIG profile the GPUs of the pod's pool(s) do not have, naming
the field and the profiles they have; `gpu-share` gives the same refusal at `gpuctl create`
(gpuctl.domain.sharing.choose_slice, one text)."""

from __future__ import annotations

import re

import pytest

from admission.rules import AdmissionConfig, review
from admission.state import CachedNode, ClusterState
from gpuctl.constants import TAS_UNCONSTRAINED, Labels
from gpuctl.domain import sharing
from gpuctl.spec.share import parse_share
from tests.unit.test_admission_fixtures import TEAM
from tests.unit.test_admission_fixtures import review as admission_review

ENFORCE = AdmissionConfig()
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
H200 = {"nvidia.com/gpu.product": "NVIDIA-H200"}


def _node(name: str, pool: str, labels: dict[str, str]) -> CachedNode:
    return CachedNode(name, {**labels, Labels.POOL: pool}, 0, pool)


def _state(*nodes: CachedNode, pools: tuple[str, ...] = ("a100", "h200", "empty")) -> ClusterState:
    return ClusterState.build(
        pools=pools,
        nodes=nodes,
        local_queues={TEAM: {"default": TEAM}},
        cluster_queues={TEAM: pools},
        namespaces={TEAM: True},
    )


STATE = _state(
    _node("a1", "a100", A100),
    _node("a2", "a100", {Labels.GPU_TYPE: "a100-80g"}),  # gpuctl's label names the model too
    _node("h1", "h200", H200),
)


def job(
    resources: dict, *, pool: str | None = None, pools: list[str] | None = None, init: bool = False
) -> dict:
    spec: dict = {"restartPolicy": "Never"}
    c = {"name": "c", "image": "x", "resources": resources}
    spec["containers"] = [{"name": "m", "image": "x"}, c] if not init else [{"name": "m", "image": "x"}]
    if init:
        spec["initContainers"] = [c]
    if pool:
        spec["nodeSelector"] = {Labels.POOL: pool}
    if pools:
        term = {"matchExpressions": [{"key": Labels.POOL, "operator": "In", "values": pools}]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}}  # fmt: skip
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": TEAM, "labels": {Labels.KUEUE_QUEUE: "default"}},
        "spec": {
            "suspend": True,
            "template": {"metadata": {"annotations": {TAS_UNCONSTRAINED: "true"}}, "spec": spec},
        },
    }


def judge(obj: dict, state: ClusterState = STATE):
    return review(admission_review(obj)["request"], state, ENFORCE)


def test_a_profile_of_another_model_is_refused_naming_field_and_profiles() -> None:
    v = judge(job({"limits": {"nvidia.com/mig-1g.5gb": "1"}}, pool="a100"))
    assert not v.allowed and v.rules == ("mig-profile",), v.message()
    msg = v.message()
    assert "spec.template.spec.containers[1].resources.limits asks for nvidia.com/mig-1g.5gb" in msg
    assert "the GPUs of pool a100 (A100-80GB) have no MIG profile 1g.5gb; they have 1g.10gb, " in msg
    assert "7g.80gb" in msg and "Fix: ask for one of those profiles" in msg


@pytest.mark.parametrize(
    ("case", "resources", "where", "refused"),
    [
        ("an H200 profile on A100", {"requests": {"nvidia.com/mig-1g.18gb": "1"}}, {"pool": "a100"}, True),
        ("the A100's own profile", {"requests": {"nvidia.com/mig-1g.10gb": "1"}}, {"pool": "a100"}, False),
        ("media extension, by name", {"limits": {"nvidia.com/mig-1g.10gb.me": "1"}}, {"pool": "a100"}, False),
        (
            "MIG + time-slicing replica",
            {"limits": {"nvidia.com/mig-1g.5gb.shared": "2"}},
            {"pool": "a100"},
            True,
        ),
        (
            "its replica on its model",
            {"limits": {"nvidia.com/mig-3g.40gb.shared": "1"}},
            {"pool": "a100"},
            False,
        ),
        (
            "in an init container",
            {"limits": {"nvidia.com/mig-1g.18gb": "1"}},
            {"pool": "a100", "init": True},
            True,
        ),
        (
            "listed pools, one has it",
            {"limits": {"nvidia.com/mig-1g.18gb": "1"}},
            {"pools": ["a100", "h200"]},
            False,
        ),
        (
            "listed pools, none has it",
            {"limits": {"nvidia.com/mig-1g.5gb": "1"}},
            {"pools": ["a100", "h200"]},
            True,
        ),
        ("no pool: the team's pools, one has it", {"limits": {"nvidia.com/mig-1g.18gb": "1"}}, {}, False),
        ("no pool: none of the team's has it", {"limits": {"nvidia.com/mig-2g.10gb": "1"}}, {}, True),
        ("whole GPUs are not judged here", {"limits": {"nvidia.com/gpu": "1"}}, {"pool": "a100"}, False),
    ],
)
def test_mig_profile_cases(case, resources, where, refused) -> None:
    v = judge(job(resources, **where))
    assert ("mig-profile" in v.rules) is refused, (case, v.message())


def test_unknown_models_and_pools_without_nodes_are_not_judged() -> None:
    unknown = _state(
        _node("x1", "a100", {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}), _node("a1", "a100", A100)
    )
    assert judge(job({"limits": {"nvidia.com/mig-1g.5gb": "1"}}, pool="a100"), unknown).allowed
    assert judge(job({"limits": {"nvidia.com/mig-1g.5gb": "1"}}, pool="empty")).allowed
    # Without a pool, the pools with nodes decide (empty is left out, as gpu-fits-node does).
    v = judge(job({"limits": {"nvidia.com/mig-1g.5gb": "1"}}))
    assert "pool a100 (A100-80GB)" in v.message() and "pool h200 (H200-141GB)" in v.message()
    assert "empty" not in v.message().split("Fix:")[0].split("[mig-profile]")[1]


def test_gpu_share_refuses_the_same_profile_with_the_same_text() -> None:
    a100 = sharing.model_named("NVIDIA-A100-SXM4-80GB")
    with pytest.raises(sharing.ShareError) as e:
        sharing.choose_slice(parse_share("1g.18gb"), "a100", sharing.Mode.MIG_MIXED, a100, {"1g.10gb"})
    assert sharing.lacking_profile_text("a100", (a100,), "1g.18gb") in str(e.value)
    with pytest.raises(sharing.ShareError, match=r"have no MIG profile 1g\.5gb"):
        sharing.choose_slice(parse_share("1g.5gb"), "a100", sharing.Mode.MIG_SINGLE, a100, {"1g.10gb"})
    # A profile the model has but the nodes are not cut into: the other message (what they offer).
    with pytest.raises(sharing.ShareError, match=r"offers no 1g\.20gb MIG instances"):
        sharing.choose_slice(parse_share("1g.20gb"), "a100", sharing.Mode.MIG_MIXED, a100, {"1g.10gb"})


def test_mig_shared_replicas_are_charged_a_quarter_of_their_instance() -> None:
    assert sharing.resource_units("nvidia.com/mig-1g.10gb.shared") == 30
    assert sharing.resource_units("nvidia.com/mig-3g.40gb.shared") == 105
    assert sharing.resource_units("nvidia.com/mig-1g.20gb.shared") == 53  # 52.5 rounded up
    assert sharing.mig_profile_of("nvidia.com/mig-1g.10gb.me.shared") == "1g.10gb+me"
    inputs = {t["input"] for t in sharing.quota_transformations()}
    assert {p.resource + ".shared" for p in sharing.PROFILES.values()} <= inputs


def test_a_grace_hopper_is_not_an_h200() -> None:
    assert sharing.model_named("NVIDIA-GH200-480GB") is None
    assert sharing.model_named("NVIDIA-H200").name == "H200-141GB"
    assert sharing.model_named("NVIDIA-H200-NVL").name == "H200-141GB"
    assert sharing.model_named("H200").name == "H200-141GB"  # at the start
    assert sharing.model_named("NVIDIA-GH200-H200").name == "H200-141GB"  # a later occurrence starts a word
    assert sharing.model_named("NVIDIA GH200 480GB") is None


@pytest.mark.parametrize(
    "text", ["NVIDIA-A100-SXM4-80GB", "GH200", "XH200-H200", "A100A100", "1A100", "-H100", "ÉH100", "H100 X"]
)
def test_a_product_name_starts_a_word_as_the_regex_said(text) -> None:
    words = [s.upper() for m in sharing.MODELS for s in m.products]
    for word in words:
        regex = re.search(rf"(^|[^A-Z0-9]){re.escape(word)}", text) is not None
        assert sharing._starts_a_word(text, word) is regex, (text, word)
