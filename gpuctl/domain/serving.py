"""Autoscaled services (docs/serving.md), read from their objects (pure): which Deployment is a floor or a
burst, the service's replica counts, and what its HorizontalPodAutoscaler says.

One rule for `get jobs`, `describe job`, the REST API and the metrics: a service's replicas are its floor's
and its burst's pods; desired = the floor's replicas + the burst's (what the HPA last set); ready = ready
replicas of both; waiting = replicas at Kueue's gate (no GPU held), running = the others that are live.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from gpuctl.constants import AUTOSCALING_METRICS, LWS_NAME_LABEL, METRIC_FLOOR_LABEL, Labels, Tier
from gpuctl.domain.gang import group_size, replica_groups
from gpuctl.domain.objects import labels, pod_finished
from gpuctl.domain.status import is_gated

_METRIC_OF = {name: metric for metric, name in AUTOSCALING_METRICS.items()}


def tier(obj: Mapping[str, Any] | None) -> Tier | None:
    """floor | burst for an autoscaled service's Deployment or pod, None otherwise."""
    value = labels(obj or {}).get(Labels.SERVING_TIER)
    return Tier(value) if value in Tier._value2member_map_ else None


def is_burst(obj: Mapping[str, Any]) -> bool:
    return tier(obj) is Tier.BURST


def service_of(obj: Mapping[str, Any]) -> str:
    """The job name of an autoscaled service's Deployment or pod (its `app` label)."""
    return labels(obj).get(Labels.APP, "")


def _replicas(obj: Mapping[str, Any] | None) -> tuple[int, int]:
    """(spec.replicas, status.readyReplicas) of a Deployment; (0, 0) for none."""
    if not obj:
        return 0, 0
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    wanted = 1 if spec.get("replicas") is None else int(spec["replicas"])
    return wanted, int(st.get("readyReplicas") or 0)


def combined(floor: Mapping[str, Any], burst: Mapping[str, Any] | None) -> dict:
    """The floor Deployment as if it held the burst's replicas too: what job_status reads for the service
    (desired and ready replicas of both; the floor's metadata)."""
    f_want, f_ready = _replicas(floor)
    b_want, b_ready = _replicas(burst)
    out = dict(floor)
    out["spec"] = {**(floor.get("spec") or {}), "replicas": f_want + b_want}
    out["status"] = {**(floor.get("status") or {}), "readyReplicas": f_ready + b_ready}
    return out


class Metric(NamedTuple):
    """What the HPA reads and aims at: the metric (concurrency | rps), its target per replica, the load
    above the floor it last read (None: not read yet) and the floor's share (minReplicas x target)."""

    metric: str
    target: str
    current: str | None
    floor_load: str


class Scale(NamedTuple):
    """An autoscaled service's replicas."""

    floor: int  # minReplicas (the floor Deployment's replicas)
    burst_max: int  # maxReplicas - minReplicas (the HPA's maxReplicas)
    desired: int  # floor + the burst's replicas (what the HPA last set)
    ready: int
    running: int  # live replicas past Kueue's gate
    waiting: int  # replicas at Kueue's gate: wanted, holding no GPU
    hpa_desired: int | None  # the HPA's own desiredReplicas for the burst (None: no HPA read)
    metric: Metric | None

    @property
    def max_replicas(self) -> int:
        return self.floor + self.burst_max

    def as_dict(self) -> dict:
        out: dict[str, Any] = {
            "minReplicas": self.floor,
            "maxReplicas": self.max_replicas,
            "desired": self.desired,
            "ready": self.ready,
            "running": self.running,
            "waiting": self.waiting,
        }
        if self.metric is not None:
            out["metric"] = {
                "name": self.metric.metric,
                "target": self.metric.target,
                "current": self.metric.current,
                "floorLoad": self.metric.floor_load,
            }
        return out


def hpa_metric(hpa: Mapping[str, Any] | None) -> Metric | None:
    """The external metric of a gpuctl HPA (gpuctl.builders.autoscaled.autoscaler) and its last reading."""
    if not hpa:
        return None
    for m in (hpa.get("spec") or {}).get("metrics") or []:
        ext = m.get("external") or {}
        name = (ext.get("metric") or {}).get("name")
        if name not in _METRIC_OF:
            continue
        selector = ((ext.get("metric") or {}).get("selector") or {}).get("matchLabels") or {}
        current = None
        for c in (hpa.get("status") or {}).get("currentMetrics") or []:
            cext = c.get("external") or {}
            if (cext.get("metric") or {}).get("name") == name:
                cur = cext.get("current") or {}
                current = cur.get("averageValue") or cur.get("value")
                # With no burst replica the HPA divides by zero and reports int64's minimum
                # ("-9223372036854775808m"): no reading, not a load. A load is never negative.
                if str(current or "").startswith("-"):
                    current = None
        return Metric(
            metric=_METRIC_OF[name],
            target=str((ext.get("target") or {}).get("averageValue") or ""),
            current=None if current is None else str(current),
            floor_load=str(selector.get(METRIC_FLOOR_LABEL, "")),
        )
    return None


def scale(
    floor: Mapping[str, Any],
    burst: Mapping[str, Any] | None,
    pods: list[Mapping[str, Any]],
    hpa: Mapping[str, Any] | None = None,
) -> Scale:
    f_want, f_ready = _replicas(floor)
    b_want, b_ready = _replicas(burst)
    live = [p for p in pods if not pod_finished(p) and not (p.get("metadata") or {}).get("deletionTimestamp")]
    replicas = tier_groups(live) if group_size(floor) > 1 else [[p] for p in live]
    # A replica of N pods (a LeaderWorkerSet group, admitted whole) waits while any of its pods is gated.
    waiting = sum(1 for r in replicas if any(is_gated(p) for p in r))
    burst_max = int(((hpa or {}).get("spec") or {}).get("maxReplicas") or 0)
    hpa_desired = None
    if hpa and (hpa.get("status") or {}).get("desiredReplicas") is not None:
        hpa_desired = int(hpa["status"]["desiredReplicas"])
    return Scale(
        floor=f_want,
        burst_max=burst_max,
        desired=f_want + b_want,
        ready=f_ready + b_ready,
        running=len(replicas) - waiting,
        waiting=waiting,
        hpa_desired=hpa_desired,
        metric=hpa_metric(hpa),
    )


def tier_groups(pods: list[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """An autoscaled service's multi-node replicas: its pods by group (floor and burst are two
    LeaderWorkerSets, each numbering its groups from 0: a group is its LeaderWorkerSet and index), each
    group in rank order, floor groups first."""
    by_set: dict[str, list[Mapping[str, Any]]] = {}
    for p in pods:
        by_set.setdefault(labels(p).get(LWS_NAME_LABEL, ""), []).append(p)
    ordered = sorted(by_set.items(), key=lambda kv: (tier(kv[1][0]) is not Tier.FLOOR, kv[0]))
    return [g for _, ps in ordered for g in replica_groups(ps).values()]


def services(
    deployments: list[Mapping[str, Any]], pods: list[Mapping[str, Any]], hpas: list[Mapping[str, Any]]
) -> dict[tuple[str, str], Scale]:
    """(namespace, job) -> Scale of every autoscaled service among these objects (the metrics' reading:
    every Deployment, pod and HPA of the cluster, whatever else they hold; `deployments` may hold
    LeaderWorkerSets too, the floors and bursts of multi-node replicas: counted in groups)."""
    floors: dict[tuple[str, str], Mapping[str, Any]] = {}
    bursts: dict[tuple[str, str], Mapping[str, Any]] = {}
    for d in deployments:
        t = tier(d)
        if t is not None:
            key = ((d.get("metadata") or {}).get("namespace", ""), service_of(d))
            (floors if t is Tier.FLOOR else bursts)[key] = d
    replicas: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for p in pods:
        if tier(p) is not None:
            key = ((p.get("metadata") or {}).get("namespace", ""), service_of(p))
            replicas.setdefault(key, []).append(p)
    by_name = {
        ((h.get("metadata") or {}).get("namespace", ""), (h.get("metadata") or {}).get("name", "")): h
        for h in hpas
    }
    return {
        key: scale(floor, bursts.get(key), replicas.get(key, []), by_name.get(key))
        for key, floor in floors.items()
    }


def replicas_beyond_team(
    what: str, replicas: int, gpus_per_replica: int, team: str, quota: int | None, borrowing_limit: int | None
) -> tuple[str, str] | None:
    """(message, fix) when `replicas` replicas of `gpus_per_replica` GPUs are more than team `team` may
    ever hold at once (its quota plus its borrowingLimit: the replicas past it would wait for ever); None
    when they fit, or when the team has no such cap (no quota, or borrowing without a limit: then only the
    idle GPUs of the moment bound it). The webhook's `hpa-queued` warns with it (an HPA a team member
    applies); it is no error: such replicas wait at Kueue's gate and say why (docs/serving.md)."""
    if quota is None or borrowing_limit is None or gpus_per_replica <= 0:
        return None
    limit = quota + borrowing_limit
    if replicas * gpus_per_replica <= limit:
        return None
    most = limit // gpus_per_replica
    message = (
        f"{what} may scale to {replicas} replicas x {gpus_per_replica} GPU(s) = "
        f"{replicas * gpus_per_replica} GPUs, more than team {team} may ever hold ({quota} of quota + "
        f"{borrowing_limit} it may borrow = {limit}): the replicas past {most} would wait for ever"
    )
    return message, f"lower maxReplicas to at most {most}, or raise the team's quota or borrowingLimit"


def floor_beyond_quota(
    what: str, floor_gpus: int, team: str, quota: int | None, others: int = 0
) -> tuple[str, str] | None:
    """(message, fix) when a service's floor (its minReplicas x GPUs) with the team's other floors
    (`others` GPUs) is more than the team's quota: the floor is guaranteed only within the quota
    (docs/serving.md); None when it fits or the team has no GPU quota."""
    if quota is None or floor_gpus <= 0 or floor_gpus + others <= quota:
        return None
    but = f" with the team's other floors ({others} GPUs)" if others else ""
    message = (
        f"{what}'s floor of {floor_gpus} GPUs{but} is more than team {team}'s quota of {quota} GPUs: the "
        "floor runs inside the quota, never preempted, so it cannot be larger"
    )
    return message, "lower minReplicas, or raise the team's quota"
