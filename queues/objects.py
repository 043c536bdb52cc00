"""The Kueue objects themselves."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from gpuctl.constants import (
    BORROW_PREEMPT_THRESHOLD,
    BUDGET_FLAVOR,
    COHORT_NAME,
    CPU_RESOURCE,
    GPU_RESOURCE,
    KUEUE_API_VERSION,
    LOCAL_QUEUE_NAME,
    MANAGED_BY_VALUE,
    MEMORY_RESOURCE,
    NAMESPACE_MARKER_VALUE,
    PRIORITY_CLASS,
    PRIORITY_VALUE,
    QUOTA_CPU,
    QUOTA_CPU_PER_CORE,
    QUOTA_GPU,
    QUOTA_MEMORY,
    UNLIMITED,
    Labels,
    Priority,
)
from gpuctl.quantity import format_quantity, parse_quantity
from queues.model import PoolCapacity, PoolGuarantee, TeamQuota

POOL_RESOURCES = (CPU_RESOURCE, MEMORY_RESOURCE, GPU_RESOURCE)
BUDGET_RESOURCES = (QUOTA_CPU, QUOTA_MEMORY, QUOTA_GPU)
MANAGED = {Labels.MANAGED_BY: MANAGED_BY_VALUE}


def _meta(name: str, **labels: str) -> dict:
    return {"name": name, "labels": {**MANAGED, **labels}}


def resource_flavor(pool: str, tolerations: Sequence[Mapping[str, Any]] = ()) -> dict:
    """A pool's flavor: Kueue admits a pod to it only if the pod's nodeSelector names the pool, and
    copies the label into the nodeSelector of pods admitted there. `tolerations` (the pool's node
    taints, gpuctl.domain.pools.pool_tolerations) are added by Kueue to every pod admitted there."""
    spec: dict = {"nodeLabels": {Labels.POOL: pool}}
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": _meta(pool, **{Labels.POOL: pool}),
        "spec": spec,
    }


def budget_flavor() -> dict:
    """The label-less flavor of the team budgets (virtual resources, so no node is ever selected)."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": _meta(BUDGET_FLAVOR),
        "spec": {},
    }


def workload_priority_classes() -> list[dict]:
    return [
        {
            "apiVersion": KUEUE_API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": _meta(PRIORITY_CLASS[p]),
            "value": PRIORITY_VALUE[p],
            "description": f"{Labels.PRIORITY}={p.value}",
        }
        for p in Priority
    ]


def _sub(a: str, b: str) -> str:
    """a - b for Kubernetes quantities, floored at 0, as a plain decimal string."""
    d = parse_quantity(a) - parse_quantity(b)
    return format_quantity(max(d, Decimal(0)))


def _milli(cpu: str) -> str:
    """CPU quantity -> milli-CPUs, the unit of runwhere.ai/quota-cpu."""
    return str(int(parse_quantity(str(cpu)) * QUOTA_CPU_PER_CORE))


def _guarantee_totals(pool: str, teams: Iterable[TeamQuota]) -> PoolGuarantee:
    gpu, cpu, mem = 0, Decimal(0), Decimal(0)
    for t in teams:
        g = t.pools.get(pool)
        if g:
            gpu += g.gpu
            cpu += parse_quantity(g.cpu)
            mem += parse_quantity(g.memory)
    return PoolGuarantee(gpu=gpu, cpu=format_quantity(cpu), memory=format_quantity(mem))


def cohort(pools: Sequence[PoolCapacity], teams: Sequence[TeamQuota] = ()) -> dict:
    """The root cohort holding every pool's capacity not guaranteed to a team.

    Team ClusterQueues (nominal = their guarantees) plus this remainder add up to each pool's capacity,
    so Kueue never admits more than a pool's nodes hold.
    """
    spec: dict = {}
    if pools:
        flavors = []
        for p in sorted(pools, key=lambda p: p.name):
            g = _guarantee_totals(p.name, teams)
            flavors.append(
                {
                    "name": p.name,
                    "resources": [
                        {"name": CPU_RESOURCE, "nominalQuota": _sub(p.cpu, g.cpu)},
                        {"name": MEMORY_RESOURCE, "nominalQuota": _sub(p.memory, g.memory)},
                        {"name": GPU_RESOURCE, "nominalQuota": str(max(p.gpu - g.gpu, 0))},
                    ],
                }
            )
        spec["resourceGroups"] = [{"coveredResources": list(POOL_RESOURCES), "flavors": flavors}]
    return {"apiVersion": KUEUE_API_VERSION, "kind": "Cohort", "metadata": _meta(COHORT_NAME), "spec": spec}


def cluster_queue(team: TeamQuota, pools: Sequence[str]) -> dict:
    """One ClusterQueue per team namespace, named after the namespace."""
    pool_flavors = []
    for pool in sorted(pools):
        g = team.pools.get(pool, PoolGuarantee())
        pool_flavors.append(
            {
                "name": pool,
                "resources": [
                    {"name": CPU_RESOURCE, "nominalQuota": format_quantity(parse_quantity(g.cpu))},
                    {"name": MEMORY_RESOURCE, "nominalQuota": format_quantity(parse_quantity(g.memory))},
                    {"name": GPU_RESOURCE, "nominalQuota": str(g.gpu)},
                ],
            }
        )
    gpu_budget: dict = {
        "name": QUOTA_GPU,
        "nominalQuota": UNLIMITED[QUOTA_GPU] if team.gpu is None else str(team.gpu),
    }
    if team.borrowing_limit is not None:
        gpu_budget["borrowingLimit"] = str(team.borrowing_limit)
    # A CPU or memory quota is a hard cap, as the earlier gpuctl's ResourceQuota was; GPUs may be
    # borrowed up to borrowingLimit.
    cpu_budget: dict = {"name": QUOTA_CPU, "nominalQuota": UNLIMITED[QUOTA_CPU]}
    if team.cpu is not None:
        cpu_budget = {"name": QUOTA_CPU, "nominalQuota": _milli(team.cpu), "borrowingLimit": "0"}
    mem_budget: dict = {"name": QUOTA_MEMORY, "nominalQuota": UNLIMITED[QUOTA_MEMORY]}
    if team.memory is not None:
        mem_budget = {"name": QUOTA_MEMORY, "nominalQuota": str(team.memory), "borrowingLimit": "0"}
    budget = {"name": BUDGET_FLAVOR, "resources": [cpu_budget, mem_budget, gpu_budget]}
    groups = []
    if pool_flavors:
        groups.append({"coveredResources": list(POOL_RESOURCES), "flavors": pool_flavors})
    groups.append({"coveredResources": list(BUDGET_RESOURCES), "flavors": [budget]})
    labels = {Labels.TEAM: team.namespace, Labels.QUOTA: team.quota_name}
    meta = _meta(team.namespace, **labels)
    if team.description:
        meta["annotations"] = {Labels.DESCRIPTION: team.description}
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": meta,
        "spec": {
            "cohortName": COHORT_NAME,
            "namespaceSelector": {"matchLabels": {Labels.NS_NAME: team.namespace}},
            # One queue spans all pools: a job blocked on a full pool must not hold up others.
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {
                # A team's high work preempts its own medium and low work.
                "withinClusterQueue": "LowerPriority",
                # Guarantees (nominal quota) are reclaimed from borrowers whatever their priority.
                "reclaimWithinCohort": "Any",
                # Work that borrows may preempt other teams' over-quota work of lower priority, up
                # to medium: high work is never preempted by another team's borrowing.
                "borrowWithinCohort": {
                    "policy": "LowerPriority",
                    "maxPriorityThreshold": BORROW_PREEMPT_THRESHOLD,
                },
            },
            "resourceGroups": groups,
        },
    }


def local_queue(namespace: str) -> dict:
    """LocalQueue `default`: Kueue puts every workload of the namespace in it, labelled or not."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": {**_meta(LOCAL_QUEUE_NAME, **{Labels.TEAM: namespace}), "namespace": namespace},
        "spec": {"clusterQueue": namespace},
    }


def team_namespace(team: TeamQuota, *, created_by_gpuctl: bool = True) -> dict:
    """The team namespace with gpuctl's marker label (Kueue manages pod-based work only there)."""
    labels = {Labels.NAMESPACE: NAMESPACE_MARKER_VALUE, Labels.QUOTA: team.quota_name}
    if created_by_gpuctl:
        labels.update(MANAGED)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team.namespace, "labels": labels}}


def desired_objects(pools: Sequence[PoolCapacity], teams: Sequence[TeamQuota]) -> list[dict]:
    """Every cluster-scoped Kueue object gpuctl owns, for these pools and teams, in apply order."""
    names = [p.name for p in pools]
    out = [*workload_priority_classes(), budget_flavor()]
    out += [resource_flavor(p) for p in sorted(names)]
    out.append(cohort(pools, teams))
    out += [cluster_queue(t, names) for t in sorted(teams, key=lambda t: t.namespace)]
    return out
