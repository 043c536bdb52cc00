"""What a pool is: a gpuctl ResourceFlavor (other than the budget flavor) and the nodes labelled
runwhere.ai/pool=<pool>. A pool's capacity is the allocatable GPUs, CPU and memory of its Ready,
schedulable nodes: a NotReady or cordoned node contributes nothing, since work Kueue admitted
against it could not run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from gpuctl.constants import BUDGET_FLAVOR, CPU_RESOURCE, GPU_RESOURCE, MEMORY_RESOURCE, Labels
from gpuctl.domain.gpus import quantity_gpus
from gpuctl.domain.objects import condition, is_gpuctl_object, labels, name
from gpuctl.quantity import QuantityError, format_quantity, parse_quantity
from queues.model import PoolCapacity

# Where the GPU model of a node is read from, in order (gpuctl's key, its earlier spelling, then
# the NVIDIA GPU operator's feature-discovery labels).
GPU_TYPE_KEYS = (Labels.GPU_TYPE, Labels.GPU_TYPE_LEGACY, "nvidia.com/gpu.product", "nvidia.com/gpu-type")
NODE_STATES = ("ready", "not_ready", "cordoned")


def is_pool_flavor(flavor: Mapping[str, Any]) -> bool:
    """A ResourceFlavor that is a gpuctl pool."""
    return is_gpuctl_object(flavor) and name(flavor) != BUDGET_FLAVOR


def pool_names(flavors: Iterable[Mapping[str, Any]]) -> list[str]:
    return sorted(name(f) for f in flavors if is_pool_flavor(f))


def node_pool(node: Mapping[str, Any]) -> str | None:
    return labels(node).get(Labels.POOL)


def node_ready(node: Mapping[str, Any]) -> bool:
    """Ready and schedulable: the node counts toward its pool's capacity."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    return condition(node, "Ready").get("status") == "True"


def node_state(node: Mapping[str, Any]) -> str:
    """ready | cordoned (Ready but unschedulable) | not_ready."""
    if node_ready(node):
        return "ready"
    return "cordoned" if condition(node, "Ready").get("status") == "True" else "not_ready"


def node_gpus(node: Mapping[str, Any], field: str = "allocatable") -> int:
    v = ((node.get("status") or {}).get(field) or {}).get(GPU_RESOURCE)
    try:
        return quantity_gpus(v) if v is not None else 0
    except ValueError:
        return 0


def node_gpu_type(node: Mapping[str, Any]) -> str:
    lb = labels(node)
    for key in GPU_TYPE_KEYS:
        if lb.get(key):
            return lb[key]
    return ""


def _qty(v: Any) -> Decimal:
    try:
        return parse_quantity(str(v)) if v is not None else Decimal(0)
    except QuantityError:
        return Decimal(0)


def pool_capacities(nodes: Iterable[Mapping[str, Any]], pools: Iterable[str]) -> list[PoolCapacity]:
    """Capacity of each named pool (pools without nodes have 0), from Node objects."""
    acc: dict[str, list] = {p: [0, Decimal(0), Decimal(0), []] for p in pools}
    for node in nodes:
        pool = node_pool(node)
        if pool not in acc:
            continue
        acc[pool][3].append(name(node))
        if not node_ready(node):
            continue
        alloc = (node.get("status") or {}).get("allocatable") or {}
        acc[pool][0] += node_gpus(node)
        acc[pool][1] += _qty(alloc.get(CPU_RESOURCE))
        acc[pool][2] += _qty(alloc.get(MEMORY_RESOURCE))
    return [
        PoolCapacity(name=p, gpu=g, cpu=format_quantity(c), memory=format_quantity(m), nodes=tuple(sorted(n)))
        for p, (g, c, m, n) in sorted(acc.items())
    ]
