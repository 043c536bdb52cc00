"""gpuctl's admission rules for team namespaces and Nodes: `review(request, state, config) -> Verdict`.

Nothing here does I/O, so every rule is unit-testable with plain dicts and the request path costs only the
evaluation itself. The rules keep the cluster to gpuctl's conventions however work arrives (`gpuctl`,
`kubectl apply`, a CI bot); each group lives in a file named after it (admission/validators/), and this
module runs them, in a fixed order, on the object the request carries:

- `gpu-queue`, `gpu-topology`                     validators/queue.py
- `pool-exists`, `pool-placement`, `gpu-fits-node` validators/placement.py
- `unknown-key`, `job-type`, `priority`           validators/labels.py
- `host-path`                                     validators/host_paths.py
- `priority-class`                                validators/priority_class.py
- `device-access`                                 validators/device_access.py
- `gpu-resource`                                  validators/gpu_resources.py
- `mig-profile`                                   validators/mig_profiles.py
- `owner-claim`                                   validators/owner_claim.py
- `kueue-gate` (UPDATE)                           validators/kueue_gate.py
- `orphan-delete` (DELETE)                        validators/orphan_delete.py
- `node-pool` (Nodes)                             validators/node_pool.py
- `gang-fits`                                     validators/gangs.py
- `set-aside-toleration`                          validators/set_aside.py

Rules apply to Pods, Jobs, Deployments, StatefulSets, ReplicaSets and JobSets (each replicated job's pod
template, under the JobSet's labels) in namespaces gpuctl manages, and to Nodes. Pods the Job, ReplicaSet or
StatefulSet controller makes (ReplicaSets the Deployment controller makes, Jobs the JobSet controller makes)
are checked once, at their owner: the owner's template is what they are made from. What proves a
pod was made by its controller is *who sends the request* (admission.identities), never what the object
says about itself. The request is decoded by admission.envelope, the verdict and the UPDATE diff are
admission.verdict's (only findings the old object did not have are denied).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from typing import Any, Final

from admission.envelope import Envelope, controller_kind, decode, subject
from admission.identities import CHECKED_OWNERS, CHECKED_RS_OWNERS, CONTROLLER_USERS, JOB_MAKERS, KCM_USER
from admission.rule_names import RULES
from admission.state import ClusterState
from admission.validators.device_access import check_device_access
from admission.validators.gangs import check_gang_fits
from admission.validators.gpu_resources import check_gpu_resources
from admission.validators.host_paths import check_host_paths
from admission.validators.kueue_gate import check_kueue_gate
from admission.validators.labels import check_labels
from admission.validators.mig_profiles import check_mig_profiles
from admission.validators.node_pool import check_node
from admission.validators.orphan_delete import check_orphan_delete
from admission.validators.owner_claim import check_owner_claim, check_owner_dropped
from admission.validators.placement import (
    check_gpu_fits_node,
    check_pool_exists,
    check_pool_placement,
    placement_of,
)
from admission.validators.priority_class import check_priority_class
from admission.validators.queue import check_queue
from admission.validators.set_aside import check_set_aside_toleration
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
from admission.work import Work, queue_name, reduce_all
from gpuctl.constants import FIELD_MANAGER
from gpuctl.domain.gpus import pod_spec_gpus
from gpuctl.domain.shape import obj_at

__all__ = ["RULES", "AdmissionConfig", "Malformed", "Mode", "Verdict", "Violation", "review", "violations"]

# (apiGroup, kind) of the objects reviewed. Template kinds carry a pod template at spec.template.
_POD: Final = ("", "Pod")
_NODE: Final = ("", "Node")
_TEMPLATE_KINDS: Final = frozenset(
    {
        ("batch", "Job"),
        ("apps", "Deployment"),
        ("apps", "StatefulSet"),
        ("apps", "ReplicaSet"),
        ("jobset.x-k8s.io", "JobSet"),  # a pod template per replicated job (admission.work.reduce_all)
    }
)
_DELETE_SKIP: Final = Verdict(allowed=True, skipped="operation DELETE")


def violations(
    w: Work, ns: str, state: ClusterState, config: AdmissionConfig
) -> tuple[list[Violation], list[str]]:
    """What the stateful and stateless validators find in one workload (object and pod template), and the
    warnings they give: the findings an UPDATE's old object is compared by."""
    warn: list[str] = []
    gpus = pod_spec_gpus(w.spec, w.spec_path)
    out = check_queue(w, ns, gpus, state, warn) if gpus else []
    placement = placement_of(w, state)
    out += check_pool_exists(placement, state)
    out += check_pool_placement(placement, state, warn)
    out += check_gpu_fits_node(placement, gpus, state)
    out += check_gang_fits(w, placement, gpus, state)
    out += check_labels(w)
    allowed = config.allowed_host_paths
    out += check_host_paths(w, allowed)
    out += check_priority_class(w)
    out += check_device_access(w, allowed)
    out += check_gpu_resources(w)
    out += check_mig_profiles(w, ns, placement, state)
    out += check_set_aside_toleration(w)
    return out, warn


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
    if gk != _POD and gk not in _TEMPLATE_KINDS:
        return Verdict(allowed=True, skipped=f"kind {env.group}/{env.kind} is not reviewed")
    ns = env.namespace()
    subj = subject(env.kind, ns, obj, request)
    # A namespace the cache has not seen yet: the API server only calls for namespaces the webhook's
    # namespaceSelector matches, so treat it as managed rather than let work slip through a watch delay.
    if state.namespaces.get(ns) is False:
        return Verdict(allowed=True, subject=subj, skipped="namespace not managed by gpuctl")
    skipped, owner = _trusted(env, obj, config)
    if skipped:
        return Verdict(allowed=True, subject=subj, skipped=skipped)
    return _review_work(env, obj, ns, subj, owner, state, config)


def _trusted(
    env: Envelope, obj: Mapping[str, Any], config: AdmissionConfig
) -> tuple[str, tuple[str, str] | None]:
    """(why the request is not judged, by who sends it, or ""; the object's controller kind)."""
    user = env.user
    if user == config.kueue_user:
        # Kueue unsuspends, injects its flavor's nodeSelector and ungates: it must never depend on this
        # webhook (the API server does not even call for its requests, matchCondition not-kueue).
        return "Kueue's own request", None
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
        return f"checked at its owner ({owner[1]})", owner
    if owner is not None and env.kind == "Job" and user == JOB_MAKERS.get(owner):
        return f"checked at its owner ({owner[1]})", owner
    return "", owner


def _review_work(
    env: Envelope,
    obj: Mapping[str, Any],
    ns: str,
    subj: str,
    owner: tuple[str, str] | None,
    state: ClusterState,
    config: AdmissionConfig,
) -> Verdict:
    """A Pod or a pod template's owner: its findings, and on UPDATE only the new ones."""
    kind, old = env.kind, env.old
    claims = kind in ("Pod", "Job")  # owner-claim: a pod's or a Job's controller reference
    works = reduce_all(kind, obj, "request.object")
    found, warn = _all_violations(works, ns, state, config)
    old_works: list[Work] | None = None  # the old object's, once reduced (kueue-gate, then before())
    if old and kind in ("Job", "Pod", "JobSet"):
        with suppress(Malformed):  # a malformed old object: the new one is judged on its own
            old_works = reduce_all(kind, old, "request.oldObject")
        if works and old_works:
            w, was = works[0], old_works[0]
            found += check_kueue_gate(w, was, queue_name(w) or queue_name(was))
    if claims and owner is not None:
        found += check_owner_claim(obj, "request.object", kind)
    if claims and old:
        with suppress(Malformed):  # a malformed old object: the new one is judged on its own
            found += check_owner_dropped(obj, old, env.user, kind)

    if not found and not warn:
        return Verdict(True, subj)  # what judge says whatever the old object had

    def before() -> list[Violation]:
        assert old is not None
        was = old_works if old_works is not None else reduce_all(kind, old, "request.oldObject")
        out, _ = _all_violations(was, ns, state, config)
        return out + check_owner_claim(old, "request.oldObject", kind) if claims else out

    return judge(subj, found, warn, before if old else None, config)


def _all_violations(
    works: list[Work], ns: str, state: ClusterState, config: AdmissionConfig
) -> tuple[list[Violation], list[str]]:
    """violations() of each Work of one object (a JobSet has one per replicated job), in order."""
    if len(works) == 1:
        return violations(works[0], ns, state, config)
    found: list[Violation] = []
    warn: list[str] = []
    for w in works:
        f, wn = violations(w, ns, state, config)
        found += [v for v in f if v not in found]  # the JobSet's own labels judged once
        warn += [x for x in wn if x not in warn]
    return found, warn


def _review_node(
    env: Envelope, obj: Mapping[str, Any], state: ClusterState, config: AdmissionConfig
) -> Verdict:
    subj = subject(env.kind, "", obj, env.request)
    found = check_node(obj, "request.object", state)
    if found and env.request.get("dryRun") is True and env.field_manager() == FIELD_MANAGER:
        # gpuctl's server-side dry run of a new pool labels the nodes after "creating" the flavor in the
        # same dry run, which persisted nothing: the pool cannot exist yet. Say so, don't deny.
        return Verdict(True, subj, warnings=clip([f"dry run: {v.text()}" for v in found]))
    # Unlike a workload's, a malformed old Node is a malformed request.
    before = check_node(env.old, "request.oldObject", state) if env.old else []
    return decide(subj, found, [], before, config)


def _review_delete(env: Envelope, state: ClusterState, config: AdmissionConfig) -> Verdict:
    """orphan-delete: a DELETE that would orphan the pods of a Job Kueue counts."""
    request = env.request
    found = check_orphan_delete(request, env.gk, env.user, state, config.kueue_user)
    if not found:
        return _DELETE_SKIP
    ns = request.get("namespace")
    old = request["oldObject"]
    return decide(subject(env.kind, ns if type(ns) is str else "", old, request), found, [], [], config)
