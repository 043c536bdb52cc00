"""`pool-toleration`, `pool-selection`, `pool-node-name`: outside team namespaces no pod goes near a pool
(docs/security.md, 2; the dispatcher, its scope and identity skips: admission/isolation.py).

- `pool-toleration`  no toleration of the pool taint: key `runwhere.ai/pool`, or a key-less
                     `operator: Exists` (which tolerates every taint), with effect empty or NoSchedule
                     (gpuctl.domain.pools.tolerates_pool_taint, Kubernetes' own matching rule).
- `pool-selection`   no GPU request together with a nodeSelector on `runwhere.ai/pool` or a required node
                     affinity term with `runwhere.ai/pool` In/Exists: the pod could never run (the taint),
                     so it is refused with the fix instead of pending forever. `DoesNotExist`/`NotIn` (the
                     earlier client's jobs without a pool) stay allowed: they keep away from pools.
- `pool-node-name`   no `spec.nodeName` naming a pool node: nodeName bypasses kube-scheduler, and with it
                     every taint. Needs the cluster's nodes, so only the webhook judges it.

DaemonSets that request no GPUs are exempt (monitoring agents, dcgm-exporter, CNI must run on every node).
"Requests GPUs" means any GPU resource (constants.GPU_RESOURCE_PREFIXES) among the requests or limits of
any container or init container, whatever the value: the same test in CEL and Python, no quantity parsing.

Python and CEL side by side: the first two also run in the API server (TOLERATION_CEL, SELECTION_CEL: the
`gpuctl-isolation` policy, admission.policies.isolation, and its webhook entry's matchConditions), in the
same words; one fix per rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from admission.policies.cel import IsolationCel, cel_list, q
from admission.rule_names import POOL_NODE_NAME, POOL_SELECTION, POOL_TOLERATION
from admission.state import ClusterState
from admission.verdict import Violation
from gpuctl.constants import GPU_RESOURCE_PREFIXES, POOL_TAINT_EFFECT, POOL_TAINT_KEY, Labels
from gpuctl.domain.gpus import is_gpu_resource
from gpuctl.domain.pools import tolerates_pool_taint
from gpuctl.domain.shape import item, list_at, obj_at, str_at, strmap_at

__all__ = [
    "NODE_NAME_FIX",
    "POD_SPEC_PATHS",
    "SELECTION_CEL",
    "SELECTION_FIX",
    "SPEC_PATH",
    "TAINT_TEXT",
    "TOLERATION_CEL",
    "TOLERATION_FIX",
    "check_node_name",
    "check_selection",
    "check_toleration",
    "daemonset_without_gpus",
    "gpus",
    "names_gpus",
    "selects_pool",
    "spec_of",
    "tolerates",
    "toleration_text",
]

TEAM_FIX: Final = "submit it to a team namespace: gpuctl create -f job.yaml -n <team>"
QUOTA_FIX: Final = "or ask an admin for a quota"
TOLERATION_FIX: Final = (
    f"pool nodes run only work Kueue admitted: {TEAM_FIX} (Kueue adds the pool's toleration itself), "
    f"{QUOTA_FIX}; or drop the toleration (a key-less `operator: Exists` tolerates every taint: give "
    "it a key). DaemonSets that request no GPUs may tolerate pools"
)
SELECTION_FIX: Final = (
    f"pool GPUs run only work Kueue admitted: {TEAM_FIX}, {QUOTA_FIX}; without a pool selector it may "
    "run on GPU nodes outside every pool"
)
NODE_NAME_FIX: Final = (
    f"pool nodes run only work Kueue admitted: remove spec.nodeName and {TEAM_FIX}, {QUOTA_FIX}"
)

# (apiGroup, kind) -> the path of its pod spec: every kind judged outside team namespaces.
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
_DAEMONSET: Final = ("apps", "DaemonSet")
TAINT_TEXT: Final = f"{POOL_TAINT_KEY}=<pool>:{POOL_TAINT_EFFECT}"


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
    """How a finding names a toleration (the same words as the policy's CEL, `_toleration_text`)."""
    key = t.get("key") or ""
    if not key:
        return "a key-less `operator: Exists` toleration (it tolerates every taint)"
    if (t.get("operator") or "Equal") == "Exists":
        return f"a toleration of {key} with operator Exists"
    return f"a toleration of {key}={t.get('value') or ''}"


def check_toleration(
    gk: tuple[str, str], spec: Mapping[str, Any], spec_path: str, gpu: bool
) -> list[Violation]:
    """`pool-toleration` of one pod spec (`gpu`: names_gpus of it)."""
    out: list[Violation] = []
    if gk == _DAEMONSET and not gpu:
        return out
    for i, t in enumerate(list_at(spec, "tolerations", spec_path)):
        t = item(t, f"{spec_path}.tolerations[{i}]")
        if tolerates_pool_taint(t):
            text = f"{spec_path}.tolerations: {toleration_text(t)} tolerates the pool taint {TAINT_TEXT}"
            out.append(Violation(POOL_TOLERATION, text, TOLERATION_FIX))
    return out


def check_selection(
    gk: tuple[str, str], spec: Mapping[str, Any], spec_path: str, gpu: bool
) -> list[Violation]:
    """`pool-selection` of one pod spec (`gpu`: names_gpus of it)."""
    if not gpu:
        return []
    out: list[Violation] = []
    selector = strmap_at(spec, "nodeSelector", spec_path)
    if Labels.POOL in selector:
        where = f"{spec_path}.nodeSelector[{Labels.POOL}]={selector[Labels.POOL]}"
        text = f"{where} selects a pool for a pod requesting GPUs"
        out.append(Violation(POOL_SELECTION, text, SELECTION_FIX))
    if _affinity_selects_pool(spec, spec_path):
        text = (
            f"{spec_path}.affinity: a required node affinity term on {Labels.POOL} (In/Exists) selects a "
            "pool for a pod requesting GPUs"
        )
        out.append(Violation(POOL_SELECTION, text, SELECTION_FIX))
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


def check_node_name(
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
    return [Violation(POOL_NODE_NAME, text, NODE_NAME_FIX, f"{POOL_NODE_NAME}={node}")]


# ---------------------------------------------------------------------------------------------------------
# CEL (the isolation policy and the webhook entry's matchConditions).


def spec_of(root: str) -> str:
    """CEL: the pod spec of `root` (object or oldObject) for every kind of POD_SPEC_PATHS."""
    cron = ".".join(POD_SPEC_PATHS[("batch", "CronJob")])
    return (
        f"(request.kind.kind == 'Pod' ? {root}.spec : request.kind.kind == 'CronJob' ? {root}.{cron} : "
        f"{root}.spec.template.spec)"
    )


SPEC_PATH: Final = (
    "(request.kind.kind == 'Pod' ? 'spec' : request.kind.kind == 'CronJob' ? "
    f"'{'.'.join(POD_SPEC_PATHS[('batch', 'CronJob')])}' : 'spec.template.spec')"
)


def _any_gpu_resource(m: str) -> str:
    """CEL: the resources map `m` names a GPU resource (one of constants.GPU_RESOURCE_PREFIXES)."""
    return f"{m}.exists(k, {cel_list(GPU_RESOURCE_PREFIXES)}.exists(p, k.startsWith(p)))"


_HAS_GPU: Final = (
    f"has(c.resources) && ((has(c.resources.requests) && {_any_gpu_resource('c.resources.requests')}) || "
    f"(has(c.resources.limits) && {_any_gpu_resource('c.resources.limits')}))"
)


def gpus(s: str) -> str:
    """CEL: names_gpus."""
    return (
        f"((has({s}.containers) && {s}.containers.exists(c, {_HAS_GPU})) || "
        f"(has({s}.initContainers) && {s}.initContainers.exists(c, {_HAS_GPU})))"
    )


def tolerates(t: str) -> str:
    """CEL: gpuctl.domain.pools.tolerates_pool_taint(t) for some pool."""
    return (
        f"((!has({t}.effect) || {t}.effect == '' || {t}.effect == {q(POOL_TAINT_EFFECT)}) && "
        f"((!has({t}.key) || {t}.key == '') ? (has({t}.operator) && {t}.operator == 'Exists') : "
        f"{t}.key == {q(POOL_TAINT_KEY)}))"
    )


def _toleration_text(t: str) -> str:
    """CEL: toleration_text."""
    return (
        f"((!has({t}.key) || {t}.key == '') ? 'a key-less `operator: Exists` toleration (it tolerates every "
        f"taint)' : (has({t}.operator) && {t}.operator == 'Exists') ? 'a toleration of ' + {t}.key + "
        f"' with operator Exists' : 'a toleration of ' + {t}.key + '=' + (has({t}.value) ? {t}.value : ''))"
    )


def _affinity_selects_pool_cel(s: str) -> str:
    """CEL: _affinity_selects_pool."""
    req = f"{s}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    return (
        f"(has({s}.affinity) && has({s}.affinity.nodeAffinity) && has({req}) && "
        f"{req}.nodeSelectorTerms.exists(term, has(term.matchExpressions) && term.matchExpressions.exists(e, "
        f"e.key == {q(Labels.POOL)} && (e.operator == 'In' || e.operator == 'Exists'))))"
    )


def daemonset_without_gpus(s: str) -> str:
    """CEL: a DaemonSet whose template requests no GPUs (monitoring agents, CNI)."""
    return f"(request.kind.kind == 'DaemonSet' && !{gpus(s)})"


def selects_pool(s: str) -> str:
    """CEL: a nodeSelector or required affinity on the pool label (pool-selection, but for the GPUs)."""
    selector = f"(has({s}.nodeSelector) && {q(Labels.POOL)} in {s}.nodeSelector)"
    return f"({selector} || {_affinity_selects_pool_cel(s)})"


def _toleration_findings(spec: str, gpu: str) -> str:
    return (
        f"(request.kind.kind == 'DaemonSet' && !{gpu}) || !has({spec}.tolerations) ? [] :\n"
        f"{spec}.tolerations.filter(t, {tolerates('t')}).map(t,\n"
        f"{SPEC_PATH} + '.tolerations: ' + {_toleration_text('t')} + "
        f"' tolerates the pool taint {TAINT_TEXT}')"
    )


def _selection_findings(spec: str, gpu: str) -> str:
    ns = q(Labels.POOL)
    return (
        f"!{gpu} ? [] :\n"
        f"(has({spec}.nodeSelector) && {ns} in {spec}.nodeSelector ?\n"
        f"[{SPEC_PATH} + '.nodeSelector[{Labels.POOL}]=' + {spec}.nodeSelector[{ns}] +\n"
        "' selects a pool for a pod requesting GPUs'] : []) +\n"
        f"({_affinity_selects_pool_cel(spec)} ? [{SPEC_PATH} + '.affinity: a required node affinity term on "
        f"{Labels.POOL} (In/Exists) selects a pool for a pod requesting GPUs'] : [])"
    )


TOLERATION_CEL: Final = IsolationCel("poolToleration", _toleration_findings)
SELECTION_CEL: Final = IsolationCel("poolSelection", _selection_findings)
