"""Backfill by maxRuntime onto a node held for a start bound (docs/queueing.md "A bound gpuctl
keeps", "Backfill by maxRuntime"). Pure: objects in, a decision out; gpuctl.server.setaside writes it.

A node held for a one-pod job near the start bound it was shown carries two NoSchedule taints naming that
job (gpuctl.domain.gang.set_aside_taints), so Kueue places nothing else there. Work that surely ends before
the bound cannot delay the job: each step, a waiting one-pod Job of the held job's pool is *granted* the
held job's pair of tolerations while `now + maxRuntime + slack <= bound` (maxRuntime: Kueue's
maximumExecutionTimeSeconds, which ends the job; slack: one serve step, Kueue's admission and the pod's
termination), and the grant is *withdrawn* from a Job still waiting once that no longer holds, or once the
node is no longer held for that job. A Job without a maxRuntime is never granted. Kueue still decides
admission: a changed suspended Job's tolerations update its Workload in place (Kueue v0.19.2
`updateWorkloadToMatchJob`), its place in the queue kept.

A granted pod that runs on the held node is no squatter while its admission plus maxRuntime ends by the
bound (`in_time`); one admitted too late for that (after its grant lapsed, before the withdrawal reached
Kueue) would delay the held job and is requeued like any squatter (gpuctl.domain.setaside.squatters).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuctl.domain.demand import job_label
from gpuctl.domain.gang import foreign_set_aside_tolerations, tolerates_gangs_set_aside
from gpuctl.domain.objects import name, namespace, owner_ref
from gpuctl.domain.promise import one_pod_job, starts_by_of
from gpuctl.domain.workload import IN_QUEUE, job_pool, max_runtime_seconds, quota_reserved_at, workload_state

__all__ = ["Backfill", "held_bounds", "in_time", "plan_backfill", "ran_in_time"]


@dataclass(frozen=True)
class Backfill:
    """Workload ns/name -> (its Job's name, the held job ns/job whose pair it gets; for a withdrawal the one
    it had, "" when it holds no held job's whole pair: every set-aside toleration not its own goes)."""

    grant: dict[str, tuple[str, str]] = field(default_factory=dict)
    withdraw: dict[str, tuple[str, str]] = field(default_factory=dict)


def held_bounds(
    workloads: Iterable[Mapping[str, Any]], hold: Mapping[str, str]
) -> dict[str, tuple[str, float]]:
    """Held job ns/job -> (its pool, its start bound): the one-pod jobs shown a bound that `hold` (node ->
    job, gpuctl.domain.setaside.Plan.hold) holds a node for. Gangs have no bound: nothing backfills theirs."""
    held = set(hold.values())
    out: dict[str, tuple[str, float]] = {}
    for w in workloads:
        key = job_label(w)
        by = starts_by_of(w) if key in held and one_pod_job(w) else None
        if by is not None:
            out[key] = (job_pool(w) or "", by)
    return out


def in_time(wl: Mapping[str, Any], bound: float, start: float, slack: float = 0.0) -> bool:
    """Whether the Workload, started at `start`, surely ends by `bound`: it has a maxRuntime and
    start + maxRuntime + slack <= bound."""
    runtime = max_runtime_seconds(wl)
    return runtime is not None and start + runtime + slack <= bound


def ran_in_time(wl: Mapping[str, Any], bound: float) -> bool:
    """A Workload holding quota that ends by `bound` by its maxRuntime, counted from its QuotaReserved."""
    at = quota_reserved_at(wl)
    return at is not None and in_time(wl, bound, at)


def plan_backfill(
    workloads: Iterable[Mapping[str, Any]],
    hold: Mapping[str, str],
    *,
    now: float,
    slack: float,
    pools: Collection[str] | None = None,
) -> Backfill:
    """Which waiting Jobs of `pools` (None: all; another serve's pools are its own) get a held job's pair
    now, and which lose the one they have (module docstring)."""
    wls = list(workloads)
    bounds = held_bounds(wls, hold)
    grant: dict[str, tuple[str, str]] = {}
    withdraw: dict[str, tuple[str, str]] = {}
    for w in wls:
        if workload_state(w) not in IN_QUEUE or not one_pod_job(w):
            continue
        if pools is not None and job_pool(w) not in pools:
            continue
        key, job = f"{namespace(w)}/{name(w)}", (owner_ref(w) or {}).get("name") or ""
        spec = ((w["spec"]["podSets"][0].get("template") or {}).get("spec")) or {}
        if foreign_set_aside_tolerations(spec, namespace(w), job):
            # granted before: kept while the job it names is held and this one still ends in time
            g = next((g for g in sorted(bounds) if tolerates_gangs_set_aside(spec, g)), "")
            if not g or not in_time(w, bounds[g][1], now, slack):
                withdraw[key] = (job, g)
            continue
        pool = job_pool(w)
        for g, (held_pool, by) in sorted(bounds.items()):
            if g != f"{namespace(w)}/{job}" and held_pool == pool and in_time(w, by, now, slack):
                grant[key] = (job, g)
                break
    return Backfill(grant, withdraw)
