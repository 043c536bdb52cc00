"""Defragmentation in `gpuctl serve` (leader only): carry out gpuctl.domain.defrag's plans through Kueue.

Off unless `gpuctl serve --defrag POOL[,POOL]` (or `--defrag all`) names pools. Every `interval`
seconds, over serve's watch cache (Nodes, Pods, Workloads, ClusterQueues):

1. **Reactivate** every Workload this moved that Kueue has since evicted (gpuctl.domain.defrag.
   to_reactivate: our marker annotation, `spec.active: false`, Evicted, no quota held): `spec.active`
   back to true and the marker removed in one merge patch. Kueue then requeues it (condition Requeued,
   reason Reactivated) in its place in the queue (its creation time) and places it again, on the node
   the plan left room for. The marker makes this idempotent across restarts and leader changes, and a
   job a user stops later (the same field) is never resumed by this.
2. **Plan** at most one move (gpuctl.domain.defrag.plan_move) and carry it out: each victim's Workload
   gets the annotations runwhere.ai/moved-for (the reason `describe job` shows), runwhere.ai/moved-at
   and the marker, and `spec.active: false`, in one merge patch with the Workload's resourceVersion (a
   Workload that changed since the cache saw it is skipped); then a Normal Event (reason
   GpuctlDefragMove) on the Workload. Kueue's own deactivation does the rest: it evicts the Workload
   (reason Deactivated), suspends the Job, its pods are deleted, its quota released. This is the path
   kueuectl's stop/resume uses; Kueue has no API to evict-and-requeue a Workload from outside (its
   Evicted condition with our own reason is not requeued: jobframework sets Requeued only for Preempted
   and node failures).

Moves are capped per rolling window (`--defrag-moves-per-hour`, all pools together; the window is
`window` seconds, an hour, shortened only by the trace bench's compressed day). Counter
gpuctl_defrag_moves_total{pool} and gpuctl_defrag_last_decision (info) are exported.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gpuctl.cluster import ApiError, path
from gpuctl.constants import (
    DEFRAG_EVENT_REASON,
    DEFRAG_MOVED_ANNOTATION,
    DEFRAG_MOVED_AT_ANNOTATION,
    DEFRAG_MOVED_FOR_TEAM_ANNOTATION,
    DEFRAG_MOVES_PER_HOUR,
    DEFRAG_MOVES_PER_TEAM_PER_HOUR,
    DEFRAG_REACTIVATE_ANNOTATION,
    DEFRAG_SETTLE_SECONDS,
    DEFRAG_WINDOW_SECONDS,
)
from gpuctl.domain.defrag import Plan, inputs_from_objects, moved_at, moved_for_team, plan_move, to_reactivate
from gpuctl.domain.objects import meta, name, namespace, rfc3339
from gpuctl.server.events import post_event
from gpuctl.server.periodic import Periodic

log = logging.getLogger(__name__)

# (nodes, pods, workloads, cluster queues): serve's cache, or plain lists (the trace bench).
Source = Callable[[], tuple[Iterable[Mapping[str, Any]], ...]]


def parse_pools(text: str | None) -> list[str] | None:
    """`--defrag` value -> pools: None = every pool (`all`), [] = off."""
    if not text:
        return []
    if text.strip() == "all":
        return None
    return [p.strip() for p in text.split(",") if p.strip()]


class Defragmenter(Periodic):
    thread_name = "defrag"

    def __init__(
        self,
        cluster: Any,
        source: Source,
        *,
        pools: list[str] | None,
        cap: int = DEFRAG_MOVES_PER_HOUR,
        team_cap: int = DEFRAG_MOVES_PER_TEAM_PER_HOUR,
        settle: float = DEFRAG_SETTLE_SECONDS,
        window: float = DEFRAG_WINDOW_SECONDS,
        interval: float = 5.0,
        leader: Callable[[], bool] | None = None,
        wall: Callable[[], float] = time.time,
        identity: str = "",
    ):
        self.cluster = cluster
        self.source = source
        self.pools = pools
        self.cap = cap
        self.team_cap = team_cap
        self.settle = settle
        self.window = window
        self.interval = interval
        self.leader = leader
        self.wall = wall
        self.identity = identity
        self.moves: dict[str, int] = {}  # pool -> moves carried out (counter)
        self.reactivated = 0
        self._recent: deque[float] = deque()  # when each move was made, within the window
        self._recent_teams: deque[tuple[float, str]] = deque()  # (when, the team it was made for)
        self.last_decision = ""
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- one step
    def moved_in_window(self, now: float, workloads: Iterable[Mapping[str, Any]] = ()) -> int:
        """Moves within the window: this replica's, or, if more, those the Workloads' runwhere.ai/moved-at
        says (an earlier leader's moves count too)."""
        while self._recent and self._recent[0] <= now - self.window:
            self._recent.popleft()
        seen = sum(1 for w in workloads if (moved_at(w) or 0.0) > now - self.window)
        return max(len(self._recent), seen)

    def moved_for_team(self, now: float, workloads: Iterable[Mapping[str, Any]]) -> dict[str, int]:
        """Moves within the window per team they were made for: this replica's, or, if more, what the
        Workloads' annotations say (an earlier leader's moves)."""
        while self._recent_teams and self._recent_teams[0][0] <= now - self.window:
            self._recent_teams.popleft()
        mine: dict[str, int] = {}
        for _, team in self._recent_teams:
            mine[team] = mine.get(team, 0) + 1
        seen = moved_for_team(workloads, now - self.window)
        return {t: max(mine.get(t, 0), seen.get(t, 0)) for t in set(mine) | set(seen)}

    def step(self) -> Plan | None:
        """Reactivate what a move evicted, then plan and carry out at most one move."""
        if self.leader is not None and not self.leader():
            return None
        nodes, pods, workloads, cqs = (list(x) for x in self.source())
        for wl in workloads:
            if to_reactivate(wl):
                self._reactivate(wl)
        now = self.wall()
        inputs = inputs_from_objects(nodes, pods, workloads, cqs)
        plan, why = plan_move(
            inputs,
            pools=self.pools,
            now=now,
            settle=self.settle,
            moved_in_window=self.moved_in_window(now, workloads),
            cap=self.cap,
            moved_for_team=self.moved_for_team(now, workloads),
            team_cap=self.team_cap,
            window=self.window,
        )
        self.last_decision = why or "moved"
        if plan is None:
            return None
        by_key = {f"{namespace(w)}/{name(w)}": w for w in workloads}
        done = 0
        for v in plan.victims:
            wl = by_key.get(v.key)
            if wl is not None and self._deactivate(wl, plan, now):
                done += 1
                self._recent.append(now)
                self._recent_teams.append((now, plan.waiter.team))
                self.moves[plan.pool] = self.moves.get(plan.pool, 0) + 1
        log.info(
            "defrag: moved %d of %d job(s) off %s for %s: %s",
            done,
            len(plan.victims),
            plan.node,
            plan.waiter.job,
            ", ".join(v.job for v in plan.victims),
        )
        return plan

    def _deactivate(self, wl: Mapping[str, Any], plan: Plan, now: float) -> bool:
        notes = {
            DEFRAG_MOVED_ANNOTATION: plan.reason(),
            DEFRAG_MOVED_AT_ANNOTATION: rfc3339(now),
            DEFRAG_MOVED_FOR_TEAM_ANNOTATION: plan.waiter.team,
        }
        return deactivate(self.cluster, wl, notes, DEFRAG_EVENT_REASON, identity=self.identity, now=now)

    def _reactivate(self, wl: Mapping[str, Any]) -> None:
        body = {"metadata": {"annotations": {DEFRAG_REACTIVATE_ANNOTATION: None}}, "spec": {"active": True}}
        try:
            self.cluster.merge_patch(path("Workload", name(wl), namespace(wl)), body)
            self.reactivated += 1
        except ApiError as e:
            log.warning("defrag: could not reactivate %s/%s: %s", namespace(wl), name(wl), e)

    # ---------------------------------------------------------------- metrics (the loop: server.periodic)
    def collect(self) -> Iterator[Any]:
        """A prometheus_client collector: `gpuctl serve` registers it when defragmentation is on."""
        return self.own_families()

    def own_families(self) -> Iterator[Any]:
        moves = CounterMetricFamily(
            "gpuctl_defrag_moves",
            "Jobs moved (deactivated, then requeued by Kueue) to free a node for a waiting job, by pool",
            labels=["pool"],
        )
        for pool in sorted(set(self.pools or []) | set(self.moves)):
            moves.add_metric([pool], self.moves.get(pool, 0))
        yield moves
        window = GaugeMetricFamily(
            "gpuctl_defrag_moves_in_window",
            "Jobs moved in the last hour, against the cap (gpuctl serve --defrag-moves-per-hour)",
            labels=["cap"],
        )
        window.add_metric([str(self.cap)], self.moved_in_window(self.wall()))
        yield window


def deactivate(
    cluster: Any, wl: Mapping[str, Any], notes: Mapping[str, str], reason: str, *, identity: str, now: float
) -> bool:
    """Move a Workload: `notes` (DEFRAG_MOVED_ANNOTATION's text is the Event's message) and the reactivate
    marker, `spec.active: false`, in one merge patch with its resourceVersion; then a Normal Event. Kueue
    evicts it and the Defragmenter's step reactivates it (gpuctl.domain.defrag.to_reactivate)."""
    body = {
        "metadata": {
            "resourceVersion": meta(wl).get("resourceVersion"),
            "annotations": {**notes, DEFRAG_REACTIVATE_ANNOTATION: "true"},
        },
        "spec": {"active": False},
    }
    try:
        cluster.merge_patch(path("Workload", name(wl), namespace(wl)), body)
    except ApiError as e:
        log.warning("could not deactivate %s/%s: %s", namespace(wl), name(wl), e)
        return False
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta(wl)}
    message = notes.get(DEFRAG_MOVED_ANNOTATION, "")
    try:
        post_event(cluster, obj, type_="Normal", reason=reason, message=message, identity=identity, now=now)
    except Exception as e:  # best effort: the annotation is the record
        log.warning("could not post an Event on %s/%s: %s", namespace(wl), name(wl), e)
    return True


def cache_source(cache: Any) -> Source:
    """Serve's watch cache as a Source."""

    def read() -> tuple[list, list, list, list]:
        return (
            cache["Node"].list(),
            cache["Pod"].list(),
            cache["Workload"].list(),
            cache["ClusterQueue"].list(),
        )

    return read


def list_source(cluster: Any) -> Source:
    """Plain lists from the API server (the trace bench, tests without serve)."""

    def read() -> tuple[list, list, list, list]:
        return (
            cluster.list(path("Node")),
            cluster.list(path("Pod")),
            cluster.list(path("Workload")),
            cluster.list(path("ClusterQueue")),
        )

    return read
