"""`resources.gpuMemory` and `placementConstraints.nodeTypes` (docs/serving.md): how many GPUs of a
pool, or which slice of one, hold the memory a job asks for, and which pools have the GPU models a job
lists. Pure: over plain Node dicts; gpuctl.service.sizing reads the nodes, and `gpuctl create`, its
dry runs and the REST API all size through `size` (one rule).

**The rule.** Per pod (every amount under `resources` is per pod, per node of a multi-node job):
1. On a pool that cuts its GPUs into MIG slices, one slice when one holds the memory: the slice a
   `gpu-share` of that size gets (gpuctl.domain.sharing.choose_slice, the same rule), unless a GPU count is
   given.
2. Else whole GPUs: the smallest count whose memory (per GPU: the smallest of the pool's GPU nodes',
   gpuctl.domain.gpumodels) holds it. Time-sliced GPUs (no memory of their own) are never counted.
3. With `resources.gpu: N` too, N GPUs must hold it (fewer is refused); N is what the pod gets (more GPUs
   than the memory needs is the user's choice, e.g. for throughput).
4. Refused, naming the fix, when no node of the pool has that many GPUs, or the memory of the pool's
   GPUs is unknown. Nothing is created.

A job that may run in several pools (a pool list, a GPU type, nodeTypes) gets one count, the largest any
of them needs, and only the pools whose nodes hold that many; whole GPUs only (a slice is one pool's
resource).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.domain.gpumodels import GIB, NodeGpu, ambiguous_name, names_model, node_gpu
from gpuctl.domain.objects import labels
from gpuctl.domain.sharing import (
    Mode,
    PoolSharing,
    ShareError,
    Slice,
    choose_slice,
    node_sharing,
    pool_sharing,
)


class SizingError(ValueError):
    """gpuMemory or nodeTypes that cannot be met: `message` says why, `fix` what to change."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(f"{message}; {fix}")
        self.message = message
        self.fix = fix


def gib(n: int) -> str:
    """Bytes as GiB for people: 80, 22.5."""
    v = n / GIB
    return f"{v:.0f}" if abs(v - round(v)) < 0.05 else f"{v:.1f}"


@dataclass(frozen=True)
class PoolGpus:
    """What a pool's nodes say about its GPUs (`pool_gpus`)."""

    pool: str
    gpus: tuple[NodeGpu, ...]  # one per node with GPUs (whole or slices)
    per_node: int  # the most whole GPUs one node has
    sharing: PoolSharing
    unknown: str = ""  # why the memory is unknown (a model name of several sizes), else ""

    @property
    def memory(self) -> int | None:
        """Memory of one GPU: the smallest of its GPU nodes' (what every node guarantees); None when a
        node's is unknown or the pool has no GPU."""
        sizes = [g.memory for g in self.gpus]
        return min(sizes) if sizes and None not in sizes else None  # type: ignore[type-var]

    @property
    def model(self) -> str:
        names = sorted({g.model for g in self.gpus if g.model})
        return "/".join(names) or "unknown"


def pool_gpus(pool: str, nodes: Sequence[Mapping[str, Any]]) -> PoolGpus:
    """A pool's GPUs from its nodes (every node labelled into it: a NotReady node may come back)."""
    shares = [(n, node_sharing(n)) for n in nodes]
    with_gpus = [(n, s) for n, s in shares if s.whole or s.slices]
    unknown = [ambiguous_name(labels(n)) for n, _ in with_gpus if node_gpu(labels(n)).memory is None]
    return PoolGpus(
        pool=pool,
        gpus=tuple(node_gpu(labels(n)) for n, _ in with_gpus),
        per_node=max((s.whole for _, s in with_gpus), default=0),
        sharing=pool_sharing([n for n, _ in with_gpus]),
        unknown=next((u for u in unknown if u), ""),
    )


@dataclass(frozen=True)
class _Asked:
    """gpuMemory as a gpu-share of that memory (gpuctl.domain.sharing.ShareAsked): the one slice rule."""

    text: str
    profile: str | None
    memory: int | None


@dataclass(frozen=True)
class Sizing:
    """What gpuMemory gives each pod: `gpus` whole GPUs, or one `slice` (then gpus is 0)."""

    gpus: int
    slice: Slice | None
    text: str  # for people: "2 GPUs of 80 GiB (A100-80GB)", "MIG 2g.20gb"


UNKNOWN_FIX = (
    "label the pool's nodes with their GPU model and memory (kind: pool, nodes: {NODE: {gpu-type: "
    "A100-80GB}}; NVIDIA's GPU feature discovery sets nvidia.com/gpu.memory), or ask for GPUs by count "
    "(resources.gpu: N) instead of gpuMemory"
)


def size(
    memory: int, shown: str, facts: PoolGpus, gpus: int = 0, *, slices: bool = True, more: str = ""
) -> Sizing:
    """What holds `memory` bytes (written `shown`) on this pool, by the module docstring's rule; `gpus`:
    the count the job gives too (0: none). `more`: what else the job could do when it is too big (a
    multi-node spelling of its kind). Raises SizingError."""
    pool = facts.pool
    if not facts.gpus:
        raise SizingError(f"pool {pool} has no GPUs", "use a pool with GPUs (resources.pool)")
    mode = facts.sharing.mode
    if slices and not gpus and mode.is_mig:
        try:
            cut = choose_slice(
                _Asked(shown, None, memory), pool, mode, facts.sharing.model, facts.sharing.profiles
            )
        except ShareError as exc:
            if not facts.per_node:
                raise SizingError(str(exc), "use a pool with whole GPUs (resources.pool)") from None
        else:
            return Sizing(0, cut, f"MIG {cut.profile}")
    if not facts.per_node or (mode in (Mode.TIME_SLICING, Mode.MPS) and "shared" not in facts.sharing.slices):
        raise SizingError(
            f"pool {pool} hands out no whole GPUs with memory of their own ({mode.value})",
            "use a pool with whole GPUs (resources.pool), or ask for a slice by name (resources.gpu-share)",
        )
    per_gpu = facts.memory
    if per_gpu is None:
        why = f" ({facts.unknown})" if facts.unknown else ""
        raise SizingError(
            f"the memory of pool {pool}'s GPUs ({facts.model}) is unknown{why}: its nodes carry no "
            "nvidia.com/gpu.memory label and no GPU model of one size in nvidia.com/gpu.product or "
            "runwhere.ai/gpu-type",
            UNKNOWN_FIX,
        )
    need = max(1, math.ceil(memory / per_gpu))
    each = f"{gib(per_gpu)} GiB ({facts.model})"
    if gpus and gpus < need:
        raise SizingError(
            f"gpu: {gpus} GPU(s) of {each} hold {gib(gpus * per_gpu)} GiB, less than {shown}",
            f"set gpu: {need} or remove gpu (gpuMemory then asks for {need})",
        )
    count = gpus or need
    if count > facts.per_node:
        raise SizingError(
            f"{shown} needs {count} GPUs of {each} per pod; the largest node of pool {pool} has "
            f"{facts.per_node}",
            "lower gpuMemory, or use a pool with larger GPUs or more GPUs per node"
            + (f", {more}" if more else ""),
        )
    return Sizing(count, None, f"{count} GPU{'s' if count > 1 else ''} of {each}")


def size_any(
    memory: int, shown: str, pools: Sequence[PoolGpus], gpus: int = 0, *, more: str = ""
) -> tuple[Sizing, list[str]]:
    """`size` for a job that may run in several pools: one whole-GPU count (the largest any needs, at
    least `gpus`) and the pools whose nodes hold it. Raises SizingError when none does."""
    fits: list[tuple[PoolGpus, Sizing]] = []
    why: list[str] = []
    for p in pools:
        try:
            fits.append((p, size(memory, shown, p, gpus, slices=False, more=more)))
        except SizingError as exc:
            why.append(exc.message)
    count = max((s.gpus for _, s in fits), default=0)
    kept = [(p, s) for p, s in fits if count <= p.per_node]
    if not kept:
        raise SizingError(
            "no pool it may run in holds it: " + "; ".join(why or [f"{count} GPUs per pod on no node"]),
            "lower gpuMemory or allow a pool with larger GPUs" + (f", {more}" if more else ""),
        )
    per_gpu = min(p.memory or 0 for p, _ in kept)
    models = "/".join(sorted({p.model for p, _ in kept}))
    text = f"{count} GPU{'s' if count > 1 else ''} of at least {gib(per_gpu)} GiB ({models})"
    return Sizing(count, None, text), sorted(p.pool for p, _ in kept)


def pools_of_types(node_types: Sequence[str], pools: Sequence[PoolGpus]) -> list[str]:
    """The pools whose GPU model placementConstraints.nodeTypes lists: every node with GPUs in the pool
    has a listed model (a pool of mixed models qualifies only if each of them is listed), sorted."""
    return sorted(
        p.pool for p in pools if p.gpus and all(any(names_model(t, g) for t in node_types) for g in p.gpus)
    )


def pool_models(pools: Sequence[PoolGpus]) -> str:
    """ "training-pool (A100-80GB), inference-pool (A10)": what a nodeTypes refusal lists."""
    return ", ".join(f"{p.pool} ({p.model})" for p in pools if p.gpus) or "no pool has GPUs"
