"""Pools: create/apply/delete (node labels + Kueue flavor + capacity), listing and describing."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.constants import (
    BUDGET_FLAVOR,
    COHORT_NAME,
    DEFAULT_POOL,
    POOL_TAINT_EFFECT,
    POOL_TAINT_KEY,
    Labels,
)
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.gang import default_topology, nodes_missing_levels, pool_topology
from gpuctl.domain.gpus import workload_gpus
from gpuctl.domain.multicluster import team_checks
from gpuctl.domain.objects import is_gpuctl_object
from gpuctl.domain.pools import (
    desired_flavor,
    flavor_immutable,
    flavor_tolerations,
    node_gpu_type,
    node_gpus,
    node_pool,
    node_pool_taint_missing,
    node_ready,
    pool_node_taints,
    pool_tolerations,
    stale_flavors,
)
from gpuctl.domain.status import State
from gpuctl.domain.teams import (
    cohort_spec_equal,
    desired_cohort,
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
from gpuctl.service.inventory import Inventory
from gpuctl.service.jobs import Job, collect_jobs
from gpuctl.service.usage import PoolUsage, pool_usage
from queues import (
    budget_flavor,
    cluster_queue,
    resource_flavor,
    topology,
    topology_name,
    workload_priority_classes,
)

if TYPE_CHECKING:  # annotations only: a read (`get pools`, `describe job`) never loads pydantic
    from gpuctl.spec import PoolSpec


def list_pools(
    cluster: Cluster, perms: Permissions | None = None, inv: Inventory | None = None
) -> list[PoolUsage]:
    """`get pools`: nodes, flavors and ClusterQueues (what pool viewers read), and the waiting
    Workloads the caller may read; no pod. `inv`: the caller's cluster-wide inventory, when it has one."""
    usage = pool_usage(inv or Inventory(cluster, None, perms=perms))
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
    # A MultiKueue manager's queues carry its check while some pool is in a worker cluster (issue 24).
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


# ----------------------------------------------------------------------------- node pool membership
# A node's pool label and the pool taint (runwhere.ai/pool=<pool>:NoSchedule) change together, in one
# merge patch: joining a pool taints the node (only Kueue-admitted work, whose pods get the pool flavor's
# toleration, lands there from then on; NoSchedule evicts nothing already running), leaving it removes
# gpuctl's taint and no other. `spec.taints` is one list (a merge patch replaces it whole), so a patch
# that changes it carries the resourceVersion it was computed from: a concurrent change of the node
# (a cordon, the GPU operator's taint, a kubelet update) fails it with 409 and it is recomputed on a
# fresh read instead of overwriting that change.
NODE_PATCH_ATTEMPTS = 5


def _labels_after(node: Mapping, labels: Mapping[str, str | None]) -> dict[str, str]:
    merged = {**(node.get("metadata", {}).get("labels") or {}), **labels}
    return {k: v for k, v in merged.items() if v is not None}


def pool_taint_change(node: Mapping, labels: Mapping[str, str | None]) -> str | None:
    """What patching `labels` onto the node does to its pool taint, in kubectl's words, or None."""
    pool = _labels_after(node, labels).get(Labels.POOL)
    if pool_node_taints(node, pool) is None:
        return None
    if pool:
        return f"tainted {POOL_TAINT_KEY}={pool}:{POOL_TAINT_EFFECT}"
    return f"untainted {POOL_TAINT_KEY}:{POOL_TAINT_EFFECT}"


def patch_node_pool(
    cluster: Cluster, node: dict, labels: Mapping[str, str | None], *, dry_run: DryRun = DryRun.NONE
) -> str | None:
    """Merge-patch `labels` (None removes one) onto `node`, with the pool taint following the pool label
    the node ends up with. Returns pool_taint_change's text (None: the taints were already right).
    CLIENT writes nothing; SERVER sends the patch with dryRun=All."""
    dry_run = DryRun(dry_run)
    name = node["metadata"]["name"]
    for attempt in range(NODE_PATCH_ATTEMPTS):
        change = pool_taint_change(node, labels)
        if not dry_run.writes:
            return change
        taints = pool_node_taints(node, _labels_after(node, labels).get(Labels.POOL))
        meta: dict = {"labels": dict(labels)} if labels else {}
        patch: dict = {"metadata": meta}
        if taints is not None:
            if node["metadata"].get("resourceVersion"):
                meta["resourceVersion"] = node["metadata"]["resourceVersion"]
            patch["spec"] = {"taints": taints or None}
        elif not labels:
            return None
        try:
            cluster.merge_patch(path("Node", name), patch, dry_run=dry_run is DryRun.SERVER)
        except ApiError as e:
            if e.status != 409 or attempt == NODE_PATCH_ATTEMPTS - 1:
                raise
            node = cluster.get(path("Node", name))
            continue
        return change
    return None  # not reached: the last attempt returns or raises


def check_pool_name(name: str) -> None:
    if name == BUDGET_FLAVOR:
        raise ServiceError(f"pool name {name} is reserved by gpuctl: choose another name")


def existing_flavor(cluster: Cluster, name: str, *, create: bool) -> dict | None:
    """Pool `name`'s ResourceFlavor, or None when there is none yet. Conflict when the flavor is not
    gpuctl's, or when `create` finds the pool already there (apply changes it)."""
    flavor = cluster.get_or_none(path("ResourceFlavor", name))
    if flavor is not None and not is_gpuctl_object(flavor):
        raise Conflict(
            f"pool {name}: a ResourceFlavor {name} exists that gpuctl did not create; choose another name"
        )
    if create and flavor is not None:
        raise Conflict(f"pool {name} already exists: use `gpuctl apply -f` to change it")
    return flavor


def apply_pool(cluster: Cluster, spec: PoolSpec, *, create: bool, dry_run: DryRun = DryRun.NONE) -> list[str]:
    """Label the pool's nodes, create its flavor, update capacity. All or nothing."""
    dry_run = DryRun(dry_run)
    check_pool_name(spec.pool.name)
    inv = Inventory(cluster, None)
    plan = _PoolPlan.of(spec, _pool_nodes(inv, spec), existing_flavor(cluster, spec.pool.name, create=create))
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


_LEFT = {Labels.POOL: None, Labels.GPU_TYPE: None}  # a node's labels once it leaves its pool


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
            if change := pool_taint_change(self.nodes[n], _LEFT):
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
            levels = pool_topology(self.desired)
            if cluster.get_or_none(path("Topology", topology_name(levels))) is None:
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
                *((n, _LEFT) for n in self.leaving),
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
    """The pool's network topology above the node (issue 31, docs/distributed.md): the document's
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


def isolate_pool(cluster: Cluster, name: str, *, dry_run: DryRun = DryRun.NONE) -> list[str]:
    """Bring a pool an earlier gpuctl made to issue 26's state (gpuctl adopt): its flavor tolerates the
    pool taint first (a TAS flavor is re-created: Kueue keeps it immutable), then each node of the pool
    that lacks the taint gets it. NoSchedule: nothing running is evicted."""
    dry_run = DryRun(dry_run)
    check_pool_name(name)
    inv = Inventory(cluster, None)
    flavor = cluster.get_or_none(path("ResourceFlavor", name))
    if flavor is None or not is_gpuctl_object(flavor):
        raise NotFound(f"pool {name} not found")
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


def untaint_nodes(cluster: Cluster, names: list[str], *, dry_run: DryRun = DryRun.NONE) -> list[str]:
    """Remove the pool taint from nodes that are in no pool any more (only gpuctl's taint)."""
    lines = []
    for n in names:
        node = cluster.get_or_none(path("Node", n))
        if node is None or node_pool(node) is not None:
            continue
        if change := patch_node_pool(cluster, node, {}, dry_run=dry_run):
            lines.append(f"node/{n} {change} (in no pool)")
    return lines


def jobs_using_pool(inv: Inventory, name: str) -> list[str]:
    """The jobs of the pool (Job.pool: the label of a single-pool job, the admission of a job of several)."""
    return sorted(f"{j.namespace}/{j.name}" for j in collect_jobs(inv) if j.pool == name)


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
    nodes = [n for n in inv.nodes if node_pool(n) == name]
    lines = [f"pool/{name} deleted"]
    for n in nodes:
        change = pool_taint_change(n, _LEFT)
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
        patch_node_pool(cluster, n, _LEFT, dry_run=dry_run)
    if dry_run.persists and not wait_flavor_gone(cluster, name):
        lines.append(
            f"resourceflavor/{name} still deleting after {FLAVOR_GONE_SECONDS:g}s: Kueue keeps its in-use "
            "finalizer while something names it (`kubectl get resourceflavor` shows when it is gone)"
        )
    return lines
