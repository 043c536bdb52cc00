"""Spec documents -> the queues/ model (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.constants import LIMIT_RANGE_NAME, MANAGED_BY_VALUE, Labels
from queues import PoolGuarantee, TeamQuota

if TYPE_CHECKING:  # annotations only: a read (`get pools`, `describe job`) never loads pydantic
    from gpuctl.spec import PoolSpec, QuotaSpec
    from gpuctl.spec.models import QuotaEntry


def team_quotas(spec: QuotaSpec) -> list[TeamQuota]:
    """One TeamQuota per namespace of a quota document (the `default:` block is namespace default)."""
    out = []
    for ns, entry in sorted(spec.entries().items()):
        pools = {
            name: PoolGuarantee(gpu=g.gpu, cpu=str(g.cpu or "0"), memory=str(g.memory or "0"))
            for name, g in (entry.pools or {}).items()
        }
        out.append(
            TeamQuota(
                namespace=ns,
                quota_name=spec.quota.name,
                gpu=entry.gpu,
                cpu=None if entry.cpu is None else str(entry.cpu),
                memory=None if entry.memory is None else str(entry.memory),
                borrowing_limit=entry.borrowing_limit,
                pools=pools,
                description=spec.quota.description,
            )
        )
    return out


def node_label_patch(node: str, pool: str | None, gpu_type: str | None) -> dict:
    """The labels a pool puts on (or, with None values, takes off) one node, as a partial Node.

    A None value removes the label (JSON merge patch semantics).
    """
    labels: dict[str, str | None] = {Labels.POOL: pool}
    if gpu_type is not None:
        labels[Labels.GPU_TYPE] = gpu_type or None
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}}


def pool_node_patches(spec: PoolSpec) -> list[dict]:
    return [node_label_patch(n, spec.pool.name, node.gpu_type) for n, node in sorted(spec.nodes.items())]


def team_limit_range(namespace: str, entry: QuotaEntry) -> dict | None:
    """The LimitRange of a team namespace from its quota entry; None when `limitRange: false`."""
    lr = entry.limit_range
    if not lr.enabled:
        return None
    item: dict = {"type": "Container", "defaultRequest": lr.default_request.as_kubernetes()}
    if lr.default_limit is not None:
        item["default"] = lr.default_limit.as_kubernetes()
    if lr.max is not None:
        item["max"] = lr.max.as_kubernetes()
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {
            "name": LIMIT_RANGE_NAME,
            "namespace": namespace,
            "labels": {Labels.MANAGED_BY: MANAGED_BY_VALUE, Labels.TEAM: namespace},
        },
        "spec": {"limits": [item]},
    }
