"""A bound gpuctl keeps (docs/queueing.md "A bound gpuctl keeps"): the start bounds `gpuctl serve`
records on waiting one-pod Jobs (pure).

The first bound a waiting Job gets ("starts by ... at the latest", gpuctl.domain.estimate) is written on its
Workload (runwhere.ai/starts-by) and stays: it is the promise `describe job` shows, and the time serve's
set-aside (gpuctl.domain.setaside) holds a node for the job from SET_ASIDE_BOUND_LEAD_SECONDS before. A job
whose start has no bound gets no promise (the estimate says why); a later estimate never moves it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from gpuctl.constants import ESTIMATE_STEP_SLACK_SECONDS, STARTS_BY_ANNOTATION
from gpuctl.domain.objects import annotations, name, namespace, owner_ref
from gpuctl.domain.workload import IN_QUEUE, job_pool, workload_state


def one_pod_job(wl: Mapping[str, Any]) -> bool:
    """A Job's Workload of one pod set of one pod: what a promise is held for (a Deployment's or a
    StatefulSet's pods do not tolerate a set-aside; a gang has its own)."""
    sets = (wl.get("spec") or {}).get("podSets") or []
    return (
        len(sets) == 1 and int(sets[0].get("count") or 1) == 1 and (owner_ref(wl) or {}).get("kind") == "Job"
    )


def new_promises(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    workloads: Sequence[Mapping[str, Any]],
    cluster_queues: Sequence[Mapping[str, Any]],
    cohort: Callable[[], Mapping[str, Any] | None],
    *,
    pools: Collection[str] | None,
    now: float,
    slack: float = ESTIMATE_STEP_SLACK_SECONDS,
) -> dict[str, float]:
    """Workload ns/name -> the start bound to record: each waiting one-pod Job of `pools` (None: all) that
    has none yet and whose start the estimate bounds (not one Kueue is admitting now). `cohort`: read only
    when there is such a job."""
    todo = [
        w
        for w in workloads
        if workload_state(w) in IN_QUEUE
        and one_pod_job(w)
        and STARTS_BY_ANNOTATION not in annotations(w)
        and (pools is None or job_pool(w) in pools)
    ]
    if not todo:
        return {}
    from gpuctl.domain.demand import workload_demand  # noqa: PLC0415 - lazy: only with work to bound
    from gpuctl.domain.estimate import estimate  # noqa: PLC0415
    from gpuctl.domain.explain import Snapshot  # noqa: PLC0415

    snap = Snapshot.build(
        nodes=nodes, pods=pods, workloads=workloads, cluster_queues=cluster_queues, cohort=cohort(), now=now
    )
    out: dict[str, float] = {}
    for w in todo:
        d = workload_demand(w)
        e = estimate(snap, d, now=now, verdict=snap.verdict(d), slack=slack)
        if e.starts_by is not None and not e.now:
            out[f"{namespace(w)}/{name(w)}"] = e.starts_by
    return out
