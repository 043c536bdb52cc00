"""A pool's capacity, computed one way for the CLI, the reconciler, the metrics and the API.

Capacity = the allocatable nvidia.com/gpu, cpu and memory of the pool's Ready, schedulable nodes.
A NotReady or cordoned node contributes nothing: work Kueue admitted against it could not run.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from gpuctl.constants import CPU_RESOURCE, GPU_RESOURCE, MEMORY_RESOURCE, Labels
from gpuctl.spec.quantity import parse_quantity
from queues import PoolCapacity


def node_pool(node: dict) -> str | None:
    return ((node.get("metadata") or {}).get("labels") or {}).get(Labels.POOL)


def node_ready(node: dict) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def node_gpus(node: dict, field: str = "allocatable") -> int:
    v = ((node.get("status") or {}).get(field) or {}).get(GPU_RESOURCE)
    return int(parse_quantity(v)) if v else 0


def node_gpu_type(node: dict) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key in (Labels.GPU_TYPE, Labels.GPU_TYPE_LEGACY, "nvidia.com/gpu.product", "nvidia.com/gpu-type"):
        if labels.get(key):
            return labels[key]
    return ""


def _fmt(d: Decimal) -> str:
    d = d.normalize()
    if d == d.to_integral_value():
        return str(int(d))
    return f"{int((d * 1000).to_integral_value(rounding='ROUND_FLOOR'))}m"


def pool_capacities(nodes: Iterable[dict], pools: Iterable[str]) -> list[PoolCapacity]:
    """Capacity of each named pool (pools without nodes have 0), from a list of Node objects."""
    acc: dict[str, list] = {p: [0, Decimal(0), Decimal(0), []] for p in pools}
    for node in nodes:
        pool = node_pool(node)
        if pool not in acc:
            continue
        acc[pool][3].append(node["metadata"]["name"])
        if not node_ready(node):
            continue
        alloc = (node.get("status") or {}).get("allocatable") or {}
        acc[pool][0] += node_gpus(node)
        acc[pool][1] += parse_quantity(alloc.get(CPU_RESOURCE, "0"))
        acc[pool][2] += parse_quantity(alloc.get(MEMORY_RESOURCE, "0"))
    return [
        PoolCapacity(name=p, gpu=g, cpu=_fmt(c), memory=_fmt(m), nodes=tuple(sorted(n)))
        for p, (g, c, m, n) in sorted(acc.items())
    ]
