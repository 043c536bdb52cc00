"""gpuctl.domain.gpus: the effective request of a pod (containers, sidecars, init phase), including the
shortcuts the webhook's hot path takes (a plain digit string, a pod without init containers)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuctl.constants import GPU_RESOURCE
from gpuctl.domain.gpus import MAX_GPUS, ShapeError, pod_spec_gpus, pod_spec_request


def c(gpus=None, limit=None, restart=None, cpu=None):
    res: dict = {}
    if gpus is not None or cpu is not None:
        res["requests"] = {k: v for k, v in ((GPU_RESOURCE, gpus), ("cpu", cpu)) if v is not None}
    if limit is not None:
        res["limits"] = {GPU_RESOURCE: limit}
    out: dict = {"name": "x", "resources": res}
    if restart:
        out["restartPolicy"] = restart
    return out


@pytest.mark.parametrize(
    ("value", "gpus"),
    [
        ("4", 4),
        ("04", 4),
        ("0", 0),
        ("1e1", 10),
        ("500m", 1),
        ("1k", 1000),
        (3, 3),
        (2.5, 3),
        ("9" * 30, MAX_GPUS),
    ],
)
def test_quantities(value, gpus):
    assert pod_spec_gpus({"containers": [c(value)]}) == gpus
    assert pod_spec_gpus({"containers": [c(limit=value)]}) == gpus


def test_non_ascii_digits_are_not_a_count():
    with pytest.raises(ShapeError, match=r"spec.containers\[0\].resources\[nvidia.com/gpu\]"):
        pod_spec_gpus({"containers": [c("\u0664")]})  # ARABIC-INDIC DIGIT FOUR: isdigit() but not a quantity


def test_containers_sidecars_and_init_phase():
    assert pod_spec_gpus({"containers": [c("1"), c("2")]}) == 3
    assert pod_spec_gpus({"containers": [c("1")], "initContainers": [c("1", restart="Always")]}) == 2
    assert pod_spec_gpus({"containers": [c("1")], "initContainers": [c("4")]}) == 4
    assert pod_spec_gpus({"containers": [c("1")], "initContainers": [c("1", restart="Always"), c("4")]}) == 5
    assert pod_spec_gpus({"containers": []}) == 0


def test_a_negative_request_without_init_containers_counts_as_zero():
    assert pod_spec_request({"containers": [c(cpu="-1")]}, "cpu") == 0
    assert pod_spec_request({"containers": [c(cpu="1500m")]}, "cpu") == Decimal("1.5")
