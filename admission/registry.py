"""Every admission rule, once: its name, what it denies (one line), its Python check, its CEL or why it has
none, its fix, and the file both live in (admission/validators/<file>.py).

The webhook's dispatchers (admission.rules for team namespaces and Nodes, admission.isolation outside them)
run `checks(stage)` in this order; the policy generators (admission.policies.team, .isolation, .deletes)
compile `cel_rules(policy)` in this order. A new rule: its file in admission/validators/ (check, CEL beside
it, FIX), its name in admission.rule_names, one `Rule` here; docs/admission.md's table is `markdown_table()`
(tests/unit/test_admission_registry.py keeps the docs so).

Stages (each with the argument its checks take):

| stage | when | check(arg) |
|---|---|---|
| WORK | every Pod / pod template (a JobSet: each replicated job's) in a team namespace | `WorkReview` |
| CLAIM | a Pod or Job there: findings of the object itself (its controller reference) | `ObjectReview` |
| CHANGE | an UPDATE of a Pod, Job or JobSet: what it changes (old findings excuse nothing) | `ObjectReview` |
| DELETE | a DELETE there | `DeleteReview` |
| NODE | a Node | `NodeReview` |
| ISOLATION | a pod spec in any other namespace | `IsolationReview` |
| SCALE | a HorizontalPodAutoscaler in a team namespace | `ScaleReview` |
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from admission.envelope import Envelope
from admission.policies.cel import DeleteCel, IsolationCel, TeamCel
from admission.rule_names import (
    CACHE_RULES,
    DELETE_GRACE,
    DEVICE_ACCESS,
    EXTENDED_RESOURCE,
    GANG_FITS,
    GPU_FITS_NODE,
    GPU_QUEUE,
    GPU_RESOURCE_RULE,
    GPU_TOPOLOGY,
    HOST_PATH,
    HPA_QUEUED,
    JOB_TYPE,
    KUEUE_GATE,
    MIG_PROFILE,
    NODE_POOL,
    ORPHAN_DELETE,
    OWNER_CLAIM,
    POOL_EXISTS,
    POOL_NODE_NAME,
    POOL_PLACEMENT,
    POOL_SELECTION,
    POOL_TOLERATION,
    PRIORITY,
    PRIORITY_CLASS_RULE,
    SET_ASIDE_TOLERATION,
    TERMINATION_GRACE,
    UNKNOWN_KEY,
)
from admission.state import ClusterState
from admission.validators import (
    autoscaling,
    device_access,
    gangs,
    gpu_resources,
    host_paths,
    isolation,
    kueue_gate,
    labels,
    mig_profiles,
    node_pool,
    orphan_delete,
    owner_claim,
    placement,
    priority_class,
    queue,
    set_aside,
    termination,
)
from admission.verdict import AdmissionConfig, Malformed, Violation
from admission.work import Work, queue_name
from gpuctl.domain.gpus import pod_spec_gpus

__all__ = [
    "CHANGE",
    "CLAIM",
    "DELETE",
    "ISOLATION",
    "NODE",
    "REGISTRY",
    "RULES",
    "SCALE",
    "WORK",
    "DeleteReview",
    "IsolationReview",
    "NodeReview",
    "ObjectReview",
    "Rule",
    "ScaleReview",
    "WorkReview",
    "cel_rules",
    "checks",
    "compiled",
    "markdown_table",
    "rule",
]

WORK: Final = "work"
CLAIM: Final = "claim"
CHANGE: Final = "change"
DELETE: Final = "delete"
NODE: Final = "node"
ISOLATION: Final = "isolation"
SCALE: Final = "scale"

# The policies that carry rules' CEL (admission/policies/).
TEAM_POLICY: Final = "gpuctl-admission"
DELETE_POLICY: Final = "gpuctl-admission-delete"
ISOLATION_POLICY: Final = "gpuctl-isolation"


class WorkReview:
    """What a WORK check reads: one Work, its namespace, the cache, the config, who sends it; the GPUs and
    placement read once; `warn` collects warnings (never denials)."""

    __slots__ = ("config", "gpus", "ns", "placement", "state", "user", "w", "warn")

    def __init__(
        self, w: Work, ns: str, state: ClusterState, config: AdmissionConfig, user: str = ""
    ) -> None:
        self.w, self.ns, self.state, self.config, self.user = w, ns, state, config, user
        self.warn: list[str] = []
        self.gpus = pod_spec_gpus(w.spec, w.spec_path)
        self.placement = placement.placement_of(w, state)


@dataclass(slots=True)
class ObjectReview:
    """What CLAIM and CHANGE checks read: the request, the object judged (at `where`: the new one, or the old
    one for the old findings on UPDATE), and on UPDATE both reduced (`old_works` None: not reduced)."""

    env: Envelope
    obj: Mapping[str, Any]
    where: str
    works: list[Work] = field(default_factory=list)
    old_works: list[Work] | None = None

    @property
    def kind(self) -> str:
        return self.env.kind


@dataclass(slots=True)
class DeleteReview:
    env: Envelope
    state: ClusterState
    config: AdmissionConfig


@dataclass(slots=True)
class NodeReview:
    obj: Mapping[str, Any]
    where: str
    state: ClusterState


@dataclass(slots=True)
class ScaleReview:
    obj: Mapping[str, Any]
    ns: str
    state: ClusterState
    warn: list[str] = field(default_factory=list)


@dataclass(slots=True)
class IsolationReview:
    gk: tuple[str, str]
    spec: Mapping[str, Any]
    spec_path: str
    state: ClusterState
    gpus: bool  # isolation.names_gpus(spec)


Check = Callable[[Any], list[Violation]]
C = TypeVar("C", TeamCel, IsolationCel, DeleteCel)


@dataclass(frozen=True)
class Rule:
    name: str
    denies: str  # one line: what the rule refuses
    file: str  # admission/validators/<file>.py: the check, the CEL, the fix
    fix: str  # the rule's fix, as the policy states it (a webhook finding may name a narrower one)
    checks: tuple[tuple[str, Check], ...]  # (stage, check), run in this order
    cel: TeamCel | IsolationCel | DeleteCel | None = None
    policy: str = ""  # the policy that carries the CEL
    webhook_only: str = ""  # why there is no CEL

    @property
    def cache(self) -> bool:
        """Its verdict depends on what the webhook's cache has seen (rule_names.CACHE_RULES)."""
        return self.name in CACHE_RULES


# ---- the checks, as each stage calls them (the validators keep their own signatures for their tests)


def _queue(r: WorkReview) -> list[Violation]:
    return queue.check_queue(r.w, r.ns, r.gpus, r.state, r.warn) if r.gpus else []


def _kueue_gate(r: ObjectReview) -> list[Violation]:
    if not r.works or not r.old_works:
        return []
    w, was = r.works[0], r.old_works[0]
    queue = queue_name(w) or queue_name(was)
    owner = "" if queue or r.kind != "Job" else orphan_delete.queued_owner(r.obj, "request.object")
    return kueue_gate.check_kueue_gate(w, was, queue, owner)


def _claims(r: ObjectReview) -> bool:
    return r.kind in ("Pod", "Job")  # a pod's or a Job's controller reference


def _owner_claim(r: ObjectReview) -> list[Violation]:
    return owner_claim.check_owner_claim(r.obj, r.where, r.kind) if _claims(r) else []


def _owner_dropped(r: ObjectReview) -> list[Violation]:
    old = r.env.old
    if not _claims(r) or not old:
        return []
    with suppress(Malformed):  # a malformed old object: the new one is judged on its own
        return owner_claim.check_owner_dropped(r.obj, old, r.env.user, r.kind)
    return []


def _orphan_delete(r: DeleteReview) -> list[Violation]:
    env = r.env
    return orphan_delete.check_orphan_delete(env.request, env.gk, env.user, r.state, r.config.kueue_user)


def _delete_grace(r: DeleteReview) -> list[Violation]:
    if r.state.namespaces.get(r.env.namespace()) is False or r.env.user == r.config.kueue_user:
        return []
    return termination.check_delete_grace(r.env.request, r.env.gk, r.config.max_termination_grace)


def _node(r: NodeReview) -> list[Violation]:
    return node_pool.check_node(r.obj, r.where, r.state)


_LABELS: Final = ((WORK, lambda r: labels.check_labels(r.w)),)
# gpu-resource and extended-resource: one pass over the resources a pod spec names.
_RESOURCES: Final = (
    (WORK, lambda r: gpu_resources.check_resources(r.w, r.config.allowed_extended_resources)),
)
_PLACEMENT_NODES: Final = "reads the pool's nodes from the webhook's cache"

REGISTRY: Final[tuple[Rule, ...]] = (
    Rule(
        GPU_QUEUE,
        "GPU work without a `kueue.x-k8s.io/queue-name` naming a LocalQueue of its namespace",
        "queue",
        "add the label naming a LocalQueue of the namespace (`gpuctl` creates LocalQueue default)",
        ((WORK, _queue),),
        webhook_only="reads the namespace's LocalQueues",
    ),
    Rule(
        GPU_TOPOLOGY,
        "GPU work for a ClusterQueue with pools, without a topology annotation (Kueue never admits it)",
        "queue",
        'add `kueue.x-k8s.io/podset-unconstrained-topology: "true"`, or install the topology policy',
        ((WORK, _queue),),
        webhook_only="reads the LocalQueue's ClusterQueue and its pools",
    ),
    Rule(
        POOL_EXISTS,
        "a `runwhere.ai/pool` (label, nodeSelector, affinity list) naming a pool that does not exist",
        "placement",
        "use an existing pool (`gpuctl get pools`)",
        ((WORK, lambda r: placement.check_pool_exists(r.placement, r.state)),),
        webhook_only="reads the pools",
    ),
    Rule(
        POOL_PLACEMENT,
        "pool label, nodeSelector, affinity and nodeName disagreeing, or nothing keeping pods on their pool",
        "placement",
        "add `nodeSelector[runwhere.ai/pool]`, change the pool or the selector",
        ((WORK, lambda r: placement.check_pool_placement(r.placement, r.state, r.warn)),),
        webhook_only=_PLACEMENT_NODES,
    ),
    Rule(
        GPU_FITS_NODE,
        "a pod asking for more GPUs than the largest node of its pool(s) has",
        "placement",
        "ask for at most the largest node's GPUs per pod, or use a pool with bigger nodes",
        ((WORK, lambda r: placement.check_gpu_fits_node(r.placement, r.gpus, r.state)),),
        webhook_only=_PLACEMENT_NODES,
    ),
    Rule(
        GANG_FITS,
        "a multi-node job that could never run in its pool, even with every node empty",
        "gangs",
        "fewer pods or GPUs per pod, a wider required topology level, or a pool with more nodes",
        ((WORK, lambda r: gangs.check_gang_fits(r.w, r.placement, r.gpus, r.state)),),
        webhook_only=_PLACEMENT_NODES,
    ),
    Rule(
        UNKNOWN_KEY,
        "a `runwhere.ai/` label or annotation key gpuctl does not know (workloads and Nodes)",
        "labels",
        labels.UNKNOWN_KEY_FIX,
        (*_LABELS, (NODE, _node)),
        labels.UNKNOWN_KEY_CEL,
        TEAM_POLICY,
    ),
    Rule(
        JOB_TYPE,
        "`runwhere.ai/job-type` not one of gpuctl's job kinds",
        "labels",
        labels.JOB_TYPE_FIX,
        _LABELS,
        labels.JOB_TYPE_CEL,
        TEAM_POLICY,
    ),
    Rule(
        PRIORITY,
        "`runwhere.ai/priority` not high/medium/low, or disagreeing with its template or Kueue's class",
        "labels",
        labels.PRIORITY_FIX,
        _LABELS,
        labels.PRIORITY_CEL,
        TEAM_POLICY,
    ),
    Rule(
        HOST_PATH,
        "a hostPath volume in `constants.DENIED_HOST_PATHS` or below, or a relative one",
        "host_paths",
        host_paths.FIX,
        ((WORK, lambda r: host_paths.check_host_paths(r.w, r.config.allowed_host_paths)),),
        host_paths.CEL,
        TEAM_POLICY,
    ),
    Rule(
        PRIORITY_CLASS_RULE,
        "a `priorityClassName` but its priority's gpuctl class, or a foreign WorkloadPriorityClass",
        "priority_class",
        priority_class.FIX,
        ((WORK, lambda r: priority_class.check_priority_class(r.w)),),
        priority_class.CEL,
        TEAM_POLICY,
    ),
    Rule(
        DEVICE_ACCESS,
        "privileged, capabilities beyond baseline, NVIDIA device env, hostPath under /dev, hostPID/hostIPC",
        "device_access",
        device_access.FIX,
        ((WORK, lambda r: device_access.check_device_access(r.w, r.config.allowed_host_paths)),),
        device_access.CEL,
        TEAM_POLICY,
    ),
    Rule(
        GPU_RESOURCE_RULE,
        "a GPU resource Kueue does not charge to the team's budget",
        "gpu_resources",
        gpu_resources.FIX,
        _RESOURCES,
        gpu_resources.CEL,
        TEAM_POLICY,
    ),
    Rule(
        EXTENDED_RESOURCE,
        "any other extended resource Kueue does not charge, unless the admin's list allows it",
        "gpu_resources",
        gpu_resources.EXTENDED_FIX,
        _RESOURCES,
        gpu_resources.EXTENDED_CEL,
        TEAM_POLICY,
    ),
    Rule(
        MIG_PROFILE,
        "a MIG profile the GPUs of the pod's pools do not have",
        "mig_profiles",
        "one of the profiles the pool's GPUs have, or gpuctl's `gpu-share: <memory>`",
        ((WORK, lambda r: mig_profiles.check_mig_profiles(r.w, r.ns, r.placement, r.state)),),
        webhook_only="reads the GPU models of the pool's nodes",
    ),
    Rule(
        SET_ASIDE_TOLERATION,
        "a toleration of a set-aside taint on anything but a Job, or of another job's set-aside",
        "set_aside",
        set_aside.FIX,
        ((WORK, lambda r: set_aside.check_set_aside_toleration(r.w, r.ns, r.user)),),
        set_aside.CEL,
        TEAM_POLICY,
    ),
    Rule(
        TERMINATION_GRACE,
        "a `terminationGracePeriodSeconds` above the admin's bound (Kueue stops counting terminating pods)",
        "termination",
        termination.FIX,
        ((WORK, lambda r: termination.check_termination_grace(r.w, r.config.max_termination_grace)),),
        termination.CEL,
        TEAM_POLICY,
    ),
    Rule(
        DELETE_GRACE,
        "a DELETE of a team pod naming a gracePeriodSeconds above the admin's bound",
        "termination",
        termination.DELETE_FIX,
        ((DELETE, _delete_grace),),
        termination.DELETE_CEL,
        DELETE_POLICY,
    ),
    Rule(
        KUEUE_GATE,
        "an UPDATE by anyone but Kueue un-suspending a queued Job or JobSet, or lifting Kueue's pod gates",
        "kueue_gate",
        kueue_gate.FIX,
        ((CHANGE, _kueue_gate),),
        kueue_gate.CEL,
        TEAM_POLICY,
    ),
    Rule(
        OWNER_CLAIM,
        "a Pod or Job claiming a controller Kueue leaves its pods to, not sent by it; such a claim dropped",
        "owner_claim",
        owner_claim.FIX,
        ((CLAIM, _owner_claim), (CHANGE, _owner_dropped)),
        owner_claim.CEL,
        TEAM_POLICY,
    ),
    Rule(
        ORPHAN_DELETE,
        "a DELETE that would orphan the pods of a Job Kueue counts",
        "orphan_delete",
        orphan_delete.FIX,
        ((DELETE, _orphan_delete),),
        orphan_delete.CEL,
        DELETE_POLICY,
    ),
    Rule(
        NODE_POOL,
        "a Node's `runwhere.ai/pool` label naming a pool that does not exist",
        "node_pool",
        "create the pool first (`gpuctl create -f pool.yaml`) or use an existing one",
        ((NODE, _node),),
        webhook_only="reads the pools",
    ),
    Rule(
        HPA_QUEUED,
        "an HPA scaling a GPU Deployment or LeaderWorkerSet Kueue does not queue (its replicas past the "
        "quota would not wait)",
        "autoscaling",
        autoscaling.FIX,
        ((SCALE, lambda r: autoscaling.check_hpa_queued(r.obj, r.ns, r.state, r.warn)),),
        webhook_only="reads the target Deployment or LeaderWorkerSet and the team's ClusterQueue from the "
        "webhook's cache",
    ),
    Rule(
        POOL_TOLERATION,
        "outside team namespaces, a toleration of the pool taint (DaemonSets without GPUs may)",
        "isolation",
        isolation.TOLERATION_FIX,
        ((ISOLATION, lambda r: isolation.check_toleration(r.gk, r.spec, r.spec_path, r.gpus)),),
        isolation.TOLERATION_CEL,
        ISOLATION_POLICY,
    ),
    Rule(
        POOL_SELECTION,
        "outside team namespaces, a pod requesting GPUs that selects a pool",
        "isolation",
        isolation.SELECTION_FIX,
        ((ISOLATION, lambda r: isolation.check_selection(r.gk, r.spec, r.spec_path, r.gpus)),),
        isolation.SELECTION_CEL,
        ISOLATION_POLICY,
    ),
    Rule(
        POOL_NODE_NAME,
        "outside team namespaces, `spec.nodeName` naming a pool node",
        "isolation",
        isolation.NODE_NAME_FIX,
        ((ISOLATION, lambda r: isolation.check_node_name(r.gk, r.spec, r.spec_path, r.state)),),
        webhook_only="reads which nodes are in a pool",
    ),
)
RULES: Final = tuple(r.name for r in REGISTRY)
_BY_NAME: Final = {r.name: r for r in REGISTRY}


def rule(name: str) -> Rule:
    return _BY_NAME[name]


def _unique(items: list[Check]) -> tuple[Check, ...]:
    out: list[Check] = []
    for c in items:
        if c not in out:
            out.append(c)
    return tuple(out)


_CHECKS: Final = {
    stage: _unique([c for r in REGISTRY for s, c in r.checks if s == stage])
    for stage in (WORK, CLAIM, CHANGE, DELETE, NODE, ISOLATION, SCALE)
}
# CLAIM and CHANGE checks in registry order, as one pass (kueue-gate, owner-claim's claim, its change).
OBJECT_CHECKS: Final = tuple((s, c) for r in REGISTRY for s, c in r.checks if s in (CLAIM, CHANGE))


def checks(stage: str) -> tuple[Check, ...]:
    """The checks of `stage`, in registry order, each once (a check that finds several rules is listed by
    each of them)."""
    return _CHECKS[stage]


def cel_rules(policy: str) -> tuple[Rule, ...]:
    """The rules whose CEL `policy` carries, in registry order."""
    return tuple(r for r in REGISTRY if r.policy == policy)


def compiled(policy: str, cel_type: type[C]) -> list[tuple[Rule, C]]:
    """cel_rules(policy) with their CEL, each of the type that policy's generator compiles."""
    out = []
    for r in cel_rules(policy):
        assert isinstance(r.cel, cel_type), r.name
        out.append((r, r.cel))
    return out


def _where(r: Rule) -> str:
    return f"webhook + `{r.policy}`" if r.policy else f"webhook only: {r.webhook_only}"


def markdown_table() -> str:
    """docs/admission.md's (and docs/architecture.md's) table of the rules, one line each."""
    lines = ["| rule | denies | where | file |", "|---|---|---|---|"]
    lines += [
        f"| `{r.name}` | {r.denies} | {_where(r)} | `admission/validators/{r.file}.py` |" for r in REGISTRY
    ]
    return "\n".join(lines) + "\n"


def _main() -> None:
    print(markdown_table(), end="")


if __name__ == "__main__":
    _main()
