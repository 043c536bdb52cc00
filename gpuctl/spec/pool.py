"""`kind: pool` (earlier spelling `resource`): a named set of nodes, maybe in worker clusters."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator

from gpuctl.constants import HOSTNAME_LABEL, MAX_TOPOLOGY_LEVELS
from gpuctl.spec.fields import (
    DnsLabel,
    DnsLabelKey,
    KindModel,
    LabelValue,
    NodeName,
    SpecModel,
    Text,
    aliases,
    fail,
    none_to_empty_dict_values,
    show,
)
from gpuctl.spec.idle import IdleSpec
from gpuctl.spec.names import is_label_key


class PoolCluster(SpecModel):
    """One `pool.clusters` entry (docs/multicluster.md): a worker cluster the pool's nodes are in.
    `kubeconfig` is the file (relative to the YAML file's directory) whose credential the manager's Kueue uses
    there; gpuctl stores it in the manager's Secret kueue-system/gpuctl-cluster-<cluster>. Left out: that
    Secret exists."""

    kubeconfig: str | None = None


def _cluster_shorthand(value: Any) -> Any:
    """`cluster: worker-a` and `clusters: [worker-a, worker-b]` are shorthand for `{worker-a: {}, ...}`."""
    if isinstance(value, str):
        return {value: {}}
    if isinstance(value, list):
        return {str(v): {} for v in value}
    if isinstance(value, dict):
        return {k: ({} if v is None else v) for k, v in value.items()}
    return value


class PoolMeta(SpecModel):
    """`pool:` — a pool's identity; `name` is the value of the nodes' `runwhere.ai/pool` label.
    `clusters` (or `cluster`): the worker clusters its nodes are in, when the cluster gpuctl talks to is a
    MultiKueue manager (docs/multicluster.md); none: the nodes are in this cluster."""

    name: DnsLabel
    description: Text | None = None
    clusters: Annotated[dict[DnsLabelKey, PoolCluster], BeforeValidator(_cluster_shorthand)] = Field(
        {}, validation_alias=aliases("clusters", "cluster")
    )


class PoolNode(SpecModel):
    """One `nodes:` entry; an empty GPU type is allowed (CPU nodes)."""

    gpu_type: LabelValue = Field("", validation_alias=aliases("gpuType", "gpu_type", "gpu-type"))


_TOPOLOGY_FIX = (
    "list the node-label keys of the pool's network levels, outermost first, e.g. "
    "topology: [example.com/block, example.com/rack] (the node itself is always the last level)"
)


def _one_or_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


class PoolSpec(KindModel):
    """`kind: pool` (earlier spelling `resource`): a named set of nodes. `topology`: the node labels of its
    network levels above the node, outermost first (`[example.com/block, example.com/rack]`); the pool's
    Kueue Topology gets them above kubernetes.io/hostname, and a multi-node job is placed inside the
    smallest level that holds it (docs/distributed.md). Left out: the well-known levels its nodes carry
    (gpuctl.domain.gang.WELL_KNOWN_TOPOLOGIES), else none."""

    kind: Literal["pool"] = "pool"
    pool: PoolMeta
    nodes: Annotated[dict[NodeName, PoolNode], BeforeValidator(none_to_empty_dict_values)] = {}
    topology: Annotated[list[str], BeforeValidator(_one_or_list)] | None = None
    # When its jobs count as idle and what `gpuctl serve --idle` does then (docs/utilisation.md); None: off.
    idle: IdleSpec | None = None

    @field_validator("topology")
    @classmethod
    def _levels(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        for i, level in enumerate(value):
            if not is_label_key(level):
                raise fail("topology", f"{show(level)} is not a node label key", _TOPOLOGY_FIX, at=f"[{i}]")
            if level == HOSTNAME_LABEL:
                raise fail(
                    "topology",
                    f"{HOSTNAME_LABEL} is always the lowest level",
                    "remove it; list only the levels above the node",
                    at=f"[{i}]",
                )
            if level in value[:i]:
                raise fail("topology", f"{level} is listed twice", "list each level once", at=f"[{i}]")
        if len(value) > MAX_TOPOLOGY_LEVELS:
            raise fail(
                "topology",
                f"{len(value)} levels; Kueue takes at most {MAX_TOPOLOGY_LEVELS} above the node",
                _TOPOLOGY_FIX,
            )
        return value
