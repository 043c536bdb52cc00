"""`gpuctl adopt`: read a cluster the earlier gpuctl ran, plan its switch-over, and carry it out.

The decisions are gpuctl.service.adopt_plan.decide (pure). The writes reuse the ordinary write path:
pools go through `apply_pool` (node labels, the flavor with the nodes' tolerations, capacity), quotas
through `apply_quota` (namespace labels, ClusterQueue, LocalQueue), so an adopted pool or quota is
exactly what `gpuctl create -f` would have made. ResourceQuotas are changed last, once the gpuctl quota
that replaces them exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuctl.cluster import Cluster, path
from gpuctl.constants import LIMIT_RANGE_NAME, POOL_TAINT_EFFECT, POOL_TAINT_KEY
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.pools import desired_flavor, node_pool, pool_node_taints, pool_toleration
from gpuctl.domain.teams import desired_cohort
from gpuctl.service import priority_classes
from gpuctl.service.adopt_plan import AdoptOptions, AdoptPlan, PoolPlan, QuotaPlan, decide, runwhere_gpu_type
from gpuctl.service.convert import node_label_patch, team_limit_range, team_quotas
from gpuctl.service.inventory import Inventory
from gpuctl.service.node_pools import untaint_nodes
from gpuctl.service.pools import apply_pool, isolate_pool
from gpuctl.service.quotas import apply_quota
from gpuctl.spec import PoolSpec, QuotaSpec
from queues import cluster_queue, local_queue, team_namespace

ADOPT_DESCRIPTION = "adopted from the earlier gpuctl by `gpuctl adopt`"


@dataclass
class Adoption:
    plan: AdoptPlan
    inventory: Inventory
    namespaces: list[dict]
    resource_quotas: list[dict]


def read(cluster: Cluster, options: AdoptOptions) -> Adoption:
    inv = Inventory(cluster, None)
    namespaces = inv.reader.list("Namespace")
    rqs = inv.reader.list("ResourceQuota")
    plan = decide(
        nodes=inv.nodes,
        flavors=inv.flavors,
        namespaces=namespaces,
        resource_quotas=rqs,
        team_namespaces=inv.team_queues,
        controllers=inv.controllers,
        pods=inv.bound_pods,
        options=options,
    )
    plan.priority_classes = priority_classes.decide(priority_classes.read(cluster))
    return Adoption(plan, inv, namespaces, rqs)


def _pool_members(inv: Inventory, p: PoolPlan) -> dict[str, str]:
    """Every node the pool will have: its current members (an existing pool keeps them) and the new."""
    members = {n["metadata"]["name"]: runwhere_gpu_type(n) for n in inv.nodes if node_pool(n) == p.name}
    for n, t in p.nodes.items():
        members[n] = t
    return members


def pool_spec(inv: Inventory, p: PoolPlan) -> PoolSpec:
    nodes = {n: ({"gpu-type": t} if t else {}) for n, t in _pool_members(inv, p).items()}
    doc = {"kind": "pool", "pool": {"name": p.name, "description": ADOPT_DESCRIPTION}, "nodes": nodes}
    return PoolSpec.model_validate(doc)


def quota_specs(quotas: list[QuotaPlan]) -> list[QuotaSpec]:
    by_name: dict[str, dict[str, dict]] = {}
    for q in quotas:
        t = q.team
        fields = (("gpu", t.gpu), ("cpu", t.cpu), ("memory", t.memory), ("borrowingLimit", t.borrowing_limit))
        by_name.setdefault(t.quota_name, {})[t.namespace] = {k: v for k, v in fields if v is not None}
    return [
        QuotaSpec.model_validate(
            {"kind": "quota", "quota": {"name": name, "description": ADOPT_DESCRIPTION}, "namespace": entries}
        )
        for name, entries in sorted(by_name.items())
    ]


def _taints_patch(node: dict, pool: str | None) -> dict:
    taints = pool_node_taints(node, pool) or []
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node["metadata"]["name"]},
        "spec": {"taints": taints},
    }


def plan_objects(a: Adoption) -> dict:
    """Every object the adoption writes, as a document for `-o yaml|json`."""
    inv, plan = a.inventory, a.plan
    apply: list[dict] = []
    nodes_after = {n["metadata"]["name"]: n for n in inv.nodes}
    new_flavors = []
    for p in plan.pools:
        for n, t in sorted(p.nodes.items()):
            patch = node_label_patch(n, p.name, t or None)
            node = nodes_after[n]
            if (taints := pool_node_taints(node, p.name)) is not None:
                patch["spec"] = {"taints": taints}
            apply.append(patch)
            added = {k: v for k, v in patch["metadata"]["labels"].items() if v is not None}
            meta = {**node["metadata"], "labels": {**(node["metadata"].get("labels") or {}), **added}}
            nodes_after[n] = {**node, "metadata": meta}
        flavor = desired_flavor(p.name, nodes_after.values())
        flavor["metadata"]["annotations"] = {"runwhere.ai/description": ADOPT_DESCRIPTION}
        new_flavors.append(flavor)
        apply.append(flavor)
    for iso in plan.isolation:
        if iso.flavor:
            apply.append(desired_flavor(iso.pool, nodes_after.values()))
        for n in iso.nodes:
            taints = pool_node_taints(nodes_after[n], iso.pool) or []
            apply.append(
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}, "spec": {"taints": taints}}
            )
    for n in plan.untaint:
        taints = pool_node_taints(nodes_after[n], None) or []
        apply.append(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}, "spec": {"taints": taints}}
        )
    pools = sorted({*inv.pools, *(p.name for p in plan.pools)})
    cqs = list(inv.cluster_queues)
    for spec in quota_specs(plan.quotas):
        for team in team_quotas(spec):
            cq = cluster_queue(team, pools)
            cqs.append(cq)
            apply += [team_namespace(team, created_by_gpuctl=False), cq, local_queue(team.namespace)]
            if lr := team_limit_range(team.namespace, spec.entries()[team.namespace]):
                apply.append(lr)
    if plan.pools or plan.quotas:
        apply.append(desired_cohort(nodes_after.values(), [*inv.flavors, *new_flavors], cqs))
    changes = []
    for c in plan.resource_quotas:
        ref = {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": c.name, "namespace": c.namespace},
        }
        if c.delete:
            changes.append({"action": "delete", **ref})
        else:
            changes.append({"action": "remove-keys", "keys": c.remove_keys, **ref})
    return {
        "apply": apply,
        "priorityClasses": [
            {"action": "recreate" if c.recreate else "create", "reason": c.reason, **c.obj}
            for c in plan.priority_classes
        ],
        "resourceQuotas": changes,
        "kept": plan.kept,
        "notConverted": plan.not_converted,
    }


def plan_lines(plan: AdoptPlan) -> list[str]:
    """The plan in kubectl-like lines (`pool/x created`), what stays and what cannot be converted."""
    lines = priority_classes.lines(plan.priority_classes)
    taint = f"{POOL_TAINT_KEY}=<pool>:{POOL_TAINT_EFFECT}"
    for p in plan.pools:
        verb = "configured" if p.exists else "created"
        lines.append(
            f"pool/{p.name} {verb} with {len(p.nodes)} node(s): {', '.join(sorted(p.nodes))} ({p.reason}); "
            f"its nodes tainted {taint.replace('<pool>', p.name)}, its flavor tolerates it"
        )
    for iso in plan.isolation:
        if iso.flavor:
            tol = pool_toleration(iso.pool)
            lines.append(
                f"resourceflavor/{iso.pool} tolerates {tol['key']}={tol['value']}:{tol['effect']} "
                "(re-created: Kueue keeps a topology flavor immutable; admitted work keeps running)"
            )
        for n in iso.nodes:
            lines.append(
                f"node/{n} tainted {taint.replace('<pool>', iso.pool)} (pool {iso.pool}; running pods "
                "stay: NoSchedule evicts nothing)"
            )
    for n in plan.untaint:
        lines.append(f"node/{n} untainted {POOL_TAINT_KEY}:{POOL_TAINT_EFFECT} (in no pool)")
    for q in plan.quotas:
        t = q.team
        limits = ", ".join(
            f"{k}={v}" for k, v in (("gpu", t.gpu), ("cpu", t.cpu), ("memory", t.memory)) if v is not None
        )
        lines.append(
            f"quota/{t.quota_name} created for namespace {t.namespace}: {limits or 'unlimited'} ({q.reason})"
        )
        lines.append(
            f"limitrange/{LIMIT_RANGE_NAME} -n {t.namespace} created (default requests for pods without any)"
        )
    for c in plan.resource_quotas:
        if c.delete:
            lines.append(
                f"resourcequota/{c.name} -n {c.namespace} deleted (its limits moved to the gpuctl quota)"
            )
        else:
            lines.append(
                f"resourcequota/{c.name} -n {c.namespace}: {', '.join(c.remove_keys)} removed "
                "(moved to the gpuctl quota; its other limits stay)"
            )
    return lines


def execute(cluster: Cluster, a: Adoption, *, dry_run: DryRun = DryRun.NONE) -> list[str]:
    """Carry out the plan: PriorityClasses, pools (new ones, then the pool taint on existing ones), then
    quotas, then the ResourceQuotas they replace."""
    dry_run = DryRun(dry_run)
    server_dry = dry_run is DryRun.SERVER
    # First: from here on no pod of the earlier gpuctl's classes preempts through kube-scheduler.
    lines: list[str] = priority_classes.execute(cluster, a.plan.priority_classes, dry_run=dry_run)
    for p in a.plan.pools:
        lines += apply_pool(cluster, pool_spec(a.inventory, p), create=not p.exists, dry_run=dry_run)
    for iso in a.plan.isolation:
        lines += isolate_pool(cluster, iso.pool, dry_run=dry_run)
    lines += untaint_nodes(cluster, a.plan.untaint, dry_run=dry_run)
    for spec in quota_specs(a.plan.quotas):
        lines += apply_quota(cluster, spec, create=True, dry_run=dry_run)
    for c in a.plan.resource_quotas:
        p = path("ResourceQuota", c.name, c.namespace)
        if c.delete:
            if dry_run.writes:
                cluster.delete(p, dry_run=server_dry)
            lines.append(f"resourcequota/{c.name} -n {c.namespace} deleted")
        else:
            if dry_run.writes:
                cluster.merge_patch(p, {"spec": {"hard": dict.fromkeys(c.remove_keys)}}, dry_run=server_dry)
            lines.append(f"resourcequota/{c.name} -n {c.namespace}: {', '.join(c.remove_keys)} removed")
    return lines
