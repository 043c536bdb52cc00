"""gpuctl's admission rules as pure functions: an AdmissionReview `request` and a snapshot in, a Verdict out.

Nothing here does I/O, so every rule is unit-testable with plain dicts and the request path costs only the
evaluation itself. The rules keep the cluster to gpuctl's conventions however work arrives (`gpuctl`,
`kubectl apply`, a CI bot):

- `gpu-queue`       GPU work names a LocalQueue of its namespace (`kueue.x-k8s.io/queue-name`): no way
                    around Kueue.
- `gpu-topology`    GPU work for a ClusterQueue with pools asks Kueue for a topology (pool flavors are
                    Topology Aware Scheduling flavors: without one Kueue never admits it). Where the
                    topology MutatingAdmissionPolicy is installed it adds the annotation first.
- `pool-exists`     every `runwhere.ai/pool` (label or nodeSelector) names a pool that exists.
- `pool-placement`  nodeSelector, required node affinity and nodeName keep the pods on their pool's nodes.
- `priority`        `runwhere.ai/priority` is high/medium/low and agrees with `kueue.x-k8s.io/priority-class`.
- `job-type`        `runwhere.ai/job-type` is one of gpuctl's four job kinds.
- `unknown-key`     no `runwhere.ai/` label or annotation key gpuctl does not know (typos would be ignored),
                    on workloads and on Nodes.
- `gpu-fits-node`   a pod asks for no more GPUs than the largest node of its pool has (else it never runs).
- `host-path`       hostPath volumes stay out of the deny list unless the admin allowed them.
- `node-pool`       a Node's `runwhere.ai/pool` label names an existing pool.
- `priority-class`  in a team namespace a pod's priorityClassName is empty or the gpuctl class matching its
                    `runwhere.ai/priority`, and `kueue.x-k8s.io/priority-class` is a gpuctl class: neither
                    Kueue's order nor kube-scheduler's preemption can be jumped.
- `device-access`   no privileged container, no capability beyond Pod Security `baseline`'s, no hostPath
                    under /dev, no NVIDIA_VISIBLE_DEVICES & co. set by hand, no hostPID/hostIPC: a pod
                    cannot reach GPUs Kueue never counted.
- `owner-claim`     a Pod claiming a controller whose pods Kueue leaves to that controller's integration
                    (a Job, ReplicaSet, StatefulSet, ...) comes from that controller, and only the
                    controller (or the garbage collector) takes such a claim away: Kueue would not gate it.
- `orphan-delete`   no orphaning DELETE of a Job Kueue counts: its pods would run on, uncounted.
- `kueue-gate`      only Kueue starts queued work: nobody else un-suspends a queued Job or removes Kueue's
                    scheduling gates from a pod (until Kueue re-suspends, its pods would run uncounted).

Rules apply to Pods, Jobs, Deployments, StatefulSets and ReplicaSets in namespaces gpuctl manages, and to
Nodes. Pods the Job, ReplicaSet or StatefulSet controller makes (and ReplicaSets the Deployment controller
makes) are checked once, at their owner: the owner's template is what they are made from. What proves a
pod was made by its controller is *who sends the request* (`request.userInfo.username`, the controller's
own ServiceAccount, see CONTROLLER_USERS), never what the object says about itself: anyone who may create
pods can write an ownerReference to a Job of his own.

On UPDATE only violations the old object did not already have are denied (compared by `Violation.identity`,
the rule and the exact finding): objects created before the webhook existed (or in warn mode) stay
updatable, but a *different* finding of the same rule (another foreign pool, another host path) is new.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any, Final, NamedTuple

from admission.state import ClusterState, NodeInfo
from gpuctl.constants import (
    AUDIT_RUNWHERE_KEYS,
    BASELINE_CAPABILITIES,
    DEVICE_HOST_PATHS,
    EXTRA_RUNWHERE_KEYS,
    FIELD_MANAGER,
    GC_USER,
    GPU_RESOURCE,
    JOB_KINDS,
    KNOWN_RUNWHERE_KEYS,
    KUEUE_DEFAULT_WORKLOAD_PRIORITY_CLASS,
    NVIDIA_DEVICE_ENV,
    PRIORITY_CLASS,
    TAS_REQUEST_KEYS,
    TAS_UNCONSTRAINED,
    Labels,
    Priority,
)
from gpuctl.domain.gpus import ShapeError, pod_spec_gpus
from gpuctl.spec.models import normalise_host_path, path_denied
from gpuctl.spec.suggest import closest

__all__ = [
    "RULES",
    "AdmissionConfig",
    "Malformed",
    "Mode",
    "Verdict",
    "Violation",
    "pod_gpus",
    "review",
]


class Mode(StrEnum):
    ENFORCE = "enforce"  # violations deny the request
    WARN = "warn"  # violations become AdmissionReview warnings; everything is allowed


# Rule names, as they appear in denials, warnings and metrics.
GPU_QUEUE: Final = "gpu-queue"
GPU_TOPOLOGY: Final = "gpu-topology"
POOL_EXISTS: Final = "pool-exists"
POOL_PLACEMENT: Final = "pool-placement"
PRIORITY: Final = "priority"
JOB_TYPE: Final = "job-type"
UNKNOWN_KEY: Final = "unknown-key"
GPU_FITS_NODE: Final = "gpu-fits-node"
HOST_PATH: Final = "host-path"
NODE_POOL: Final = "node-pool"
# What a tenant may not do in its own team namespace (issue 26).
PRIORITY_CLASS_RULE: Final = "priority-class"
DEVICE_ACCESS: Final = "device-access"
OWNER_CLAIM: Final = "owner-claim"
ORPHAN_DELETE: Final = "orphan-delete"
KUEUE_GATE: Final = "kueue-gate"
# Rules whose verdict depends on what the cache has seen: a denial by these alone may be watch lag (a pool
# created a millisecond before its nodes are labelled), so the server re-checks it once the cache moves.
CACHE_RULES: Final = frozenset(
    {GPU_QUEUE, GPU_TOPOLOGY, POOL_EXISTS, POOL_PLACEMENT, GPU_FITS_NODE, NODE_POOL}
)
RULES: Final = (
    GPU_QUEUE,
    GPU_TOPOLOGY,
    POOL_EXISTS,
    POOL_PLACEMENT,
    PRIORITY,
    JOB_TYPE,
    UNKNOWN_KEY,
    GPU_FITS_NODE,
    HOST_PATH,
    NODE_POOL,
    PRIORITY_CLASS_RULE,
    DEVICE_ACCESS,
    OWNER_CLAIM,
    ORPHAN_DELETE,
    KUEUE_GATE,
)

# Kubernetes truncates longer warnings; one violation per warning keeps each readable.
MAX_WARNING_CHARS: Final = 256
PRIORITY_VALUES: Final = tuple(p.value for p in Priority)
JOB_TYPES: Final = tuple(k.value for k in JOB_KINDS)
_ALL_KEYS: Final = (*KNOWN_RUNWHERE_KEYS, *EXTRA_RUNWHERE_KEYS, *AUDIT_RUNWHERE_KEYS)
KNOWN_KEYS: Final = frozenset(_ALL_KEYS)
_KNOWN_SUFFIXES: Final = tuple(k.removeprefix(Labels.PREFIX) for k in _ALL_KEYS)
PRIORITY_CLASSES: Final = frozenset(PRIORITY_CLASS.values())
CLASS_PREFIX: Final = PRIORITY_CLASS[Priority.HIGH].removesuffix(Priority.HIGH.value)  # "gpuctl-"
_QUEUE_ANNOTATION: Final = Labels.KUEUE_QUEUE  # Kueue still reads the (deprecated) annotation too

# (apiGroup, kind) of the objects reviewed. Template kinds carry a pod template at spec.template.
_POD: Final = ("", "Pod")
_NODE: Final = ("", "Node")
_TEMPLATE_KINDS: Final = frozenset(
    {("batch", "Job"), ("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "ReplicaSet")}
)
# Who may skip review, by identity. kube-controller-manager run with --use-service-account-credentials (as
# kubeadm and managed clusters do) sends each controller's requests as its own ServiceAccount; only cluster
# admins can act as those (a token of a kube-system ServiceAccount, or impersonation).
SA_PREFIX: Final = "system:serviceaccount:"
KCM_NAMESPACE: Final = "kube-system"
# (apiGroup, kind) of a controller owner -> the user its controller sends requests as.
CONTROLLER_USERS: Final = {
    ("batch", "Job"): f"{SA_PREFIX}{KCM_NAMESPACE}:job-controller",
    ("apps", "ReplicaSet"): f"{SA_PREFIX}{KCM_NAMESPACE}:replicaset-controller",
    ("apps", "StatefulSet"): f"{SA_PREFIX}{KCM_NAMESPACE}:statefulset-controller",
    ("apps", "Deployment"): f"{SA_PREFIX}{KCM_NAMESPACE}:deployment-controller",
}
# kube-controller-manager without --use-service-account-credentials sends every controller's requests as
# this one user (its client certificate); trusted the same way, with the owner kind deciding which controller.
KCM_USER: Final = "system:kube-controller-manager"
# Kueue's controller (its Deployment's ServiceAccount): it unsuspends Jobs, injects the flavor's
# nodeSelector and removes its scheduling gate; the webhook's matchConditions never call for its requests.
# The default (Kueue's own chart and manifests); AdmissionConfig.kueue_user is what the webhook trusts.
KUEUE_NAMESPACE: Final = "kueue-system"
KUEUE_SERVICE_ACCOUNT: Final = "kueue-controller-manager"
KUEUE_USER: Final = f"{SA_PREFIX}{KUEUE_NAMESPACE}:{KUEUE_SERVICE_ACCOUNT}"
# A pod controlled by one of these is made from a template already reviewed at its owner.
_CHECKED_OWNERS: Final = frozenset({("batch", "Job"), ("apps", "ReplicaSet"), ("apps", "StatefulSet")})
# A ReplicaSet controlled by a Deployment is made from the Deployment's (reviewed) template.
_CHECKED_RS_OWNERS: Final = frozenset({("apps", "Deployment")})

# (apiGroup, kind) of every owner whose pods Kueue's pod webhook does not gate: it walks a new pod's
# controller references up (jobframework.FindAncestorJobManagedByKueue, Kueue v0.19.2) through every kind
# an integration registers, plus ReplicaSet as a Deployment's interim owner, and skips the pod when an
# ancestor is a queued object of an enabled integration: that integration counts the pods. A pod that
# *claims* such an owner without being made by it runs with no Workload at all, so only the owner's own
# controller may send one (`owner-claim`). No trusted identity for the other kinds: Deployments and Pods
# never make pods this way, and the operators of the other kinds are not part of gpuctl's team namespaces
# (add their ServiceAccount to POD_MAKERS to run one there).
KUEUE_OWNER_KINDS: Final = frozenset(
    {
        ("batch", "Job"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("apps", "Deployment"),
        ("", "Pod"),
        ("jobset.x-k8s.io", "JobSet"),
        ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
        ("kubeflow.org", "MPIJob"),
        ("kubeflow.org", "PyTorchJob"),
        ("kubeflow.org", "TFJob"),
        ("kubeflow.org", "XGBoostJob"),
        ("kubeflow.org", "PaddleJob"),
        ("kubeflow.org", "JAXJob"),
        ("ray.io", "RayJob"),
        ("ray.io", "RayCluster"),
        ("ray.io", "RayService"),
        ("workload.codeflare.dev", "AppWrapper"),
        ("trainer.kubeflow.org", "TrainJob"),
        ("sparkoperator.k8s.io", "SparkApplication"),
    }
)
# Who may send a pod whose controller reference names one of KUEUE_OWNER_KINDS (and who else but the
# garbage collector may take such a reference away): the controllers of _CHECKED_OWNERS.
POD_MAKERS: Final = {gk: CONTROLLER_USERS[gk] for gk in sorted(_CHECKED_OWNERS)}
# Kinds whose pods Kueue counts through the object's own Workload only: deleting it with orphaning finishes
# the Workload while the pods run on (`orphan-delete`). Measured on Kueue v0.19.2: a Deployment's or a bare
# ReplicaSet's pods are each their own Workload (Kueue's pod integration) and stay counted, and the Workload
# of a StatefulSet's pod group is owned by its pods too and stays admitted, so orphaning those escapes
# nothing (the Deployment controller's next ReplicaSet even adopts the orphans back).
ORPHAN_KINDS: Final = frozenset({("batch", "Job")})
# Kinds whose controller releases a pod whose labels stop matching its selector and makes a replacement,
# while the released pod runs on: for these the Workload is the owner's, so the released pod is counted
# no more (`owner-claim` refuses a label change of such a pod by anyone but the controller). A Deployment's,
# ReplicaSet's or StatefulSet's pod keeps its own Workload when released (and a StatefulSet cannot make a
# second pod of the same name).
RELEASING_KINDS: Final = KUEUE_OWNER_KINDS - {
    ("apps", "ReplicaSet"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("", "Pod"),
}
# The kind whose API server default for a DELETE without any policy is orphaning (k8s.io/kubernetes
# pkg/registry/batch/job/strategy.go, DefaultGarbageCollectionPolicy: "for backwards compatibility").
ORPHAN_BY_DEFAULT: Final = frozenset({("batch", "Job", "v1")})
ORPHAN_FINALIZER: Final = "orphan"
FOREGROUND_FINALIZER: Final = "foregroundDeletion"
# The scheduling gates Kueue puts on the pods it holds (pkg/controller/jobs/pod/constants SchedulingGateName;
# apis/kueue/v1beta2 TopologySchedulingGate, ElasticJobSchedulingGate): only Kueue lifts them (`kueue-gate`).
KUEUE_GATES: Final = frozenset(
    {"kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology", "kueue.x-k8s.io/elastic-job"}
)
# WorkloadPriorityClasses a team namespace may name: gpuctl's, and the one Kueue's defaulting writes.
ALLOWED_WORKLOAD_CLASSES: Final = frozenset({*PRIORITY_CLASS.values(), KUEUE_DEFAULT_WORKLOAD_PRIORITY_CLASS})
_BASELINE_CAPS: Final = frozenset(BASELINE_CAPABILITIES)
_NVIDIA_ENV: Final = frozenset(NVIDIA_DEVICE_ENV)

_EMPTY: Final[Mapping[str, Any]] = {}
# Label keys read on every request, as module constants (a class attribute lookup per use adds up).
_POOL: Final = Labels.POOL
_PREFIX: Final = Labels.PREFIX
_JOB_TYPE: Final = Labels.JOB_TYPE
_PRIORITY: Final = Labels.PRIORITY
_KUEUE_PRIORITY: Final = Labels.KUEUE_PRIORITY
_KUEUE_QUEUE: Final = Labels.KUEUE_QUEUE
_STR_ONLY: Final = frozenset({str})
_NO_QUEUE: Final = (
    "namespace {ns} has no LocalQueue: create the team with gpuctl (it creates LocalQueue default)"
)


class Malformed(ValueError):
    """Not a well-formed AdmissionReview request; the server answers HTTP 400 with this text."""


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """Webhook settings that change verdicts."""

    mode: Mode = Mode.ENFORCE
    # hostPath prefixes the admin allows despite constants.DENIED_HOST_PATHS (normalised absolute paths).
    allowed_host_paths: tuple[str, ...] = ()
    # Who Kueue's controller is (`--kueue-user`; the chart's kueue.namespace/serviceAccountName): its
    # requests are never judged. Only this identity: a default-named ServiceAccount in a namespace Kueue
    # does not run in is an ordinary user.
    kueue_user: str = KUEUE_USER


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: what is wrong and how to fix it, in words a `kubectl apply` user can act on.

    `key` identifies the violation across an UPDATE's old and new object (see module docstring); it defaults
    to the rule name.
    """

    rule: str
    message: str
    fix: str
    key: str = ""

    @property
    def identity(self) -> str:
        """What makes two findings the same across an UPDATE: the key where the message quotes cluster state
        that may change between the two (sizes, node names), else the rule and its message."""
        return self.key or f"{self.rule}: {self.message}"

    def text(self) -> str:
        return f"[{self.rule}] {self.message}. Fix: {self.fix}"


class Verdict(NamedTuple):
    """The answer to one request. `violations` are what the rules found whatever the mode; `allowed` applies
    the mode; `warnings` are what the API server will show the client (kubectl prints them).

    Immutable like a frozen dataclass, but a tuple: one is made per request, and a frozen dataclass's
    field-by-field object.__setattr__ cost more than some rules."""

    allowed: bool
    subject: str = ""
    violations: tuple[Violation, ...] = ()
    warnings: tuple[str, ...] = ()
    # Why no rule ran (unmanaged namespace, pod checked at its owner, ...), for logs and metrics.
    skipped: str = ""
    # HTTP-style code and reason of the AdmissionResponse status when denied.
    code: int = 200

    @property
    def cache_dependent(self) -> bool:
        """Denied only by rules that read the cache (see CACHE_RULES)."""
        found = self.violations
        return not self.allowed and bool(found) and all(v.rule in CACHE_RULES for v in found)

    @property
    def rules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v.rule for v in self.violations))

    def message(self) -> str:
        """The denial text (kubectl prints it after `admission webhook ... denied the request:`)."""
        if not self.violations:
            return ""
        parts = "; ".join(v.text() for v in self.violations)
        return f"gpuctl: {self.subject} breaks {len(self.violations)} rule(s): {parts}"


ALLOW: Final = Verdict(allowed=True)


# ---------------------------------------------------------------------------------------------------------
# Typed access to untrusted JSON. The API server sends schema-valid objects, but the webhook must answer
# anything with a 400, never a 500, so every access checks the type it relies on.


def _m(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    v = parent.get(key)
    if v is None:
        return _EMPTY
    if type(v) is not dict:
        raise Malformed(f"{where}.{key} must be an object, not {type(v).__name__}")
    return v


def _l(parent: Mapping[str, Any], key: str, where: str) -> list:
    v = parent.get(key)
    if v is None:
        return []
    if type(v) is not list:
        raise Malformed(f"{where}.{key} must be a list, not {type(v).__name__}")
    return v


def _s(parent: Mapping[str, Any], key: str, where: str) -> str:
    v = parent.get(key)
    if v is None:
        return ""
    if type(v) is not str:
        raise Malformed(f"{where}.{key} must be a string, not {type(v).__name__}")
    return v


def _item(v: Any, where: str) -> Mapping[str, Any]:
    if type(v) is not dict:
        raise Malformed(f"{where} must be an object, not {type(v).__name__}")
    return v


def _strmap(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, str]:
    m = parent.get(key)
    if m is None:
        return _EMPTY
    # The usual case in one C-level pass (exact types: a str subclass is no JSON string either).
    if type(m) is dict and (not m or set(map(type, m.values())) <= _STR_ONLY):
        return m
    m = _m(parent, key, where)
    for k, v in m.items():
        if type(v) is not str:
            raise Malformed(f"{where}.{key}[{k!r}] must be a string, not {type(v).__name__}")
    return m


# ---------------------------------------------------------------------------------------------------------
# The object under review, reduced to what the rules read.


@dataclass(slots=True)
class _Work:
    kind: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    tmpl_labels: Mapping[str, str]  # pod template metadata; empty for a Pod
    tmpl_annotations: Mapping[str, str]
    spec: Mapping[str, Any]  # the pod spec
    spec_path: str
    has_template: bool
    obj_spec: Mapping[str, Any]  # the object's own spec (a Job's suspend); a Pod's: the pod spec


def _work(kind: str, obj: Mapping[str, Any], where: str) -> _Work:
    # Each `x = get(); if type(x) is not dict: x = _m(...)` is _m's check with the error path (and its
    # f-string) only taken when the value is missing or wrong: same results, same errors, same order.
    meta = obj.get("metadata")
    if type(meta) is not dict:
        meta = _m(obj, "metadata", where)
    labels = _strmap(meta, "labels", f"{where}.metadata")
    annotations = _strmap(meta, "annotations", f"{where}.metadata")
    spec = obj.get("spec")
    if type(spec) is not dict:
        spec = _m(obj, "spec", where)
    if kind == "Pod":
        return _Work(kind, labels, annotations, _EMPTY, _EMPTY, spec, "spec", False, spec)
    tmpl = spec.get("template")
    if type(tmpl) is not dict:
        tmpl = _m(spec, "template", f"{where}.spec")
    tmeta = tmpl.get("metadata")
    if type(tmeta) is not dict:
        tmeta = _m(tmpl, "metadata", f"{where}.spec.template")
    tmpl_labels = _strmap(tmeta, "labels", f"{where}.spec.template.metadata")
    tmpl_annotations = _strmap(tmeta, "annotations", f"{where}.spec.template.metadata")
    pspec = tmpl.get("spec")
    if type(pspec) is not dict:
        pspec = _m(tmpl, "spec", f"{where}.spec.template")
    return _Work(
        kind, labels, annotations, tmpl_labels, tmpl_annotations, pspec, "spec.template.spec", True, spec
    )


def pod_gpus(spec: Mapping[str, Any], where: str = "spec") -> int:
    """GPUs one pod holds (gpuctl.domain.gpus.pod_spec_gpus: containers and sidecars, or the init phase's
    peak if larger); a value of the wrong shape is Malformed."""
    try:
        return pod_spec_gpus(spec, where)
    except ShapeError as exc:
        raise Malformed(str(exc)) from None


# ---------------------------------------------------------------------------------------------------------
# Node selection, evaluated against the cached nodes.


def _required_terms(spec: Mapping[str, Any], where: str) -> list[Mapping[str, Any]]:
    aff = _m(_m(spec, "affinity", where), "nodeAffinity", f"{where}.affinity")
    req = _m(aff, "requiredDuringSchedulingIgnoredDuringExecution", f"{where}.affinity.nodeAffinity")
    path = f"{where}.affinity.nodeAffinity.required"
    return [
        _item(t, f"{path}.nodeSelectorTerms[{i}]") for i, t in enumerate(_l(req, "nodeSelectorTerms", path))
    ]


def _expr_ok(expr: Mapping[str, Any], value: str | None) -> bool:
    """A nodeSelectorRequirement against one label value (None: the node lacks the label)."""
    op = expr.get("operator")
    values = expr.get("values") or ()
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        try:
            a, b = int(value or ""), int(values[0])
        except (ValueError, IndexError, TypeError):
            return False
        return a > b if op == "Gt" else a < b
    return False


def _term_ok(term: Mapping[str, Any], node: NodeInfo, skip_pool: bool) -> bool:
    for e in term.get("matchExpressions") or ():
        if type(e) is not dict or (skip_pool and e.get("key") == Labels.POOL):
            continue
        if not _expr_ok(e, node.labels.get(e.get("key"))):  # type: ignore[arg-type]
            return False
    for e in term.get("matchFields") or ():
        if type(e) is dict and e.get("key") == "metadata.name" and not _expr_ok(e, node.name):
            return False
    return True


def _node_ok(node: NodeInfo, selector: Mapping[str, str], terms: list, skip_pool: bool) -> bool:
    for k, v in selector.items():
        if skip_pool and k == Labels.POOL:
            continue
        if node.labels.get(k) != v:
            return False
    if not terms:
        return True
    return any(_term_ok(t, node, skip_pool) for t in terms)


def _term_admits_pool(term: Mapping[str, Any], pool: str) -> bool:
    """Whether a term's conditions on the pool label alone allow nodes of `pool`."""
    for e in term.get("matchExpressions") or ():
        if type(e) is dict and e.get("key") == Labels.POOL and not _expr_ok(e, pool):
            return False
    return True


def _typed_terms(terms: list[Mapping[str, Any]], where: str) -> list[Mapping[str, Any]]:
    """Type-check the parts of the terms the matchers read, once, so matching can trust them."""
    for i, t in enumerate(terms):
        for part in ("matchExpressions", "matchFields"):
            for j, e in enumerate(_l(t, part, f"{where}[{i}]")):
                ew = f"{where}[{i}].{part}[{j}]"
                e = _item(e, ew)
                _s(e, "key", ew)
                _s(e, "operator", ew)
                for k, v in enumerate(_l(e, "values", ew)):
                    if type(v) is not str:
                        raise Malformed(f"{ew}.values[{k}] must be a string")
    return terms


# ---------------------------------------------------------------------------------------------------------
# The rules.


@lru_cache(maxsize=4096)
def _closest(word: str, candidates: frozenset[str] | tuple[str, ...]) -> str | None:
    """closest(), memoised: difflib costs tens of microseconds and the same typo tends to come back."""
    return closest(word, candidates if isinstance(candidates, tuple) else sorted(candidates))


def _did_you_mean(word: str, candidates: frozenset[str] | tuple[str, ...]) -> str:
    hit = _closest(word, candidates)
    return f' (did you mean "{hit}"?)' if hit else ""


def _names(items: Iterable[str], limit: int = 8) -> str:
    items = sorted(items)
    if not items:
        return "none"
    more = f", … {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def _check_unknown_keys(places: Iterable[tuple[str, Mapping[str, str]]], out: list[Violation]) -> None:
    """unknown-key, for workloads and Nodes alike."""
    for where, m in places:
        for key in m:
            if key.startswith(Labels.PREFIX) and key not in KNOWN_KEYS:
                # Compare what follows the shared prefix, or every key looks "close" to every other.
                hit = _closest(key.removeprefix(Labels.PREFIX), _KNOWN_SUFFIXES)
                hit = f"{Labels.PREFIX}{hit}" if hit else None
                fix = f"rename it to {hit}" if hit else f"remove it (gpuctl's keys: {_names(KNOWN_KEYS, 12)})"
                hint = f' (did you mean "{hit}"?)' if hit else ""
                out.append(
                    Violation(UNKNOWN_KEY, f"unknown key {key} in {where}{hint}", fix, f"{UNKNOWN_KEY}={key}")
                )


# Whether a run of label and annotation keys holds a runwhere.ai/ key gpuctl does not know, memoised on the
# keys: they recur (every object gpuctl or a controller makes carries the same ones), so a lookup replaces a
# pass over them. Bounded: input that never repeats only misses, and the table starts over when full.
_KEYS_SEEN: Final[dict[tuple[str, ...], bool]] = {}
_KEYS_SEEN_MAX: Final = 4096


def _has_unknown_key(keys: tuple[str, ...]) -> bool:
    """Whether _check_unknown_keys would find anything among `keys`."""
    hit = _KEYS_SEEN.get(keys)
    if hit is None:
        hit = any(k.startswith(_PREFIX) and k not in KNOWN_KEYS for k in keys)
        if len(_KEYS_SEEN) >= _KEYS_SEEN_MAX:
            _KEYS_SEEN.clear()
        _KEYS_SEEN[keys] = hit
    return hit


def _check_keys(w: _Work, out: list[Violation]) -> None:
    """unknown-key, job-type, priority."""
    labels, tl = w.labels, w.tmpl_labels
    if _has_unknown_key((*labels, *w.annotations, *tl, *w.tmpl_annotations)):
        places = (
            ("metadata.labels", labels),
            ("metadata.annotations", w.annotations),
            ("spec.template.metadata.labels", tl),
            ("spec.template.metadata.annotations", w.tmpl_annotations),
        )
        _check_unknown_keys(places, out)
    # job-type and priority read six label values and nothing else: their findings are memoised on them.
    found = _label_rules(
        labels.get(_JOB_TYPE),
        tl.get(_JOB_TYPE),
        labels.get(_PRIORITY),
        tl.get(_PRIORITY),
        labels.get(_KUEUE_PRIORITY),
        tl.get(_KUEUE_PRIORITY),
    )
    if found:
        out += found


@lru_cache(maxsize=1024)
def _label_rules(
    jt: str | None,
    tmpl_jt: str | None,
    p: str | None,
    tmpl_p: str | None,
    cls: str | None,
    tmpl_cls: str | None,
) -> tuple[Violation, ...]:
    """job-type and priority, from the object's and its pod template's label values (None: no label)."""
    out: list[Violation] = []
    for where, v in (("metadata.labels", jt), ("spec.template.metadata.labels", tmpl_jt)):
        if v is not None and v not in JOB_TYPES:
            out.append(
                Violation(
                    JOB_TYPE,
                    f'{where}[{Labels.JOB_TYPE}] is "{v}"{_did_you_mean(v, JOB_TYPES)}',
                    f"use one of {', '.join(JOB_TYPES)}",
                )
            )
    _check_priority(((p, cls), (tmpl_p, tmpl_cls)), out)
    return tuple(out)


def _check_priority(levels: tuple[tuple[str | None, str | None], ...], out: list[Violation]) -> None:
    """(runwhere.ai/priority, kueue.x-k8s.io/priority-class) of the object, then of its pod template."""
    places = ("metadata.labels", "spec.template.metadata.labels")
    # Priority: each level that says one must say a valid one, the levels must agree, and Kueue's
    # priority class (what Kueue actually schedules by) must be the matching gpuctl class.
    said: str | None = None
    for where, (p, _) in zip(places, levels, strict=True):
        if p is None:
            continue
        if p not in PRIORITY_VALUES:
            out.append(
                Violation(
                    PRIORITY,
                    f'{where}[{Labels.PRIORITY}] is "{p}"{_did_you_mean(p, PRIORITY_VALUES)}',
                    f"use one of {', '.join(PRIORITY_VALUES)}",
                )
            )
            return
        if said is not None and p != said:
            out.append(
                Violation(
                    PRIORITY,
                    f'{Labels.PRIORITY} is "{said}" on the object but "{p}" on its pod template',
                    "use the same priority in both places",
                )
            )
            return
        said = p
    for where, (_, cls) in zip(places, levels, strict=True):
        if cls is None:
            continue
        if cls.startswith(CLASS_PREFIX) and cls not in PRIORITY_CLASSES:
            out.append(
                Violation(
                    PRIORITY,
                    f'{where}[{Labels.KUEUE_PRIORITY}] is "{cls}", not a gpuctl priority class'
                    f"{_did_you_mean(cls, PRIORITY_CLASSES)}",
                    f"use one of {', '.join(sorted(PRIORITY_CLASSES))}",
                )
            )
            return
        if said is not None and cls != PRIORITY_CLASS[Priority(said)]:
            out.append(
                Violation(
                    PRIORITY,
                    f'{Labels.PRIORITY} is "{said}" but {where}[{Labels.KUEUE_PRIORITY}] is "{cls}"',
                    f"set {Labels.KUEUE_PRIORITY}: {PRIORITY_CLASS[Priority(said)]} "
                    f"(or change {Labels.PRIORITY})",
                )
            )
            return
    if said is not None and levels[0][1] is None:
        out.append(
            Violation(
                PRIORITY,
                f'{Labels.PRIORITY} is "{said}" but the object has no {Labels.KUEUE_PRIORITY} label, '
                f"so Kueue would schedule it at the default priority",
                f"add label {Labels.KUEUE_PRIORITY}: {PRIORITY_CLASS[Priority(said)]}",
            )
        )


def _queue_name(w: _Work) -> str:
    """The queue Kueue will use: Jobs, Deployments, StatefulSets and Pods carry it on the object; the pods of
    a bare ReplicaSet are Kueue-managed pods, so there it is the template's."""
    src, ann = (w.tmpl_labels, w.tmpl_annotations) if w.kind == "ReplicaSet" else (w.labels, w.annotations)
    return src.get(_KUEUE_QUEUE) or ann.get(_QUEUE_ANNOTATION) or ""


def _check_queue(
    w: _Work, ns: str, gpus: int, state: ClusterState, out: list[Violation], warn: list[str]
) -> None:
    queues = state.local_queues.get(ns, _EMPTY)
    name = _queue_name(w)
    if not name:
        where = "spec.template.metadata.labels" if w.kind == "ReplicaSet" else "metadata.labels"
        fix = (
            f"add label {Labels.KUEUE_QUEUE}: {_names(queues)} in {where}"
            if queues
            else _NO_QUEUE.format(ns=ns)
        )
        out.append(
            Violation(
                GPU_QUEUE,
                f"requests {gpus} {GPU_RESOURCE} without a {Labels.KUEUE_QUEUE} label",
                fix,
                GPU_QUEUE,
            )
        )
        return
    cq = queues.get(name)
    if cq is None:
        fix = (
            f"use {Labels.KUEUE_QUEUE}: {_closest(name, frozenset(queues)) or sorted(queues)[0]} "
            f"(LocalQueues here: {_names(queues)})"
            if queues
            else _NO_QUEUE.format(ns=ns)
        )
        out.append(
            Violation(
                GPU_QUEUE,
                f'requests {gpus} {GPU_RESOURCE} but {Labels.KUEUE_QUEUE} "{name}" is not a LocalQueue in '
                f"namespace {ns}",
                fix,
                f"{GPU_QUEUE}={name}",
            )
        )
        return
    if not state.pools.isdisjoint(state.cluster_queues.get(cq, ())):
        _check_topology(w, gpus, cq, out)
    if cq and cq not in state.cluster_queues:
        warn.append(
            f'LocalQueue {ns}/{name} points at ClusterQueue "{cq}", which does not exist: Kueue will not '
            f"admit this work until it does"
        )


def _check_topology(w: _Work, gpus: int, cq: str, out: list[Violation]) -> None:
    """Pool flavors are TAS flavors: Kueue admits a pod set there only if it asks for a topology."""
    ann = w.tmpl_annotations if w.has_template else w.annotations
    if ann and not ann.keys().isdisjoint(TAS_REQUEST_KEYS):
        return
    where = "spec.template.metadata" if w.has_template else "metadata"
    out.append(
        Violation(
            GPU_TOPOLOGY,
            f"requests {gpus} {GPU_RESOURCE} from ClusterQueue {cq}, whose pools place pods by node "
            f"(Topology Aware Scheduling), without a topology annotation: Kueue would never admit it",
            f'add annotation {TAS_UNCONSTRAINED}: "true" in {where}.annotations (or another '
            f"kueue.x-k8s.io/podset-*-topology); the topology MutatingAdmissionPolicy "
            f"(manifests/admission/topology.yaml, Kubernetes >= 1.36) adds it for you",
            GPU_TOPOLOGY,
        )
    )


def _check_pool(w: _Work, gpus: int, state: ClusterState, out: list[Violation], warn: list[str]) -> None:
    """pool-exists, pool-placement and gpu-fits-node."""
    spec, sp = w.spec, w.spec_path
    selector = _EMPTY if spec.get("nodeSelector") is None else _strmap(spec, "nodeSelector", sp)
    label_pool, tmpl_pool, selector_pool = w.labels.get(_POOL), w.tmpl_labels.get(_POOL), selector.get(_POOL)
    terms: list[Mapping[str, Any]] = (
        []
        if spec.get("affinity") is None
        else _typed_terms(_required_terms(spec, sp), f"{sp}.affinity...nodeSelectorTerms")
    )
    node_name = spec.get("nodeName")
    if node_name is None:
        node_name = ""
    elif type(node_name) is not str:
        node_name = _s(spec, "nodeName", sp)

    pool: str | None = None
    said = label_pool if label_pool is not None else tmpl_pool if tmpl_pool is not None else selector_pool
    if (
        said is not None
        and (tmpl_pool is None or tmpl_pool == said)
        and (selector_pool is None or selector_pool == said)
        and said in state.pools
    ):
        pool = said  # the usual case: one existing pool, the same wherever it is said
    elif said is not None:
        sources: list[tuple[str, str]] = []
        for where, v in (
            ("metadata.labels", label_pool),
            ("spec.template.metadata.labels", tmpl_pool),
            (f"{sp}.nodeSelector", selector_pool),
        ):
            if v is not None:
                sources.append((where, v))
        bad = False
        for where, v in dict((v, (where, v)) for where, v in sources).values():
            if v not in state.pools:
                bad = True
                out.append(
                    Violation(
                        POOL_EXISTS,
                        f'{where}[{Labels.POOL}] names pool "{v}", which does not exist'
                        f"{_did_you_mean(v, state.pools)}",
                        f"use an existing pool ({_names(state.pools)}); `gpuctl get pools` lists them",
                        f"{POOL_EXISTS}={v}",
                    )
                )
        values = {v for _, v in sources}
        if len(values) > 1:
            said = ", ".join(f'{where} says "{v}"' for where, v in sources)
            out.append(
                Violation(
                    POOL_PLACEMENT,
                    f"the pool is ambiguous: {said}",
                    "use one pool everywhere",
                )
            )
            return
        if bad:
            return
        pool = sources[0][1]

    if pool is not None:
        if selector_pool is None and not (terms and all(_pins_pool(t) for t in terms)):
            pin = f"{sp}.nodeSelector[{Labels.POOL}]: {pool}"
            out.append(
                Violation(
                    POOL_PLACEMENT,
                    f'labelled pool "{pool}" but nothing keeps the pods there: Kueue may run them on '
                    f"any pool",
                    f"add {pin}",
                )
            )
        if terms and not any(_term_admits_pool(t, pool) for t in terms):
            out.append(
                Violation(
                    POOL_PLACEMENT,
                    f'required node affinity excludes pool "{pool}"',
                    f"remove the {Labels.POOL} condition from the affinity or make it allow {pool}",
                )
            )
        if node_name:
            node = state.nodes.get(node_name)
            if node is not None and node.pool != pool:
                where = f'pool "{node.pool}"' if node.pool else "no pool"
                out.append(
                    Violation(
                        POOL_PLACEMENT,
                        f'{sp}.nodeName {node_name} is a node of {where}, not of pool "{pool}"',
                        f"remove nodeName (the scheduler picks a node of {pool}) or name one of its nodes",
                        f"{POOL_PLACEMENT}: nodeName={node_name} pool={pool}",
                    )
                )
        members = state.pool_nodes.get(pool, ())
        # Any nodeSelector key besides the pool's, or any other condition in the terms.
        extra = len(selector) > (selector_pool is not None) or (
            bool(terms) and any(_has_other_conditions(t) for t in terms)
        )
        if extra and members and not any(_node_ok(n, selector, terms, False) for n in members):
            elsewhere = sorted(
                {
                    n.pool
                    for n in state.nodes.values()
                    if n.pool and n.pool != pool and _node_ok(n, selector, terms, True)
                }
            )
            if elsewhere:
                out.append(
                    Violation(
                        POOL_PLACEMENT,
                        f'nodeSelector/affinity match no node of pool "{pool}", only nodes of pool(s) '
                        f"{', '.join(elsewhere)}",
                        f"change the pool to {elsewhere[0]} or the selector to match nodes of {pool}",
                        f"{POOL_PLACEMENT}: selector outside pool={pool}",
                    )
                )
            else:
                warn.append(
                    f'no node of pool "{pool}" matches the nodeSelector/affinity: the pods stay Pending '
                    f"until one does"
                )

    if pool is None and terms and all(_pins_pool(t) for t in terms):
        # No single pool, a list in the affinity (gpuctl's `pool: [P, Q]`, issue 23): each listed pool
        # exists, and a pod fits the largest node of one of them.
        listed = sorted(_affinity_pools(terms))
        missing = [p for p in listed if p not in state.pools]
        for v in missing:
            out.append(
                Violation(
                    POOL_EXISTS,
                    f'{sp}.affinity[{Labels.POOL} In] names pool "{v}", which does not exist'
                    f"{_did_you_mean(v, state.pools)}",
                    f"use existing pools ({_names(state.pools)}); `gpuctl get pools` lists them",
                    f"{POOL_EXISTS}={v}",
                )
            )
        if missing:
            return
        sized = {p: state.pool_max_gpu.get(p, 0) for p in listed if state.pool_nodes.get(p)}
        if gpus and sized and gpus > max(sized.values()):
            best, biggest = max(sized.items(), key=lambda kv: (kv[1], kv[0]))
            out.append(
                Violation(
                    GPU_FITS_NODE,
                    f"a pod asks for {gpus} GPUs but the largest node of its pools ({', '.join(listed)}) has "
                    f'{biggest} (pool "{best}"), so it could never run',
                    f"ask for at most {biggest} GPUs per pod or list a pool with bigger nodes",
                    f"{GPU_FITS_NODE}={gpus}",
                )
            )
        return

    if gpus:
        _check_gpus(gpus, pool, state, out)


def _affinity_pools(terms: list[Mapping[str, Any]]) -> set[str]:
    """The pools a required node affinity allows by `runwhere.ai/pool In [...]` (every term has one)."""
    out: set[str] = set()
    for t in terms:
        for e in t.get("matchExpressions") or ():
            if type(e) is dict and e.get("key") == Labels.POOL and e.get("operator") == "In":
                out.update(str(v) for v in e.get("values") or () if isinstance(v, str))
    return out


def _pins_pool(term: Mapping[str, Any]) -> bool:
    return any(
        type(e) is dict and e.get("key") == Labels.POOL and e.get("operator") == "In"
        for e in term.get("matchExpressions") or ()
    )


def _has_other_conditions(term: Mapping[str, Any]) -> bool:
    return bool(term.get("matchFields")) or any(
        type(e) is dict and e.get("key") != Labels.POOL for e in term.get("matchExpressions") or ()
    )


def _check_gpus(gpus: int, pool: str | None, state: ClusterState, out: list[Violation]) -> None:
    if pool is not None:
        if not state.pool_nodes.get(pool):
            return  # no nodes yet (or scaled to zero): nothing proves it can never run
        biggest = state.pool_max_gpu.get(pool, 0)
        if gpus > biggest:
            out.append(
                Violation(
                    GPU_FITS_NODE,
                    f'a pod asks for {gpus} GPUs but the largest node of pool "{pool}" has {biggest}, '
                    f"so it could never run",
                    f"ask for at most {biggest} GPUs per pod (split the work across pods) or use a pool with "
                    f"bigger nodes",
                    f"{GPU_FITS_NODE}={gpus}@{pool}",
                )
            )
        return
    if not state.pool_max_gpu:
        return
    best_pool, biggest = max(state.pool_max_gpu.items(), key=lambda kv: (kv[1], kv[0]))
    if gpus > biggest:
        out.append(
            Violation(
                GPU_FITS_NODE,
                f"a pod asks for {gpus} GPUs but no pool has a node that big (largest: {biggest} in pool "
                f'"{best_pool}"), so it could never run',
                f"ask for at most {biggest} GPUs per pod",
                f"{GPU_FITS_NODE}={gpus}",
            )
        )


def _check_host_paths(w: _Work, config: AdmissionConfig, out: list[Violation]) -> None:
    volumes = w.spec.get("volumes")
    if volumes is None:
        return
    for i, vol in enumerate(_l(w.spec, "volumes", w.spec_path)):
        if type(vol) is not dict:
            _item(vol, f"{w.spec_path}.volumes[{i}]")
        hp = vol.get("hostPath")
        if hp is None:
            continue
        raw = hp.get("path") if type(hp) is dict else None
        if type(raw) is not str:
            where = f"{w.spec_path}.volumes[{i}]"
            raw = _s(_item(hp, f"{where}.hostPath"), "path", f"{where}.hostPath")
        if not raw.startswith("/"):
            out.append(
                Violation(
                    HOST_PATH,
                    f"volume {_vol_name(vol)}: hostPath {raw!r} is not an absolute path",
                    "use an absolute host path such as /data/<team>",
                    f"{HOST_PATH}={raw}",
                )
            )
            continue
        norm, denied = _host_path(raw, config.allowed_host_paths)
        if denied is not None:
            inside = "" if denied == norm else f" (inside {denied})"
            allowed = f" (allowed: {_names(config.allowed_host_paths)})" if config.allowed_host_paths else ""
            out.append(
                Violation(
                    HOST_PATH,
                    f"volume {_vol_name(vol)}: mounting host path {norm}{inside} is not allowed",
                    f"mount a directory outside {denied}{allowed}, or ask an admin to allow it "
                    f"(--allowed-host-path on the webhook)",
                    f"{HOST_PATH}={norm}",
                )
            )


@lru_cache(maxsize=1024)
def _host_path(raw: str, allowed: tuple[str, ...]) -> tuple[str, str | None]:
    """(normalised path, the deny-list entry that forbids it or None): pure, and the same few paths (a
    team's data directories) come back in request after request."""
    norm = normalise_host_path(raw)
    return norm, path_denied(norm, allowed)


def _vol_name(vol: Mapping[str, Any]) -> str:
    n = vol.get("name")
    return n if type(n) is str and n else "?"


# ---------------------------------------------------------------------------------------------------------
# What a tenant may not do in its own team namespace (issue 26): priority-class, device-access, owner-claim,
# orphan-delete. Stateless, like host-path: admission/policy.py carries the same table to the API server.


def _check_priority_class(w: _Work, out: list[Violation]) -> None:
    """priority-class: a pod's priorityClassName is empty or the gpuctl class of its runwhere.ai/priority
    (with preemptionPolicy Never, gpuctl.service.priority_classes); the WorkloadPriorityClass is gpuctl's."""
    spec, labels, tl = w.spec, w.labels, w.tmpl_labels
    pcn = spec.get("priorityClassName")
    if pcn is not None and type(pcn) is not str:
        pcn = _s(spec, "priorityClassName", w.spec_path)
    if pcn:
        said = labels.get(_PRIORITY)
        if said is None:
            said = tl.get(_PRIORITY)
        want = PRIORITY_CLASS[Priority(said)] if said in PRIORITY_VALUES else None
        if pcn != want:
            where = f"{w.spec_path}.priorityClassName"
            if pcn in PRIORITY_CLASSES:
                now = f'"{said}"' if said is not None else "not set"
                msg = f'{where} is "{pcn}" but {Labels.PRIORITY} is {now}'
                fix = f"remove {where} or set {Labels.PRIORITY}: {pcn.removeprefix(CLASS_PREFIX)}"
            else:
                msg = (
                    f'{where} is "{pcn}": in a team namespace a pod names no PriorityClass but gpuctl\'s own '
                    f"(kube-scheduler would let it preempt pods Kueue admitted, Kueue would order it by it)"
                )
                fix = (
                    f"remove {where}; choose the priority with {Labels.PRIORITY}: high|medium|low "
                    f"(gpuctl-high|medium|low for Kueue)"
                )
            out.append(Violation(PRIORITY_CLASS_RULE, msg, fix, f"{PRIORITY_CLASS_RULE}: {pcn} for {said}"))
    for where, m in (("metadata.labels", labels), ("spec.template.metadata.labels", tl)):
        cls = m.get(_KUEUE_PRIORITY)
        # A misspelt gpuctl-* class is the `priority` rule's finding.
        # (An empty label is no class to Kueue: jobframework.WorkloadPriorityClassName.)
        if cls and cls not in ALLOWED_WORKLOAD_CLASSES and not cls.startswith(CLASS_PREFIX):
            out.append(
                Violation(
                    PRIORITY_CLASS_RULE,
                    f'{where}[{Labels.KUEUE_PRIORITY}] is "{cls}", not a gpuctl WorkloadPriorityClass: in a '
                    f"team namespace Kueue orders work by gpuctl's classes only",
                    f"use one of {', '.join(sorted(PRIORITY_CLASSES))} (or set {Labels.PRIORITY}: "
                    f"high|medium|low)",
                    f"{PRIORITY_CLASS_RULE}: workload class {cls}",
                )
            )


_DEVICE_FIX: Final = "request GPUs with nvidia.com/gpu (Kueue counts them)"


_CONTAINER_PARTS: Final = ("initContainers", "containers", "ephemeralContainers")


def _check_device_access(w: _Work, config: AdmissionConfig, out: list[Violation]) -> None:
    """device-access: nothing in the pod reaches the node's devices (GPUs) behind its resource requests.
    (Written for CPU like the rest: a container with neither securityContext nor env costs two lookups, and
    paths and texts are only built for what is found.)"""
    spec, sp = w.spec, w.spec_path
    if spec.get("hostPID") is True or spec.get("hostIPC") is True:
        for flag, what in (("hostPID", "process"), ("hostIPC", "IPC")):
            if spec.get(flag) is True:
                out.append(
                    Violation(
                        DEVICE_ACCESS,
                        f"{sp}.{flag} is true: the pod would share the node's {what} namespace with other "
                        f"teams' GPU processes",
                        f"remove {flag}",
                        f"{DEVICE_ACCESS}: {flag}",
                    )
                )
    for part in _CONTAINER_PARTS:
        items = spec.get(part)
        if items is None:
            continue
        if type(items) is not list:
            items = _l(spec, part, sp)
        for i, c in enumerate(items):
            if type(c) is not dict:
                _item(c, f"{sp}.{part}[{i}]")
            sc, env = c.get("securityContext"), c.get("env")
            if sc is not None or env is not None:
                _container_devices(c, sp, part, i, out)
    volumes = spec.get("volumes")
    if volumes is None:
        return
    if type(volumes) is not list:
        volumes = _l(spec, "volumes", sp)
    for i, vol in enumerate(volumes):
        if type(vol) is not dict:
            _item(vol, f"{sp}.volumes[{i}]")
        hp = vol.get("hostPath")
        raw = hp.get("path") if type(hp) is dict else None
        if type(raw) is not str or not raw.startswith("/"):
            continue  # a missing or relative path is host-path's finding
        norm, _ = _host_path(raw, config.allowed_host_paths)
        inside = _device_path(norm, config.allowed_host_paths)
        if inside is not None:
            out.append(
                Violation(
                    DEVICE_ACCESS,
                    f"volume {_vol_name(vol)}: host path {norm} (inside {inside}) holds the node's device "
                    f"nodes",
                    f"remove the volume ({_DEVICE_FIX}; for shared memory use an emptyDir with medium: "
                    f"Memory), or ask an admin to allow the path (--allowed-host-path)",
                    f"{DEVICE_ACCESS}: hostPath {norm}",
                )
            )


def _container_devices(c: Mapping[str, Any], sp: str, part: str, i: int, out: list[Violation]) -> None:
    """device-access for one container that has a securityContext or env."""
    where = f"{sp}.{part}[{i}]"
    name = c.get("name")
    name = name if type(name) is str and name else str(i)
    if c.get("securityContext") is not None:
        sc = _m(c, "securityContext", where)
        if sc.get("privileged") is True:
            out.append(
                Violation(
                    DEVICE_ACCESS,
                    f"container {name} is privileged: it sees every device of the node, GPUs included, while "
                    f"Kueue counts only what it requests",
                    f"remove {part}[{i}].securityContext.privileged; {_DEVICE_FIX}",
                    f"{DEVICE_ACCESS}: {part}/{name} privileged",
                )
            )
        caps = _m(sc, "capabilities", f"{where}.securityContext")
        for cap in _l(caps, "add", f"{where}.securityContext.capabilities"):
            if type(cap) is not str:
                raise Malformed(f"{where}.securityContext.capabilities.add must hold strings")
            if cap.upper().removeprefix("CAP_") not in _BASELINE_CAPS:
                out.append(
                    Violation(
                        DEVICE_ACCESS,
                        f"container {name} adds capability {cap}, beyond Pod Security baseline's",
                        f"drop it (baseline allows {', '.join(BASELINE_CAPABILITIES)})",
                        f"{DEVICE_ACCESS}: {part}/{name} cap {cap}",
                    )
                )
    if c.get("env") is None:
        return
    for j, e in enumerate(_l(c, "env", where)):
        env = (e if type(e) is dict else _item(e, f"{where}.env[{j}]")).get("name")
        if env in _NVIDIA_ENV:
            out.append(
                Violation(
                    DEVICE_ACCESS,
                    f"container {name} sets {env}: the NVIDIA container runtime would hand it GPUs no quota "
                    f"counted",
                    f"remove it: the device plugin sets it for the GPUs the pod requests; {_DEVICE_FIX}",
                    f"{DEVICE_ACCESS}: {part}/{name} env {env}",
                )
            )


@lru_cache(maxsize=256)
def _device_path(norm: str, allowed: tuple[str, ...]) -> str | None:
    """The DEVICE_HOST_PATHS entry a normalised host path lies in, unless the admin allowed it."""
    for a in allowed:
        a = normalise_host_path(a)
        if a == "/" or norm == a or norm.startswith(a.rstrip("/") + "/"):
            return None
    for d in DEVICE_HOST_PATHS:
        if norm == d or norm.startswith(d + "/"):
            return d
    return None


def _controller_ref(meta: Mapping[str, Any], where: str) -> Mapping[str, Any] | None:
    """The object's controller owner reference, if any."""
    for i, ref in enumerate(_l(meta, "ownerReferences", where)):
        ref = _item(ref, f"{where}.ownerReferences[{i}]")
        if ref.get("controller") is True:
            return ref
    return None


def _ref_kind(ref: Mapping[str, Any]) -> tuple[str, str]:
    api, kind = ref.get("apiVersion"), ref.get("kind")
    api = api if type(api) is str else ""
    return (api.rpartition("/")[0] if "/" in api else "", kind if type(kind) is str else "")


def _owner_claims(obj: Mapping[str, Any], where: str) -> list[Violation]:
    """owner-claim, on what the pod says: a controller reference to an owner whose pods Kueue does not gate.
    (review() has already let through the pods their own controller sends.)"""
    meta = obj.get("metadata")
    if type(meta) is not dict or meta.get("ownerReferences") is None:
        return []
    ref = _controller_ref(meta, f"{where}.metadata")
    if ref is None:
        return []
    gk = _ref_kind(ref)
    if gk not in KUEUE_OWNER_KINDS:
        return []
    name, uid = ref.get("name"), ref.get("uid")
    maker = POD_MAKERS.get(gk)
    by = f"only {maker} makes such pods" if maker else f"nothing makes pods owned by a {gk[1]}"
    return [
        Violation(
            OWNER_CLAIM,
            f"the pod names {gk[1]} {name} as its controller, but Kueue leaves the pods of a {gk[1]} to "
            f"it and does not queue this one ({by}): it would run outside the team's quota",
            "remove the ownerReference (a pod of your own is queued by Kueue like any other), or create the "
            f"{gk[1]} and let it make its pods",
            f"{OWNER_CLAIM}: {gk[0]}/{gk[1]} {name} {uid}",
        )
    ]


def _owner_dropped(obj: Mapping[str, Any], old: Mapping[str, Any], user: str) -> list[Violation]:
    """owner-claim, on an UPDATE: only the owner's controller (or the garbage collector) takes a pod's
    controller reference away, and only the controller relabels a pod of a RELEASING_KINDS owner. Anyone else
    would turn a counted pod into an orphan that runs on while its owner makes a counted replacement."""
    old_meta = old.get("metadata")
    if type(old_meta) is not dict or old_meta.get("ownerReferences") is None:
        return []
    ref = _controller_ref(old_meta, "request.oldObject.metadata")
    if ref is None:
        return []
    gk = _ref_kind(ref)
    if gk not in KUEUE_OWNER_KINDS or user in (POD_MAKERS.get(gk), KCM_USER, GC_USER):
        return []
    meta = obj.get("metadata")
    meta = meta if type(meta) is dict else _EMPTY
    now = None if meta.get("ownerReferences") is None else _controller_ref(meta, "request.object.metadata")
    name = ref.get("name")
    if now is None or now.get("uid") != ref.get("uid"):
        return [
            Violation(
                OWNER_CLAIM,
                f"the update takes away the pod's controller reference to {gk[1]} {name}: the pod would run "
                f"on as an orphan while its {gk[1]} makes a counted replacement",
                f"leave ownerReferences as they are; to stop the pod, delete it (or its {gk[1]})",
                f"{OWNER_CLAIM}: drop {gk[0]}/{gk[1]} {name}",
            )
        ]
    if gk in RELEASING_KINDS and _strmap(meta, "labels", "request.object.metadata") != _strmap(
        old_meta, "labels", "request.oldObject.metadata"
    ):
        return [
            Violation(
                OWNER_CLAIM,
                f"the update changes the labels of a pod its {gk[1]} {name} controls: a pod that no longer "
                f"matches its selector is released, runs on uncounted, and the {gk[1]} makes a replacement",
                f"leave the labels of a {gk[1]}'s pods as they are (label the {gk[1]} instead); to stop the "
                f"pod, delete it",
                f"{OWNER_CLAIM}: relabel {gk[0]}/{gk[1]} {name}",
            )
        ]
    return []


def _kueue_gate(w: _Work, old: _Work, queue: str) -> list[Violation]:
    """kueue-gate, on an UPDATE (Kueue's own requests never reach the rules): a queued Job un-suspended, or
    Kueue's scheduling gates lifted from a pod, by anyone else."""
    if w.kind == "Job":
        spec, old_spec = w.obj_spec, old.obj_spec
        if queue and old_spec.get("suspend") is True and spec.get("suspend") is not True:
            return [
                Violation(
                    KUEUE_GATE,
                    f"the update un-suspends a Job queued in LocalQueue {queue}: its pods would run before "
                    f"Kueue admits them, outside the team's quota, until Kueue suspends it again",
                    "leave spec.suspend to Kueue: it un-suspends the Job when the team's quota has room "
                    "(`gpuctl describe job` says why it waits)",
                    f"{KUEUE_GATE}: unsuspend",
                )
            ]
        return []
    if w.kind != "Pod":
        return []
    lifted = _gates(old.spec, "request.oldObject.spec") - _gates(w.spec, "request.object.spec")
    if not lifted:
        return []
    return [
        Violation(
            KUEUE_GATE,
            f"the update removes Kueue's scheduling gate {', '.join(sorted(lifted))}: the pod would run "
            f"before Kueue admits it, outside the team's quota",
            "leave spec.schedulingGates to Kueue: it lifts its gates when the team's quota has room",
            f"{KUEUE_GATE}: ungate {','.join(sorted(lifted))}",
        )
    ]


def _gates(spec: Mapping[str, Any], where: str) -> frozenset[str]:
    if spec.get("schedulingGates") is None:
        return frozenset()
    names = (
        _item(g, f"{where}.schedulingGates[{i}]").get("name")
        for i, g in enumerate(_l(spec, "schedulingGates", where))
    )
    return frozenset(n for n in names if n in KUEUE_GATES)


def _orphaning(request: Mapping[str, Any], gk: tuple[str, str], version: str, old: Mapping[str, Any]) -> str:
    """How a DELETE orphans the object's dependents ("" when it does not): what the API server's store
    decides (k8s.io/apiserver registry/generic/registry/store.go, shouldOrphanDependents)."""
    options = request.get("options")
    options = options if type(options) is dict else _EMPTY
    od = options.get("orphanDependents")
    if od is not None:
        return "orphanDependents: true" if od is True else ""
    pp = options.get("propagationPolicy")
    if pp is not None:
        return 'propagationPolicy "Orphan"' if pp == "Orphan" else ""
    meta = old.get("metadata")
    finalizers = meta.get("finalizers") if type(meta) is dict else None
    finalizers = finalizers if type(finalizers) is list else ()
    if ORPHAN_FINALIZER in finalizers:
        return f'no propagationPolicy while the object carries the "{ORPHAN_FINALIZER}" finalizer'
    if FOREGROUND_FINALIZER not in finalizers and (*gk, version) in ORPHAN_BY_DEFAULT:
        return f"no propagationPolicy (for {gk[0]}/{version} {gk[1]}s the API server then orphans the pods)"
    return ""


def _review_delete(
    request: Mapping[str, Any], group: str, kind: str, state: ClusterState, config: AdmissionConfig
) -> Verdict:
    """orphan-delete: a DELETE that would orphan the pods of a Job Kueue counts."""
    skip = Verdict(allowed=True, skipped="operation DELETE")
    gk = (group, kind)
    old = request.get("oldObject")
    if gk not in ORPHAN_KINDS or type(old) is not dict:
        return skip
    kind_ref = request.get("kind")
    version = kind_ref.get("version") if type(kind_ref) is dict else None
    how = _orphaning(request, gk, version if type(version) is str else "", old)
    if not how:
        return skip
    meta = _m(old, "metadata", "request.oldObject")
    labels = _strmap(meta, "labels", "request.oldObject.metadata")
    queue = labels.get(_KUEUE_QUEUE) or _strmap(meta, "annotations", "request.oldObject.metadata").get(
        _QUEUE_ANNOTATION
    )
    ns = request.get("namespace")
    ns = ns if type(ns) is str else ""
    user_info = request.get("userInfo")
    user = user_info.get("username") if type(user_info) is dict else None
    if not queue or state.namespaces.get(ns) is False or user == config.kueue_user:
        return skip
    subject = _subject(kind, ns, old, request)
    v = Violation(
        ORPHAN_DELETE,
        f"deleting it with {how} would leave its pods running while Kueue stops counting them "
        f"(LocalQueue {queue})",
        "delete with propagationPolicy Background or Foreground (kubectl's default, --cascade=background; "
        "gpuctl delete); to keep a pod, copy it out first",
        ORPHAN_DELETE,
    )
    return _decide(subject, [v], [], [], config)


def _work_violations(
    w: _Work, ns: str, state: ClusterState, config: AdmissionConfig
) -> tuple[list[Violation], list[str]]:
    out: list[Violation] = []
    warn: list[str] = []
    gpus = pod_gpus(w.spec, w.spec_path)
    if gpus:
        _check_queue(w, ns, gpus, state, out, warn)
    _check_pool(w, gpus, state, out, warn)
    _check_keys(w, out)
    _check_host_paths(w, config, out)
    _check_priority_class(w, out)
    _check_device_access(w, config, out)
    return out, warn


def _node_violations(obj: Mapping[str, Any], where: str, state: ClusterState) -> list[Violation]:
    meta = _m(obj, "metadata", where)
    labels = _strmap(meta, "labels", f"{where}.metadata")
    out: list[Violation] = []
    _check_unknown_keys(
        (
            ("metadata.labels", labels),
            ("metadata.annotations", _strmap(meta, "annotations", f"{where}.metadata")),
        ),
        out,
    )
    pool = labels.get(Labels.POOL)
    if pool is None or pool in state.pools:
        return out
    return [
        *out,
        Violation(
            NODE_POOL,
            f"label {Labels.POOL}={pool} names a pool that does not exist{_did_you_mean(pool, state.pools)}",
            f"create the pool first (gpuctl create -f pool.yaml) or use an existing one "
            f"({_names(state.pools)})",
            f"{NODE_POOL}={pool}",
        ),
    ]


# ---------------------------------------------------------------------------------------------------------
# Entry point.


def _controller(meta: Mapping[str, Any], where: str) -> tuple[str, str] | None:
    """(apiGroup, kind) of the object's controller owner, if any."""
    for i, ref in enumerate(_l(meta, "ownerReferences", where)):
        ref = _item(ref, f"{where}.ownerReferences[{i}]")
        if ref.get("controller") is True:
            api = ref.get("apiVersion")
            kind = ref.get("kind")
            if type(api) is str and type(kind) is str:
                return (api.rpartition("/")[0] if "/" in api else "", kind)
    return None


def _field_manager(request: Mapping[str, Any]) -> str:
    options = request.get("options")
    fm = options.get("fieldManager") if type(options) is dict else None
    return fm if type(fm) is str else ""


def _subject(kind: str, ns: str, obj: Mapping[str, Any], request: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = request.get("name") or ""
    if not name and type(meta) is dict:
        name = meta.get("name") or (f"{meta.get('generateName')}*" if meta.get("generateName") else "")
    name = name if type(name) is str and name else "<unnamed>"
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


def review(request: Mapping[str, Any], state: ClusterState, config: AdmissionConfig) -> Verdict:
    """Judge one AdmissionReview `request` against the cluster as the cache last saw it.

    Returns a Verdict, or raises Malformed (HTTP 400) for input no API server would send; never anything
    else. Unmanaged namespaces, other kinds and other operations are allowed untouched.
    """
    if type(request) is not dict:
        raise Malformed("request must be an object")
    # `x = get(); if type(x) is not ...: x = _s(...)`: the typed accessors' checks, their error paths (and
    # f-strings) only taken for a missing or mistyped value.
    kind_ref = request.get("kind")
    if type(kind_ref) is not dict:
        kind_ref = _m(request, "kind", "request")
    group = kind_ref.get("group")
    if type(group) is not str:
        group = _s(kind_ref, "group", "request.kind")
    kind = kind_ref.get("kind")
    if type(kind) is not str:
        kind = _s(kind_ref, "kind", "request.kind")
    if not kind:
        raise Malformed("request.kind.kind is missing")
    op = request.get("operation")
    if type(op) is not str:
        op = _s(request, "operation", "request")
    if op not in ("CREATE", "UPDATE"):
        if op == "DELETE":
            return _review_delete(request, group, kind, state, config) if state.synced else _skip_delete()
        if op == "CONNECT":
            return Verdict(allowed=True, skipped=f"operation {op}")
        raise Malformed(f"request.operation {op!r} is not CREATE, UPDATE, DELETE or CONNECT")
    obj = request.get("object")
    if type(obj) is not dict:
        raise Malformed(f"request.object must be an object for {op}")
    old = request.get("oldObject") if op == "UPDATE" else None
    if old is not None and type(old) is not dict:
        raise Malformed("request.oldObject must be an object")

    gk = (group, kind)
    if not state.synced:
        return _not_ready(config, _subject(kind, "", obj, request))

    if gk == _NODE:
        subject = _subject(kind, "", obj, request)
        found = _node_violations(obj, "request.object", state)
        if found and request.get("dryRun") is True and _field_manager(request) == FIELD_MANAGER:
            # gpuctl's server-side dry run of a new pool labels the nodes after "creating" the flavor in
            # the same dry run, which persisted nothing: the pool cannot exist yet. Say so, don't deny.
            return Verdict(True, subject, warnings=_clip([f"dry run: {v.text()}" for v in found]))
        before = _node_violations(old, "request.oldObject", state) if old else []
        return _decide(subject, found, [], before, config)

    if gk != _POD and gk not in _TEMPLATE_KINDS:
        return Verdict(allowed=True, skipped=f"kind {group}/{kind} is not reviewed")

    ns = request.get("namespace")
    if type(ns) is not str:
        ns = _s(request, "namespace", "request")
    if not ns:
        ns = _s(_m(obj, "metadata", "request.object"), "namespace", "metadata")
    subject = _subject(kind, ns, obj, request)
    managed = state.namespaces.get(ns)
    # A namespace the cache has not seen yet: the API server only calls for namespaces the webhook's
    # namespaceSelector matches, so treat it as managed rather than let work slip through a watch delay.
    if managed is False:
        return Verdict(allowed=True, subject=subject, skipped="namespace not managed by gpuctl")

    user_info = request.get("userInfo")
    user = user_info.get("username") if type(user_info) is dict else None
    if type(user) is not str:
        user = ""
    if user == config.kueue_user:
        # Kueue unsuspends, injects its flavor's nodeSelector and ungates: it must never depend on this
        # webhook (the API server does not even call for its requests, matchCondition not-kueue).
        return Verdict(allowed=True, subject=subject, skipped="Kueue's own request")
    meta = obj.get("metadata")
    owner = (
        None
        if type(meta) is dict and meta.get("ownerReferences") is None
        else _controller(_m(obj, "metadata", "request.object"), "request.object.metadata")
    )
    if (
        owner is not None
        and (
            (gk == _POD and owner in _CHECKED_OWNERS)
            or (kind == "ReplicaSet" and owner in _CHECKED_RS_OWNERS)
        )
        and user in (CONTROLLER_USERS[owner], KCM_USER)
    ):
        return Verdict(allowed=True, subject=subject, skipped=f"checked at its owner ({owner[1]})")

    work = _work(kind, obj, "request.object")
    found, warn = _work_violations(work, ns, state, config)
    if old and kind in ("Job", "Pod"):
        try:
            old_work = _work(kind, old, "request.oldObject")
        except Malformed:
            old_work = None  # judge the new object on its own
        if old_work is not None:
            found += _kueue_gate(work, old_work, _queue_name(work) or _queue_name(old_work))
    if gk == _POD and owner is not None:
        found += _owner_claims(obj, "request.object")
    if gk == _POD and old:
        with suppress(Malformed):  # a malformed old object: the new one is judged on its own
            found += _owner_dropped(obj, old, user)
    if not found and not warn:
        return Verdict(True, subject)  # what _decide says whatever the old object had
    before: list[Violation] = []
    if old:
        try:
            before, _ = _work_violations(_work(kind, old, "request.oldObject"), ns, state, config)
            if gk == _POD:
                before += _owner_claims(old, "request.oldObject")
        except Malformed:
            before = []  # judge the new object on its own
    return _decide(subject, found, warn, before, config)


def _skip_delete() -> Verdict:
    return Verdict(allowed=True, skipped="operation DELETE")


def _decide(
    subject: str, found: list[Violation], warn: list[str], before: list[Violation], config: AdmissionConfig
) -> Verdict:
    if before:
        known = {v.identity for v in before}
        kept = [v for v in found if v.identity in known]
        found = [v for v in found if v.identity not in known]
        warn = warn + [f"not denied because the object already had it: {v.text()}" for v in kept]
    if not found:
        return (
            Verdict(allowed=True, subject=subject, warnings=_clip(warn)) if warn else Verdict(True, subject)
        )
    if config.mode is Mode.WARN:
        texts = [f"gpuctl would deny {subject}: {v.text()}" for v in found]
        return Verdict(allowed=True, subject=subject, violations=tuple(found), warnings=_clip(texts + warn))
    return Verdict(allowed=False, subject=subject, violations=tuple(found), warnings=_clip(warn), code=403)


def _not_ready(config: AdmissionConfig, subject: str) -> Verdict:
    text = "the gpuctl webhook has not loaded the cluster state yet; retry in a few seconds"
    if config.mode is Mode.WARN:
        return Verdict(
            allowed=True,
            subject=subject,
            warnings=(f"gpuctl could not check {subject}: {text}",),
            skipped="cache not synced",
        )
    v = Violation("not-ready", text, "retry; if it persists, check the webhook pods' logs")
    return Verdict(allowed=False, subject=subject, violations=(v,), skipped="cache not synced", code=503)


def _clip(texts: list[str]) -> tuple[str, ...]:
    return tuple(t if len(t) <= MAX_WARNING_CHARS else t[: MAX_WARNING_CHARS - 1] + "…" for t in texts)
