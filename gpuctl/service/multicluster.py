"""Pools in worker clusters through MultiKueue (docs/multicluster.md): the writes and reads.

gpuctl talks to the manager (the cluster of the caller's kubeconfig context) and to each worker through
the caller's kubeconfig context named after the worker (`Cluster.member`). Kueue on the manager talks to
each worker with the kubeconfig in the Secret kueue-system/gpuctl-cluster-<worker>, which gpuctl writes
from the file a pool document names (`pool.clusters.<worker>.kubeconfig`).

On the manager: the MultiKueueCluster and Secret of every worker, one MultiKueueConfig listing them,
one AdmissionCheck naming it, and every team ClusterQueue carrying that check; each pool's flavor
carries the clusters it is in (POOL_CLUSTERS_ANNOTATION). On each worker: the pool's flavor, labels and
taints of its nodes there (gpuctl.service.pools.apply_pool, as on any cluster), and every team's
namespace, LocalQueue and ClusterQueue without a budget: the manager alone enforces the team quotas,
a worker only decides whether its nodes have room.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import (
    KUEUE_NAMESPACE,
    LOCAL_QUEUE_NAME,
    MULTIKUEUE_CHECK,
    MULTIKUEUE_CONFIG,
    POOL_CLUSTERS_ANNOTATION,
    Labels,
)
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.multicluster import (
    clusters_annotation,
    kubeconfig_problem,
    pool_clusters,
    pools_in,
    remote_pools,
    worker_clusters,
)
from gpuctl.domain.pools import pool_names
from gpuctl.domain.teams import team_from_cluster_queue
from gpuctl.service.errors import Conflict, NotFound, ServiceError
from gpuctl.service.inventory import Inventory
from gpuctl.service.members import worker
from gpuctl.service.node_pools import LEFT_POOL, patch_node_pool
from gpuctl.service.pool_sync import ensure_bootstrap, sync_cohort, sync_queues
from gpuctl.service.pools import apply_pool, delete_pool, existing_flavor
from queues import (
    TeamQuota,
    cluster_queue,
    local_queue,
    pool_toleration,
    resource_flavor,
    team_namespace,
    topology,
    topology_name,
)
from queues.multicluster import (
    admission_check,
    cluster_secret,
    cluster_secret_name,
    multikueue_cluster,
    multikueue_config,
)

if TYPE_CHECKING:  # annotations only: a read (`get pools`, `describe job`) never loads pydantic
    from gpuctl.spec import PoolSpec


@dataclass
class ClusterPlan:
    name: str
    member: Cluster
    kubeconfig: bytes | None  # None: the Secret is already on the manager
    nodes: dict[str, dict]  # the pool's nodes found in this worker


def _kubeconfig(cluster: Cluster, pool: str, name: str, file: str | None, base: Path) -> bytes | None:
    where = f"pool {pool}: pool.clusters.{name}"
    if file is None:
        secret = cluster.get_or_none(path("Secret", cluster_secret_name(name), KUEUE_NAMESPACE))
        if secret is None:
            raise NotFound(
                f"{where}: no kubeconfig given and no Secret {KUEUE_NAMESPACE}/{cluster_secret_name(name)} "
                f"on the manager; set pool.clusters.{name}.kubeconfig to the file Kueue should use to reach "
                f"{name}"
            )
        return None
    p = Path(file).expanduser()
    p = p if p.is_absolute() else base / p
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ServiceError(
            f"{where}.kubeconfig: cannot read {p}: {e.strerror}; give the worker's kubeconfig"
        ) from None
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError as e:
        raise ServiceError(f"{where}.kubeconfig: {p} is not valid YAML ({e})") from None
    problem = kubeconfig_problem(doc)
    if problem:
        raise ServiceError(
            f"{where}.kubeconfig: Kueue would refuse {p}: {problem} (docs/multicluster.md, "
            '"Connecting a cluster", makes one)'
        )
    return data


def check_local_pool(inv: Inventory, spec: PoolSpec) -> None:
    """A pool of this cluster's own nodes is refused on a MultiKueue manager (see plan_clusters); inv:
    the command's Inventory."""
    remote = remote_pools(inv.flavors)
    if remote and spec.pool.name not in remote:
        raise Conflict(
            f"pool {spec.pool.name}: this cluster is a MultiKueue manager (pools "
            f"{', '.join(sorted(remote))} are in worker clusters), and Kueue v0.19.2 sends either every job "
            "of a team through MultiKueue or none: set pool.clusters to the worker cluster(s) this pool's "
            "nodes are in"
        )
    if spec.pool.name in remote:
        raise Conflict(
            f"pool {spec.pool.name} is in cluster(s) {', '.join(remote[spec.pool.name])}: keep pool.clusters "
            "in its document (gpuctl delete pool first to make it a pool of this cluster's nodes)"
        )


def plan_clusters(cluster: Cluster, spec: PoolSpec, base: Path, inv: Inventory) -> list[ClusterPlan]:
    """Every check of a pool in worker clusters, before anything is written (reads only); inv: the
    command's Inventory of the manager."""
    name = spec.pool.name
    local = sorted(p for p in pool_names(inv.flavors) if p != name and p not in remote_pools(inv.flavors))
    if local:
        raise Conflict(
            f"pool {name}: pool.clusters: this cluster has pools of its own nodes ({', '.join(local)}); "
            "Kueue v0.19.2 sends either every job of a team through MultiKueue or none, so a manager's pools "
            "are all in worker clusters: delete those pools, or leave pool.clusters out"
        )
    plans = []
    for c, ref in sorted(spec.pool.clusters.items()):
        data = _kubeconfig(cluster, name, c, ref.kubeconfig, base)
        member = worker(cluster, c, f"pool {name}: pool.clusters.{c}: ")
        try:
            nodes = {n["metadata"]["name"]: n for n in member.list(path("Node"))}
        except (ApiError, OSError) as e:
            raise ServiceError(
                f"pool {name}: pool.clusters.{c}: cannot list the nodes of cluster {c} through your context "
                f"{c}: {e}; check that context (kubectl --context {c} get nodes)"
            ) from None
        plans.append(ClusterPlan(c, member, data, {n: nodes[n] for n in spec.nodes if n in nodes}))
    missing = sorted(n for n in spec.nodes if not any(n in p.nodes for p in plans))
    if missing:
        raise NotFound(
            f"pool {name}: nodes: {', '.join(missing)} not found in cluster(s) "
            f"{', '.join(p.name for p in plans)}; `kubectl --context <cluster> get nodes` lists them"
        )
    return plans


def _remote_pool_lines(
    name: str, flavor: dict | None, plans: list, dropped: list[str], clusters: list[str]
) -> list[str]:
    """What apply_remote_pool does, in kubectl's words."""
    lines = [
        f"pool/{name} {'created' if flavor is None else 'configured'} "
        f"in cluster(s) {', '.join(p.name for p in plans)}"
    ]
    for p in plans:
        if p.kubeconfig is not None:
            lines.append(
                f"secret/{cluster_secret_name(p.name)} -n {KUEUE_NAMESPACE} written "
                f"(Kueue's kubeconfig for {p.name})"
            )
        lines.append(f"multikueuecluster/{p.name} configured")
        lines += [f"node/{n} labeled {Labels.POOL}={name} in cluster {p.name}" for n in sorted(p.nodes)]
    lines += [f"pool/{name} removed from cluster {c}" for c in dropped]
    lines.append(f"multikueueconfig/{MULTIKUEUE_CONFIG} clusters: {', '.join(clusters)}")
    return lines


def apply_remote_pool(
    cluster: Cluster,
    spec: PoolSpec,
    *,
    create: bool,
    base: Path,
    inv: Inventory,
    dry_run: DryRun = DryRun.NONE,
) -> list[str]:
    """A pool whose nodes are in worker clusters: its flavor and the MultiKueue objects on the manager,
    the pool and the team queues on each worker. All checks first; a failed write undoes the manager's
    new objects. inv: the command's Inventory of the manager."""
    dry_run = DryRun(dry_run)
    name = spec.pool.name
    flavor = existing_flavor(inv, name, create=create)
    if flavor is not None and not pool_clusters(flavor):
        raise Conflict(
            f"pool {name}: pool.clusters: pool {name} is a pool of this cluster's nodes; delete it first "
            "(gpuctl delete pool) to make it a pool of worker clusters"
        )
    plans = plan_clusters(cluster, spec, base, inv)
    others = [f for f in inv.flavors if f["metadata"]["name"] != name]
    clusters = sorted({*worker_clusters(others), *spec.pool.clusters})
    # Clusters the pool leaves: it goes from there as `gpuctl delete pool` would (refused while jobs use it).
    dropped = {
        c: worker(cluster, c, f"pool {name}: leaving ")
        for c in pool_clusters(flavor)
        if c not in spec.pool.clusters
    }
    for member in dropped.values():
        with contextlib.suppress(NotFound):
            delete_pool(member, name, dry_run=DryRun.CLIENT)
    lines = _remote_pool_lines(name, flavor, plans, sorted(dropped), clusters)
    if dry_run is DryRun.CLIENT:
        return lines
    created: list[str] = []
    try:
        _write_manager(cluster, spec, plans, clusters, created, dry_run)
        _write_workers(cluster, spec, plans, dropped, dry_run)
    except Exception:
        if dry_run.persists and flavor is None:
            with contextlib.suppress(ApiError):
                cluster.delete(path("ResourceFlavor", name))
            for c in created:
                with contextlib.suppress(ApiError):
                    cluster.delete(path("MultiKueueCluster", c))
            sync_manager(cluster)
        raise
    return lines


def _write_manager(
    cluster: Cluster,
    spec: PoolSpec,
    plans: list[ClusterPlan],
    clusters: list[str],
    created: list[str],
    dry_run: DryRun,
) -> None:
    """The manager's side of a pool in worker clusters: each worker's Secret and MultiKueueCluster (the
    new ones appended to `created`), the config over `clusters`, the check, the workers' Topology and
    the pool's flavor; then the team queues name it."""
    server_dry = dry_run is DryRun.SERVER
    ensure_bootstrap(cluster, dry_run=dry_run)
    for p in plans:
        if p.kubeconfig is not None:
            cluster.apply(cluster_secret(p.name, p.kubeconfig), dry_run=server_dry)
        if cluster.get_or_none(path("MultiKueueCluster", p.name)) is None:
            created.append(p.name)
        cluster.apply(multikueue_cluster(p.name), dry_run=server_dry)
    cluster.apply(multikueue_config(clusters), dry_run=server_dry)
    cluster.apply(admission_check(), dry_run=server_dry)
    # the workers' levels (docs/distributed.md), so a gang's level exists here too
    levels = tuple(spec.topology or ())
    if levels and cluster.get_or_none(path("Topology", topology_name(levels))) is None:
        cluster.apply(topology(levels), dry_run=server_dry)
    rf = resource_flavor(spec.pool.name, [pool_toleration(spec.pool.name)], levels)
    notes = {Labels.DESCRIPTION: spec.pool.description} if spec.pool.description else {}
    rf["metadata"]["annotations"] = {
        **rf["metadata"].get("annotations", {}),
        **notes,
        POOL_CLUSTERS_ANNOTATION: clusters_annotation(spec.pool.clusters),
    }
    cluster.apply(rf, dry_run=server_dry)
    if dry_run.persists:
        sync_queues(cluster)


def _write_workers(
    cluster: Cluster, spec: PoolSpec, plans: list[ClusterPlan], dropped: dict[str, Cluster], dry_run: DryRun
) -> None:
    """Each worker's side: the pool of its nodes there (apply_pool, as on any cluster) and every team's
    queues; the pool goes from the clusters it leaves (`dropped`), and the manager follows."""
    name = spec.pool.name
    for p in plans:
        sub = spec.model_copy(
            update={
                "pool": spec.pool.model_copy(update={"clusters": {}}),
                "nodes": {n: spec.nodes[n] for n in p.nodes},
            }
        )
        apply_pool(p.member, sub, create=False, dry_run=dry_run)
        if dry_run.persists:
            sync_worker(cluster, p.name, p.member)
    for c, member in dropped.items():
        with contextlib.suppress(NotFound):
            delete_pool(member, name, dry_run=dry_run)
        if dry_run.persists:
            sync_worker(cluster, c, member)
    if dry_run.persists and dropped:
        sync_manager(cluster)


def _release_flavor(member: Cluster, pool: str) -> None:
    """A worker's deleted pool flavor that Kueue keeps for its in-use finalizer although no ClusterQueue
    there names it any more (Kueue does not look again when the last queue stops naming it): gpuctl owns
    the flavor, so it lifts the finalizer, as gpuctl.service.pool_sync does when it re-creates a flavor."""
    rf = member.get_or_none(path("ResourceFlavor", pool))
    if rf is None or not rf["metadata"].get("deletionTimestamp") or not rf["metadata"].get("finalizers"):
        return
    named = {
        f.get("name")
        for cq in member.list(path("ClusterQueue"))
        for g in (cq.get("spec") or {}).get("resourceGroups") or []
        for f in g.get("flavors") or []
    }
    if pool not in named:
        with contextlib.suppress(ApiError):
            member.merge_patch(path("ResourceFlavor", pool), {"metadata": {"finalizers": None}})


def _unlabel_nodes(member: Cluster, pool: str, dry_run: DryRun) -> list[str]:
    lines = []
    for n in member.list(path("Node"), label_selector=f"{Labels.POOL}={pool}"):
        change = patch_node_pool(member, n, LEFT_POOL, dry_run=dry_run)
        lines.append(f"node/{n['metadata']['name']} unlabeled" + (f", {change}" if change else ""))
    return lines


def sync_manager(cluster: Cluster) -> None:
    """The manager's MultiKueue objects as its pools say: the config lists every worker cluster in use; with
    none left, the check, the config and the team queues' check go (the MultiKueueClusters and Secrets of
    clusters no pool uses any more go too)."""
    inv = Inventory(cluster, None)
    clusters = worker_clusters(inv.flavors)
    if clusters:
        cluster.apply(multikueue_config(clusters))
    sync_queues(cluster)
    if not clusters:
        for kind, obj in (("AdmissionCheck", MULTIKUEUE_CHECK), ("MultiKueueConfig", MULTIKUEUE_CONFIG)):
            with contextlib.suppress(ApiError):
                cluster.delete(path(kind, obj))
    for mkc in cluster.list(path("MultiKueueCluster"), label_selector=f"{Labels.MANAGED_BY}=gpuctl"):
        c = mkc["metadata"]["name"]
        if c not in clusters:
            with contextlib.suppress(ApiError):
                cluster.delete(path("MultiKueueCluster", c))
            with contextlib.suppress(ApiError):
                cluster.delete(path("Secret", cluster_secret_name(c), KUEUE_NAMESPACE))


def worker_team(cq: dict) -> TeamQuota:
    """A team's queue in a worker: no budget (the manager enforces the quota), the same names."""
    t = team_from_cluster_queue(cq)
    return TeamQuota(namespace=t.namespace, quota_name=t.quota_name, description=t.description)


def sync_worker(
    cluster: Cluster, name: str, member: Cluster | None = None, inv: Inventory | None = None
) -> list[str]:
    """Worker `name` holds every team of the manager: its namespace, LocalQueue `default` and a
    ClusterQueue over the worker's pools (MultiKueue creates a job's copy in the same namespace and queue).
    inv: the manager's Inventory, read after the command's writes (else one is read here)."""
    member = member or worker(cluster, name)
    inv = inv or Inventory(cluster, None)
    pools = pools_in(inv.flavors, name)
    ensure_bootstrap(member)
    lines = []
    for ns, cq in sorted(inv.team_queues.items()):
        if cq["metadata"].get("deletionTimestamp"):
            continue  # a quota being deleted (Kueue holds its queue until its Workloads are gone)
        team = worker_team(cq)
        if member.get_or_none(path("Namespace", ns)) is None:
            member.create(team_namespace(team))
            lines.append(f"namespace/{ns} created in cluster {name}")
        member.apply(cluster_queue(team, pools))
        member.apply(local_queue(ns))
    sync_cohort(member)
    return lines


def sync_workers(cluster: Cluster, inv: Inventory | None = None) -> list[str]:
    """Every worker cluster holds every team of the manager (after a quota changed). inv: as sync_worker's."""
    inv = inv or Inventory(cluster, None)
    return [line for c in worker_clusters(inv.flavors) for line in sync_worker(cluster, c, inv=inv)]


def remove_worker_team(cluster: Cluster, namespace: str, clusters: list[str]) -> None:
    """A quota deleted on the manager: its queues go from every worker cluster (`clusters`, the
    manager's worker_clusters read before the command's first write; namespaces stay)."""
    for c in clusters:
        member = worker(cluster, c)
        for p in (path("LocalQueue", LOCAL_QUEUE_NAME, namespace), path("ClusterQueue", namespace)):
            with contextlib.suppress(ApiError):
                member.delete(p)


def delete_pool_everywhere(
    cluster: Cluster,
    name: str,
    *,
    dry_run: DryRun = DryRun.NONE,
    keep_running: bool = False,
    inv: Inventory | None = None,
) -> list[str]:
    """`gpuctl delete pool`: a pool of this cluster's nodes as ever (gpuctl.service.pools.delete_pool); a pool
    in worker clusters goes from the manager (refused while jobs use it, as any pool), then from each worker
    (its flavor, node labels and taints there), and the manager's MultiKueue objects follow what is left.
    inv: the command's Inventory of this cluster (else one is read here)."""
    dry_run = DryRun(dry_run)
    inv = inv or Inventory(cluster, None)
    clusters = pool_clusters(inv.flavor(name))
    lines = delete_pool(cluster, name, dry_run=dry_run, keep_running=keep_running, inv=inv)
    if not clusters:
        return lines
    members = {c: worker(cluster, c) for c in clusters}
    for c, member in members.items():
        try:
            found = delete_pool(member, name, dry_run=dry_run, keep_running=True)
        except NotFound:  # its flavor is gone there already: its nodes still lose label and taint
            found = ["", *_unlabel_nodes(member, name, dry_run)]
        lines += [f"{line} (cluster {c})" for line in found[1:]]
        if dry_run.persists:
            _release_flavor(member, name)
    if dry_run.persists:
        sync_manager(cluster)
        for c, member in members.items():
            with contextlib.suppress(ServiceError, ApiError):
                sync_worker(cluster, c, member)
    return lines
