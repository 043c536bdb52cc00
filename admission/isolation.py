"""The rules outside team namespaces (issue 26): pool GPUs run only Kueue-admitted work, from any namespace.

Every pool node carries the taint `runwhere.ai/pool=<pool>:NoSchedule` (gpuctl.domain.pools) and only the
pool's ResourceFlavor tolerates it: Kueue adds the flavor's toleration to the pods it admits, in team
namespaces (label `runwhere.ai/namespace=true`). Everywhere else -- `default`, any other namespace but the
system ones -- these rules keep a pod off pool nodes however it is written:

- `pool-toleration`  no toleration of the pool taint: key `runwhere.ai/pool`, or a key-less
                     `operator: Exists` (which tolerates every taint), with effect empty or NoSchedule
                     (gpuctl.domain.pools.tolerates_pool_taint, Kubernetes' own matching rule).
- `pool-selection`   no GPU request together with a nodeSelector on `runwhere.ai/pool` or a required node
                     affinity term with `runwhere.ai/pool` In/Exists: the pod could never run (the taint),
                     so it is refused with the fix instead of pending forever. `DoesNotExist`/`NotIn` (the
                     earlier client's jobs without a pool) stay allowed: they keep away from pools.
- `pool-node-name`   no `spec.nodeName` naming a pool node: nodeName bypasses kube-scheduler, and with it
                     every taint. Needs the cluster's nodes, so only the webhook judges it.

DaemonSets that request no GPUs are exempt (monitoring agents, dcgm-exporter, CNI must run on every node):
the DaemonSet's template is judged where a user writes it, and its pods come from the daemon-set
controller. A DaemonSet whose template requests GPUs is judged like any pod template.

"Requests GPUs" here means any GPU resource (constants.GPU_RESOURCE_PREFIXES: nvidia.com/gpu*,
nvidia.com/mig-*, amd.com/gpu*, gpu.intel.com/*) among the requests or limits of any container or init
container (whatever the value): the same test in CEL and Python, no quantity parsing.

What is judged where: Pods, and the pod templates of Jobs, CronJobs, Deployments, StatefulSets, ReplicaSets,
DaemonSets and ReplicationControllers, where a user writes them. What their controllers make from a
reviewed template is skipped, by who asks (CONTROLLER_USERS below, as admission.identities trusts
controllers): the Job/ReplicaSet/StatefulSet/DaemonSet/ReplicationController controllers' pods, the
Deployment controller's ReplicaSets, the CronJob controller's Jobs. Also skipped: Kueue's own requests and
kubelets' mirror pods (a static pod is the node admin's). Every other pod (an operator's, a user's with a
forged ownerReference) is judged itself. On UPDATE only findings the old object did not have are denied.

The stateless rules also run in the API server as a ValidatingAdmissionPolicy generated from this module's
tables (admission/policies/isolation.py, manifests/admission/isolation.yaml); `review_isolation` is the
webhook's evaluator of all three (`POST /isolation`, the `isolation.admission.runwhere.ai` entry of
manifests/admission/webhook.yaml, called only for non-team namespaces).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from admission.envelope import controller_kind, decode, subject
from admission.identities import CONTROLLER_USERS, KCM_NAMESPACE, KCM_USER, KUEUE_USER, SA_PREFIX
from admission.state import ClusterState
from admission.verdict import AdmissionConfig, Malformed, Verdict, Violation, judge, not_ready
from gpuctl.constants import POOL_TAINT_EFFECT, POOL_TAINT_KEY, Labels
from gpuctl.domain.gpus import is_gpu_resource
from gpuctl.domain.pools import tolerates_pool_taint
from gpuctl.domain.shape import item, list_at, obj_at, str_at, strmap_at

__all__ = ["ISOLATION_RULES", "STATELESS_RULES", "Malformed", "review_isolation"]

POOL_TOLERATION: Final = "pool-toleration"
POOL_SELECTION: Final = "pool-selection"
POOL_NODE_NAME: Final = "pool-node-name"
ISOLATION_RULES: Final = (POOL_TOLERATION, POOL_SELECTION, POOL_NODE_NAME)
# The rules the ValidatingAdmissionPolicy carries too (no cluster state needed).
STATELESS_RULES: Final = (POOL_TOLERATION, POOL_SELECTION)

TEAM_FIX: Final = "submit it to a team namespace: gpuctl create -f job.yaml -n <team>"
QUOTA_FIX: Final = "or ask an admin for a quota"
FIXES: Final = {
    POOL_TOLERATION: (
        f"pool nodes run only work Kueue admitted: {TEAM_FIX} (Kueue adds the pool's toleration itself), "
        f"{QUOTA_FIX}; or drop the toleration (a key-less `operator: Exists` tolerates every taint: give "
        "it a key). DaemonSets that request no GPUs may tolerate pools"
    ),
    POOL_SELECTION: (
        f"pool GPUs run only work Kueue admitted: {TEAM_FIX}, {QUOTA_FIX}; without a pool selector it may "
        "run on GPU nodes outside every pool"
    ),
    POOL_NODE_NAME: (
        f"pool nodes run only work Kueue admitted: remove spec.nodeName and {TEAM_FIX}, {QUOTA_FIX}"
    ),
}

# (apiGroup, kind) -> the path of its pod spec.
POD_SPEC_PATHS: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    ("", "Pod"): ("spec",),
    ("", "ReplicationController"): ("spec", "template", "spec"),
    ("batch", "Job"): ("spec", "template", "spec"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template", "spec"),
    ("apps", "Deployment"): ("spec", "template", "spec"),
    ("apps", "StatefulSet"): ("spec", "template", "spec"),
    ("apps", "ReplicaSet"): ("spec", "template", "spec"),
    ("apps", "DaemonSet"): ("spec", "template", "spec"),
}
_POD: Final = ("", "Pod")
_DAEMONSET: Final = ("apps", "DaemonSet")
# admission.identities' controllers plus the ones that make pods or Jobs outside team namespaces too. A pod
# controlled by one of POD_OWNERS and sent by its controller's identity is made from a reviewed template.
ISOLATION_CONTROLLER_USERS: Final = {
    **CONTROLLER_USERS,
    ("apps", "DaemonSet"): f"{SA_PREFIX}{KCM_NAMESPACE}:daemon-set-controller",
    ("", "ReplicationController"): f"{SA_PREFIX}{KCM_NAMESPACE}:replication-controller",
    ("batch", "CronJob"): f"{SA_PREFIX}{KCM_NAMESPACE}:cronjob-controller",
}
POD_OWNERS: Final = frozenset(
    {
        ("batch", "Job"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        _DAEMONSET,
        ("", "ReplicationController"),
    }
)
# (kind made, its controller owner): a ReplicaSet of a Deployment, a Job of a CronJob.
TEMPLATE_OWNERS: Final = {
    ("apps", "ReplicaSet"): ("apps", "Deployment"),
    ("batch", "Job"): ("batch", "CronJob"),
}
# Kubelets create mirror pods of their static pods (NodeRestriction limits them to pods bound to themselves).
NODE_USER_PREFIX: Final = "system:node:"
TAINT_TEXT: Final = f"{POOL_TAINT_KEY}=<pool>:{POOL_TAINT_EFFECT}"


def _pod_spec(gk: tuple[str, str], obj: Mapping[str, Any], where: str) -> tuple[Mapping[str, Any], str]:
    spec: Mapping[str, Any] = obj
    here = where
    for part in POD_SPEC_PATHS[gk]:
        spec = obj_at(spec, part, here)
        here = f"{here}.{part}"
    return spec, here.removeprefix(f"{where}.")


def _containers(spec: Mapping[str, Any], where: str) -> list[Mapping[str, Any]]:
    out = []
    for field in ("containers", "initContainers"):
        for i, c in enumerate(list_at(spec, field, where)):
            out.append(item(c, f"{where}.{field}[{i}]"))
    return out


def names_gpus(spec: Mapping[str, Any], where: str = "spec") -> bool:
    """A GPU resource (gpuctl.domain.gpus.is_gpu_resource: nvidia.com/gpu*, nvidia.com/mig-*, amd.com/gpu*,
    gpu.intel.com/*) among the requests or limits of a container or init container (any value)."""
    for c in _containers(spec, where):
        res = obj_at(c, "resources", where)
        if any(map(is_gpu_resource, obj_at(res, "requests", where))) or any(
            map(is_gpu_resource, obj_at(res, "limits", where))
        ):
            return True
    return False


def toleration_text(t: Mapping[str, Any]) -> str:
    """How a finding names a toleration (the same words as the policy's CEL)."""
    key = t.get("key") or ""
    if not key:
        return "a key-less `operator: Exists` toleration (it tolerates every taint)"
    if (t.get("operator") or "Equal") == "Exists":
        return f"a toleration of {key} with operator Exists"
    return f"a toleration of {key}={t.get('value') or ''}"


def stateless_findings(gk: tuple[str, str], spec: Mapping[str, Any], spec_path: str) -> list[Violation]:
    """`pool-toleration` and `pool-selection` for one pod spec (the VAP's rules, same words)."""
    out: list[Violation] = []
    gpus = names_gpus(spec, spec_path)
    if gk == _DAEMONSET and not gpus:
        return out
    for i, t in enumerate(list_at(spec, "tolerations", spec_path)):
        t = item(t, f"{spec_path}.tolerations[{i}]")
        if tolerates_pool_taint(t):
            text = f"{spec_path}.tolerations: {toleration_text(t)} tolerates the pool taint {TAINT_TEXT}"
            out.append(Violation(POOL_TOLERATION, text, FIXES[POOL_TOLERATION]))
    if not gpus:
        return out
    selector = strmap_at(spec, "nodeSelector", spec_path)
    if Labels.POOL in selector:
        where = f"{spec_path}.nodeSelector[{Labels.POOL}]={selector[Labels.POOL]}"
        text = f"{where} selects a pool for a pod requesting GPUs"
        out.append(Violation(POOL_SELECTION, text, FIXES[POOL_SELECTION]))
    if _affinity_selects_pool(spec, spec_path):
        text = (
            f"{spec_path}.affinity: a required node affinity term on {Labels.POOL} (In/Exists) selects a "
            "pool for a pod requesting GPUs"
        )
        out.append(Violation(POOL_SELECTION, text, FIXES[POOL_SELECTION]))
    return out


def _affinity_selects_pool(spec: Mapping[str, Any], where: str) -> bool:
    node_affinity = obj_at(obj_at(spec, "affinity", where), "nodeAffinity", where)
    required = obj_at(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution", where)
    for i, term in enumerate(list_at(required, "nodeSelectorTerms", where)):
        term = item(term, f"{where}.affinity...nodeSelectorTerms[{i}]")
        for j, expr in enumerate(list_at(term, "matchExpressions", where)):
            expr = item(expr, f"{where}.affinity...matchExpressions[{j}]")
            if expr.get("key") == Labels.POOL and expr.get("operator") in ("In", "Exists"):
                return True
    return False


def node_name_findings(
    gk: tuple[str, str], spec: Mapping[str, Any], spec_path: str, state: ClusterState
) -> list[Violation]:
    """`pool-node-name`: spec.nodeName names a node the cache knows in a pool (its runwhere.ai/pool label)."""
    node = str_at(spec, "nodeName", spec_path)
    if not node or (gk == _DAEMONSET and not names_gpus(spec, spec_path)):
        return []
    info = state.nodes.get(node)
    if info is None or info.pool is None:
        return []
    text = f"{spec_path}.nodeName {node} is a node of pool {info.pool} (nodeName bypasses its taint)"
    return [Violation(POOL_NODE_NAME, text, FIXES[POOL_NODE_NAME], f"{POOL_NODE_NAME}={node}")]


def findings(gk: tuple[str, str], obj: Mapping[str, Any], where: str, state: ClusterState) -> list[Violation]:
    spec, spec_path = _pod_spec(gk, obj, where)
    return [*stateless_findings(gk, spec, spec_path), *node_name_findings(gk, spec, spec_path, state)]


def skip_reason(gk: tuple[str, str], obj: Mapping[str, Any], user: str, kueue_user: str = KUEUE_USER) -> str:
    """Why a request is not judged (trusted by who sends it), or ""."""
    if user == kueue_user:
        return "Kueue's own request"
    if gk == _POD and user.startswith(NODE_USER_PREFIX):
        return "a kubelet's mirror pod"
    meta = obj.get("metadata")
    if type(meta) is not dict or meta.get("ownerReferences") is None:
        return ""
    owner = controller_kind(obj_at(obj, "metadata", "request.object"), "request.object.metadata")
    if owner is None or user not in (ISOLATION_CONTROLLER_USERS.get(owner), KCM_USER):
        return ""
    if (gk == _POD and owner in POD_OWNERS) or TEMPLATE_OWNERS.get(gk) == owner:
        return f"made by its controller from a reviewed template ({owner[1]})"
    return ""


def review_isolation(request: Mapping[str, Any], state: ClusterState, config: AdmissionConfig) -> Verdict:
    """Judge one AdmissionReview `request` from a namespace that is not a team namespace (the API server's
    namespaceSelector decided that). Returns a Verdict, or raises Malformed; never anything else."""
    env = decode(request)
    obj = env.obj
    if obj is None:
        return Verdict(allowed=True, skipped=f"operation {env.op}")
    gk = env.gk
    ns = env.namespace()
    subj = subject(env.kind, ns, obj, request)
    if gk not in POD_SPEC_PATHS:
        return Verdict(allowed=True, subject=subj, skipped=f"kind {env.group}/{env.kind} is not reviewed")
    if ns in config.exempt_namespaces:
        return Verdict(allowed=True, subject=subj, skipped="exempt namespace")
    if not state.synced:
        return not_ready(config, subj)
    skipped = skip_reason(gk, obj, env.user, config.kueue_user)
    if skipped:
        return Verdict(allowed=True, subject=subj, skipped=skipped)
    old = env.old
    found = findings(gk, obj, "request.object", state)
    return judge(
        subj, found, [], (lambda: findings(gk, old, "request.oldObject", state)) if old else None, config
    )
