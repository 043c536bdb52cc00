"""What `gpuctl adopt` would change on a cluster the earlier gpuctl ran: pure decisions over plain dicts,
no I/O (in the service layer only because it checks names with gpuctl.spec; gpuctl.service.adopt reads
and writes).

The earlier gpuctl kept its state in plain Kubernetes objects: pools were node labels
(`runwhere.ai/pool`), a job without a pool ran on the nodes without that label, team quotas were
ResourceQuotas (`<quota>-<ns>`, labelled `runwhere.ai/quota`) in namespaces labelled
`runwhere.ai/namespace=true`, and namespace `default` always took jobs. `decide()` turns that state
into gpuctl pools and quotas:

- every `runwhere.ai/pool` value on a node without a gpuctl ResourceFlavor becomes a pool of those nodes;
- the unlabelled nodes with GPUs become pool `default` (the pool a job without `resources.pool` uses),
  so jobs that ran "anywhere unlabelled" keep running somewhere; nodes without GPUs are left alone;
- each team namespace (marker label, an earlier gpuctl ResourceQuota, or a ResourceQuota on GPUs) gets
  a gpuctl quota. With `remove` (the default) the limits of the earlier gpuctl's ResourceQuotas move
  into the gpuctl quota and those ResourceQuotas lose the converted keys (deleted when nothing else is
  left); with `keep` every ResourceQuota stays and keeps enforcing, so the gpuctl quota leaves those
  resources unlimited. A ResourceQuota gpuctl did not create is never changed: it keeps enforcing,
  and the gpuctl quota leaves its resources unlimited. Either way exactly one of them enforces each
  resource;
- namespace `default` gets a quota only when asked (`include_default`): then it is a team namespace and
  the jobs the earlier client submits without `-n` queue there in Kueue; without it they are refused on
  pool nodes (the isolation rules, admission/isolation.py);
- every pool node carries the pool taint `runwhere.ai/pool=<pool>:NoSchedule` and every pool flavor
  tolerates it (docs/adoption.md, the pool taint): pools gpuctl already has (an earlier gpuctl-made
  flavor without the toleration, nodes labelled but never tainted) are brought to that state
  (`isolation`), taints left on nodes that are in no pool any more are removed. NoSchedule evicts
  nothing: the pods already on those nodes that do not tolerate the taint keep running, and are listed
  (a DaemonSet among them no longer replaces its pod there until it tolerates the taint);
- whatever cannot be converted is said (other ResourceQuota keys such as `pods`, invalid pool names,
  a ResourceFlavor gpuctl did not make, workloads of the earlier gpuctl that Kueue does not queue).

Decisions already taken (a pool with a flavor, a namespace with a gpuctl ClusterQueue, a ResourceQuota
already stripped) produce nothing, so a second run changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gpuctl.constants import (
    BUDGET_FLAVOR,
    CPU_RESOURCE,
    DEFAULT_NAMESPACE,
    GPU_RESOURCE,
    MEMORY_RESOURCE,
    NAMESPACE_MARKER_VALUE,
    Labels,
)
from gpuctl.domain.objects import controller_ref, is_gpuctl_object, labels, name, namespace
from gpuctl.domain.pools import (
    flavor_tolerations,
    is_pool_flavor,
    node_gpus,
    node_pool,
    node_pool_taint_missing,
    pool_toleration,
    tolerates_pool_taint,
)
from gpuctl.quantity import QuantityError, parse_quantity
from gpuctl.spec.names import is_dns_label
from queues import TeamQuota

REMOVE = "remove"
KEEP = "keep"
RESOURCE_QUOTA_MODES = (REMOVE, KEEP)
# The quota name of team namespaces whose ResourceQuota does not say one.
ADOPTED_QUOTA = "adopted"
# Namespaces that are never teams, whatever they hold.
SYSTEM_NAMESPACE_PREFIXES = ("kube-", "kueue-")

# ResourceQuota keys gpuctl converts, by the gpuctl quota field they become. gpuctl's pods request
# what they limit, so requests.* and limits.* mean the same budget; the smallest value wins.
QUOTA_KEYS: dict[str, tuple[str, ...]] = {
    "gpu": (GPU_RESOURCE, f"requests.{GPU_RESOURCE}", f"limits.{GPU_RESOURCE}"),
    "cpu": (CPU_RESOURCE, f"requests.{CPU_RESOURCE}", f"limits.{CPU_RESOURCE}"),
    "memory": (MEMORY_RESOURCE, f"requests.{MEMORY_RESOURCE}", f"limits.{MEMORY_RESOURCE}"),
}
CONVERTED_KEYS = frozenset(k for keys in QUOTA_KEYS.values() for k in keys)
GPU_KEYS = frozenset(QUOTA_KEYS["gpu"])


@dataclass
class PoolPlan:
    name: str
    # node -> its GPU type under gpuctl's key ("" = none)
    nodes: dict[str, str]
    exists: bool = False  # the flavor exists: the nodes are added to it
    reason: str = ""


@dataclass
class QuotaPlan:
    """A team quota to create (a ResourceQuota is a hard cap: a GPU limit taken from one gets
    borrowing_limit 0) and where its limits come from."""

    team: TeamQuota
    reason: str = ""


@dataclass
class ResourceQuotaChange:
    namespace: str
    name: str
    # keys removed from spec.hard; delete = nothing else was left
    remove_keys: list[str]
    delete: bool


@dataclass
class IsolationPlan:
    """An existing gpuctl pool brought to the pool taint's state (docs/adoption.md): its flavor tolerates the
    pool taint (a TAS flavor is re-created for it) and each of its nodes carries it."""

    pool: str
    flavor: bool  # the flavor lacks the toleration of its pool's taint
    nodes: list[str]  # nodes of the pool whose pool taint is missing or names another pool


@dataclass
class AdoptPlan:
    pools: list[PoolPlan] = field(default_factory=list)
    quotas: list[QuotaPlan] = field(default_factory=list)
    resource_quotas: list[ResourceQuotaChange] = field(default_factory=list)
    isolation: list[IsolationPlan] = field(default_factory=list)
    # nodes in no pool that still carry a pool taint: it is removed
    untaint: list[str] = field(default_factory=list)
    # what stays as it is, and why (informational)
    kept: list[str] = field(default_factory=list)
    # what gpuctl cannot convert (the user has to act)
    not_converted: list[str] = field(default_factory=list)
    # the earlier gpuctl's PriorityClasses made never to preempt (gpuctl.service.priority_classes)
    priority_classes: list[Any] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (
            self.pools
            or self.quotas
            or self.resource_quotas
            or self.isolation
            or self.untaint
            or self.priority_classes
        )


@dataclass(frozen=True)
class AdoptOptions:
    resource_quotas: str = REMOVE
    include_default: bool = False
    default_pool: str | None = "default"  # None: unlabelled GPU nodes are left alone


def runwhere_gpu_type(node: Mapping[str, Any]) -> str:
    """The node's GPU type under gpuctl's keys (gpu-type, or its alias gpuType); "" when neither."""
    lb = labels(node)
    return lb.get(Labels.GPU_TYPE) or lb.get(Labels.GPU_TYPE_LEGACY) or ""


def decide_pools(
    nodes: Iterable[Mapping[str, Any]], flavors: Iterable[Mapping[str, Any]], options: AdoptOptions
) -> tuple[list[PoolPlan], list[str], list[str]]:
    """(pools to create or extend, kept notes, not-converted notes)."""
    flavor_by_name = {name(f): f for f in flavors}
    by_pool: dict[str, dict[str, str]] = {}
    unlabelled_gpu: dict[str, str] = {}
    unlabelled_cpu: list[str] = []
    for n in nodes:
        pool = node_pool(n)
        if pool is None:
            if node_gpus(n, "capacity") > 0:
                unlabelled_gpu[name(n)] = runwhere_gpu_type(n)
            else:
                unlabelled_cpu.append(name(n))
        else:
            by_pool.setdefault(pool, {})[name(n)] = runwhere_gpu_type(n)
    plans: list[PoolPlan] = []
    kept: list[str] = []
    bad: list[str] = []
    for pool, members in sorted(by_pool.items()):
        flavor = flavor_by_name.get(pool)
        if pool == BUDGET_FLAVOR or not is_dns_label(pool):
            why = "is reserved by gpuctl" if pool == BUDGET_FLAVOR else "is not a valid pool name"
            bad.append(
                f"pool label {Labels.POOL}={pool} on {', '.join(sorted(members))}: {why}; "
                f"relabel those nodes (gpuctl label node NODE {Labels.POOL}=NEW --overwrite) and adopt again"
            )
        elif flavor is not None and not is_gpuctl_object(flavor):
            bad.append(
                f"pool {pool}: a ResourceFlavor {pool} exists that gpuctl did not create; "
                f"relabel its nodes ({', '.join(sorted(members))}) into another pool"
            )
        elif flavor is None:
            plans.append(PoolPlan(pool, members, reason=f"from the {Labels.POOL} label of its nodes"))
    target = options.default_pool
    if unlabelled_gpu and target:
        flavor = flavor_by_name.get(target)
        if flavor is not None and not is_gpuctl_object(flavor):
            bad.append(f"pool {target}: a ResourceFlavor {target} exists that gpuctl did not create")
        else:
            existing = next((p for p in plans if p.name == target), None)
            if existing is not None:
                existing.nodes.update(unlabelled_gpu)
                existing.reason += "; and the GPU nodes without a pool label"
            else:
                plans.append(
                    PoolPlan(
                        target,
                        dict(unlabelled_gpu),
                        exists=flavor is not None,
                        reason="the GPU nodes without a pool label (where jobs without resources.pool ran)",
                    )
                )
    elif unlabelled_gpu:
        kept.append(
            f"GPU nodes without a pool label stay outside every pool: {_names(unlabelled_gpu)} "
            "(jobs without resources.pool need a pool named default)"
        )
    if unlabelled_cpu:
        kept.append(
            f"nodes without GPUs and without a pool label stay outside every pool: {_names(unlabelled_cpu)}"
        )
    return plans, kept, bad


def _names(items: Iterable[str], limit: int = 6) -> str:
    items = sorted(items)
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def _hard(rq: Mapping[str, Any]) -> Mapping[str, Any]:
    return (rq.get("spec") or {}).get("hard") or {}


def is_earlier_gpuctl_quota(rq: Mapping[str, Any]) -> bool:
    """A ResourceQuota the earlier gpuctl created (it labelled them runwhere.ai/quota)."""
    return Labels.QUOTA in labels(rq) or is_gpuctl_object(rq)


def _min_quantity(values: list[str]) -> tuple[Decimal, str] | None:
    """The smallest quantity and its text as written (128Gi stays 128Gi); unparsable ones skipped."""
    parsed = []
    for v in values:
        try:
            parsed.append((parse_quantity(str(v)), str(v)))
        except QuantityError:
            continue
    return min(parsed, key=lambda p: p[0]) if parsed else None


def _converted_limits(
    ns: str, enforcing: list[Mapping[str, Any]], removable: list[Mapping[str, Any]], bad: list[str]
) -> dict[str, Any]:
    """The gpuctl quota's limits from the ResourceQuotas gpuctl removes (the smallest of each), except
    what a ResourceQuota that stays enforces; a GPU limit that is not whole is rounded down (noted)."""
    enforced = {k for rq in enforcing for k in _hard(rq)}
    limits: dict[str, Any] = {}
    for fld, keys in QUOTA_KEYS.items():
        if enforced & set(keys):
            continue  # a ResourceQuota that stays enforces it
        found = _min_quantity([str(_hard(rq)[k]) for rq in removable for k in keys if k in _hard(rq)])
        if found is None:
            continue
        q, text = found
        if fld == "gpu":
            if q != q.to_integral_value():
                bad.append(f"namespace {ns}: GPU quota {text} is not a whole number; rounded down")
            limits["gpu"] = int(q)
            limits["borrowing_limit"] = 0
        else:
            limits[fld] = text
    return limits


def decide_quotas(
    namespaces: Iterable[Mapping[str, Any]],
    resource_quotas: Iterable[Mapping[str, Any]],
    team_namespaces: Iterable[str],
    options: AdoptOptions,
) -> tuple[list[QuotaPlan], list[ResourceQuotaChange], list[str], list[str]]:
    """(quotas to create, ResourceQuota changes, kept notes, not-converted notes)."""
    teams = set(team_namespaces)
    # A namespace being deleted is nobody's team any more.
    ns_labels = {
        name(n): labels(n) for n in namespaces if not (n.get("metadata") or {}).get("deletionTimestamp")
    }
    rqs: dict[str, list[Mapping[str, Any]]] = {}
    for rq in resource_quotas:
        rqs.setdefault(namespace(rq), []).append(rq)
    candidates = set()
    for ns, lb in ns_labels.items():
        if lb.get(Labels.NAMESPACE) == NAMESPACE_MARKER_VALUE:
            candidates.add(ns)
    for ns, items in rqs.items():
        if any(is_earlier_gpuctl_quota(rq) or GPU_KEYS & set(_hard(rq)) for rq in items):
            candidates.add(ns)
    if options.include_default:
        candidates.add(DEFAULT_NAMESPACE)
    quotas: list[QuotaPlan] = []
    changes: list[ResourceQuotaChange] = []
    kept: list[str] = []
    bad: list[str] = []
    for ns in sorted(candidates):
        if ns.startswith(SYSTEM_NAMESPACE_PREFIXES) or ns not in ns_labels:
            continue
        items = sorted(rqs.get(ns, []), key=name)
        if ns == DEFAULT_NAMESPACE and not options.include_default:
            kept.append(
                "namespace default: no gpuctl quota (jobs there are refused until it has one; "
                "adopt again with --default-quota, or create a quota for it)"
            )
            continue
        removable = [rq for rq in items if options.resource_quotas == REMOVE and is_earlier_gpuctl_quota(rq)]
        enforcing = [rq for rq in items if rq not in removable]
        for rq in items:
            hard = set(_hard(rq))
            other, converted = sorted(hard - CONVERTED_KEYS), sorted(hard & CONVERTED_KEYS)
            if other:
                shown = ", ".join(f"{k}={_hard(rq)[k]}" for k in other)
                bad.append(
                    f"ResourceQuota {ns}/{name(rq)}: {shown} not converted "
                    "(gpuctl quotas limit GPUs, CPU and memory); the ResourceQuota keeps enforcing them"
                )
            if converted and rq in removable:
                changes.append(ResourceQuotaChange(ns, name(rq), converted, delete=not other))
            elif converted:
                why = "--resource-quotas=keep" if is_earlier_gpuctl_quota(rq) else "gpuctl did not create it"
                kept.append(
                    f"ResourceQuota {ns}/{name(rq)} keeps enforcing {', '.join(converted)} ({why}); "
                    "the gpuctl quota leaves them unlimited"
                )
        if ns in teams:
            continue  # already a gpuctl quota: only the ResourceQuota change (if any) is left to do
        limits = _converted_limits(ns, enforcing, removable, bad)
        quota_name = _quota_name(ns, items, ns_labels.get(ns, {}))
        sources = ", ".join(f"ResourceQuota {name(rq)}" for rq in removable) or "no ResourceQuota"
        quotas.append(QuotaPlan(TeamQuota(ns, quota_name, **limits), reason=f"from {sources}"))
    return quotas, changes, kept, bad


def _quota_name(ns: str, rqs: list[Mapping[str, Any]], ns_labels: Mapping[str, str]) -> str:
    for rq in rqs:
        v = labels(rq).get(Labels.QUOTA)
        if v and is_dns_label(v):
            return v
    v = ns_labels.get(Labels.QUOTA)
    if v and is_dns_label(v):
        return v
    return ADOPTED_QUOTA


def earlier_workloads(controllers: Iterable[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Notes on the earlier gpuctl's jobs (a job-type label, no Kueue queue label): they keep running
    untouched, outside Kueue, until re-created with gpuctl."""
    out = []
    for kind, obj in controllers:
        lb = labels(obj)
        if Labels.JOB_TYPE in lb and Labels.KUEUE_QUEUE not in lb:
            out.append(f"{namespace(obj)}/{name(obj)} ({kind})")
    if not out:
        return []
    return [
        f"jobs of the earlier gpuctl keep running untouched and outside Kueue: {_names(out)}; "
        "`gpuctl apply -f` their YAML to queue them (a running training job restarts)"
    ]


def decide_isolation(
    nodes: Iterable[Mapping[str, Any]], flavors: Iterable[Mapping[str, Any]], new_pools: Iterable[PoolPlan]
) -> tuple[list[IsolationPlan], list[str]]:
    """(existing pools to taint and tolerate, nodes to untaint). Pools adopt creates or extends go
    through apply_pool, which taints their nodes and tolerates the taint itself: only the nodes already in
    an existing pool are listed here."""
    joining = {n for p in new_pools for n in p.nodes}
    existing = {name(f): f for f in flavors if is_pool_flavor(f)}
    stale_nodes: dict[str, list[str]] = {}
    untaint: list[str] = []
    for n in nodes:
        if name(n) in joining or not node_pool_taint_missing(n):
            continue
        pool = node_pool(n)
        if pool is None:
            untaint.append(name(n))
        elif pool in existing:
            stale_nodes.setdefault(pool, []).append(name(n))
    plans = []
    for pool, flavor in sorted(existing.items()):
        untolerated = pool_toleration(pool) not in flavor_tolerations(flavor)
        if untolerated or pool in stale_nodes:
            plans.append(IsolationPlan(pool, untolerated, sorted(stale_nodes.get(pool, []))))
    return plans, sorted(untaint)


def untolerating_pods(
    pods: Iterable[Mapping[str, Any]], node_pools: Mapping[str, str]
) -> tuple[list[str], list[str]]:
    """(pods, DaemonSets) on pool nodes (node -> pool after adoption) that do not tolerate the pool taint.
    They keep running: NoSchedule evicts nothing. A DaemonSet's controller no longer re-creates its pod on a
    node whose NoSchedule taint it does not tolerate (k8s pkg/controller/daemon NodeShouldRunDaemonPod:
    shouldRun false, shouldContinueRunning true)."""
    plain: list[str] = []
    daemonsets: set[str] = set()
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        pool = node_pools.get(node or "")
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        if pool is None or any(tolerates_pool_taint(t, pool) for t in tolerations):
            continue
        ctrl = controller_ref(pod)
        ds = ctrl.get("name") if ctrl and ctrl.get("kind") == "DaemonSet" else None
        if ds:
            daemonsets.add(f"{namespace(pod)}/{ds}")
        else:
            plain.append(f"{namespace(pod)}/{name(pod)} on {node}")
    return sorted(plain), sorted(daemonsets)


def isolation_notes(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    new_pools: Iterable[PoolPlan],
    isolation: Iterable[IsolationPlan],
    options: AdoptOptions,
) -> list[str]:
    """What stays as it is when pool nodes are tainted (informational)."""
    tainted = {n for p in isolation for n in p.nodes}
    node_pools = {n: p.name for p in new_pools for n in p.nodes}
    node_pools.update({name(n): node_pool(n) or "" for n in nodes if name(n) in tainted})
    plain, daemonsets = untolerating_pods(pods, node_pools)
    notes = []
    if plain:
        notes.append(
            f"pods already on pool nodes that do not tolerate the pool taint keep running (NoSchedule "
            f"evicts nothing; `gpuctl serve` reports GPU pods no admitted Workload covers): {_names(plain)}"
        )
    if daemonsets:
        notes.append(
            f"DaemonSets whose pods on pool nodes do not tolerate the pool taint: {_names(daemonsets)}; "
            "their pods keep running, but one that is deleted is not re-created on a pool node until the "
            f"DaemonSet tolerates it (add {{key: {Labels.POOL}, operator: Exists, effect: NoSchedule}}; "
            "allowed for DaemonSets without GPUs)"
        )
    if (new_pools or isolation) and not options.include_default:
        notes.append(
            "namespace default is not a team namespace: GPU jobs the earlier client submits without -n "
            "are refused for named pools and never run on pool nodes; adopt again with --default-quota "
            "to queue them in Kueue as team default, or submit with -n <team>"
        )
    return notes


def decide(
    *,
    nodes: list[Mapping[str, Any]],
    flavors: list[Mapping[str, Any]],
    namespaces: list[Mapping[str, Any]],
    resource_quotas: list[Mapping[str, Any]],
    team_namespaces: Iterable[str],
    controllers: Iterable[tuple[str, Mapping[str, Any]]] = (),
    pods: Iterable[Mapping[str, Any]] = (),
    options: AdoptOptions = AdoptOptions(),
) -> AdoptPlan:
    if options.resource_quotas not in RESOURCE_QUOTA_MODES:
        raise ValueError(f"resource_quotas must be one of {', '.join(RESOURCE_QUOTA_MODES)}")
    pools, kept_p, bad_p = decide_pools(nodes, flavors, options)
    quotas, changes, kept_q, bad_q = decide_quotas(namespaces, resource_quotas, team_namespaces, options)
    isolation, untaint = decide_isolation(nodes, flavors, pools)
    kept_i = isolation_notes(nodes, pods, pools, isolation, options)
    return AdoptPlan(
        pools=pools,
        quotas=quotas,
        resource_quotas=changes,
        isolation=isolation,
        untaint=untaint,
        kept=[*kept_p, *kept_q, *earlier_workloads(controllers), *kept_i],
        not_converted=[*bad_p, *bad_q],
    )
