"""gpu-resource (issue 33): every GPU-like extended resource (constants.GPU_RESOURCE_PREFIXES) that Kueue does
not charge to a team's budget (gpuctl.domain.sharing.quota_transformations) is refused in team namespaces
(webhook and policy), and every one counts as GPUs for the rules outside them (pool-selection, the
DaemonSet exemption, pool-node-name)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from admission.isolation import names_gpus, review_isolation
from admission.rules import AdmissionConfig, review
from admission.validators.gpu_resources import COUNTED_GPU_RESOURCES, uncounted_gpu_resources
from gpuctl.constants import GPU_RESOURCE, TAS_UNCONSTRAINED, Labels
from gpuctl.domain.gpus import is_gpu_resource
from tests.unit.test_admission_fixtures import PLAIN, TEAM, state
from tests.unit.test_admission_fixtures import review as admission_review

ROOT = Path(__file__).resolve().parents[2]
STATE = state()
ENFORCE = AdmissionConfig()


def pod(ns: str, resources: dict, init: bool = False, **spec) -> dict:
    c = {"name": "c", "image": "x", "resources": resources}
    part = (
        {"initContainers": [c], "containers": [{"name": "m", "image": "x"}]} if init else {"containers": [c]}
    )
    labels = {Labels.KUEUE_QUEUE: "default"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": ns,
            "labels": labels,
            "annotations": {TAS_UNCONSTRAINED: "true"},
        },
        "spec": {**part, **spec},
    }


def test_kueue_charges_exactly_the_counted_gpu_resources() -> None:
    """The webhook and the policy let through exactly what Kueue's configuration charges to the budget."""
    config = yaml.safe_load((ROOT / "manifests/kueue/configuration.yaml").read_text())
    charged = {t["input"] for t in config["resources"]["transformations"] if is_gpu_resource(t["input"])}
    assert charged == set(COUNTED_GPU_RESOURCES)
    assert {GPU_RESOURCE, "amd.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb"} <= charged


@pytest.mark.parametrize(
    ("case", "resources", "init", "want"),
    [
        ("whole nvidia GPUs", {"limits": {GPU_RESOURCE: "2"}}, False, []),
        ("AMD: charged as whole GPUs", {"limits": {"amd.com/gpu": "4"}}, False, []),
        ("a known MIG profile: charged its share", {"requests": {"nvidia.com/mig-1g.10gb": "1"}}, False, []),
        ("time-slicing replicas: charged", {"limits": {"nvidia.com/gpu.shared": "16"}}, False, []),
        ("HAMi's GPU memory", {"limits": {"nvidia.com/gpumem": "4000"}}, False, ["nvidia.com/gpumem"]),
        (
            "a MIG profile of no known model",
            {"limits": {"nvidia.com/mig-9g.99gb": "1"}},
            False,
            ["nvidia.com/mig-9g.99gb"],
        ),
        (
            "Intel's shared millicores, in an init container",
            {"limits": {"gpu.intel.com/millicores": "100"}},
            True,
            ["gpu.intel.com/millicores"],
        ),
        ("not a GPU", {"limits": {"example.com/fpga": "1", "cpu": "1"}}, False, []),
    ],
)
def test_uncounted_gpu_resources_are_refused_in_team_namespaces(case, resources, init, want) -> None:
    obj = pod(TEAM, resources, init)
    assert uncounted_gpu_resources(obj["spec"], "spec") == want, case
    v = review(admission_review(obj)["request"], STATE, ENFORCE)
    assert ("gpu-resource" in v.rules) is bool(want), (case, v.message())
    if want:
        assert (
            not v.allowed
            and f"requests {want[0]}" in v.message()
            and "Fix: request whole GPUs" in v.message()
        )


def test_other_gpu_resources_are_gpus_outside_team_namespaces() -> None:
    """pool-selection and the DaemonSet exemption read every GPU resource, charged or not: outside team
    namespaces nothing is charged."""
    sel = {"nodeSelector": {Labels.POOL: "a100"}}
    for r in ("amd.com/gpu", "nvidia.com/mig-3g.40gb", "nvidia.com/gpu.shared", "nvidia.com/gpumem"):
        obj = pod(PLAIN, {"limits": {r: "1"}}, **sel)
        assert names_gpus(obj["spec"])
        v = review_isolation(admission_review(obj)["request"], STATE, ENFORCE)
        assert v.rules == ("pool-selection",), (r, v.message())
    assert not names_gpus(pod(PLAIN, {"limits": {"example.com/fpga": "1"}})["spec"])
