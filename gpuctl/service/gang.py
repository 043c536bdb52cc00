"""Multi-node jobs (docs/distributed.md, "A gang, always: the policies"): what a submission needs to know of
its pool. Loaded by the write paths only (it imports the builders, hence the spec models)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpuctl.builders import TargetPool
from gpuctl.builders.gang import topology_level
from gpuctl.cluster.reader import Reader
from gpuctl.constants import Labels
from gpuctl.domain.gang import gang_never_fits, pool_topology
from gpuctl.domain.objects import labels, name
from gpuctl.domain.pools import node_gpus, node_ready
from gpuctl.service.errors import ServiceError

if TYPE_CHECKING:  # annotations only: a read never loads pydantic
    from gpuctl.spec import Document, JobSpec


def gang_pool_facts(
    where: str,
    spec: JobSpec,
    flavors: Sequence[Mapping[str, Any]],
    docs: list[Document],
    reader: Reader | None = None,
    gpus: int | None = None,
) -> TargetPool:
    """What the builders may know of a single-pool job's pool: its topology levels, from the pool
    document in the same submission or from the pool's ResourceFlavor (None: not known). A
    `resources.topology` that names no level of the pool is refused here, before anything is written, and
    so is a multi-node job the pool's nodes can never hold (with `reader`: the webhook's `gang-fits`)."""
    pool = spec.resources.pool
    new = next(
        (d.spec for d in docs if getattr(d.spec, "kind", "") == "pool" and d.spec.pool.name == pool), None
    )
    if new is not None:
        levels = tuple(new.topology) if new.topology is not None else None
    else:
        flavor = next((f for f in flavors if name(f) == pool), None)
        levels = pool_topology(flavor) if flavor is not None else None
    wanted = getattr(spec.resources, "topology", None)
    if wanted and levels is not None and topology_level(wanted, levels) is None:
        names = ", ".join(level.rsplit("/", 1)[-1] for level in levels)
        fix = f"use one of {names}" if levels else f"name its levels in pool {pool}'s `topology`"
        raise ServiceError(
            f"{where}: resources.topology: {wanted} is no level of pool {pool}'s topology "
            f"({', '.join(levels) or 'none: the node only'}); {fix}, or remove resources.topology"
        )
    if reader is not None and new is None and getattr(spec.resources, "nodes", 1) > 1:
        level = topology_level(wanted, levels) if wanted and levels is not None else None
        _check_gang_fits(reader, where, spec, level or "", gpus)
    return TargetPool(name=pool, topology=levels)


def _check_gang_fits(reader: Reader, where: str, spec: JobSpec, level: str, gpus: int | None) -> None:
    """A multi-node job its pool can never hold, even empty (gpuctl.domain.gang.gang_never_fits)."""
    pool, res = spec.resources.pool, spec.resources
    nodes = [
        (name(n), node_gpus(n), labels(n), node_ready(n))
        for n in reader.list("Node", label_selector=f"{Labels.POOL}={pool}")
    ]
    why = gang_never_fits(pool, nodes, res.nodes, res.gpu if gpus is None else gpus, level)
    if why:
        fix = "lower resources.nodes or resources.gpu (per node)"
        fix += ", widen or remove resources.topology" if level else ""
        raise ServiceError(f"{where}: resources.nodes: {why}; {fix}, or use a pool with more nodes")
