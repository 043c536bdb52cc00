"""The rules outside team namespaces (docs/admission.md, "Outside team namespaces"): pool GPUs run only
Kueue-admitted work, from any namespace.

Every pool node carries the taint `runwhere.ai/pool=<pool>:NoSchedule` (gpuctl.domain.pools) and only the
pool's ResourceFlavor tolerates it: Kueue adds the flavor's toleration to the pods it admits, in team
namespaces (label `runwhere.ai/namespace=true`). Everywhere else -- `default`, any other namespace but the
system ones -- the isolation rules keep a pod off pool nodes however it is written: `pool-toleration`,
`pool-selection`, `pool-node-name` (their checks, CEL and fixes: admission/validators/isolation.py; this
module runs admission.registry's ISOLATION checks in its order).

What is judged where: Pods, and the pod templates of Jobs, CronJobs, Deployments, StatefulSets, ReplicaSets,
DaemonSets and ReplicationControllers, where a user writes them. What their controllers make from a
reviewed template is skipped, by who asks (CONTROLLER_USERS below, as admission.identities trusts
controllers): the Job/ReplicaSet/StatefulSet/DaemonSet/ReplicationController controllers' pods, the
Deployment controller's ReplicaSets, the CronJob controller's Jobs. Also skipped: Kueue's own requests and
kubelets' mirror pods (a static pod is the node admin's). Every other pod (an operator's, a user's with a
forged ownerReference) is judged itself. On UPDATE only findings the old object did not have are denied.

The stateless rules also run in the API server as a ValidatingAdmissionPolicy generated from their CEL
(admission/policies/isolation.py, manifests/admission/isolation.yaml); `review_isolation` is the
webhook's evaluator of all three (`POST /isolation`, the `isolation.admission.runwhere.ai` entry of
manifests/admission/webhook.yaml, called only for non-team namespaces).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from admission.envelope import controller_kind, decode, subject
from admission.identities import CONTROLLER_USERS, KCM_NAMESPACE, KCM_USER, KUEUE_USER, SA_PREFIX
from admission.registry import ISOLATION, IsolationReview, checks, rule
from admission.rule_names import POOL_NODE_NAME, POOL_SELECTION, POOL_TOLERATION
from admission.state import ClusterState
from admission.validators.isolation import POD_SPEC_PATHS, names_gpus
from admission.verdict import AdmissionConfig, Malformed, Verdict, Violation, judge, not_ready
from gpuctl.domain.shape import obj_at

__all__ = [
    "ISOLATION_CONTROLLER_USERS",
    "ISOLATION_RULES",
    "POD_OWNERS",
    "POOL_NODE_NAME",
    "POOL_SELECTION",
    "POOL_TOLERATION",
    "STATELESS_RULES",
    "TEMPLATE_OWNERS",
    "Malformed",
    "findings",
    "names_gpus",
    "review_isolation",
    "skip_reason",
]

ISOLATION_RULES: Final = (POOL_TOLERATION, POOL_SELECTION, POOL_NODE_NAME)
# The rules the ValidatingAdmissionPolicy carries too (no cluster state needed).
STATELESS_RULES: Final = tuple(r for r in ISOLATION_RULES if rule(r).cel is not None)
_CHECKS: Final = checks(ISOLATION)

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


def _pod_spec(gk: tuple[str, str], obj: Mapping[str, Any], where: str) -> tuple[Mapping[str, Any], str]:
    spec: Mapping[str, Any] = obj
    here = where
    for part in POD_SPEC_PATHS[gk]:
        spec = obj_at(spec, part, here)
        here = f"{here}.{part}"
    return spec, here.removeprefix(f"{where}.")


def findings(gk: tuple[str, str], obj: Mapping[str, Any], where: str, state: ClusterState) -> list[Violation]:
    """What the ISOLATION checks find in one object's pod spec."""
    spec, spec_path = _pod_spec(gk, obj, where)
    r = IsolationReview(gk, spec, spec_path, state, names_gpus(spec, spec_path))
    out: list[Violation] = []
    for check in _CHECKS:
        out += check(r)
    return out


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
