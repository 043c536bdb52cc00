"""No starvation for multi-node jobs in `gpuctl serve --defrag POOLS` (leader only): carry out
gpuctl.domain.setaside's plans (docs/distributed.md, "No starvation").

Every `interval` seconds, over serve's watch cache (Nodes, Pods, Workloads, ClusterQueues, flavors): nodes
to hold get the gang's taints (runwhere.ai/set-aside=<namespace>, runwhere.ai/set-aside-job=<job>, both
NoSchedule: gpuctl.domain.gang.set_aside_taints) and the annotations runwhere.ai/set-aside-for=<namespace>/
<job> and set-aside-since=<when it began>; nodes to give back lose all of them. Each write is a merge patch
of the node carrying the resourceVersion it was computed from (a concurrent change of the node, such as a
cordon or another taint, fails it with 409 and the next step recomputes), and touches only gpuctl's own
taints. A new set-aside and its end are said on the gang's Workload: a Normal Event (GpuctlSetAside,
GpuctlSetAsideEnded; the audit trail records both) and, for the end, the annotation
runwhere.ai/set-aside-ended ("<when> <why>": no set-aside again for the cooldown; `describe job` shows it).
A Workload Kueue admitted onto a held node whose pod cannot start there (gpuctl.domain.setaside.stranded),
or whose pod squats a gang's nodes (squatters), is requeued the way defragmentation moves a job
(gpuctl.server.defrag.deactivate: deactivated with the reactivate marker; the Defragmenter, which runs
beside this under the same `--defrag` flag, reactivates it once Kueue has evicted it). Gauge
gpuctl_set_aside_nodes{pool} is exported.

A bound gpuctl keeps (docs/queueing.md), with `--hold-bounds`: each step also records on every waiting
one-pod Job of its pools the first start bound it gets (runwhere.ai/starts-by, gpuctl.domain.promise), and
the plan holds a node for such a job from `lead` seconds before that bound, and waiting Jobs whose maxRuntime
ends before that bound get the held job's tolerations (backfill, gpuctl.domain.backfill), withdrawn from a
still-suspended Job once it would no longer end in time.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from gpuctl.cluster import ApiError, path
from gpuctl.constants import (
    DEFRAG_MOVED_ANNOTATION,
    ESTIMATE_STEP_SLACK_SECONDS,
    KUEUE_API_VERSION,
    SET_ASIDE_BOUND_LEAD_SECONDS,
    SET_ASIDE_COOLDOWN_SECONDS,
    SET_ASIDE_ENDED_ANNOTATION,
    SET_ASIDE_ENDED_REASON,
    SET_ASIDE_EVENT_REASON,
    SET_ASIDE_FOR_ANNOTATION,
    SET_ASIDE_IDLE_SECONDS,
    SET_ASIDE_MAX_SECONDS,
    SET_ASIDE_REQUEUE_REASON,
    SET_ASIDE_SETTLE_SECONDS,
    SET_ASIDE_SINCE_ANNOTATION,
    SET_ASIDE_TAINT_KEYS,
    STARTS_BY_ANNOTATION,
)
from gpuctl.domain.backfill import plan_backfill
from gpuctl.domain.gang import (
    foreign_set_aside_tolerations,
    pool_topology,
    set_aside_taints,
    set_aside_tolerations,
)
from gpuctl.domain.objects import annotations, meta, name, namespace, rfc3339
from gpuctl.domain.pools import node_pool
from gpuctl.domain.promise import new_promises
from gpuctl.domain.setaside import Plan, ended_note, plan_set_aside
from gpuctl.server.defrag import deactivate
from gpuctl.server.events import post_event
from gpuctl.server.periodic import Periodic

log = logging.getLogger(__name__)

# (nodes, pods, workloads, cluster queues, resource flavors)
Source = Callable[[], tuple[Iterable[Mapping[str, Any]], ...]]


def _taints_without(node: Mapping[str, Any]) -> list[dict]:
    return [
        t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") not in SET_ASIDE_TAINT_KEYS
    ]


def _held_as_planned(node: Mapping[str, Any], gang: str) -> bool:
    """The node already carries gang's set-aside: its taints (both, exactly), annotations and start."""
    notes = annotations(node)
    ours = [
        {k: t.get(k) or "" for k in ("key", "value", "effect")}
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("key") in SET_ASIDE_TAINT_KEYS
    ]
    return (
        notes.get(SET_ASIDE_FOR_ANNOTATION) == gang
        and bool(notes.get(SET_ASIDE_SINCE_ANNOTATION))
        and sorted(ours, key=str) == sorted(set_aside_taints(gang), key=str)
    )


class SetAside(Periodic):
    thread_name = "set-aside"

    def __init__(
        self,
        cluster: Any,
        source: Source,
        *,
        pools: list[str] | None,
        settle: float = SET_ASIDE_SETTLE_SECONDS,
        idle: float = SET_ASIDE_IDLE_SECONDS,
        max_hold: float = SET_ASIDE_MAX_SECONDS,
        cooldown: float = SET_ASIDE_COOLDOWN_SECONDS,
        interval: float = 5.0,
        leader: Callable[[], bool] | None = None,
        wall: Callable[[], float] = time.time,
        identity: str = "",
        lead: float = SET_ASIDE_BOUND_LEAD_SECONDS,
        bounds: bool = False,
        slack: float = ESTIMATE_STEP_SLACK_SECONDS,
        cohort: Callable[[], Mapping[str, Any] | None] = lambda: None,
    ):
        self.cluster, self.source, self.pools, self.identity = cluster, source, pools, identity
        self.settle, self.interval, self.leader, self.wall = settle, interval, leader, wall
        self.idle, self.max_hold, self.cooldown = idle, max_hold, cooldown
        self.lead, self.bounds, self.slack, self.cohort = lead, bounds, slack, cohort
        self.held: dict[str, int] = {}  # pool -> nodes set aside now
        self.last: dict[str, str] = {}
        self.idle_since: dict[str, float] = {}  # held gang -> since when its nodes are free (this leader's)
        self.ended: dict[str, float] = {}  # Workload -> when this process ended its set-aside (cooldown)

    def step(self) -> Plan | None:
        if self.leader is not None and not self.leader():
            self.idle_since = {}  # the next leadership measures its own
            return None
        nodes, pods, workloads, cqs, flavors = (list(x) for x in self.source())
        levels = {name(f): pool_topology(f) for f in flavors}
        now = self.wall()
        if self.bounds:  # --hold-bounds
            workloads = self._promise(nodes, pods, workloads, cqs, now)
        plan = plan_set_aside(
            nodes,
            pods,
            workloads,
            cqs,
            levels,
            pools=self.pools,
            now=now,
            settle=self.settle,
            idle=self.idle,
            max_hold=self.max_hold,
            cooldown=self.cooldown,
            idle_since=self.idle_since,
            recently_ended=self.ended,
            lead=self.lead,
            bounds=self.bounds,
        )
        if self.bounds:
            self._backfill(workloads, plan.hold, now)
        self.idle_since = dict(plan.idle_since)
        self.ended = {k: t for k, t in self.ended.items() if now - t < self.cooldown}
        self.ended.update(dict.fromkeys(plan.ended, now))
        by_name = {name(n): n for n in nodes}
        for node in plan.release:
            self._patch(by_name[node], None)
        for node, gang in sorted(plan.hold.items()):
            if not _held_as_planned(by_name[node], gang):
                self._patch(by_name[node], gang, plan.since.get(gang, now))
        by_key = {f"{namespace(w)}/{name(w)}": w for w in workloads}
        for key, nodes_of in sorted(plan.started.items()):
            until = rfc3339(now + self.max_hold)
            self._say(
                by_key[key],
                SET_ASIDE_EVENT_REASON,
                f"gpuctl serve set nodes {', '.join(nodes_of)} aside for this job: only its pods may start "
                f"there; given back once it is admitted, or at the latest at {until} (docs/distributed.md)",
            )
        for key, why in sorted(plan.ended.items()):
            self._end(by_key[key], why, now)
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

    def _promise(self, nodes: list, pods: list, workloads: list, cqs: list, now: float) -> list:
        """Record the first start bound of each waiting one-pod Job (gpuctl.domain.promise) on its Workload;
        the Workloads as this step plans with them (with the bounds just recorded)."""
        made = new_promises(
            nodes, pods, workloads, cqs, self.cohort, pools=self.pools, now=now, slack=self.slack
        )
        for key, by in sorted(made.items()):
            ns, _, wl_name = key.partition("/")
            body = {"metadata": {"annotations": {STARTS_BY_ANNOTATION: rfc3339(math.ceil(by))}}}
            try:
                self.cluster.merge_patch(path("Workload", wl_name, ns), body)
            except ApiError as e:  # gone, or changed: the next step sees it again
                log.warning("set-aside: could not record the start bound of %s: %s", key, e)
        out = []
        for w in workloads:  # copies: the lists may be serve's watch cache
            by = made.get(f"{namespace(w)}/{name(w)}")
            if by is not None:
                notes = {**annotations(w), STARTS_BY_ANNOTATION: rfc3339(math.ceil(by))}
                w = {**w, "metadata": {**meta(w), "annotations": notes}}
            out.append(w)
        return out

    def _backfill(self, workloads: list, hold: Mapping[str, str], now: float) -> None:
        """Grant and withdraw held jobs' tolerations (gpuctl.domain.backfill) on waiting Jobs."""
        plan = plan_backfill(workloads, hold, now=now, slack=self.slack, pools=self.pools)
        for key, (job, held) in sorted(plan.grant.items()):
            self._tolerate(key.partition("/")[0], job, held)
        for key, (job, _) in sorted(plan.withdraw.items()):
            self._tolerate(key.partition("/")[0], job, "")

    def _tolerate(self, ns: str, job: str, held: str) -> None:
        """The suspended Job keeps its own tolerations and gets held job `held`'s pair ("": none of another
        job's): a merge patch of its pod template's tolerations with the resourceVersion it was computed
        from (Kueue un-suspending it meanwhile fails it with 409: a started Job keeps what it ran with)."""
        try:
            obj = self.cluster.get(path("Job", job, ns))
            spec = obj["spec"]["template"]["spec"]
            if not obj["spec"].get("suspend"):
                return
            foreign = foreign_set_aside_tolerations(spec, ns, job)
            keep = [t for t in spec.get("tolerations") or [] if t not in foreign]
            if held:
                keep += set_aside_tolerations(*held.split("/", 1))
            body = {
                "metadata": {"resourceVersion": meta(obj).get("resourceVersion")},
                "spec": {"template": {"spec": {"tolerations": keep}}},
            }
            self.cluster.merge_patch(path("Job", job, ns), body)
        except ApiError as e:  # gone, changed or started: the next step sees it again
            log.warning("set-aside: could not change the tolerations of Job %s/%s: %s", ns, job, e)
            return
        if held:
            log.info(
                "set-aside: %s/%s may run on the node held for %s: it ends before its bound", ns, job, held
            )
        else:
            log.info("set-aside: %s/%s no longer tolerates a node held for another job", ns, job)

    def _say(self, wl: Mapping[str, Any], reason: str, message: str) -> None:
        """A Normal Event on the gang's Workload (the audit trail records it); best effort."""
        obj = {"apiVersion": KUEUE_API_VERSION, "kind": "Workload", "metadata": meta(wl)}
        try:
            post_event(
                self.cluster, obj, type_="Normal", reason=reason, message=message, identity=self.identity,
                now=self.wall(),
            )  # fmt: skip
        except Exception as e:
            log.warning("set-aside: could not post an Event on %s/%s: %s", namespace(wl), name(wl), e)

    def _end(self, wl: Mapping[str, Any], why: str, now: float) -> None:
        """A set-aside ended by its time (gpuctl.domain.setaside): the Workload's annotation (its cooldown,
        `describe job`), then the Event."""
        body = {"metadata": {"annotations": {SET_ASIDE_ENDED_ANNOTATION: ended_note(now, why, rfc3339)}}}
        try:
            self.cluster.merge_patch(path("Workload", name(wl), namespace(wl)), body)
        except ApiError as e:
            log.warning("set-aside: could not annotate %s/%s: %s", namespace(wl), name(wl), e)
        again = rfc3339(now + self.cooldown)
        log.info("set-aside: %s/%s ended: %s", namespace(wl), name(wl), why)
        self._say(
            wl,
            SET_ASIDE_ENDED_REASON,
            f"gpuctl serve gave back the nodes set aside for this job: {why}; none are set aside for it "
            f"again before {again} (docs/distributed.md)",
        )

    def _patch(self, node: Mapping[str, Any], gang: str | None, since: float = 0.0) -> None:
        """Set the node aside for `gang` (None: give it back): gpuctl's taints and annotations only."""
        taints = _taints_without(node)
        if gang is not None:
            taints += set_aside_taints(gang)
        notes: dict[str, str | None] = {SET_ASIDE_FOR_ANNOTATION: gang, SET_ASIDE_SINCE_ANNOTATION: None}
        if gang is not None:
            notes[SET_ASIDE_SINCE_ANNOTATION] = rfc3339(since)
        body = {
            "metadata": {"resourceVersion": meta(node).get("resourceVersion"), "annotations": notes},
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
