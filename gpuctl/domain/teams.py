"""What a gpuctl team ClusterQueue means, read back from Kueue's objects, and the desired Cohort.

A team is a ClusterQueue named after its namespace (made by queues.cluster_queue): its budget of
virtual resources runwhere.ai/quota-{gpu-840ths,cpu,memory} on the budget flavor (GPUs in 1/840 GPU
units, so slices of GPUs are charged exactly: gpuctl.domain.sharing), optional per-pool
guarantees (nominal quota on pool flavors), and Kueue's accounting of both in `status`. The root
Cohort holds every pool's capacity less what teams are guaranteed there.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any, NamedTuple

from gpuctl.constants import (
    BUDGET_FLAVOR,
    GPU_RESOURCE,
    GPU_UNITS,
    LEGACY_QUOTA_GPU,
    QUOTA_CPU,
    QUOTA_CPU_PER_CORE,
    QUOTA_GPU,
    QUOTA_MEMORY,
    UNLIMITED,
    Labels,
)
from gpuctl.domain.gpus import quantity_gpus
from gpuctl.domain.objects import annotations, condition, is_gpuctl_object, labels, name
from gpuctl.domain.pools import pool_capacities, pool_names
from gpuctl.domain.sharing import units_to_gpus
from gpuctl.quantity import QuantityError, format_bytes, format_quantity, parse_quantity
from queues.model import PoolGuarantee, TeamQuota
from queues.objects import cohort


def _gpus(v: Any) -> int:
    try:
        return quantity_gpus(str(v)) if v is not None else 0
    except ValueError:
        return 0


def _units(v: Any) -> int:
    """A quantity of runwhere.ai/quota-gpu-840ths (units of 1/840 GPU); unreadable counts 0."""
    try:
        return max(0, int(parse_quantity(str(v)))) if v is not None else 0
    except QuantityError:
        return 0


def cores(milli: str) -> str:
    """runwhere.ai/quota-cpu (milli-CPUs) -> cores as a plain decimal string."""
    try:
        v = (parse_quantity(str(milli)) / Decimal(QUOTA_CPU_PER_CORE)).normalize()
    except QuantityError:
        return "0"
    return f"{v:f}"


def _resources(cq: Mapping[str, Any], flavor_is_budget: bool) -> dict[str, dict[str, Mapping[str, Any]]]:
    """flavor -> resource -> its spec entry (nominalQuota, borrowingLimit) for budget or pool flavors."""
    out: dict[str, dict[str, Mapping[str, Any]]] = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for fl in group.get("flavors") or []:
            if (fl.get("name") == BUDGET_FLAVOR) == flavor_is_budget:
                out[fl.get("name", "")] = {r.get("name", ""): r for r in fl.get("resources") or []}
    return out


def cluster_queue_flavors(cq: Mapping[str, Any]) -> frozenset[str]:
    """Every flavor a ClusterQueue has quota in (any ClusterQueue, gpuctl's or not)."""
    return frozenset(
        fl["name"]
        for group in (cq.get("spec") or {}).get("resourceGroups") or []
        for fl in group.get("flavors") or []
        if isinstance(fl, dict) and isinstance(fl.get("name"), str)
    )


def pool_guarantees(cq: Mapping[str, Any]) -> dict[str, PoolGuarantee]:
    """Per-pool guarantees of the quota as written (annotation runwhere.ai/pool-guarantees on the
    team ClusterQueue); pools with nothing guaranteed are left out. Kept for display: the team's
    whole quota is what Kueue reclaims for it (docs/queueing.md)."""
    raw = annotations(cq).get(Labels.POOL_GUARANTEES)
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    out = {}
    for pool, g in (data if isinstance(data, dict) else {}).items():
        if not isinstance(g, dict):
            continue
        pg = PoolGuarantee(
            gpu=_gpus(g.get("gpu")), cpu=str(g.get("cpu", "0")), memory=str(g.get("memory", "0"))
        )
        if pg.gpu or pg.cpu not in ("0", "") or pg.memory not in ("0", ""):
            out[pool] = pg
    return out


def team_from_cluster_queue(cq: Mapping[str, Any]) -> TeamQuota:
    """Read a gpuctl team ClusterQueue back into the TeamQuota it was made from. One made before issue
    32 holds its GPU budget in whole GPUs (LEGACY_QUOTA_GPU): read as such, so the next write of the
    ClusterQueue (apply, a pool change) moves it to QUOTA_GPU without changing the team's quota."""
    budget = _resources(cq, flavor_is_budget=True).get(BUDGET_FLAVOR, {})

    def nominal(res: str) -> str | None:
        v = str((budget.get(res) or {}).get("nominalQuota", UNLIMITED[res]))
        return None if v == UNLIMITED[res] else v

    cpu = nominal(QUOTA_CPU)
    if QUOTA_GPU not in budget and LEGACY_QUOTA_GPU in budget:
        legacy = budget[LEGACY_QUOTA_GPU]
        gpu_v, borrow_v = str(legacy.get("nominalQuota", "1M")), legacy.get("borrowingLimit")
        gpu = None if gpu_v == "1M" else _gpus(gpu_v)
        borrow = None if borrow_v is None else _gpus(borrow_v)
    else:
        units = nominal(QUOTA_GPU)
        gpu = None if units is None else _units(units) // GPU_UNITS
        borrow_u = (budget.get(QUOTA_GPU) or {}).get("borrowingLimit")
        borrow = None if borrow_u is None else _units(borrow_u) // GPU_UNITS
    return TeamQuota(
        namespace=name(cq),
        quota_name=labels(cq).get(Labels.QUOTA, ""),
        gpu=gpu,
        cpu=None if cpu is None else cores(cpu),
        memory=nominal(QUOTA_MEMORY),
        borrowing_limit=borrow,
        pools=pool_guarantees(cq),
        description=annotations(cq).get(Labels.DESCRIPTION),
    )


class TeamUsage(NamedTuple):
    """Kueue's accounting of a team ClusterQueue (status.flavorsReservation: quota held by Workloads
    that reserved it, which is what keeps others out)."""

    budget_used: Mapping[str, str] = MappingProxyType({})  # quota-* resource -> total
    budget_borrowed: Mapping[str, str] = MappingProxyType({})  # quota-* resource -> beyond nominal
    pool_gpus: Mapping[str, int] = MappingProxyType({})  # pool -> GPUs reserved
    pool_borrowed: Mapping[str, int] = MappingProxyType({})  # pool -> GPUs beyond its guarantee
    pending: int = 0
    admitted: int = 0
    active: bool = False
    inactive_reason: str = ""

    @property
    def gpu_units(self) -> int:
        """GPU equivalents of budget held, in 1/840 GPU (whole GPUs and slices together)."""
        return _units(self.budget_used.get(QUOTA_GPU, "0"))

    @property
    def gpus(self) -> int | float:
        """GPU equivalents of budget held (units_to_gpus: 1, 0.14, 2.5)."""
        return units_to_gpus(self.gpu_units)

    @property
    def gpus_over_quota(self) -> int | float:
        return units_to_gpus(_units(self.budget_borrowed.get(QUOTA_GPU, "0")))


def flavors_reservation(cq: Mapping[str, Any]) -> dict[str, dict[str, Mapping[str, Any]]]:
    """flavor -> resource -> its entry ({total, borrowed}) of a ClusterQueue's
    status.flavorsReservation: Kueue's count of the quota its Workloads hold. The one reading of that
    field (team_usage, pool_reservations, flavor_reserved, explain's snapshot all go through it)."""
    out: dict[str, dict[str, Mapping[str, Any]]] = {}
    for fr in (cq.get("status") or {}).get("flavorsReservation") or []:
        entries = out.setdefault(str(fr.get("name", "")), {})
        for r in fr.get("resources") or []:
            entries[str(r.get("name", ""))] = r
    return out


def team_usage(cq: Mapping[str, Any]) -> TeamUsage:
    st = cq.get("status") or {}
    used: dict[str, str] = {}
    borrowed: dict[str, str] = {}
    pool_gpus: dict[str, int] = {}
    pool_borrowed: dict[str, int] = {}
    for flavor, resources in flavors_reservation(cq).items():
        for res, r in resources.items():
            if flavor == BUDGET_FLAVOR:
                used[res] = str(r.get("total", "0"))
                borrowed[res] = str(r.get("borrowed", "0"))
            elif res == GPU_RESOURCE:
                pool_gpus[flavor] = _gpus(r.get("total"))
                pool_borrowed[flavor] = _gpus(r.get("borrowed"))
    active = condition(cq, "Active")
    return TeamUsage(
        budget_used=used,
        budget_borrowed=borrowed,
        pool_gpus=pool_gpus,
        pool_borrowed=pool_borrowed,
        pending=int(st.get("pendingWorkloads") or 0),
        admitted=int(st.get("admittedWorkloads") or 0),
        active=active.get("status") == "True",
        inactive_reason=active.get("reason") or "Inactive",
    )


def pool_reservations(cluster_queues: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Flavor (a pool's flavor is named after it) -> GPUs held there by Workloads that reserved quota,
    summed over the ClusterQueues' status.flavorsReservation: Kueue's own count, for gpuctl's team
    queues and any other ClusterQueue naming the flavor alike. Reading it costs one small list where
    summing the Workloads (gpuctl.domain.workload.reserved_gpus) costs a list of every Workload."""
    out: dict[str, int] = {}
    for cq in cluster_queues:
        for flavor, gpus in team_usage(cq).pool_gpus.items():
            out[flavor] = out.get(flavor, 0) + gpus
    return out


def flavor_reserved(cluster_queues: Iterable[Mapping[str, Any]], flavor: str) -> bool:
    """Whether any Workload holds quota of `flavor` (any resource: a CPU-only pool's jobs hold no GPU),
    by the ClusterQueues' status.flavorsReservation."""
    for cq in cluster_queues:
        for r in flavors_reservation(cq).get(flavor, {}).values():
            try:
                if parse_quantity(str(r.get("total") or "0")) != 0:
                    return True
            except QuantityError:
                return True  # unreadable: assume held (the caller then reads the Workloads)
    return False


# How a budget resource reads in words (budget_shortfall): its name, and its amount in the ClusterQueue's
# units (1/840 GPU, milli-CPU, bytes) as people write it.
_BUDGET_WORDS = {
    QUOTA_GPU: ("GPU", lambda v: f"{units_to_gpus(int(v))} GPUs"),
    QUOTA_CPU: ("CPU", lambda v: f"{format_quantity(v / QUOTA_CPU_PER_CORE)} cores"),
    QUOTA_MEMORY: ("memory", lambda v: format_bytes(v)),
}


def budget_shortfall(cq: Mapping[str, Any] | None, need: Mapping[str, Decimal]) -> str:
    """Why a team cannot take `need` more on its own quota ("" when it can): `need` is budget resource ->
    amount in the ClusterQueue's units (QUOTA_GPU in 1/840 GPU, QUOTA_CPU in milli-CPU, QUOTA_MEMORY in
    bytes, what Kueue's transformations charge), compared with the nominal quota of the budget flavor less
    what its Workloads hold (status.flavorsReservation). Borrowing is not counted: this is what the quota
    entitles the team to. A resource without quota (gpuctl's UNLIMITED) never falls short."""
    if cq is None:
        return "its namespace has no team quota"
    budget = _resources(cq, flavor_is_budget=True).get(BUDGET_FLAVOR, {})
    held = flavors_reservation(cq).get(BUDGET_FLAVOR, {})
    out = []
    for res, amount in need.items():
        nominal = (budget.get(res) or {}).get("nominalQuota")
        if amount <= 0 or nominal is None or str(nominal) == UNLIMITED.get(res):
            continue
        try:
            left = parse_quantity(str(nominal)) - parse_quantity(str((held.get(res) or {}).get("total", "0")))
        except QuantityError:
            continue
        if amount > left:
            word, show = _BUDGET_WORDS.get(res, (res, str))
            out.append(f"{word}: needs {show(amount)}, {show(max(left, Decimal(0)))} of its quota left")
    return "; ".join(out)


def team_budgets(cluster_queues: Iterable[Mapping[str, Any]]) -> dict[str, TeamQuota]:
    """Team namespace -> the quota its gpuctl ClusterQueue was made from (team_from_cluster_queue)."""
    return {ns: team_from_cluster_queue(cq) for ns, cq in team_queues(cluster_queues).items()}


def team_reserved_units(cluster_queues: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Team namespace -> budget its Workloads hold in 1/840 GPU, whole GPUs and slices together (Kueue's
    count, team_usage); a team whose ClusterQueue has no status yet is left out (the caller counts its
    jobs instead)."""
    return {
        ns: team_usage(cq).gpu_units for ns, cq in team_queues(cluster_queues).items() if cq.get("status")
    }


def team_reserved_gpus(cluster_queues: Iterable[Mapping[str, Any]]) -> dict[str, int | float]:
    """team_reserved_units as GPU equivalents (1, 0.14, 2.5)."""
    return {ns: units_to_gpus(u) for ns, u in team_reserved_units(cluster_queues).items()}


def cohort_budget_gpus(cohort: Mapping[str, Any] | None) -> int | float:
    """GPUs of budget the root Cohort lends beyond the teams' quotas (its nominal quota of
    runwhere.ai/quota-gpu-840ths on the budget flavor, as GPUs; 0 without a Cohort)."""
    for g in ((cohort or {}).get("spec") or {}).get("resourceGroups") or []:
        for fl in g.get("flavors") or []:
            if fl.get("name") != BUDGET_FLAVOR:
                continue
            for r in fl.get("resources") or []:
                if r.get("name") == QUOTA_GPU:
                    return units_to_gpus(_units(r.get("nominalQuota", "0")))
    return 0


def team_queues(cluster_queues: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Team namespace -> its gpuctl ClusterQueue (foreign ClusterQueues are not teams)."""
    return {name(cq): cq for cq in cluster_queues if is_gpuctl_object(cq)}


def desired_cohort(
    nodes: Iterable[Mapping[str, Any]],
    flavors: Iterable[Mapping[str, Any]],
    cluster_queues: Iterable[Mapping[str, Any]],
) -> dict:
    """The root Cohort for these nodes, pool flavors and team ClusterQueues."""
    pools = pool_capacities(list(nodes), pool_names(flavors))
    teams = [team_from_cluster_queue(cq) for cq in cluster_queues if is_gpuctl_object(cq)]
    return cohort(pools, teams)


def cohort_spec_equal(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> bool:
    """Whether the Cohort in the cluster already has the desired resource groups."""
    if a is None:
        return False
    return (a.get("spec") or {}).get("resourceGroups") == (b.get("spec") or {}).get("resourceGroups")
