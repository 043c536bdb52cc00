"""`node-pool`: a Node's `runwhere.ai/pool` label names a pool that exists (and `unknown-key` on Nodes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.rule_names import NODE_POOL
from admission.state import ClusterState
from admission.validators.hints import did_you_mean, names
from admission.validators.labels import check_unknown_keys
from admission.verdict import Violation
from gpuctl.constants import Labels
from gpuctl.domain.shape import obj_at, strmap_at

__all__ = ["check_node"]


def check_node(obj: Mapping[str, Any], where: str, state: ClusterState) -> list[Violation]:
    meta = obj_at(obj, "metadata", where)
    labels = strmap_at(meta, "labels", f"{where}.metadata")
    out = check_unknown_keys(
        (
            ("metadata.labels", labels),
            ("metadata.annotations", strmap_at(meta, "annotations", f"{where}.metadata")),
        )
    )
    pool = labels.get(Labels.POOL)
    if pool is None or pool in state.pools:
        return out
    return [
        *out,
        Violation(
            NODE_POOL,
            f"label {Labels.POOL}={pool} names a pool that does not exist{did_you_mean(pool, state.pools)}",
            f"create the pool first (gpuctl create -f pool.yaml) or use an existing one "
            f"({names(state.pools)})",
            f"{NODE_POOL}={pool}",
        ),
    ]
