"""`resources.gpuMemory` and `placementConstraints.nodeTypes` at submission (docs/serving.md): the
pools' nodes read, the rules of gpuctl.domain.sizing applied, a refusal turned into the error a user sees
(file, job, field, fix). Used by gpuctl.service.prechecks, so by `create`, `apply`, their server dry runs
and the REST API alike. Nothing here writes."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import TYPE_CHECKING

from gpuctl.builders import TargetPool
from gpuctl.cluster.reader import Reader
from gpuctl.constants import GPU_TYPE_LABEL_KEYS, Labels
from gpuctl.domain.objects import labels
from gpuctl.domain.pools import node_pool
from gpuctl.domain.sizing import PoolGpus, SizingError, pool_gpus, pool_models, pools_of_types, size, size_any
from gpuctl.quantity import parse_quantity
from gpuctl.service.errors import NotFound, ServiceError

if TYPE_CHECKING:  # annotations only: a read never loads pydantic
    from gpuctl.spec import Document, JobSpec


def pool_nodes(reader: Reader, docs: list[Document], pool: str | None = None) -> dict[str, list[dict]]:
    """Pool -> its nodes (one pool's, or every pool's), with the pools this submission creates or changes
    as their documents make them: the nodes they name, labelled with the pool and the document's GPU type
    (the pool is written before the job, gpuctl.service.lifecycle)."""
    selector = f"{Labels.POOL}={pool}" if pool else Labels.POOL
    by_pool: dict[str, list[dict]] = {}
    for n in reader.list("Node", label_selector=selector):
        by_pool.setdefault(node_pool(n) or "", []).append(n)
    for d in docs:
        spec = d.spec
        if getattr(spec, "kind", "") != "pool" or (pool and spec.pool.name != pool) or spec.pool.clusters:
            continue
        named = []
        for node_name, entry in spec.nodes.items():
            node = reader.get("Node", node_name)
            if node is None:
                continue
            node = copy.deepcopy(node)
            lab = node.setdefault("metadata", {}).setdefault("labels", {})
            lab[Labels.POOL] = spec.pool.name
            if entry.gpu_type:
                lab.update(dict.fromkeys(GPU_TYPE_LABEL_KEYS, entry.gpu_type))
            named.append(node)
        by_pool[spec.pool.name] = named
        for other, nodes in by_pool.items():  # a node the document moves out of its old pool
            if other != spec.pool.name:
                by_pool[other] = [n for n in nodes if n["metadata"]["name"] not in spec.nodes]
    by_pool.pop("", None)
    return by_pool


def _facts(by_pool: dict[str, list[dict]]) -> list[PoolGpus]:
    return [pool_gpus(p, nodes) for p, nodes in sorted(by_pool.items())]


def resolve_node_types(reader: Reader, where: str, spec: JobSpec, docs: list[Document]) -> JobSpec:
    """The job as if it listed the pools of its placementConstraints.nodeTypes: `pool: [P, Q]` (the
    any-pool machinery), one pool as `pool: P`; with a pool list of its own, those of them; with a pool
    named, that pool if its GPUs are listed. NotFound, naming the pools' models, when none is."""
    res = spec.resources
    wanted = list(res.node_types)
    facts = _facts(pool_nodes(reader, docs))
    matching = pools_of_types(wanted, facts)
    allowed = res.pools_allowed
    pools = [p for p in matching if allowed is None or p in allowed]
    if not pools:
        among = "" if allowed is None else f" among resources.pool {', '.join(allowed)}"
        shown = [f for f in facts if allowed is None or f.pool in allowed]
        raise NotFound(
            f"{where}: placementConstraints.nodeTypes: no pool{among} has only GPUs of "
            f"{', '.join(wanted)}; pools: {pool_models(shown)}; list one of those models (a100 is any A100, "
            "a100-80gb one of 80 GB), or set resources.pool"
        )
    return with_pools(spec, pools)


def with_pools(spec: JobSpec, pools: list[str]) -> JobSpec:
    """The job as if its YAML named these pools: `pool: P` for one, `pool: [P, Q]` for more."""
    res = spec.resources
    one = len(pools) == 1
    new = res.model_copy(update={"pool": pools[0], "any_of_pools": []} if one else {"any_of_pools": pools})
    new._node_types = res.node_types
    return spec.model_copy(update={"resources": new})


def _memory(where: str, spec: JobSpec) -> tuple[int, str]:
    text = spec.resources.gpu_memory or "0"
    return int(parse_quantity(text)), text


def _more(spec: JobSpec) -> str:
    """What else a job too big for one node could do: its kind's multi-node spelling."""
    if spec.kind == "training":
        return "or run the job on several nodes (resources.nodes: N, with gpuMemory per node)"
    if spec.kind == "inference":
        return "or run each replica on several nodes (resources.nodes: N, with gpuMemory per node)"
    return ""


def size_pinned(
    reader: Reader, where: str, spec: JobSpec, docs: list[Document], facts: TargetPool
) -> TargetPool:
    """`facts` (the job's one pool) with what gpuMemory gives each pod: a whole-GPU count or one slice."""
    memory, text = _memory(where, spec)
    pool = spec.resources.pool
    nodes = pool_nodes(reader, docs, pool).get(pool, [])
    try:
        sized = size(memory, text, pool_gpus(pool, nodes), spec.resources.gpu, more=_more(spec))
    except SizingError as exc:
        raise ServiceError(f"{where}: resources.gpuMemory: {exc}") from None
    if sized.slice is not None:
        r = sized.slice.resource
        return replace(facts, name=pool, gpu_resource=r, slice_resource=r, sized=sized.text)
    return replace(facts, name=pool, gpus=sized.gpus, sized=sized.text)


def size_any_pool(
    reader: Reader, where: str, spec: JobSpec, docs: list[Document]
) -> tuple[JobSpec, TargetPool]:
    """A job of several pools: one whole-GPU count, and the job narrowed to the pools that hold it."""
    memory, text = _memory(where, spec)
    res = spec.resources
    by_pool = pool_nodes(reader, docs)
    allowed = res.pools_allowed
    if allowed is None:  # any pool of its GPU type: its nodes of that type (the pods' node affinity)
        by_pool = {p: [n for n in ns if _has_type(n, res.gpu_type)] for p, ns in by_pool.items()}
    facts = [f for f in _facts(by_pool) if allowed is None or f.pool in allowed]
    try:
        sized, pools = size_any(memory, text, facts, res.gpu, more=_more(spec))
    except SizingError as exc:
        raise ServiceError(f"{where}: resources.gpuMemory: {exc}") from None
    if pools != sorted(allowed or []):
        spec = with_pools(spec, pools)
    return spec, TargetPool(gpus=sized.gpus, sized=sized.text)


def _has_type(node: dict, gpu_type: str | None) -> bool:
    return any(labels(node).get(k) == gpu_type for k in GPU_TYPE_LABEL_KEYS)
