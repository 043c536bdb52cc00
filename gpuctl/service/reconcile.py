"""The desired root Cohort, derived from what the cluster holds (pure).

Used by every path that changes capacity (gpuctl pool/label commands, and the `gpuctl serve`
reconciler, which reacts to node changes made by anyone), so capacity is computed one way.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuctl.constants import BUDGET_FLAVOR, CPU_RESOURCE, GPU_RESOURCE, MEMORY_RESOURCE, Labels
from gpuctl.service.capacity import pool_capacities
from gpuctl.service.convert import is_gpuctl_object
from queues import PoolGuarantee, TeamQuota, cohort


def pool_names(flavors: Iterable[dict]) -> list[str]:
    """Pools = gpuctl's ResourceFlavors except the budget flavor."""
    return sorted(
        f["metadata"]["name"]
        for f in flavors
        if is_gpuctl_object(f) and f["metadata"]["name"] != BUDGET_FLAVOR
    )


def guarantees_from_cluster_queues(cluster_queues: Iterable[dict]) -> list[TeamQuota]:
    """Per-pool guarantees as written in gpuctl's team ClusterQueues (nominal quota on pool flavors)."""
    teams = []
    for cq in cluster_queues:
        if not is_gpuctl_object(cq):
            continue
        pools: dict[str, PoolGuarantee] = {}
        for group in (cq.get("spec") or {}).get("resourceGroups") or []:
            if GPU_RESOURCE not in group.get("coveredResources", []):
                continue
            for fl in group.get("flavors") or []:
                q = {r["name"]: str(r.get("nominalQuota", "0")) for r in fl.get("resources") or []}
                pools[fl["name"]] = PoolGuarantee(
                    gpu=int(float(q.get(GPU_RESOURCE, "0"))),
                    cpu=q.get(CPU_RESOURCE, "0"),
                    memory=q.get(MEMORY_RESOURCE, "0"),
                )
        labels = cq["metadata"].get("labels", {})
        teams.append(
            TeamQuota(namespace=cq["metadata"]["name"], quota_name=labels.get(Labels.QUOTA, ""), pools=pools)
        )
    return teams


def desired_cohort(nodes: Iterable[dict], flavors: Iterable[dict], cluster_queues: Iterable[dict]) -> dict:
    pools = pool_capacities(list(nodes), pool_names(flavors))
    return cohort(pools, guarantees_from_cluster_queues(cluster_queues))


def cohort_spec_equal(a: dict | None, b: dict) -> bool:
    """Whether the cohort in the cluster already has the desired resource groups (quantities as text)."""
    if a is None:
        return False
    return (a.get("spec") or {}).get("resourceGroups") == (b.get("spec") or {}).get("resourceGroups")


def _cores(milli: str) -> str:
    from decimal import Decimal

    from gpuctl.constants import QUOTA_CPU_PER_CORE
    from gpuctl.spec.quantity import parse_quantity

    v = (parse_quantity(milli) / Decimal(QUOTA_CPU_PER_CORE)).normalize()
    return f"{v:f}"


def team_from_cluster_queue(cq: dict) -> TeamQuota:
    """Read a gpuctl team ClusterQueue back into the TeamQuota it was made from."""
    from gpuctl.constants import QUOTA_CPU, QUOTA_GPU, QUOTA_MEMORY, UNLIMITED

    (base,) = guarantees_from_cluster_queues([cq]) or [
        TeamQuota(namespace=cq["metadata"]["name"], quota_name="")
    ]
    budget: dict[str, dict] = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for fl in group.get("flavors") or []:
            if fl["name"] == BUDGET_FLAVOR:
                budget = {r["name"]: r for r in fl.get("resources") or []}

    def nominal(res: str) -> str | None:
        v = str((budget.get(res) or {}).get("nominalQuota", UNLIMITED[res]))
        return None if v == UNLIMITED[res] else v

    gpu = nominal(QUOTA_GPU)
    borrow = (budget.get(QUOTA_GPU) or {}).get("borrowingLimit")
    meta = cq["metadata"]
    return TeamQuota(
        namespace=meta["name"],
        quota_name=(meta.get("labels") or {}).get(Labels.QUOTA, ""),
        gpu=None if gpu is None else int(float(gpu)),
        cpu=None if nominal(QUOTA_CPU) is None else _cores(nominal(QUOTA_CPU)),
        memory=nominal(QUOTA_MEMORY),
        borrowing_limit=None if borrow is None else int(float(str(borrow))),
        pools={
            k: v
            for k, v in base.pools.items()
            if v.gpu or v.cpu not in ("0", "") or v.memory not in ("0", "")
        },
        description=(meta.get("annotations") or {}).get(Labels.DESCRIPTION),
    )
