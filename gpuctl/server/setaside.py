"""No starvation for multi-node jobs in `gpuctl serve --defrag POOLS` (leader only): carry out
gpuctl.domain.setaside's plans (docs/distributed.md, "No starvation").

Every `interval` seconds, over serve's watch cache (Nodes, Pods, Workloads, ClusterQueues, flavors): nodes
to hold get the taint runwhere.ai/set-aside=<gang namespace>:NoSchedule and the annotation
runwhere.ai/set-aside-for=<namespace>/<job>; nodes to give back lose both. Each write is a merge patch of
the node carrying the resourceVersion it was computed from (a concurrent change of the node, such as a
cordon or another taint, fails it with 409 and the next step recomputes), and touches only gpuctl's own
taint. A Workload Kueue admitted onto a held node whose pod cannot start there (gpuctl.domain.setaside.
stranded) is requeued the way defragmentation moves a job (gpuctl.server.defrag.deactivate: deactivated
with the reactivate marker; the Defragmenter, which runs beside this under the same `--defrag` flag,
reactivates it once Kueue has evicted it). Gauge gpuctl_set_aside_nodes{pool} is exported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from gpuctl.cluster import ApiError, path
from gpuctl.constants import (
    DEFRAG_MOVED_ANNOTATION,
    SET_ASIDE_FOR_ANNOTATION,
    SET_ASIDE_REQUEUE_REASON,
    SET_ASIDE_SETTLE_SECONDS,
    SET_ASIDE_TAINT_KEY,
)
from gpuctl.domain.gang import pool_topology
from gpuctl.domain.objects import meta, name, namespace
from gpuctl.domain.pools import node_pool
from gpuctl.domain.setaside import Plan, plan_set_aside
from gpuctl.server.defrag import deactivate
from gpuctl.server.periodic import Periodic

log = logging.getLogger(__name__)

# (nodes, pods, workloads, cluster queues, resource flavors)
Source = Callable[[], tuple[Iterable[Mapping[str, Any]], ...]]


def _taints_without(node: Mapping[str, Any]) -> list[dict]:
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != SET_ASIDE_TAINT_KEY]


class SetAside(Periodic):
    thread_name = "set-aside"

    def __init__(
        self,
        cluster: Any,
        source: Source,
        *,
        pools: list[str] | None,
        settle: float = SET_ASIDE_SETTLE_SECONDS,
        interval: float = 5.0,
        leader: Callable[[], bool] | None = None,
        wall: Callable[[], float] = time.time,
        identity: str = "",
    ):
        self.cluster, self.source, self.pools, self.identity = cluster, source, pools, identity
        self.settle, self.interval, self.leader, self.wall = settle, interval, leader, wall
        self.held: dict[str, int] = {}  # pool -> nodes set aside now
        self.last: dict[str, str] = {}

    def step(self) -> Plan | None:
        if self.leader is not None and not self.leader():
            return None
        nodes, pods, workloads, cqs, flavors = (list(x) for x in self.source())
        levels = {name(f): pool_topology(f) for f in flavors}
        plan = plan_set_aside(
            nodes, pods, workloads, cqs, levels, pools=self.pools, now=self.wall(), settle=self.settle
        )
        by_name = {name(n): n for n in nodes}
        for node in plan.release:
            self._patch(by_name[node], None)
        for node, gang in sorted(plan.hold.items()):
            current = by_name[node]
            if (meta(current).get("annotations") or {}).get(SET_ASIDE_FOR_ANNOTATION) != gang or not any(
                t.get("key") == SET_ASIDE_TAINT_KEY for t in (current.get("spec") or {}).get("taints") or []
            ):
                self._patch(current, gang)
        by_key = {f"{namespace(w)}/{name(w)}": w for w in workloads}
        for key, why in sorted(plan.requeue.items()):
            notes = {DEFRAG_MOVED_ANNOTATION: why}
            if deactivate(
                self.cluster,
                by_key[key],
                notes,
                SET_ASIDE_REQUEUE_REASON,
                identity=self.identity,
                now=self.wall(),
            ):
                log.info("set-aside: %s %s", key, why)
        self.held = {}
        for node in plan.hold:
            pool = node_pool(by_name[node]) or ""
            self.held[pool] = self.held.get(pool, 0) + 1
        for pool, why in plan.why.items():
            if self.last.get(pool) != why:
                log.info("set-aside: %s: %s", pool, why)
        self.last = dict(plan.why)
        return plan

    def _patch(self, node: Mapping[str, Any], gang: str | None) -> None:
        """Set the node aside for `gang` (None: give it back): gpuctl's taint and annotation only."""
        taints = _taints_without(node)
        if gang is not None:
            taints.append({"key": SET_ASIDE_TAINT_KEY, "value": gang.split("/")[0], "effect": "NoSchedule"})
        body = {
            "metadata": {
                "resourceVersion": meta(node).get("resourceVersion"),
                "annotations": {SET_ASIDE_FOR_ANNOTATION: gang},
            },
            "spec": {"taints": taints or None},
        }
        try:
            self.cluster.merge_patch(path("Node", name(node)), body)
        except ApiError as e:  # 409: changed since read; the next step recomputes
            log.warning("set-aside: could not patch node %s: %s", name(node), e)

    # ---------------------------------------------------------------- metrics (the loop: server.periodic)
    def collect(self) -> Iterator[Any]:
        held = GaugeMetricFamily(
            "gpuctl_set_aside_nodes",
            "Nodes set aside for the oldest waiting multi-node job, by pool",
            labels=["pool"],
        )
        for pool in sorted(set(self.pools or []) | set(self.held)):
            held.add_metric([pool], self.held.get(pool, 0))
        yield held


def cache_source(cache: Any) -> Source:
    """serve's watch cache as the step's input."""

    def read() -> tuple[Iterable[Mapping[str, Any]], ...]:
        return tuple(cache[k].list() for k in ("Node", "Pod", "Workload", "ClusterQueue", "ResourceFlavor"))

    return read
