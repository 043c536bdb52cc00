"""Team quotas: a ClusterQueue + LocalQueue per team namespace, enforced by Kueue."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gpuctl.cluster import Cluster, path
from gpuctl.constants import (
    GPU_UNITS,
    LIMIT_RANGE_NAME,
    LOCAL_QUEUE_NAME,
    MANAGED_BY_VALUE,
    QUOTA_CPU,
    QUOTA_MEMORY,
    Labels,
)
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.multicluster import team_checks, worker_clusters
from gpuctl.domain.objects import identity, is_gpuctl_object
from gpuctl.domain.pools import pool_capacities
from gpuctl.domain.sharing import units_to_gpus
from gpuctl.domain.teams import cores, team_from_cluster_queue, team_usage
from gpuctl.quantity import QuantityError, format_quantity, parse_quantity
from gpuctl.service.convert import team_limit_range, team_quotas
from gpuctl.service.errors import Conflict, NotFound, ServiceError
from gpuctl.service.idle_policy import write_queue_policy
from gpuctl.service.inventory import Inventory
from gpuctl.service.multicluster import remove_worker_team, sync_workers
from gpuctl.service.pool_sync import ensure_bootstrap, sync_cohort
from queues import TeamQuota, cluster_queue, local_queue, team_namespace

if TYPE_CHECKING:  # annotations only: a read (`get quotas`, `describe job`) never loads pydantic
    from gpuctl.spec import QuotaSpec
    from gpuctl.spec.models import QuotaEntry


def apply_quota(
    cluster: Cluster, spec: QuotaSpec, *, create: bool, dry_run: DryRun = DryRun.NONE
) -> list[str]:
    """Create or update every team of a quota document. Checks everything before the first write, from
    one Inventory; after the writes, one more for the Cohort and the worker clusters.

    CLIENT: the checks and the lines, no write; SERVER: every write with dryRun=All."""
    dry_run = DryRun(dry_run)
    inv = Inventory(cluster, None)
    teams = _checked_teams(cluster, spec, inv, create=create)
    created: list[tuple[str, str | None]] = []
    lines = []
    try:
        ensure_bootstrap(cluster, dry_run=dry_run)
        for t in teams:
            lines += _write_team(cluster, spec, t, inv, created, dry_run)
        if dry_run.persists:
            after = Inventory(cluster, None)  # one read of what the writes made, for both
            sync_cohort(cluster, inv=after)
            # a MultiKueue manager's workers hold every team (docs/multicluster.md)
            lines += sync_workers(cluster, after)
    except Exception:
        if dry_run.persists:
            for kind, name in reversed(created):
                if kind == "ClusterQueue":
                    cluster.delete(path("LocalQueue", LOCAL_QUEUE_NAME, name))
                cluster.delete(path(kind, name))
        raise
    return lines


def _checked_teams(cluster: Cluster, spec: QuotaSpec, inv: Inventory, *, create: bool) -> list[TeamQuota]:
    """The quota's teams, once each is free to take (no foreign ClusterQueue, no other quota on a
    create), names existing pools, and the guarantees of every team fit each pool's capacity; a GPU
    guarantee gets the pool's CPU and memory per GPU (with_proportional_guarantees)."""
    teams = team_quotas(spec)
    for t in teams:
        cq = cluster.get_or_none(path("ClusterQueue", t.namespace))
        if cq is not None and not is_gpuctl_object(cq):
            raise Conflict(
                f"namespace {t.namespace}: a ClusterQueue {t.namespace} exists that gpuctl did not create"
            )
        if cq is not None and create:
            owner = (cq["metadata"].get("labels") or {}).get(Labels.QUOTA, "?")
            raise Conflict(
                f"namespace {t.namespace} already has quota {owner}: use `gpuctl apply -f` to change it"
            )
        unknown = sorted(set(t.pools) - set(inv.pools))
        if unknown:
            raise NotFound(
                f"quota {spec.quota.name}: namespace {t.namespace}: pool {', '.join(unknown)} does not exist"
            )
    # Guarantees must fit the pools' capacity, counting other teams' guarantees too.
    capacity = {c.name: c for c in pool_capacities(inv.nodes, inv.pools)}
    teams = [with_proportional_guarantees(t, capacity) for t in teams]
    new = {t.namespace for t in teams}
    others = [team_from_cluster_queue(cq) for ns, cq in inv.team_queues.items() if ns not in new]
    for pool, cap in capacity.items():
        total = sum(t.pools[pool].gpu for t in [*teams, *others] if pool in t.pools)
        if total > cap.gpu:
            raise ServiceError(
                f"quota {spec.quota.name}: teams are guaranteed {total} GPUs in pool {pool}, "
                f"which has {cap.gpu}; lower the `pools:` guarantees"
            )
    return teams


def _write_team(
    cluster: Cluster,
    spec: QuotaSpec,
    t: TeamQuota,
    inv: Inventory,
    created: list[tuple[str, str | None]],
    dry_run: DryRun,
) -> list[str]:
    """A team's namespace (created, or labelled as a team's), ClusterQueue over every pool, LocalQueue
    and LimitRange; what it created is appended to `created` (for the caller's rollback)."""
    writes, server_dry = dry_run.writes, dry_run is DryRun.SERVER
    lines = []
    ns = cluster.get_or_none(path("Namespace", t.namespace))
    if ns is None:
        if writes:
            cluster.create(team_namespace(t), dry_run=server_dry)
            created.append(("Namespace", t.namespace))
        lines.append(f"namespace/{t.namespace} created")
    changed = not writes  # a client dry run writes nothing to compare: `configured`, as before
    if ns is not None and writes:
        labels = team_namespace(t, created_by_gpuctl=False)["metadata"]["labels"]
        after = cluster.merge_patch(
            path("Namespace", t.namespace), {"metadata": {"labels": labels}}, dry_run=server_dry
        )
        changed |= _differs(ns, after)
    was = t.namespace in inv.team_queues
    if writes:
        cq = cluster_queue(t, inv.pools, checks=team_checks(inv.flavors))
        changed |= _differs(inv.team_queues.get(t.namespace), cluster.apply(cq, dry_run=server_dry))
        if not was:
            created.append(("ClusterQueue", t.namespace))
        # A server dry run did not create the namespace: its LocalQueue cannot be checked.
        if not (server_dry and ns is None):
            lq = local_queue(t.namespace)
            before = cluster.get_or_none(path("LocalQueue", LOCAL_QUEUE_NAME, t.namespace))
            changed |= _differs(before, cluster.apply(lq, dry_run=server_dry))
            changed |= _sync_limit_range(cluster, t.namespace, spec.entries()[t.namespace], dry_run=dry_run)
    word = "created" if not was else "configured" if changed else "unchanged"
    lines.append(f"quota/{spec.quota.name} {word} for namespace {t.namespace}")
    idle = write_queue_policy(  # docs/utilisation.md: the quota's idle policy, on the team's ClusterQueue
        cluster, t.namespace, spec.idle, inv.team_queues.get(t.namespace), spec.quota.name, dry_run=dry_run
    )
    return lines + ([idle] if idle else [])


def _differs(before: dict | None, after: dict) -> bool:
    """Whether a write changed what an object says (spec, data, labels, annotations): kubectl's
    `unchanged` for an apply that changed nothing, with or without dryRun (whose answer is the object as
    it would be)."""
    if before is None:
        return True

    def said(o: dict) -> Any:
        meta = o.get("metadata") or {}
        return _by_value((o.get("spec"), meta.get("labels") or {}, meta.get("annotations") or {}))

    return said(before) != said(after)


def _by_value(v: Any) -> Any:
    """Quantities compared by value: Kueue's webhook stores `64k` where gpuctl sent `64000`."""
    if isinstance(v, dict):
        return {k: _by_value(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_by_value(x) for x in v]
    if isinstance(v, str):
        try:
            return parse_quantity(v)
        except QuantityError:
            return v
    return v


def _sync_limit_range(cluster: Cluster, namespace: str, entry: QuotaEntry, *, dry_run: DryRun) -> bool:
    """The team's LimitRange as its quota entry says; gpuctl's is removed with `limitRange: false`.
    Whether that changed it."""
    desired = team_limit_range(namespace, entry)
    existing = cluster.get_or_none(path("LimitRange", LIMIT_RANGE_NAME, namespace))
    if desired is not None:
        return _differs(existing, cluster.apply(desired, dry_run=dry_run is DryRun.SERVER))
    return _delete_limit_range(cluster, namespace, dry_run=dry_run, existing=existing)


def _delete_limit_range(
    cluster: Cluster, namespace: str, *, dry_run: DryRun, existing: dict | None = None
) -> bool:
    """gpuctl's LimitRange of the namespace removed; whether there was one."""
    if existing is None:
        existing = cluster.get_or_none(path("LimitRange", LIMIT_RANGE_NAME, namespace))
    if existing is not None and is_gpuctl_object(existing):
        cluster.delete(path("LimitRange", LIMIT_RANGE_NAME, namespace), dry_run=dry_run is DryRun.SERVER)
        return True
    return False


def with_proportional_guarantees(team: TeamQuota, capacity: dict) -> TeamQuota:
    """Give a GPU guarantee the pool's CPU and memory per GPU when the YAML names only GPUs.

    Kueue reclaims a guarantee from borrowers only if the whole request (cpu and memory too) fits in
    the team's own nominal quota (QuantitiesFitInQuota in Kueue's hierarchical preemption); a
    GPU-only guarantee would never be reclaimed.
    """
    pools = {}
    for name, g in team.pools.items():
        cap = capacity.get(name)
        if cap and cap.gpu and g.gpu and parse_quantity(g.cpu) == 0 and parse_quantity(g.memory) == 0:
            share = Decimal(g.gpu) / Decimal(cap.gpu)
            g = g._replace(
                cpu=format_quantity(parse_quantity(cap.cpu) * share),
                memory=format_quantity(parse_quantity(cap.memory) * share),
            )
        pools[name] = g
    return team._replace(pools=pools)


def delete_quota(
    cluster: Cluster,
    name: str,
    *,
    delete_namespace: bool = False,
    dry_run: DryRun = DryRun.NONE,
    namespaces: list[str] | None = None,
) -> list[str]:
    """Remove a quota's queues. Namespaces stay unless delete_namespace and gpuctl created them."""
    dry_run = DryRun(dry_run)
    writes, server_dry = dry_run.writes, dry_run is DryRun.SERVER
    inv = Inventory(cluster, None)
    cqs = [
        cq
        for cq in inv.cluster_queues
        if (cq["metadata"].get("labels") or {}).get(Labels.QUOTA) == name
        and (namespaces is None or cq["metadata"]["name"] in namespaces)
    ]
    if not cqs:
        raise NotFound(f"quota {name} not found", resource="quotas", name=name)
    workers = worker_clusters(inv.flavors) if dry_run.persists else []  # MultiKueue's (docs/multicluster.md)
    lines = []
    for cq in cqs:
        ns = cq["metadata"]["name"]
        lq = cluster.get_or_none(path("LocalQueue", LOCAL_QUEUE_NAME, ns))
        if writes:
            if lq is not None and is_gpuctl_object(lq):
                cluster.delete(path("LocalQueue", LOCAL_QUEUE_NAME, ns), dry_run=server_dry)
            _delete_limit_range(cluster, ns, dry_run=dry_run)
            cluster.delete(path("ClusterQueue", ns), dry_run=server_dry)
            if dry_run.persists:
                remove_worker_team(cluster, ns, workers)
        lines.append(f"quota/{name} deleted for namespace {ns}")
        nsobj = cluster.get_or_none(path("Namespace", ns))
        if nsobj is None:
            continue
        ours = (nsobj["metadata"].get("labels") or {}).get(Labels.MANAGED_BY) == MANAGED_BY_VALUE
        if delete_namespace and ours:
            if writes:
                cluster.delete(path("Namespace", ns), dry_run=server_dry)
            lines.append(f"namespace/{ns} deleted")
        else:
            if writes:
                cluster.merge_patch(
                    path("Namespace", ns),
                    {"metadata": {"labels": {Labels.NAMESPACE: None, Labels.QUOTA: None}}},
                    dry_run=server_dry,
                )
            if delete_namespace:
                lines.append(f"namespace/{ns} kept: gpuctl did not create it")
    if dry_run.persists:
        sync_cohort(cluster)
    return lines


def quota_rows(cluster: Cluster, namespace: str | None = None, *, metadata: bool = False) -> list[dict]:
    """One row per team: budget and Kueue's usage (reserved), borrowing, guarantees. metadata=True adds
    the team's ClusterQueue's uid, creationTimestamp and labels (`metadata`), what `get quotas -o json`
    prints."""
    inv = Inventory(cluster, None)
    rows = []
    for ns, cq in sorted(inv.team_queues.items()):
        if namespace and ns != namespace:
            continue
        t = team_from_cluster_queue(cq)
        u = team_usage(cq)
        rows.append(
            {
                "name": t.quota_name,
                "namespace": ns,
                # GPU equivalents: whole GPUs and slices (MIG, time-slicing) in one unit, the team's
                # budget's (docs/sharing.md); free = quota - used, None when unlimited.
                "gpu": {
                    "used": u.gpus,
                    "quota": t.gpu,
                    "free": None if t.gpu is None else units_to_gpus(max(t.gpu * GPU_UNITS - u.gpu_units, 0)),
                    "borrowed": u.gpus_over_quota,
                    "borrowing_limit": t.borrowing_limit,
                },
                "cpu": {"used": cores(u.budget_used.get(QUOTA_CPU, "0")), "quota": t.cpu},
                "memory": {"used": u.budget_used.get(QUOTA_MEMORY, "0"), "quota": t.memory},
                "guarantees": {p: g.gpu for p, g in t.pools.items()},
                "pending_workloads": u.pending,
                "admitted_workloads": u.admitted,
                "status": "Active" if u.active else u.inactive_reason,
                "description": t.description,
            }
        )
        if metadata:
            rows[-1]["metadata"] = identity(cq)
    return rows
