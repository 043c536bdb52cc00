"""The gauge families of gpuctl's metrics, from facts computed elsewhere: pools
(gpuctl.domain.pools.PoolFacts), Workloads (`WorkloadSums`, over gpuctl.server.metrics.WorkloadInfo
summaries) and teams (their ClusterQueues, read through gpuctl.domain.teams). Each function only names,
documents and fills series; no rule is decided here (docs/metrics.md has the series)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from prometheus_client.core import GaugeMetricFamily, Metric

from gpuctl.constants import LOCAL_QUEUE_NAME, METRIC_JOB_LABEL, Labels
from gpuctl.domain.gpus import pod_holds_gpus, pod_spec_gpu_requests
from gpuctl.domain.objects import labels
from gpuctl.domain.pools import NODE_STATES, PoolFacts
from gpuctl.domain.teams import team_from_cluster_queue, team_usage
from gpuctl.domain.utilisation import pod_job
from gpuctl.domain.workload import NO_PRIORITY, PRIORITIES

ANY_POOL = "*"


class _Workload(Protocol):  # gpuctl.server.metrics.WorkloadInfo
    namespace: str
    pool: str | None
    priority: str
    state: str | None
    requested_gpus: float
    reserved: tuple[tuple[str, float], ...]
    pending_since: float | None
    gang_pods: int


@dataclass
class WorkloadSums:
    """The Workload side of a scrape: GPUs reserved per pool (the terms of Kueue's sum), GPUs requested by
    waiting Workloads and the oldest wait per (pool, priority), and Workloads per (pool, namespace,
    priority, state). A Workload whose pool is not a known pool counts under `*`."""

    reserved: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    requested: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    count: dict[tuple[str, str, str, str], int] = field(default_factory=lambda: defaultdict(int))
    oldest: dict[tuple[str, str], float] = field(default_factory=dict)
    # Waiting gangs (multi-node Workloads, gpuctl.domain.gang.workload_gang) per pool, and their GPUs.
    gangs: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    gang_gpus: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    @classmethod
    def of(cls, workloads: Iterable[_Workload], pools: set[str], now: float) -> WorkloadSums:
        out = cls()
        for w in workloads:
            if w.state is None:  # finished: not counted
                continue
            pool = w.pool if w.pool in pools else ANY_POOL
            out.count[(pool, w.namespace, w.priority, w.state)] += 1
            for rp, gpus in w.reserved:
                out.reserved[rp] += gpus
            if w.pending_since is not None:
                key = (pool, w.priority)
                out.requested[key] += w.requested_gpus
                out.oldest[key] = max(out.oldest.get(key, 0.0), now - w.pending_since)
                if w.gang_pods:
                    out.gangs[pool] += 1
                    out.gang_gpus[pool] += w.requested_gpus
        return out


def _per_pool(name: str, doc: str, pools: list[str], values: Mapping[str, float]) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=["pool"])
    for p in pools:
        g.add_metric([p], values.get(p, 0.0))
    return g


def _slices(
    facts: Mapping[str, PoolFacts], used: Mapping[str, Mapping[str, int] | None]
) -> Iterator[GaugeMetricFamily]:
    """gpuctl_pool_slices (offered) and gpuctl_pool_slices_used (held by bound pods, as `gpuctl serve`'s
    reconciler last wrote it on the pool's flavor: SLICES_USED_ANNOTATION; absent where it has not)."""
    labels = ["pool", "profile", "resource"]
    offered = GaugeMetricFamily(
        "gpuctl_pool_slices",
        "Slices of GPUs the pool's Ready nodes offer, per MIG profile (or `shared` for time-slicing/MPS "
        "replicas) and the resource a pod asks for (docs/sharing.md)",
        labels=labels,
    )
    held = GaugeMetricFamily(
        "gpuctl_pool_slices_used",
        "Slices of the pool's GPUs that bound, unfinished pods hold, per MIG profile (or `shared`) and "
        "resource: the pool flavor's runwhere.ai/slices-used (docs/sharing.md)",
        labels=labels,
    )
    for p in sorted(facts):
        counts = used.get(p)
        for (prof, res), n in facts[p].slices.items():
            offered.add_metric([p, prof, res], n)
            if counts is not None:
                held.add_metric([p, prof, res], counts.get(res, 0))
    yield offered
    yield held


def pool_families(
    facts: Mapping[str, PoolFacts],
    allocated: Mapping[str, float],
    requested: Mapping[tuple[str, str], float],
    slices_used: Mapping[str, Mapping[str, int] | None],
) -> Iterator[GaugeMetricFamily]:
    """gpuctl_pool_* and gpuctl_node_pool_info. allocated: pool -> GPUs bound pods hold there;
    slices_used: pool -> slice resource -> slices held (None: not known)."""
    sp = sorted(facts)
    info = GaugeMetricFamily(
        "gpuctl_pool_info",
        "A gpuctl pool (=1). flavor is its Kueue ResourceFlavor; gpu_type lists its nodes' GPU types",
        labels=["pool", "flavor", "gpu_type", "registered"],
    )
    for p in sp:
        info.add_metric([p, p, ",".join(facts[p].gpu_types), "true" if facts[p].registered else "false"], 1)
    yield info
    node_info = GaugeMetricFamily(
        "gpuctl_node_pool_info",
        "A node of a gpuctl pool (=1): joins per-node series such as DCGM's to pools",
        labels=["node", "pool"],
    )
    for node, pool in sorted((n, p) for p in sp for n in facts[p].nodes):
        node_info.add_metric([node, pool], 1)
    yield node_info
    yield from _slices(facts, slices_used)
    yield _per_pool(
        "gpuctl_pool_capacity_gpus",
        "GPUs installed in the pool's nodes (status.capacity), ready or not",
        sp,
        {p: f.capacity_gpus for p, f in facts.items()},
    )
    yield _per_pool(
        "gpuctl_pool_allocatable_gpus",
        "GPUs of the pool's Ready, schedulable nodes (status.allocatable): the pool's Kueue capacity",
        sp,
        {p: f.allocatable_gpus for p, f in facts.items()},
    )
    yield _per_pool(
        "gpuctl_pool_allocated_gpus",
        "GPUs requested by bound, unfinished pods on the pool's nodes",
        sp,
        allocated,
    )
    yield _per_pool(
        "gpuctl_pool_reserved_gpus",
        "GPUs Kueue has reserved in the pool for admitted Workloads",
        sp,
        {p: f.reserved_gpus for p, f in facts.items()},
    )
    yield _per_pool(
        "gpuctl_pool_free_gpus",
        "Allocatable GPUs neither reserved by Kueue nor allocated to pods: "
        "allocatable - max(reserved, allocated)",
        sp,
        {p: float(f.free(allocated.get(p, 0.0))) for p, f in facts.items()},
    )
    req = GaugeMetricFamily(
        "gpuctl_pool_requested_gpus",
        "GPUs requested by Workloads waiting for quota (queued or preempted); pool * = not chosen yet",
        labels=["pool", "priority"],
    )
    for p in [*sp, ANY_POOL]:
        for prio in sorted(PRIORITIES | {NO_PRIORITY}):
            if p != ANY_POOL or (p, prio) in requested:
                req.add_metric([p, prio], requested.get((p, prio), 0.0))
    yield req
    yield _per_pool(
        "gpuctl_pool_untainted_nodes",
        "Nodes of the pool without its taint runwhere.ai/pool=<pool>:NoSchedule (labelled into the "
        "pool without gpuctl): work from outside Kueue can run there; `gpuctl apply -f` of the pool "
        "taints them",
        sp,
        {p: f.untainted_nodes for p, f in facts.items()},
    )
    nodes_g = GaugeMetricFamily(
        "gpuctl_pool_nodes",
        "Nodes of the pool by state (ready, not_ready, cordoned)",
        labels=["pool", "state"],
    )
    for p in sp:
        for s in NODE_STATES:
            nodes_g.add_metric([p, s], facts[p].node_states.get(s, 0))
    yield nodes_g


F = TypeVar("F", bound=Metric)


def family(
    cls: type[F], name: str, doc: str, labels: list[str], samples: Mapping[tuple[str, ...], float]
) -> F:
    """A metric family (GaugeMetricFamily, CounterMetricFamily) with one sample per label-value tuple of
    `samples`, in sorted order."""
    fam = cls(name, doc, labels=labels)
    for values, n in sorted(samples.items()):
        fam.add_metric(list(values), n)
    return fam


def workload_families(sums: WorkloadSums, teams: Iterable[str]) -> Iterator[GaugeMetricFamily]:
    """gpuctl_workloads (a zero series per team and state, so "no queued work" is a 0, not an absent series)
    and gpuctl_queue_oldest_pending_seconds."""
    wl = family(
        GaugeMetricFamily,
        "gpuctl_workloads",
        "Kueue Workloads by pool, team namespace, priority and state (queued, admitted, running, "
        "preempted, inactive); finished ones are not counted",
        ["pool", "namespace", "priority", "state"],
        sums.count,
    )
    for ns in sorted(teams):
        for st in ("queued", "admitted", "running", "preempted"):
            if not any(k[1] == ns and k[3] == st for k in sums.count):
                wl.add_metric([ANY_POOL, ns, NO_PRIORITY, st], 0)
    yield wl
    yield family(
        GaugeMetricFamily,
        "gpuctl_queue_oldest_pending_seconds",
        "Age of the oldest Workload waiting for quota (since creation or its last eviction)",
        ["pool", "priority"],
        sums.oldest,
    )


def gang_families(sums: WorkloadSums, pools: list[str]) -> Iterator[GaugeMetricFamily]:
    """gpuctl_pool_waiting_gangs and gpuctl_pool_waiting_gang_gpus: a zero series per pool (no waiting gang
    is a 0, not an absent series), `*` only while a gang waits whose pool is not chosen yet."""
    shown = [*pools, *([ANY_POOL] if ANY_POOL in sums.gangs else [])]
    yield _per_pool(
        "gpuctl_pool_waiting_gangs",
        "Multi-node jobs (gangs: one Workload of N pods, docs/distributed.md) waiting for quota or room "
        "(queued or preempted); pool * = not chosen yet",
        shown,
        sums.gangs,
    )
    yield _per_pool(
        "gpuctl_pool_waiting_gang_gpus",
        "GPUs the waiting gangs ask for, all their pods (N pods x GPUs per pod); a part of "
        "gpuctl_pool_requested_gpus",
        shown,
        sums.gang_gpus,
    )


def team_families(
    cluster_queues: Iterable[Mapping[str, Any]], pools: list[str], allocated: Mapping[tuple[str, str], float]
) -> Iterator[GaugeMetricFamily]:
    """gpuctl_team_*, from each team's ClusterQueue (spec: budgets; status: Kueue's usage).
    allocated: (namespace, pool) -> GPUs the team's bound pods hold there."""
    fams = {
        "info": GaugeMetricFamily(
            "gpuctl_team_info",
            "A gpuctl team (=1): its namespace, ClusterQueue (Kueue's cluster_queue label) and quota name",
            labels=["namespace", "cluster_queue", "local_queue", "quota"],
        ),
        "quota": GaugeMetricFamily(
            "gpuctl_team_quota_gpus",
            "The team's GPU budget across pools (absent when unlimited)",
            labels=["namespace"],
        ),
        "limit": GaugeMetricFamily(
            "gpuctl_team_borrowing_limit_gpus",
            "GPUs the team may borrow beyond its budget (absent when unlimited)",
            labels=["namespace"],
        ),
        "guar": GaugeMetricFamily(
            "gpuctl_team_guaranteed_gpus",
            "GPUs guaranteed to the team in a pool",
            labels=["namespace", "pool"],
        ),
        "used": GaugeMetricFamily(
            "gpuctl_team_used_gpus",
            "GPUs Kueue counts as used by the team's admitted Workloads in a pool (ClusterQueue status)",
            labels=["namespace", "pool"],
        ),
        "borrow": GaugeMetricFamily(
            "gpuctl_team_borrowed_gpus",
            "GPUs the team uses in a pool beyond its guarantee there, borrowed from the cohort (Kueue's "
            "ClusterQueue status)",
            labels=["namespace", "pool"],
        ),
        "over": GaugeMetricFamily(
            "gpuctl_team_over_quota_gpus",
            "GPUs the team uses beyond its budget, borrowed from idle teams' budgets (ClusterQueue status)",
            labels=["namespace"],
        ),
        "alloc": GaugeMetricFamily(
            "gpuctl_team_allocated_gpus",
            "GPUs requested by the team's bound, unfinished pods in a pool",
            labels=["namespace", "pool"],
        ),
        "budget": GaugeMetricFamily(
            "gpuctl_team_budget_used_gpus",
            "GPU equivalents of its budget the team's admitted Workloads hold across pools: whole GPUs and "
            "slices (MIG instances, time-slicing replicas) by docs/sharing.md's rule (ClusterQueue status)",
            labels=["namespace"],
        ),
    }
    for cq in sorted(cluster_queues, key=lambda c: c["metadata"]["name"]):
        ns = cq["metadata"]["name"]
        fams["info"].add_metric([ns, ns, LOCAL_QUEUE_NAME, labels(cq).get(Labels.QUOTA, "")], 1)
        team = team_from_cluster_queue(cq)
        usage = team_usage(cq)
        if team.gpu is not None:
            fams["quota"].add_metric([ns], team.gpu)
        if team.borrowing_limit is not None:
            fams["limit"].add_metric([ns], team.borrowing_limit)
        fams["over"].add_metric([ns], usage.gpus_over_quota)
        fams["budget"].add_metric([ns], usage.gpus)
        for p in pools:
            g = team.pools.get(p)
            fams["guar"].add_metric([ns, p], g.gpu if g else 0)
            fams["used"].add_metric([ns, p], usage.pool_gpus.get(p, 0))
            fams["borrow"].add_metric([ns, p], usage.pool_borrowed.get(p, 0))
            fams["alloc"].add_metric([ns, p], allocated.get((ns, p), 0.0))
    yield from fams.values()


def job_pod_family(pods: Iterable[Mapping[str, Any]], node_pool: Mapping[str, str]) -> GaugeMetricFamily:
    """gpuctl_job_pod_info (docs/utilisation.md): which job, kind and pool each bound pod of a gpuctl job
    holding GPUs
    belongs to, so PromQL joins dcgm-exporter's per-pod series to jobs (rules.yaml's per-job recording
    rule and alert; the job by gpuctl.domain.utilisation.pod_job)."""
    g = GaugeMetricFamily(
        "gpuctl_job_pod_info",
        "1 per pod of a gpuctl job that holds GPUs on a node: its job (gpuctl_job), kind and pool; join "
        "dcgm-exporter's per-pod series on (namespace, pod)",
        labels=["namespace", "pod", METRIC_JOB_LABEL, "kind", "pool"],
    )
    for p in pods:
        kind = labels(p).get(Labels.JOB_TYPE)
        if not kind or not pod_holds_gpus(p) or not pod_spec_gpu_requests(p.get("spec")):
            continue
        meta = p.get("metadata") or {}
        node = (p.get("spec") or {}).get("nodeName") or ""
        g.add_metric(
            [meta.get("namespace", ""), meta.get("name", ""), pod_job(p), kind, node_pool.get(node, "")], 1
        )
    return g


def service_families(scales: Mapping[tuple[str, str], Any]) -> Iterator[GaugeMetricFamily]:
    """Per autoscaled service (gpuctl.domain.serving.Scale, docs/serving.md): its replicas as the HPA
    wants them, as they run, and as they wait at Kueue's gate, with its floor and its maximum. The service
    is `gpuctl_job` (not `job`, Prometheus' own target label), the label its replicas' load series carry
    (manifests/prometheus/serving-scrape.yaml), so the two join."""
    series = (
        (
            "gpuctl_service_desired_replicas",
            "Replicas an autoscaled service wants: its floor plus what its HPA set for the burst",
            "desired",
        ),
        (
            "gpuctl_service_running_replicas",
            "Replicas of an autoscaled service past Kueue's gate (holding their GPUs)",
            "running",
        ),
        ("gpuctl_service_ready_replicas", "Ready replicas of an autoscaled service", "ready"),
        (
            "gpuctl_service_waiting_replicas",
            "Replicas of an autoscaled service waiting at Kueue's gate for GPUs (holding none)",
            "waiting",
        ),
        (
            "gpuctl_service_min_replicas",
            "An autoscaled service's floor (minReplicas), inside its team's quota",
            "floor",
        ),
        (
            "gpuctl_service_max_replicas",
            "An autoscaled service's maxReplicas (floor plus the HPA's maximum burst)",
            "max_replicas",
        ),
    )
    for metric, doc, attr in series:
        g = GaugeMetricFamily(metric, doc, labels=["namespace", METRIC_JOB_LABEL])
        for (ns, job), sc in sorted(scales.items()):
            g.add_metric([ns, job], float(getattr(sc, attr)))
        yield g
