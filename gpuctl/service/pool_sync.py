"""Kueue's objects kept in step with the pools: the objects every gpuctl cluster needs (ensure_bootstrap),
the team ClusterQueues listing exactly the pools, the Cohort holding their capacity, and each pool flavor
tolerating its nodes' taints (a Topology Aware Scheduling flavor re-created: Kueue keeps it immutable).

Every write function takes a DryRun: NONE writes, SERVER sends each write with dryRun=All (nothing
persists, so the follow-up syncs that read the cluster back are skipped), CLIENT runs every check
(reads only) and returns what it would do before its first write. Each takes the command's Inventory
(`inv`) when the caller has read the cluster already."""

from __future__ import annotations

import contextlib
import time

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import COHORT_NAME
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.multicluster import team_checks
from gpuctl.domain.objects import is_gpuctl_object
from gpuctl.domain.pools import flavor_immutable, stale_flavors
from gpuctl.domain.teams import cohort_spec_equal, desired_cohort, team_from_cluster_queue
from gpuctl.service.inventory import Inventory
from queues import budget_flavor, cluster_queue, resource_flavor, topology, workload_priority_classes


def ensure_bootstrap(cluster: Cluster, *, dry_run: DryRun = DryRun.NONE) -> None:
    """The priority classes, the node Topology and the budget flavor every gpuctl cluster needs
    (idempotent)."""
    dry_run = DryRun(dry_run)
    if not dry_run.writes:
        return
    for obj in [*workload_priority_classes(), topology(), budget_flavor()]:
        existing = cluster.get_or_none(path(obj["kind"], obj["metadata"]["name"]))
        if existing is None:
            cluster.apply(obj, dry_run=dry_run is DryRun.SERVER)


def sync_queues(
    cluster: Cluster,
    *,
    dry_run: DryRun = DryRun.NONE,
    pools: list[str] | None = None,
    inv: Inventory | None = None,
) -> None:
    """Make every team ClusterQueue list exactly the current pools, and the Cohort hold capacity.
    inv: the caller's cluster-wide Inventory, read after its own writes (else one is read here)."""
    dry_run = DryRun(dry_run)
    if not dry_run.writes:
        return
    inv = inv or Inventory(cluster, None)
    pool_list = inv.pools if pools is None else pools
    # A MultiKueue manager's queues carry its check while some pool is in a worker cluster
    # (docs/multicluster.md).
    checks = team_checks(f for f in inv.flavors if f["metadata"]["name"] in pool_list)
    for cq in inv.cluster_queues:
        desired = cluster_queue(team_from_cluster_queue(cq), pool_list, checks=checks)
        spec = cq.get("spec") or {}
        if spec.get("resourceGroups") != desired["spec"]["resourceGroups"] or spec.get(
            "admissionChecksStrategy"
        ) != desired["spec"].get("admissionChecksStrategy"):
            cluster.apply(desired, dry_run=dry_run is DryRun.SERVER)
    # The Cohort reads the teams' budgets from the same ClusterQueues: applying the desired queues changes
    # which pools they list, never a team's budget (team_from_cluster_queue reads the same TeamQuota back).
    sync_cohort(cluster, dry_run=dry_run, pools=pool_list, inv=inv)


def sync_cohort(
    cluster: Cluster,
    *,
    dry_run: DryRun = DryRun.NONE,
    pools: list[str] | None = None,
    inv: Inventory | None = None,
) -> dict:
    """Apply the desired Cohort; with no pool left, delete gpuctl's Cohort instead.

    An empty `spec: {}` cannot be applied (the API server stores it as null and rejects the object),
    and a Cohort without resource groups holds nothing: the team ClusterQueues keep naming it (Kueue
    treats a missing Cohort as an implicit, empty one) and the next pool creates it again. `gpuctl
    serve`'s reconciler leaves a missing Cohort alone.
    """
    dry_run = DryRun(dry_run)
    inv = inv or Inventory(cluster, None)
    flavors = inv.flavors
    if pools is not None:
        flavors = [resource_flavor(p) for p in pools]
    desired = desired_cohort(inv.nodes, flavors, inv.cluster_queues)
    if not dry_run.writes:
        return desired
    if not (desired.get("spec") or {}).get("resourceGroups"):
        if inv.cohort is not None and is_gpuctl_object(inv.cohort):
            cluster.delete(path("Cohort", COHORT_NAME), dry_run=dry_run is DryRun.SERVER)
        return desired
    if not cohort_spec_equal(inv.cohort, desired):
        cluster.apply(desired, dry_run=dry_run is DryRun.SERVER)
    return desired


def set_flavor_tolerations(
    cluster: Cluster, flavor: dict, tolerations: list[dict], *, dry_run: DryRun = DryRun.NONE
) -> None:
    """Give a pool flavor these tolerations. A Topology Aware Scheduling flavor is immutable in Kueue
    (CRD rule "tolerations are immutable when topologyName is set"), so it is deleted (its in-use
    finalizer lifted: gpuctl owns it) and created again with the same name; the team ClusterQueues
    keep naming it, admitted work keeps running and Kueue re-syncs its TAS usage."""
    dry_run = DryRun(dry_run)
    name = flavor["metadata"]["name"]
    if not flavor_immutable(flavor):
        cluster.merge_patch(
            path("ResourceFlavor", name),
            {"spec": {"tolerations": tolerations or None}},
            dry_run=dry_run is DryRun.SERVER,
        )
        return
    if not dry_run.persists:
        return
    new = {
        "apiVersion": flavor.get("apiVersion", "kueue.x-k8s.io/v1beta2"),
        "kind": "ResourceFlavor",
        "metadata": {k: v for k, v in flavor["metadata"].items() if k in ("name", "labels", "annotations")},
        "spec": {k: v for k, v in flavor["spec"].items() if k != "tolerations"},
    }
    if tolerations:
        new["spec"]["tolerations"] = tolerations
    if flavor["metadata"].get("finalizers"):
        with contextlib.suppress(ApiError):
            cluster.merge_patch(path("ResourceFlavor", name), {"metadata": {"finalizers": None}})
    cluster.delete(path("ResourceFlavor", name))
    wait_flavor_gone(cluster, name)
    cluster.create(new)


FLAVOR_GONE_SECONDS = 30.0


def wait_flavor_gone(cluster: Cluster, name: str, seconds: float = FLAVOR_GONE_SECONDS) -> bool:
    """Wait (as `kubectl delete` does by default) until a deleted flavor is gone: Kueue lifts its in-use
    finalizer once no ClusterQueue or Cohort names it, asynchronously. False when it is still there."""
    deadline = time.monotonic() + seconds
    while cluster.get_or_none(path("ResourceFlavor", name)) is not None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def sync_flavors(
    cluster: Cluster, *, dry_run: DryRun = DryRun.NONE, inv: Inventory | None = None
) -> list[str]:
    """Make every pool flavor tolerate its nodes' taints now (gpuctl.domain.pools.stale_flavors); the
    reconciler of `gpuctl serve` does the same continuously. Returns the flavors changed. inv: as
    sync_queues'."""
    dry_run = DryRun(dry_run)
    inv = inv or Inventory(cluster, None)
    stale = stale_flavors(inv.flavors, inv.nodes)
    if dry_run.writes:
        by_name = {f["metadata"]["name"]: f for f in inv.flavors}
        for flavor, tolerations in sorted(stale.items()):
            set_flavor_tolerations(cluster, by_name[flavor], tolerations, dry_run=dry_run)
    return sorted(stale)
