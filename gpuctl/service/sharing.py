"""`resources.gpu-share`: which slice of a GPU a job gets on its pool, read from the pool's nodes.

The rules are gpuctl.domain.sharing's (pure); this module reads the nodes and turns a refusal into the
error a user sees (file, job, field, fix). docs/sharing.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.builders import TargetPool
from gpuctl.cluster.reader import Reader
from gpuctl.constants import Labels
from gpuctl.domain.pools import pools_sharing
from gpuctl.domain.sharing import Mode, PoolSharing, ShareError, choose_slice
from gpuctl.service.errors import ServiceError

if TYPE_CHECKING:
    from gpuctl.spec.share import GpuShare


def share_facts(reader: Reader, where: str, pool: str, share: GpuShare) -> TargetPool:
    """The TargetPool that makes a job's `gpu-share` one slice on `pool`: the smallest MIG profile of the
    pool's GPU model holding the memory asked for (or the profile named), or one time-slicing / MPS
    replica. Refused, naming the fix, on a pool that does not share its GPUs or lacks the profile. The
    pool's sharing is its counted nodes' (gpuctl.domain.pools.pools_sharing), as `get pools` shows it."""
    nodes = reader.list("Node", label_selector=f"{Labels.POOL}={pool}")
    ps = pools_sharing(nodes).get(pool, PoolSharing())
    try:
        chosen = choose_slice(share, pool, ps.mode, ps.model, ps.profiles)
    except ShareError as exc:
        fix = ""
        if ps.mode is Mode.NONE:
            every = pools_sharing(reader.list("Node", label_selector=Labels.POOL))
            sharing = [p for p, s in every.items() if s.mode is not Mode.NONE and s.slices]
            fix = (
                f"; pools that share GPUs: {', '.join(sharing)} (set resources.pool to one of them)"
                if sharing
                else "; no pool shares GPUs (docs/sharing.md: how an admin turns on MIG or time-slicing)"
            )
            fix += ", or ask for whole GPUs (gpu: N) without gpu-share"
        raise ServiceError(f"{where}: resources.gpu-share: {exc}{fix}") from None
    return TargetPool(name=pool, gpu_resource=chosen.resource, slice_resource=chosen.resource)
