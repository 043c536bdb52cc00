"""Inputs of the Kueue mapping: what a pool holds and what a team is given."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PoolCapacity:
    """A pool and the sum of its Ready nodes' allocatable resources (quantities as strings)."""

    name: str
    gpu: int = 0
    cpu: str = "0"
    memory: str = "0"
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PoolGuarantee:
    """Resources reserved for one team in one pool; Kueue reclaims them from borrowers."""

    gpu: int = 0
    cpu: str = "0"
    memory: str = "0"


@dataclass(frozen=True)
class TeamQuota:
    """A team namespace's quota. None means unlimited."""

    namespace: str
    quota_name: str
    gpu: int | None = None
    cpu: str | None = None
    memory: str | None = None
    # GPUs beyond `gpu` the team may borrow while others are idle; None = no limit, 0 = hard cap.
    borrowing_limit: int | None = None
    pools: dict[str, PoolGuarantee] = field(default_factory=dict)
    description: str | None = None
