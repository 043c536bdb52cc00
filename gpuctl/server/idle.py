"""Idle GPUs back to the queue (docs/utilisation.md): `gpuctl serve --idle`'s reclaimer.

Every `interval` seconds the leader reads gpuctl's running jobs from serve's cache, finds the idle policy
each falls under (its team quota's, else its pool's: gpuctl.service.idle_policy; none: left alone), reads
their GPUs' activity over the policy's window from Prometheus (gpuctl.service.gpu_use) and judges them
(gpuctl.domain.idle). A job idle by its policy and not kept (`gpuctl keep`) gets its kind's action:

- stop (notebooks; training only where the admin opted in): Kueue `spec.active: false` through the stop
  path every client uses (gpuctl.service.activation.set_active), with the evidence on the Workload
  (runwhere.ai/idle-stopped, -stopped-at). Kueue evicts its pods and gives its quota to the head of the
  queue; a notebook's volume and Service stay; `gpuctl resume` brings it back;
- floor / zero (inference, compute): the Deployment scaled to its floor (1 replica) or to zero, the
  replicas it had kept in runwhere.ai/idle-replicas for `gpuctl resume`;
- report (training and gangs by default), or any action under a dry-run policy or `--idle-dry-run`: only
  reported, once per idle stretch.

Each is an Event on the job's Workload (reason GpuctlIdleStopped, GpuctlIdleScaled, GpuctlIdle; the
audit trail reads it, gpuctl.domain.history), a count in gpuctl_idle_actions_total, and a log line. Every
write is serve's own identity (its ServiceAccount's RBAC, manifests/serve/rbac.yaml); nothing a tenant
writes steers it: the policy is on cluster-scoped objects only an admin writes, and the evidence is
Prometheus' dcgm-exporter series, scraped from the GPU Operator's namespace (docs/utilisation.md, "Whose
numbers").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gpuctl.cluster import ApiError, path
from gpuctl.constants import (
    ACTOR_IDLE,
    IDLE_INTERVAL_SECONDS,
    IDLE_POINTS,
    IDLE_REPLICAS_ANNOTATION,
    IDLE_REPORTED_REASON,
    IDLE_SCALED_REASON,
    IDLE_STOPPED_ANNOTATION,
    IDLE_STOPPED_AT_ANNOTATION,
    IDLE_STOPPED_REASON,
    KEEP_UNTIL_ANNOTATION,
)
from gpuctl.domain.idle import (
    Decision,
    IdleAction,
    IdlePolicy,
    KindRule,
    decide,
    judge,
    keep_clamped,
    keep_until,
    target_replicas,
)
from gpuctl.domain.objects import condition, parse_time, rfc3339
from gpuctl.domain.status import State
from gpuctl.domain.utilisation import pod_started
from gpuctl.server.cache import Cache, CacheReader
from gpuctl.server.events import post_event
from gpuctl.server.gauges import family
from gpuctl.server.periodic import Periodic
from gpuctl.service.activation import set_active
from gpuctl.service.errors import ServiceError
from gpuctl.service.gpu_use import Span, by_pod, read_devices, use_of
from gpuctl.service.idle_policy import job_policy
from gpuctl.service.inventory import PER_REPLICA_KINDS, Inventory
from gpuctl.service.jobs import Job, collect_jobs
from gpuctl.service.prometheus import Prometheus

log = logging.getLogger("gpuctl.server.idle")


@dataclass
class Outcome:
    """What one pass did with one job (for the metrics, the log and the tests)."""

    namespace: str
    job: str
    kind: str
    decision: Decision
    done: str  # "stopped", "scaled to 1", "reported", "" (nothing new)
    source: str  # the policy's ("pool a100", "quota team-a")


class IdleReclaimer(Periodic):
    thread_name = "idle"

    def __init__(
        self,
        cluster: Any,
        cache: Cache,
        prom: Prometheus,
        *,
        interval: float = IDLE_INTERVAL_SECONDS,
        dry_run: bool = False,
        leader: Callable[[], bool] | None = None,
        identity: str = "",
        wall: Callable[[], float] = time.time,
    ):
        self.cluster = cluster
        self.cache = cache
        self.prom = prom
        self.interval = interval
        self.dry_run = dry_run  # --idle-dry-run: every policy only reports
        self.leader = leader
        self.identity = identity or ACTOR_IDLE
        self.wall = wall
        self.reported: set[str] = set()  # Workload uids reported in their current idle stretch
        self.actions: dict[tuple[str, str, str, str], int] = {}  # (namespace, kind, action, mode) -> count
        self.idle_jobs: dict[tuple[str, str, str, str], float] = {}  # (ns, job, kind, pool) -> seconds due
        self.errors = 0
        self.last: list[Outcome] = []

    # ---------------------------------------------------------------- a pass
    def step(self) -> None:
        if self.leader is not None and not self.leader():
            return
        self.last = self.run_once(self.wall())

    def run_once(self, now: float) -> list[Outcome]:
        inv = Inventory(CacheReader(self.cache, self.cluster), None)
        candidates: list[tuple[Job, IdlePolicy, KindRule]] = []
        for job in collect_jobs(inv, positions=False):
            if job.status != State.RUNNING or ((job.workload or {}).get("spec") or {}).get("active") is False:
                continue  # holds no GPU, or stopped already (its pods still going)
            pol, why = job_policy(
                inv.team_queues.get(job.namespace), inv.flavor(job.pool) if job.pool else None
            )
            if why:
                log.warning("idle: %s/%s left alone: %s", job.namespace, job.name, why)
                continue
            rule = pol.rule(job.kind) if pol is not None else None
            if pol is not None and rule is not None:
                candidates.append((job, pol, rule))
        outcomes = []
        by_window: dict[int, list[tuple[Job, IdlePolicy, KindRule]]] = {}
        for c in candidates:
            by_window.setdefault(c[2].after, []).append(c)
        idle_now: dict[tuple[str, str, str, str], float] = {}
        for after, group in sorted(by_window.items()):
            span = Span(window=after, lookback=after, points=IDLE_POINTS)
            try:
                devices = by_pod(
                    read_devices(self.prom, sorted({j.namespace for j, _, _ in group}), span, now)
                )
            except ServiceError as e:  # no evidence: nothing is done
                self.errors += 1
                log.warning("idle: GPU use not read: %s", e)
                continue
            for job, pol, rule in group:
                o = self._judge(job, pol, rule, devices, span, now)
                if o is None:
                    continue
                outcomes.append(o)
                if o.decision.verdict.idle:
                    idle_now[(job.namespace, job.name, job.kind, job.pool or "")] = o.decision.verdict.window
        self.idle_jobs = idle_now
        return outcomes

    def _judge(
        self, job: Job, pol: IdlePolicy, rule: KindRule, devices: dict, span: Span, now: float
    ) -> Outcome | None:
        use = use_of(job, devices, span, now)
        found = [d for p in use.pods for d in p.devices]
        # Judged over what it has held since it last started: its newest pod, and its Workload's admission (a
        # resumed notebook's old pod may still be going, under the same name and series).
        starts = [t for p in job.pods if (t := pod_started(p)) is not None]
        admitted = parse_time(condition(job.workload, "Admitted").get("lastTransitionTime"))
        since = max([*starts, *([admitted] if admitted is not None else [])], default=None)
        verdict = judge(found, rule, now=now, step=span.step, gpus=use.gpus, since=since)
        until = keep_until(job.obj)
        if (cut := keep_clamped(until, now, pol.keep_max)) is not None:
            until = self._clamp_keep(job, cut, pol)
        decision = decide(rule, verdict, dry_run=pol.dry_run or self.dry_run, kept_until=until, now=now)
        wl_uid = ((job.workload or {}).get("metadata") or {}).get("uid") or job.obj["metadata"]["uid"]
        if not verdict.idle:
            self.reported.discard(wl_uid)
            return Outcome(job.namespace, job.name, job.kind, decision, "", pol.source)
        done = ""
        if decision.acts:
            done = self._act(job, decision, pol, now)
        elif wl_uid not in self.reported:  # a dry run, report only, or kept: said once per idle stretch
            done = "reported"
            self._event(job, IDLE_REPORTED_REASON, self._report_text(decision, pol), now)
            self._count(job, decision.action, "reported")
        if done:
            self.reported.add(wl_uid)
            log.info(
                "idle: %s/%s %s: %s (%s)",
                job.namespace,
                job.name,
                done,
                decision.verdict.evidence(),
                pol.source,
            )
        return Outcome(job.namespace, job.name, job.kind, decision, done, pol.source)

    @staticmethod
    def _report_text(decision: Decision, pol: IdlePolicy) -> str:
        why = (
            f"kept until {rfc3339(decision.kept_until)}"
            if decision.kept_until is not None
            else "dry run"
            if decision.dry_run and decision.action != IdleAction.REPORT
            else "report only"
        )
        return f"idle, {decision.action} due ({why}): {decision.verdict.evidence()}; policy of {pol.source}"

    # ---------------------------------------------------------------- acting
    def _act(self, job: Job, decision: Decision, pol: IdlePolicy, now: float) -> str:
        evidence = decision.verdict.evidence()
        try:
            if decision.action == IdleAction.STOP:
                if job.resource in PER_REPLICA_KINDS:  # a service is scaled, never stopped
                    return ""
                notes = {IDLE_STOPPED_ANNOTATION: evidence, IDLE_STOPPED_AT_ANNOTATION: rfc3339(now)}
                done = set_active(self.cluster, job.name, job.namespace, False, actor=ACTOR_IDLE, notes=notes)
                if not done.changed:  # stopped meanwhile (by its user, or a pass before the cache saw it)
                    return ""
                self._event(
                    job, IDLE_STOPPED_REASON, f"stopped: idle, {evidence}; policy of {pol.source}", now
                )
                self._count(job, decision.action, "acted")
                return "stopped"
            if decision.action in (IdleAction.FLOOR, IdleAction.ZERO) and job.resource in PER_REPLICA_KINDS:
                return self._scale(job, decision, pol, now)
        except (ApiError, ServiceError, OSError) as e:
            self.errors += 1
            log.warning("idle: %s/%s: %s failed: %s", job.namespace, job.name, decision.action, e)
        return ""

    def _scale(self, job: Job, decision: Decision, pol: IdlePolicy, now: float) -> str:
        spec = job.obj.get("spec") or {}
        replicas = 1 if spec.get("replicas") is None else int(spec["replicas"])
        want = target_replicas(decision.action, replicas, 1)
        if want is None:
            return ""
        before = (job.obj["metadata"].get("annotations") or {}).get(IDLE_REPLICAS_ANNOTATION) or str(replicas)
        self.cluster.merge_patch(
            path(job.resource, job.name, job.namespace),  # a Deployment, or a LeaderWorkerSet's groups
            {
                "metadata": {
                    "uid": job.obj["metadata"]["uid"],
                    "annotations": {IDLE_REPLICAS_ANNOTATION: before},
                },
                "spec": {"replicas": want},
            },
            field_manager="gpuctl-idle",
        )
        evidence = decision.verdict.evidence()
        text = f"scaled from {replicas} to {want} replica(s): idle, {evidence}; policy of {pol.source}"
        self._event(job, IDLE_SCALED_REASON, text, now)
        self._count(job, decision.action, "acted")
        return f"scaled to {want}"

    def _clamp_keep(self, job: Job, until: float, pol: IdlePolicy) -> float:
        """A keep past the policy's keepMax: written back as now + keepMax (the first time serve sees it)."""
        try:
            self.cluster.merge_patch(
                path(job.resource, job.name, job.namespace),
                {
                    "metadata": {
                        "uid": job.obj["metadata"]["uid"],
                        "annotations": {KEEP_UNTIL_ANNOTATION: rfc3339(until)},
                    }
                },
                field_manager="gpuctl-idle",
            )
            log.info(
                "idle: %s/%s keep cut to %s (keepMax of %s)",
                job.namespace,
                job.name,
                rfc3339(until),
                pol.source,
            )
        except (ApiError, OSError) as e:
            self.errors += 1
            log.warning("idle: %s/%s: keep not cut: %s", job.namespace, job.name, e)
        return until

    def _event(self, job: Job, reason: str, message: str, now: float) -> None:
        target = job.workload or job.obj
        try:
            post_event(
                self.cluster,
                target,
                type_="Normal",
                reason=reason,
                message=message,
                identity=self.identity,
                now=now,
            )
        except (ApiError, OSError) as e:
            log.warning("idle: %s/%s: Event not posted: %s", job.namespace, job.name, e)

    def _count(self, job: Job, action: str, mode: str) -> None:
        key = (job.namespace, job.kind, action, mode)
        self.actions[key] = self.actions.get(key, 0) + 1

    # ---------------------------------------------------------------- metrics (a prometheus_client collector)
    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[Any]:
        yield family(
            CounterMetricFamily,
            "gpuctl_idle_actions",
            "Idle jobs gpuctl serve acted on (mode=acted: stopped or scaled) or reported (mode=reported: "
            "a dry run, a report-only action, a kept job), by namespace, job kind and the policy's action",
            ["namespace", "kind", "action", "mode"],
            self.actions,
        )
        yield family(
            GaugeMetricFamily,
            "gpuctl_idle_job_window_seconds",
            "Jobs whose GPUs have been idle for their policy's whole window (the window, in seconds), "
            "acted on or not, per job (gpuctl_job: its name)",
            ["namespace", "gpuctl_job", "kind", "pool"],
            self.idle_jobs,
        )
        errors = CounterMetricFamily(
            "gpuctl_idle_errors",
            "Idle passes or actions that failed (Prometheus unreadable, a write refused)",
        )
        errors.add_metric([], self.errors)
        yield errors
