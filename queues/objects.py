"""The Kueue objects themselves."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpuctl.constants import (
    BORROW_PREEMPT_THRESHOLD,
    BUDGET_FLAVOR,
    COHORT_NAME,
    CPU_RESOURCE,
    GPU_RESOURCE,
    GPU_UNITS,
    HOSTNAME_LABEL,
    KUEUE_API_VERSION,
    LOCAL_QUEUE_NAME,
    MANAGED_BY_VALUE,
    MEMORY_RESOURCE,
    NAMESPACE_MARKER_VALUE,
    POOL_NOMINAL,
    POOL_TAINT_EFFECT,
    POOL_TAINT_KEY,
    POOL_TOPOLOGY_ANNOTATION,
    PRIORITY_CLASS,
    PRIORITY_VALUE,
    QUOTA_CPU,
    QUOTA_CPU_PER_CORE,
    QUOTA_GPU,
    QUOTA_MEMORY,
    SERVING_CLASS,
    SERVING_VALUE,
    TOPOLOGY_NAME,
    TOPOLOGY_PREFIX,
    UNLIMITED,
    Labels,
    Priority,
    Tier,
)
from gpuctl.quantity import parse_quantity
from queues.model import PoolCapacity, PoolGuarantee, TeamQuota

POOL_RESOURCES = (CPU_RESOURCE, MEMORY_RESOURCE, GPU_RESOURCE)
BUDGET_RESOURCES = (QUOTA_CPU, QUOTA_MEMORY, QUOTA_GPU)
MANAGED = {Labels.MANAGED_BY: MANAGED_BY_VALUE}


def _meta(name: str, **labels: str) -> dict:
    return {"name": name, "labels": {**MANAGED, **labels}}


def pool_toleration(pool: str) -> dict:
    """The toleration of the taint every node of `pool` carries (runwhere.ai/pool=<pool>:NoSchedule): the
    pool's flavor always has it first (gpuctl.domain.pools.pool_tolerations), so Kueue adds it to the pods
    it admits there and no other pod tolerates it (admission/isolation.py)."""
    return {"key": POOL_TAINT_KEY, "operator": "Equal", "value": pool, "effect": POOL_TAINT_EFFECT}


def resource_flavor(
    pool: str, tolerations: Sequence[Mapping[str, Any]] = (), levels: Sequence[str] = ()
) -> dict:
    """A pool's flavor: Kueue admits a pod to it only if the pod's nodeSelector names the pool, and
    copies the label into the nodeSelector of pods admitted there. `tolerations` (the pool's node
    taints, gpuctl.domain.pools.pool_tolerations) are added by Kueue to every pod admitted there.
    `topologyName` makes it a Topology Aware Scheduling flavor: a pod is admitted only when one node
    of the pool can hold it (Kueue then keeps nodeLabels and tolerations immutable: a change of the
    pool's taints re-creates the flavor, gpuctl.service.pool_sync). `levels`: the pool's network topology
    above the node (kind: pool `topology`), kept in POOL_TOPOLOGY_ANNOTATION and in the Topology the
    flavor names (topology(levels))."""
    spec: dict = {"nodeLabels": {Labels.POOL: pool}, "topologyName": topology_name(levels)}
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    meta = _meta(pool, **{Labels.POOL: pool})
    if levels:
        meta["annotations"] = {POOL_TOPOLOGY_ANNOTATION: ",".join(levels)}
    return {"apiVersion": KUEUE_API_VERSION, "kind": "ResourceFlavor", "metadata": meta, "spec": spec}


def topology_name(levels: Sequence[str] = ()) -> str:
    """The Topology of pools with these levels above the node: TOPOLOGY_NAME for none, else one named by
    a hash of the levels (a Topology is immutable: other levels are another Topology)."""
    if not levels:
        return TOPOLOGY_NAME
    import hashlib  # noqa: PLC0415 - lazy: a read (`gpuctl get`) imports this module and names no Topology

    return TOPOLOGY_PREFIX + hashlib.sha256("\n".join(levels).encode()).hexdigest()[:10]


def topology(levels: Sequence[str] = ()) -> dict:
    """The Topology of pool flavors: the pool's levels (outermost first), then the node."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Topology",
        "metadata": _meta(topology_name(levels)),
        "spec": {"levels": [*({"nodeLabel": level} for level in levels), {"nodeLabel": HOSTNAME_LABEL}]},
    }


def budget_flavor() -> dict:
    """The label-less flavor of the team budgets (virtual resources, so no node is ever selected)."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": _meta(BUDGET_FLAVOR),
        "spec": {},
    }


def _priority_class(name: str, value: int, description: str) -> dict:
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "WorkloadPriorityClass",
        "metadata": _meta(name),
        "value": value,
        "description": description,
    }


def workload_priority_classes() -> list[dict]:
    """gpuctl's priorities, then an autoscaled service's floor (above high: the team's own work never
    preempts it) and burst (below low: the first replica to yield), docs/serving.md."""
    jobs = [
        _priority_class(PRIORITY_CLASS[p], PRIORITY_VALUE[p], f"{Labels.PRIORITY}={p.value}")
        for p in Priority
    ]
    tiers = [
        _priority_class(SERVING_CLASS[t], SERVING_VALUE[t], f"{Labels.SERVING_TIER}={t.value}") for t in Tier
    ]
    return jobs + tiers


def _milli(cpu: str) -> str:
    """CPU quantity -> milli-CPUs, the unit of runwhere.ai/quota-cpu."""
    return str(int(parse_quantity(str(cpu)) * QUOTA_CPU_PER_CORE))


def cohort(pools: Sequence[PoolCapacity], teams: Sequence[TeamQuota] = ()) -> dict:
    """The root cohort: it holds the GPU budget nobody's quota covers (all pools' GPUs less the sum
    of the team quotas, floored at 0), so idle GPUs beyond the quotas can be lent too.

    Team budgets plus this surplus add up to the cluster's GPUs whenever quotas do not oversubscribe
    it. Pool capacity itself is not quota: Topology Aware Scheduling admits a pod only where a node
    of its pool can hold it.
    """
    spec: dict = {}
    if pools:
        total = sum(p.gpu for p in pools)
        quotas = sum(t.gpu for t in teams if t.gpu is not None)
        budget = {
            "name": BUDGET_FLAVOR,
            "resources": [
                {"name": QUOTA_CPU, "nominalQuota": "0"},
                {"name": QUOTA_MEMORY, "nominalQuota": "0"},
                {"name": QUOTA_GPU, "nominalQuota": str(max(total - quotas, 0) * GPU_UNITS)},
            ],
        }
        spec["resourceGroups"] = [{"coveredResources": list(BUDGET_RESOURCES), "flavors": [budget]}]
    return {"apiVersion": KUEUE_API_VERSION, "kind": "Cohort", "metadata": _meta(COHORT_NAME), "spec": spec}


def _guarantees_annotation(pools: dict[str, PoolGuarantee]) -> str:
    return json.dumps(
        {p: {"gpu": g.gpu, "cpu": g.cpu, "memory": g.memory} for p, g in sorted(pools.items())},
        sort_keys=True,
        separators=(",", ":"),
    )


def cluster_queue(team: TeamQuota, pools: Sequence[str], *, checks: Mapping[str, Any] | None = None) -> dict:
    """One ClusterQueue per team namespace, named after the namespace. `checks`: its
    spec.admissionChecksStrategy (a MultiKueue manager's, queues.multicluster.admission_checks_strategy)."""
    # Every pool at the same, unreachable nominal quota (POOL_NOMINAL): a job never borrows pool
    # quota, so whether it is within its team's quota is decided by the budget alone, and Kueue's
    # reclaim (reclaimWithinCohort: Any) applies whenever it is. Nodes bound the pools (TAS).
    pool_flavors = [
        {
            "name": pool,
            "resources": [{"name": r, "nominalQuota": POOL_NOMINAL[r]} for r in POOL_RESOURCES],
        }
        for pool in sorted(pools)
    ]
    gpu_budget: dict = {
        "name": QUOTA_GPU,
        "nominalQuota": UNLIMITED[QUOTA_GPU] if team.gpu is None else str(team.gpu * GPU_UNITS),
    }
    if team.borrowing_limit is not None:
        gpu_budget["borrowingLimit"] = str(team.borrowing_limit * GPU_UNITS)
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
    notes = {}
    if team.description:
        notes[Labels.DESCRIPTION] = team.description
    if team.pools:
        notes[Labels.POOL_GUARANTEES] = _guarantees_annotation(team.pools)
    if notes:
        meta["annotations"] = notes
    spec: dict = {
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
    }
    if checks:
        spec["admissionChecksStrategy"] = dict(checks)
    return {"apiVersion": KUEUE_API_VERSION, "kind": "ClusterQueue", "metadata": meta, "spec": spec}


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
    out = [*workload_priority_classes(), topology(), budget_flavor()]
    out += [resource_flavor(p, [pool_toleration(p)]) for p in sorted(names)]
    out.append(cohort(pools, teams))
    out += [cluster_queue(t, names) for t in sorted(teams, key=lambda t: t.namespace)]
    return out
