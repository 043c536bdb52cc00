"""`kind: pool` (earlier spelling `resource`): a named set of nodes, maybe in worker clusters."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from gpuctl.spec.fields import (
    DnsLabel,
    DnsLabelKey,
    KindModel,
    LabelValue,
    NodeName,
    SpecModel,
    Text,
    aliases,
    none_to_empty_dict_values,
)


class PoolCluster(SpecModel):
    """One `pool.clusters` entry (issue 24): a worker cluster the pool's nodes are in. `kubeconfig` is the
    file (relative to the YAML file's directory) whose credential the manager's Kueue uses there; gpuctl
    stores it in the manager's Secret kueue-system/gpuctl-cluster-<cluster>. Left out: that Secret exists."""

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


class PoolSpec(KindModel):
    """`kind: pool` (earlier spelling `resource`): a named set of nodes."""

    kind: Literal["pool"] = "pool"
    pool: PoolMeta
    nodes: Annotated[dict[NodeName, PoolNode], BeforeValidator(none_to_empty_dict_values)] = {}
