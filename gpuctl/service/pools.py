"""Pools: create/apply/delete (node labels + Kueue flavor + capacity), listing and describing. Keeping
Kueue's queues, Cohort and flavors in step: gpuctl.service.pool_sync; a node's pool label and taint:
gpuctl.service.node_pools.

Every write function takes a DryRun (NONE writes, SERVER sends each write with dryRun=All, CLIENT runs
every check and returns what it would do before its first write)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import (
    BUDGET_FLAVOR,
    DEFAULT_POOL,
    IDLE_POLICY_ANNOTATION,
    Labels,
)
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.gang import default_topology, nodes_missing_levels, pool_topology
from gpuctl.domain.gpus import workload_gpus
from gpuctl.domain.objects import annotations, is_gpuctl_object
from gpuctl.domain.pools import (
    desired_flavor,
    flavor_immutable,
    flavor_tolerations,
    node_gpu_type,
    node_gpus,
    node_pool,
    node_pool_taint_missing,
    node_ready,
    pool_tolerations,
)
from gpuctl.domain.status import State
from gpuctl.domain.teams import (
    flavor_reserved,
    team_from_cluster_queue,
    team_usage,
)
from gpuctl.domain.workload import (
    HOLDING_QUOTA,
    IN_QUEUE,
    WAITING,
    WorkloadState,
    assigned_flavors,
    workload_state,
)
from gpuctl.service.access import Permissions
from gpuctl.service.convert import node_label_patch
from gpuctl.service.errors import Conflict, NotFound, ServiceError
from gpuctl.service.idle_policy import flavor_annotations
from gpuctl.service.inventory import Inventory
from gpuctl.service.jobs import Job, collect_jobs
from gpuctl.service.node_pools import LEFT_POOL, patch_node_pool, pool_taint_change
from gpuctl.service.pool_sync import (
    FLAVOR_GONE_SECONDS,
    ensure_bootstrap,
    set_flavor_tolerations,
    sync_flavors,
    sync_queues,
    wait_flavor_gone,
)
from gpuctl.service.usage import PoolUsage as PoolUsage  # usage's; the API's routes import it from here
from gpuctl.service.usage import list_pools as list_pools  # usage's; the API's routes import it from here
from gpuctl.service.usage import pool_usage
from queues import (
    topology,
    topology_name,
)

if TYPE_CHECKING:  # annotations only: a read (`get pools`, `describe job`) never loads pydantic
    from gpuctl.spec import PoolSpec


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
        raise NotFound(f"pool {name} not found", resource="pools", name=name)
    u = pool_usage(inv, with_pods=inv.sees_every_pod)[name]
    nodes = [n for n in inv.nodes if node_pool(n) == name]
    # A team's guarantee is its whole quota, in any mix of pools (what Kueue reclaims for it: the budget's
    # nominal quota, docs/queueing.md rule 3); a quota's per-pool `pools:` entry is display only
    # (`describe quota`) and guarantees nothing here. None: an unlimited quota.
    teams = [
        {
            "team": ns,
            "gpus_in_use": team_usage(cq).pool_gpus.get(name, 0),
            "guaranteed": team_from_cluster_queue(cq).gpu,
        }
        for ns, cq in inv.team_queues.items()
    ]
    found, spaces = readable_jobs(cluster, inv)
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
        **pool_jobs(found, name),
    }


def pool_jobs(jobs: list[Job], pool: str) -> dict[str, list[dict]]:
    """`describe pool`'s jobs of `pool` (Job.pool, gpuctl.domain.workload.job_pool), by the domain's sets
    of their Workload's state: running = holding quota (QuotaReserved or Admitted; finished Workloads
    hold none) and not being deleted; queued = IN_QUEUE (pending or preempted: the set the pool's GPU
    Queued counts); stopped = WAITING but not IN_QUEUE (Inactive: in no queue, counted nowhere). A job
    without a Workload yet, a finished one and a terminating one are in none of them."""
    out: dict[str, list[dict]] = {"running": [], "queued": [], "stopped": []}
    for j in jobs:
        if j.pool != pool or j.status == State.TERMINATING:
            continue
        st = workload_state(j.workload)
        key = (
            "running"
            if st in HOLDING_QUOTA
            else "queued"
            if st in IN_QUEUE
            else "stopped"
            if st in WAITING
            else None
        )
        if key is not None:
            out[key].append(
                {
                    "name": j.name,
                    "namespace": j.namespace,
                    "kind": j.kind,
                    "status": j.status,
                    "position": j.position,
                    "gpus": workload_gpus(j.workload) if j.workload else 0,
                }
            )
    return out


def check_pool_name(name: str) -> None:
    if name == BUDGET_FLAVOR:
        raise ServiceError(f"pool name {name} is reserved by gpuctl: choose another name")


def existing_flavor(inv: Inventory, name: str, *, create: bool) -> dict | None:
    """Pool `name`'s ResourceFlavor, or None when there is none yet. Conflict when the flavor is not
    gpuctl's, or when `create` finds the pool already there (apply changes it)."""
    flavor = inv.flavor(name)
    if flavor is not None and not is_gpuctl_object(flavor):
        raise Conflict(
            f"pool {name}: a ResourceFlavor {name} exists that gpuctl did not create; choose another name"
        )
    if create and flavor is not None:
        raise Conflict(f"pool {name} already exists: use `gpuctl apply -f` to change it")
    return flavor


def apply_pool(
    cluster: Cluster,
    spec: PoolSpec,
    *,
    create: bool,
    dry_run: DryRun = DryRun.NONE,
    inv: Inventory | None = None,
) -> list[str]:
    """Label the pool's nodes, create its flavor, update capacity. All or nothing. inv: the command's
    cluster-wide Inventory (its nodes and flavors; else one is read here)."""
    dry_run = DryRun(dry_run)
    check_pool_name(spec.pool.name)
    inv = inv or Inventory(cluster, None)
    plan = _PoolPlan.of(spec, _pool_nodes(inv, spec), existing_flavor(inv, spec.pool.name, create=create))
    if dry_run is not DryRun.CLIENT:
        plan.write(cluster, dry_run)
    return plan.lines()


def _pool_nodes(inv: Inventory, spec: PoolSpec) -> dict[str, dict]:
    """Every node by name, once the pool's nodes are known to exist and to be in no other pool."""
    name = spec.pool.name
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
    return nodes


@dataclass
class _PoolPlan:
    """What `apply_pool` changes: the flavor (its tolerations those of the nodes the pool will have, its
    own pool taint first), the labels (and pool taint) of its nodes, the nodes that leave it."""

    name: str
    nodes: dict[str, dict]  # every node, by name
    joining: list[str]
    leaving: list[str]
    labels_of: dict[str, dict]  # joining node -> its labels patch
    flavor: dict | None  # the pool's flavor now, None: created
    desired: dict  # its flavor as it will be

    @classmethod
    def of(cls, spec: PoolSpec, nodes: dict[str, dict], flavor: dict | None) -> _PoolPlan:
        name = spec.pool.name
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
        rf = desired_flavor(name, members, _pool_levels(spec, members, flavor))
        if spec.pool.description:
            rf["metadata"].setdefault("annotations", {})[Labels.DESCRIPTION] = spec.pool.description
        if idle := flavor_annotations(spec.idle, name):  # docs/utilisation.md: the pool's idle policy
            rf["metadata"].setdefault("annotations", {}).update(idle)
        return cls(
            name=name,
            nodes=nodes,
            joining=sorted(spec.nodes),
            leaving=sorted(n for n, obj in nodes.items() if node_pool(obj) == name and n not in spec.nodes),
            labels_of={
                n: node_label_patch(n, name, m.gpu_type)["metadata"]["labels"] for n, m in spec.nodes.items()
            },
            flavor=flavor,
            desired=rf,
        )

    @property
    def tolerations(self) -> list[dict]:
        return self.desired["spec"].get("tolerations", [])

    @property
    def retolerate(self) -> bool:
        return self.flavor is not None and flavor_tolerations(self.flavor) != self.tolerations

    def lines(self) -> list[str]:
        name = self.name
        lines = [f"pool/{name} {'created' if self.flavor is None else 'configured'}"]
        was, now = (annotations(f).get(IDLE_POLICY_ANNOTATION) for f in (self.flavor, self.desired))
        if was != now:
            lines.append(f"pool/{name} idle policy {'set' if now else 'removed'}")
        if self.retolerate:
            how = (
                " (re-created: Kueue keeps a topology flavor immutable)"
                if flavor_immutable(self.flavor)
                else ""
            )
            lines.append(f"resourceflavor/{name} tolerations set{how}: {_tolerations_text(self.tolerations)}")
        for n in self.joining:
            lines.append(f"node/{n} labeled {Labels.POOL}={name}")
            if change := pool_taint_change(self.nodes[n], self.labels_of[n]):
                lines.append(f"node/{n} {change} (running pods stay: NoSchedule evicts nothing)")
        for n in self.leaving:
            lines.append(f"node/{n} unlabeled (left pool {name})")
            if change := pool_taint_change(self.nodes[n], LEFT_POOL):
                lines.append(f"node/{n} {change}")
        return lines

    def write(self, cluster: Cluster, dry_run: DryRun) -> None:
        """The flavor first (admitted pods must tolerate a new taint before any node carries it), then the
        nodes; then, once, the queues and flavors from what the writes made. A failure puts the touched
        nodes back and removes a flavor it created (with NONE; a server dry run persisted nothing)."""
        server_dry = dry_run is DryRun.SERVER
        previous = {
            n: (
                {
                    k: (self.nodes[n]["metadata"].get("labels") or {}).get(k)
                    for k in (Labels.POOL, Labels.GPU_TYPE)
                },
                (self.nodes[n].get("spec") or {}).get("taints"),
            )
            for n in [*self.joining, *self.leaving]
        }
        touched: list[str] = []
        created_flavor = False
        try:
            ensure_bootstrap(cluster, dry_run=dry_run)
            levels = pool_topology(self.desired)  # () is the node-level Topology ensure_bootstrap made
            if levels and cluster.get_or_none(path("Topology", topology_name(levels))) is None:
                cluster.apply(topology(levels), dry_run=server_dry)
            if self.flavor is None:
                cluster.apply(self.desired, dry_run=server_dry)
                created_flavor = True
            else:
                if self.retolerate:
                    set_flavor_tolerations(cluster, self.flavor, self.tolerations, dry_run=dry_run)
                if dry_run.persists or not (self.retolerate and flavor_immutable(self.flavor)):
                    cluster.apply(self.desired, dry_run=server_dry)
            for n, labels in [
                *((n, self.labels_of[n]) for n in self.joining),
                *((n, LEFT_POOL) for n in self.leaving),
            ]:
                patch_node_pool(cluster, self.nodes[n], labels, dry_run=dry_run)
                touched.append(n)
            if dry_run.persists:
                # One read of what the writes made (the new flavor, the nodes' labels and taints) for both.
                after = Inventory(cluster, None)
                sync_queues(cluster, inv=after)
                sync_flavors(
                    cluster, inv=after
                )  # nodes that left may have taken taints away from other pools
        except Exception:
            if dry_run.persists:
                for n in touched:
                    labels, taints = previous[n]
                    with contextlib.suppress(ApiError):
                        cluster.merge_patch(
                            path("Node", n),
                            {"metadata": {"labels": labels}, "spec": {"taints": taints or None}},
                        )
                if created_flavor:
                    cluster.delete(path("ResourceFlavor", self.name))
            raise


def _pool_levels(spec: PoolSpec, members: list[dict], flavor: dict | None) -> tuple[str, ...]:
    """The pool's network topology above the node (docs/distributed.md, "Placement"): the document's
    `topology`; else, for a new pool, the well-known levels all its nodes carry
    (gpuctl.domain.gang.default_topology), for an existing one the levels it has. Refused: a node
    without a label of some level (Kueue would never place a pod on it), and a change of an existing
    pool's levels (Kueue keeps a flavor's topologyName fixed)."""
    name = spec.pool.name
    if spec.topology is not None:
        levels = tuple(spec.topology)
    else:
        levels = default_topology(members) if flavor is None else pool_topology(flavor)
    missing = nodes_missing_levels(members, levels)
    if missing:
        node, lack = sorted(missing.items())[0]
        raise ServiceError(
            f"pool {name}: node {node} has no label {', '.join(lack)}, a level of the pool's topology, so "
            f"Kueue would never place a pod on it: label it (gpuctl label node {node} {lack[0]}=<value>) "
            "or leave the level out of `topology`"
        )
    if flavor is not None and (flavor.get("spec") or {}).get("topologyName") != topology_name(levels):
        was = ", ".join(pool_topology(flavor)) or "the node only"
        raise Conflict(
            f"pool {name}: its topology is {was}; Kueue keeps a pool's topology fixed while the pool exists: "
            f"delete the pool (gpuctl delete pool {name}) and create it again with the new `topology`"
        )
    return levels


def _tolerations_text(tolerations: list[dict]) -> str:
    out = []
    for t in tolerations:
        value = f"={t['value']}" if t.get("operator") == "Equal" else ""
        out.append(f"{t['key']}{value}:{t.get('effect', '')}")
    return ", ".join(out)


def isolate_pool(
    cluster: Cluster, name: str, *, dry_run: DryRun = DryRun.NONE, inv: Inventory | None = None
) -> list[str]:
    """Bring a pool an earlier gpuctl made to the pool taint's state (gpuctl adopt; docs/adoption.md): its
    flavor tolerates the pool taint first (a TAS flavor is re-created: Kueue keeps it immutable), then each
    node of the pool that lacks the taint gets it. NoSchedule: nothing running is evicted."""
    dry_run = DryRun(dry_run)
    check_pool_name(name)
    inv = inv or Inventory(cluster, None)
    flavor = inv.flavor(name)
    if flavor is None or not is_gpuctl_object(flavor):
        raise NotFound(f"pool {name} not found", resource="pools", name=name)
    lines = []
    want = pool_tolerations(inv.nodes, name)
    if flavor_tolerations(flavor) != want:
        how = " (re-created: Kueue keeps a topology flavor immutable)" if flavor_immutable(flavor) else ""
        lines.append(f"resourceflavor/{name} tolerations set{how}: {_tolerations_text(want)}")
        if dry_run.writes:
            set_flavor_tolerations(cluster, flavor, want, dry_run=dry_run)
    for n in sorted(inv.nodes, key=lambda n: n["metadata"]["name"]):
        if node_pool(n) == name and node_pool_taint_missing(n):
            change = patch_node_pool(cluster, n, {}, dry_run=dry_run)
            if change:
                lines.append(
                    f"node/{n['metadata']['name']} {change} (running pods stay: NoSchedule evicts nothing)"
                )
    return lines


def jobs_using_pool(inv: Inventory, name: str) -> list[str]:
    """The unfinished jobs of the pool (Job.pool: the label of a single-pool job, the admission of a job
    of several). A Succeeded or Failed job holds nothing and waits for nothing: it does not keep a pool."""
    return sorted(
        f"{j.namespace}/{j.name}"
        for j in collect_jobs(inv)
        if j.pool == name and j.status not in (State.SUCCEEDED, State.FAILED)
    )


def delete_pool(
    cluster: Cluster,
    name: str,
    *,
    dry_run: DryRun = DryRun.NONE,
    keep_running: bool = False,
    inv: Inventory | None = None,
) -> list[str]:
    """Remove a pool: only gpuctl's flavor and labels are removed. Refuses while jobs use it, unless
    keep_running (the product documents' behaviour): the jobs keep running where they are (a running
    pod is never evicted for a node label it no longer matches), and new work naming the pool is
    refused because the pool no longer exists. inv: the command's cluster-wide Inventory (else one is
    read here)."""
    dry_run = DryRun(dry_run)
    check_pool_name(name)
    inv = inv or Inventory(cluster, None)
    flavor = inv.flavor(name)
    if flavor is None:
        if name == DEFAULT_POOL:
            raise NotFound("pool default has not been created (jobs without a pool wait for it)")
        raise NotFound(f"pool {name} not found", resource="pools", name=name)
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
    nodes = [n for n in inv.nodes if node_pool(n) == name]
    lines = [f"pool/{name} deleted"]
    for n in nodes:
        change = pool_taint_change(n, LEFT_POOL)
        lines.append(f"node/{n['metadata']['name']} unlabeled" + (f", {change}" if change else ""))
    lines += [
        f"job {j} keeps running (pool {name} is gone: it cannot restart there)" for j in users or admitted
    ]
    if dry_run is DryRun.CLIENT:
        return lines
    server_dry = dry_run is DryRun.SERVER
    remaining = [p for p in inv.pools if p != name]
    # The queues stop naming the pool first (a server dry run validates these writes too), and the Cohort
    # holds the remaining pools' capacity (their nodes are not the ones unlabelled below).
    sync_queues(cluster, pools=remaining, dry_run=dry_run, inv=inv)
    cluster.delete(path("ResourceFlavor", name), dry_run=server_dry)
    for n in nodes:
        patch_node_pool(cluster, n, LEFT_POOL, dry_run=dry_run)
    if dry_run.persists and not wait_flavor_gone(cluster, name):
        lines.append(
            f"resourceflavor/{name} still deleting after {FLAVOR_GONE_SECONDS:g}s: Kueue keeps its in-use "
            "finalizer while something names it (`kubectl get resourceflavor` shows when it is gone)"
        )
    return lines
