"""Pools: create/apply/delete (node labels + Kueue flavor + capacity), listing and describing."""

from __future__ import annotations

import contextlib
import time

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import BUDGET_FLAVOR, COHORT_NAME, DEFAULT_POOL, Labels
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.gpus import workload_gpus
from gpuctl.domain.objects import is_gpuctl_object
from gpuctl.domain.pools import (
    desired_flavor,
    flavor_immutable,
    node_gpu_type,
    node_gpus,
    node_pool,
    node_ready,
    stale_flavors,
)
from gpuctl.domain.status import WAITING_STATES, State
from gpuctl.domain.teams import (
    cohort_spec_equal,
    desired_cohort,
    flavor_reserved,
    team_from_cluster_queue,
    team_usage,
)
from gpuctl.domain.workload import WorkloadState, assigned_flavors, workload_state
from gpuctl.service.access import Permissions
from gpuctl.service.convert import node_label_patch
from gpuctl.service.errors import Conflict, NotFound, ServiceError
from gpuctl.service.inventory import Inventory
from gpuctl.service.jobs import Job, collect_jobs
from gpuctl.service.usage import PoolUsage, pool_usage
from gpuctl.spec import PoolSpec
from queues import budget_flavor, cluster_queue, resource_flavor, topology, workload_priority_classes


def list_pools(cluster: Cluster, perms: Permissions | None = None) -> list[PoolUsage]:
    """`get pools`: nodes, flavors and ClusterQueues (what pool viewers read), and the waiting
    Workloads the caller may read; no pod."""
    usage = pool_usage(Inventory(cluster, None, perms=perms))
    return [usage[p] for p in sorted(usage)]


def readable_jobs(cluster: Cluster, inv: Inventory) -> tuple[list[Job], list[str] | None]:
    """The jobs of every namespace for a caller who may list them, else of the team namespaces where
    it may (and those namespaces; None: every one)."""
    spaces = inv.readable_namespaces("jobs", "batch")
    if spaces is None:
        return collect_jobs(inv), None
    jobs = [j for ns in spaces for j in collect_jobs(Inventory(cluster, ns, perms=inv.perms))]
    return jobs, spaces


def describe_pool(cluster: Cluster, name: str, perms: Permissions | None = None) -> dict:
    """A pool's numbers, nodes, teams and jobs. Pod use (GPU Allocated) only for a caller who may list
    every pod; jobs of the namespaces the caller may read (`jobs_namespaces`; None: every one)."""
    inv = Inventory(cluster, None, perms=perms)
    if name not in inv.pools:
        raise NotFound(f"pool {name} not found")
    u = pool_usage(inv, with_pods=inv.sees_every_pod)[name]
    nodes = [n for n in inv.nodes if node_pool(n) == name]
    teams = []
    for ns, cq in inv.team_queues.items():
        guaranteed = team_from_cluster_queue(cq).pools.get(name)
        teams.append(
            {
                "team": ns,
                "gpus_in_use": team_usage(cq).pool_gpus.get(name, 0),
                "guaranteed": guaranteed.gpu if guaranteed else 0,
            }
        )
    found, spaces = readable_jobs(cluster, inv)
    jobs = [
        {
            "name": j.name,
            "namespace": j.namespace,
            "kind": j.kind,
            "status": j.status,
            "position": j.position,
            "gpus": workload_gpus(j.workload) if j.workload else 0,
        }
        for j in found
        if j.labels.get(Labels.POOL) == name
    ]
    return {
        **u.as_dict(),
        "nodes": [
            {
                "name": n["metadata"]["name"],
                "ready": node_ready(n),
                "gpus": node_gpus(n, "capacity"),
                "gpu_type": node_gpu_type(n),
            }
            for n in nodes
        ],
        "teams": sorted(teams, key=lambda t: t["team"]),
        "jobs_namespaces": spaces,
        "running": [j for j in jobs if j["status"] not in (*WAITING_STATES, State.PENDING)],
        "queued": [j for j in jobs if j["status"] in WAITING_STATES],
    }


# ----------------------------------------------------------------------------- writes
# Every write function takes a DryRun: NONE writes, SERVER sends each write with dryRun=All (nothing
# persists, so the follow-up syncs that read the cluster back are skipped), CLIENT runs every check
# (reads only) and returns what it would do before its first write.
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


def sync_queues(cluster: Cluster, *, dry_run: DryRun = DryRun.NONE, pools: list[str] | None = None) -> None:
    """Make every team ClusterQueue list exactly the current pools, and the Cohort hold capacity."""
    dry_run = DryRun(dry_run)
    if not dry_run.writes:
        return
    inv = Inventory(cluster, None)
    pool_list = inv.pools if pools is None else pools
    for cq in inv.cluster_queues:
        desired = cluster_queue(team_from_cluster_queue(cq), pool_list)
        if (cq.get("spec") or {}).get("resourceGroups") != desired["spec"]["resourceGroups"]:
            cluster.apply(desired, dry_run=dry_run is DryRun.SERVER)
    sync_cohort(cluster, dry_run=dry_run, pools=pool_list)


def sync_cohort(cluster: Cluster, *, dry_run: DryRun = DryRun.NONE, pools: list[str] | None = None) -> dict:
    """Apply the desired Cohort; with no pool left, delete gpuctl's Cohort instead.

    An empty `spec: {}` cannot be applied (the API server stores it as null and rejects the object),
    and a Cohort without resource groups holds nothing: the team ClusterQueues keep naming it (Kueue
    treats a missing Cohort as an implicit, empty one) and the next pool creates it again. `gpuctl
    serve`'s reconciler leaves a missing Cohort alone.
    """
    dry_run = DryRun(dry_run)
    inv = Inventory(cluster, None)
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
    deadline = time.monotonic() + 30
    while cluster.get_or_none(path("ResourceFlavor", name)) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    cluster.create(new)


def sync_flavors(cluster: Cluster, *, dry_run: DryRun = DryRun.NONE) -> list[str]:
    """Make every pool flavor tolerate its nodes' taints now (gpuctl.domain.pools.stale_flavors); the
    reconciler of `gpuctl serve` does the same continuously. Returns the flavors changed."""
    dry_run = DryRun(dry_run)
    inv = Inventory(cluster, None)
    stale = stale_flavors(inv.flavors, inv.nodes)
    if dry_run.writes:
        by_name = {f["metadata"]["name"]: f for f in inv.flavors}
        for flavor, tolerations in sorted(stale.items()):
            set_flavor_tolerations(cluster, by_name[flavor], tolerations, dry_run=dry_run)
    return sorted(stale)


def check_pool_name(name: str) -> None:
    if name == BUDGET_FLAVOR:
        raise ServiceError(f"pool name {name} is reserved by gpuctl: choose another name")


def apply_pool(cluster: Cluster, spec: PoolSpec, *, create: bool, dry_run: DryRun = DryRun.NONE) -> list[str]:
    """Label the pool's nodes, create its flavor, update capacity. All or nothing."""
    dry_run = DryRun(dry_run)
    name = spec.pool.name
    check_pool_name(name)
    inv = Inventory(cluster, None)
    nodes = {n["metadata"]["name"]: n for n in inv.nodes}
    missing = sorted(set(spec.nodes) - set(nodes))
    if missing:
        raise NotFound(f"pool {name}: nodes not found: {', '.join(missing)} (gpuctl get nodes lists them)")
    for n in sorted(spec.nodes):
        other = node_pool(nodes[n])
        if other and other != name:
            raise Conflict(
                f"pool {name}: node {n} is in pool {other}; remove it from {other} first "
                f"(gpuctl apply -f the {other} file without it) or move it with "
                f"`gpuctl label node {n} {Labels.POOL}={name} --overwrite`"
            )
    flavor = cluster.get_or_none(path("ResourceFlavor", name))
    if flavor is not None and not is_gpuctl_object(flavor):
        raise Conflict(
            f"pool {name}: a ResourceFlavor {name} exists that gpuctl did not create; choose another name"
        )
    if create and flavor is not None:
        raise Conflict(f"pool {name} already exists: use `gpuctl apply -f` to change it")
    leaving = sorted(n for n, obj in nodes.items() if node_pool(obj) == name and n not in spec.nodes)
    lines = [f"pool/{name} {'created' if flavor is None else 'configured'}"]
    lines += [f"node/{n} labeled {Labels.POOL}={name}" for n in sorted(spec.nodes)]
    lines += [f"node/{n} unlabeled (left pool {name})" for n in leaving]
    if dry_run is DryRun.CLIENT:
        return lines

    server_dry = dry_run is DryRun.SERVER
    previous = {
        n: {k: (nodes[n]["metadata"].get("labels") or {}).get(k) for k in (Labels.POOL, Labels.GPU_TYPE)}
        for n in [*spec.nodes, *leaving]
    }
    touched: list[str] = []
    created_flavor = False
    try:
        ensure_bootstrap(cluster, dry_run=dry_run)
        # The flavor tolerates the taints of the nodes the pool will have.
        members = [
            {
                **n,
                "metadata": {
                    **n["metadata"],
                    "labels": {**(n["metadata"].get("labels") or {}), Labels.POOL: name},
                },
            }
            for k, n in nodes.items()
            if k in spec.nodes
        ]
        rf = desired_flavor(name, members)
        if spec.pool.description:
            rf["metadata"]["annotations"] = {Labels.DESCRIPTION: spec.pool.description}
        cluster.apply(rf, dry_run=server_dry)
        created_flavor = flavor is None
        for n, node in sorted(spec.nodes.items()):
            patch = node_label_patch(n, name, node.gpu_type)
            cluster.merge_patch(path("Node", n), {"metadata": patch["metadata"]}, dry_run=server_dry)
            touched.append(n)
        for n in leaving:
            cluster.merge_patch(
                path("Node", n),
                {"metadata": {"labels": {Labels.POOL: None, Labels.GPU_TYPE: None}}},
                dry_run=server_dry,
            )
            touched.append(n)
        if dry_run.persists:
            sync_queues(cluster)
            sync_flavors(cluster)  # nodes that left may have taken taints away from other pools
    except Exception:
        if dry_run.persists:
            for n in touched:
                with contextlib.suppress(ApiError):
                    cluster.merge_patch(path("Node", n), {"metadata": {"labels": previous[n]}})
            if created_flavor:
                cluster.delete(path("ResourceFlavor", name))
        raise
    return lines


def jobs_using_pool(inv: Inventory, name: str) -> list[str]:
    return sorted(f"{j.namespace}/{j.name}" for j in collect_jobs(inv) if j.labels.get(Labels.POOL) == name)


def delete_pool(
    cluster: Cluster, name: str, *, dry_run: DryRun = DryRun.NONE, keep_running: bool = False
) -> list[str]:
    """Remove a pool: only gpuctl's flavor and labels are removed. Refuses while jobs use it, unless
    keep_running (the product documents' behaviour): the jobs keep running where they are (a running
    pod is never evicted for a node label it no longer matches), and new work naming the pool is
    refused because the pool no longer exists."""
    dry_run = DryRun(dry_run)
    check_pool_name(name)
    inv = Inventory(cluster, None)
    flavor = cluster.get_or_none(path("ResourceFlavor", name))
    if flavor is None:
        if name == DEFAULT_POOL:
            raise NotFound("pool default has not been created (jobs without a pool wait for it)")
        raise NotFound(f"pool {name} not found")
    if not is_gpuctl_object(flavor):
        raise Conflict(f"ResourceFlavor {name} was not created by gpuctl; gpuctl leaves it alone")
    users = jobs_using_pool(inv, name)
    # Which Workloads hold the pool's quota: listed only when a ClusterQueue says some do.
    admitted = (
        sorted(
            f"{w['metadata']['namespace']}/{w['metadata']['name']}"
            for w in inv.workloads_all
            if workload_state(w) in (WorkloadState.QUOTA_RESERVED, WorkloadState.ADMITTED)
            and not w["metadata"].get("deletionTimestamp")
            and name in assigned_flavors(w)
        )
        if flavor_reserved(inv.all_cluster_queues, name)
        else []
    )
    if (users or admitted) and not keep_running:
        raise Conflict(
            f"pool {name} is in use by {', '.join(users or admitted)}; "
            "delete those jobs first (gpuctl delete job NAME -n NS), or pass --keep-running to delete the "
            "pool and leave them running (no new work is admitted to it)"
        )
    nodes = [n["metadata"]["name"] for n in inv.nodes if node_pool(n) == name]
    lines = [f"pool/{name} deleted"] + [f"node/{n} unlabeled" for n in nodes]
    lines += [
        f"job {j} keeps running (pool {name} is gone: it cannot restart there)" for j in users or admitted
    ]
    if dry_run is DryRun.CLIENT:
        return lines
    server_dry = dry_run is DryRun.SERVER
    remaining = [p for p in inv.pools if p != name]
    # The queues stop naming the pool first (a server dry run validates these writes too).
    sync_queues(cluster, pools=remaining, dry_run=dry_run)
    cluster.delete(path("ResourceFlavor", name), dry_run=server_dry)
    for n in nodes:
        cluster.merge_patch(
            path("Node", n),
            {"metadata": {"labels": {Labels.POOL: None, Labels.GPU_TYPE: None}}},
            dry_run=server_dry,
        )
    if dry_run.persists:
        sync_cohort(cluster)
    return lines
