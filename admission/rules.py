"""gpuctl's admission rules for team namespaces and Nodes: `review(request, state, config) -> Verdict`.

Nothing here does I/O, so every rule is unit-testable with plain dicts and the request path costs only the
evaluation itself. The rules keep the cluster to gpuctl's conventions however work arrives (`gpuctl`,
`kubectl apply`, a CI bot); each group lives in a file named after it (admission/validators/), and this
module runs them, in admission.registry's order (each rule's check and CEL in one file of
admission/validators/, named after it; `python -m admission.registry` prints the table).

Rules apply to Pods, Jobs, Deployments, StatefulSets, ReplicaSets, JobSets (each replicated job's pod
template, under the JobSet's labels) and LeaderWorkerSets (its leader and worker templates, under its labels)
in namespaces gpuctl manages, and to Nodes. Pods the Job, ReplicaSet or StatefulSet controller makes
(ReplicaSets the Deployment controller makes, Jobs the JobSet controller makes, StatefulSets the
LeaderWorkerSet controller makes) are checked once, at their owner: the owner's template is what they are
made from. What proves a pod was made by its controller is *who sends the request* (admission.identities),
never what the object says about itself. The request is decoded by admission.envelope, the verdict and the
UPDATE diff are admission.verdict's (only findings the old object did not have are denied).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from typing import Any, Final

from admission.envelope import Envelope, controller_kind, decode, subject
from admission.identities import (
    CHECKED_OWNERS,
    CHECKED_RS_OWNERS,
    CONTROLLER_USERS,
    JOB_MAKERS,
    KCM_USER,
    STS_MAKERS,
)
from admission.registry import (
    CLAIM,
    DELETE,
    NODE,
    OBJECT_CHECKS,
    RULES,
    SCALE,
    WORK,
    DeleteReview,
    NodeReview,
    ObjectReview,
    ScaleReview,
    WorkReview,
    checks,
)
from admission.state import ClusterState
from admission.verdict import (
    AdmissionConfig,
    Malformed,
    Mode,
    Verdict,
    Violation,
    clip,
    decide,
    judge,
    not_ready,
)
from admission.work import Work, reduce_all
from gpuctl.constants import FIELD_MANAGER
from gpuctl.domain.shape import obj_at

__all__ = ["RULES", "AdmissionConfig", "Malformed", "Mode", "Verdict", "Violation", "review", "violations"]

# (apiGroup, kind) of the objects reviewed. Template kinds carry a pod template at spec.template.
_POD: Final = ("", "Pod")
_NODE: Final = ("", "Node")
_HPA: Final = ("autoscaling", "HorizontalPodAutoscaler")
_TEMPLATE_KINDS: Final = frozenset(
    {
        ("batch", "Job"),
        ("apps", "Deployment"),
        ("apps", "StatefulSet"),
        ("apps", "ReplicaSet"),
        ("jobset.x-k8s.io", "JobSet"),  # a pod template per replicated job (admission.work.reduce_all)
        ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),  # its leader and worker templates (the same)
    }
)
_DELETE_SKIP: Final = Verdict(allowed=True, skipped="operation DELETE")


_WORK_CHECKS: Final = checks(WORK)
_CLAIM_CHECKS: Final = checks(CLAIM)
_NODE_CHECKS: Final = checks(NODE)
_DELETE_CHECKS: Final = checks(DELETE)
_SCALE_CHECKS: Final = checks(SCALE)


def violations(
    w: Work, ns: str, state: ClusterState, config: AdmissionConfig, user: str = ""
) -> tuple[list[Violation], list[str]]:
    """What the WORK checks find in one workload (object and pod template) sent by `user`, and the warnings
    they give: the findings an UPDATE's old object is compared by."""
    r = WorkReview(w, ns, state, config, user)
    out: list[Violation] = []
    for check in _WORK_CHECKS:
        out += check(r)
    return out, r.warn


def review(request: Mapping[str, Any], state: ClusterState, config: AdmissionConfig) -> Verdict:
    """Judge one AdmissionReview `request` against the cluster as the cache last saw it.

    Returns a Verdict, or raises Malformed (HTTP 400) for input no API server would send; never anything
    else. Unmanaged namespaces, other kinds and other operations are allowed untouched.
    """
    env = decode(request)
    obj = env.obj
    if obj is None:
        if env.op == "DELETE":
            return _review_delete(env, state, config) if state.synced else _DELETE_SKIP
        return Verdict(allowed=True, skipped=f"operation {env.op}")
    if not state.synced:
        return not_ready(config, subject(env.kind, "", obj, request))
    gk = env.gk
    if gk == _NODE:
        return _review_node(env, obj, state, config)
    if gk == _HPA:
        return _review_scale(env, obj, state, config)
    if gk != _POD and gk not in _TEMPLATE_KINDS:
        return Verdict(allowed=True, skipped=f"kind {env.group}/{env.kind} is not reviewed")
    ns = env.namespace()
    subj = subject(env.kind, ns, obj, request)
    # A namespace the cache has not seen yet: the API server only calls for namespaces the webhook's
    # namespaceSelector matches, so treat it as managed rather than let work slip through a watch delay.
    if state.namespaces.get(ns) is False:
        return Verdict(allowed=True, subject=subj, skipped="namespace not managed by gpuctl")
    skipped = _trusted(env, obj, config)
    if skipped:
        return Verdict(allowed=True, subject=subj, skipped=skipped)
    return _review_work(env, obj, ns, subj, state, config)


def _trusted(env: Envelope, obj: Mapping[str, Any], config: AdmissionConfig) -> str:
    """Why the request is not judged, by who sends it, or ""."""
    user = env.user
    if user == config.kueue_user:
        # Kueue unsuspends, injects its flavor's nodeSelector and ungates: it must never depend on this
        # webhook (the API server does not even call for its requests, matchCondition not-kueue).
        return "Kueue's own request"
    meta = obj.get("metadata")
    owner = (
        None
        if type(meta) is dict and meta.get("ownerReferences") is None
        else controller_kind(obj_at(obj, "metadata", "request.object"), "request.object.metadata")
    )
    if (
        owner is not None
        and (
            (env.gk == _POD and owner in CHECKED_OWNERS)
            or (env.kind == "ReplicaSet" and owner in CHECKED_RS_OWNERS)
        )
        and user in (CONTROLLER_USERS[owner], KCM_USER)
    ):
        return f"checked at its owner ({owner[1]})"
    if owner is not None and env.kind == "Job" and user == JOB_MAKERS.get(owner):
        return f"checked at its owner ({owner[1]})"
    if owner is not None and env.kind == "StatefulSet" and user == STS_MAKERS.get(owner):
        return f"made by the LeaderWorkerSet controller, checked at its LeaderWorkerSet (owner {owner[1]})"
    return ""


def _review_work(
    env: Envelope,
    obj: Mapping[str, Any],
    ns: str,
    subj: str,
    state: ClusterState,
    config: AdmissionConfig,
) -> Verdict:
    """A Pod or a pod template's owner: its findings, and on UPDATE only the new ones (but for what CHANGE
    checks find in the update itself)."""
    kind, old = env.kind, env.old
    works = reduce_all(kind, obj, "request.object")
    found, warn = _all_violations(works, ns, state, config, env.user)
    r = ObjectReview(env, obj, "request.object", works)
    if old and kind in ("Job", "Pod", "JobSet", "LeaderWorkerSet"):
        with suppress(Malformed):  # a malformed old object: the new one is judged on its own
            r.old_works = reduce_all(kind, old, "request.oldObject")
    for stage, check in OBJECT_CHECKS:
        if stage == CLAIM or old:
            found += check(r)

    if not found and not warn:
        return Verdict(True, subj)  # what judge says whatever the old object had

    def before() -> list[Violation]:
        assert old is not None
        was = r.old_works if r.old_works is not None else reduce_all(kind, old, "request.oldObject")
        out, _ = _all_violations(was, ns, state, config, env.user)
        then = ObjectReview(env, old, "request.oldObject", was, was)
        for check in _CLAIM_CHECKS:
            out += check(then)
        return out

    return judge(subj, found, warn, before if old else None, config)


def _all_violations(
    works: list[Work], ns: str, state: ClusterState, config: AdmissionConfig, user: str = ""
) -> tuple[list[Violation], list[str]]:
    """violations() of each Work of one object (a JobSet has one per replicated job), in order."""
    if len(works) == 1:
        return violations(works[0], ns, state, config, user)
    found: list[Violation] = []
    warn: list[str] = []
    for w in works:
        f, wn = violations(w, ns, state, config, user)
        found += [v for v in f if v not in found]  # the JobSet's own labels judged once
        warn += [x for x in wn if x not in warn]
    return found, warn


def _review_node(
    env: Envelope, obj: Mapping[str, Any], state: ClusterState, config: AdmissionConfig
) -> Verdict:
    subj = subject(env.kind, "", obj, env.request)
    found = _node_findings(obj, "request.object", state)
    if found and env.request.get("dryRun") is True and env.field_manager() == FIELD_MANAGER:
        # gpuctl's server-side dry run of a new pool labels the nodes after "creating" the flavor in the
        # same dry run, which persisted nothing: the pool cannot exist yet. Say so, don't deny.
        return Verdict(True, subj, warnings=clip([f"dry run: {v.text()}" for v in found]))
    # Unlike a workload's, a malformed old Node is a malformed request.
    before = _node_findings(env.old, "request.oldObject", state) if env.old else []
    return decide(subj, found, [], before, config)


def _node_findings(obj: Mapping[str, Any], where: str, state: ClusterState) -> list[Violation]:
    r = NodeReview(obj, where, state)
    out: list[Violation] = []
    for check in _NODE_CHECKS:
        out += check(r)
    return out


def _review_scale(
    env: Envelope, obj: Mapping[str, Any], state: ClusterState, config: AdmissionConfig
) -> Verdict:
    """hpa-queued: an HPA in a team namespace (docs/serving.md); on UPDATE only a new finding denies."""
    ns = env.namespace()
    subj = subject(env.kind, ns, obj, env.request)
    if state.namespaces.get(ns) is False:
        return Verdict(allowed=True, subject=subj, skipped="namespace not managed by gpuctl")
    r = ScaleReview(obj, ns, state)
    found: list[Violation] = []
    for check in _SCALE_CHECKS:
        found += check(r)
    before: list[Violation] = []
    if env.old and found:
        with suppress(Malformed):  # a malformed old object: the new one is judged on its own
            was = ScaleReview(env.old, ns, state)
            for check in _SCALE_CHECKS:
                before += check(was)
    return decide(subj, found, list(clip(r.warn)), before, config)


def _review_delete(env: Envelope, state: ClusterState, config: AdmissionConfig) -> Verdict:
    """orphan-delete: a DELETE that would orphan the pods of a Job Kueue counts."""
    request = env.request
    r = DeleteReview(env, state, config)
    found: list[Violation] = []
    for check in _DELETE_CHECKS:
        found += check(r)
    if not found:
        return _DELETE_SKIP
    ns = request.get("namespace")
    old = request["oldObject"]
    return decide(subject(env.kind, ns if type(ns) is str else "", old, request), found, [], [], config)
