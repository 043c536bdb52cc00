"""Inputs of the Kueue mapping: what a pool holds and what a team is given."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

# NamedTuples, not dataclasses: `gpuctl get` reads these and `import dataclasses` alone costs a read ~12 ms
# (it imports inspect, ast and dis); tests/unit/test_cli_startup.py keeps the reads without it.
_NO_POOLS: Mapping[str, PoolGuarantee] = MappingProxyType({})


class PoolCapacity(NamedTuple):
    """A pool and the sum of its Ready nodes' allocatable resources (quantities as strings)."""

    name: str
    gpu: int = 0
    cpu: str = "0"
    memory: str = "0"
    nodes: tuple[str, ...] = ()


class PoolGuarantee(NamedTuple):
    """Resources reserved for one team in one pool; Kueue reclaims them from borrowers."""

    gpu: int = 0
    cpu: str = "0"
    memory: str = "0"


class TeamQuota(NamedTuple):
    """A team namespace's quota. None means unlimited."""

    namespace: str
    quota_name: str
    gpu: int | None = None
    cpu: str | None = None
    memory: str | None = None
    # GPUs beyond `gpu` the team may borrow while others are idle; None = no limit, 0 = hard cap.
    borrowing_limit: int | None = None
    pools: Mapping[str, PoolGuarantee] = _NO_POOLS  # read-only when not given
    description: str | None = None
