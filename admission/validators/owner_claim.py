"""`owner-claim`: a Pod claiming a controller whose pods Kueue leaves to that controller's integration (a Job,
ReplicaSet, StatefulSet, ... `identities.KUEUE_OWNER_KINDS`) comes from that controller; and only the
controller (or the garbage collector) takes such a claim away or relabels a Job's pod. Kueue would not gate
such a pod: it would run outside the team's quota. The same for a Job claiming a JobSet (Kueue queues the
JobSet, not its Jobs): only the JobSet controller makes one (`identities.JOB_MAKERS`) or takes the claim away.

`check_owner_claim` judges what the pod says (admission.rules.review has already let through the pods
their own controller sends); `check_owner_dropped` judges what an UPDATE changes. Their CEL (the team policy's
`ownerClaim` and `ownerDropped`) is below, on the same tables; one fix for the policy (FIX).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from admission.envelope import controller_ref, ref_kind
from admission.identities import GC_USER, JOB_MAKERS, KCM_USER, KUEUE_OWNER_KINDS, POD_MAKERS, RELEASING_KINDS
from admission.policies.cel import TeamCel, cel_list, old_skip, q, var_name
from admission.rule_names import OWNER_CLAIM
from admission.verdict import Violation
from gpuctl.domain.shape import EMPTY, strmap_at

__all__ = ["CEL", "FIX", "check_owner_claim", "check_owner_dropped"]

FIX: Final = (
    "remove the ownerReference (a pod of your own is queued by Kueue like any other) and leave the "
    "controller references of your pods as they are; to stop a pod, delete it"
)


def _makers(kind: str) -> Mapping[tuple[str, str], str]:
    return JOB_MAKERS if kind == "Job" else POD_MAKERS


def check_owner_claim(obj: Mapping[str, Any], where: str, kind: str = "Pod") -> list[Violation]:
    """owner-claim, on what the pod (or Job) says: a controller reference to an owner whose pods Kueue does
    not gate. (review() has already let through what the owner's own controller sends.)"""
    meta = obj.get("metadata")
    if type(meta) is not dict or meta.get("ownerReferences") is None:
        return []
    ref = controller_ref(meta, f"{where}.metadata")
    if ref is None:
        return []
    gk = ref_kind(ref)
    if gk not in KUEUE_OWNER_KINDS:
        return []
    name, uid = ref.get("name"), ref.get("uid")
    what = "Jobs" if kind == "Job" else "pods"
    noun = "pod" if kind == "Pod" else kind
    maker = _makers(kind).get(gk)
    by = f"only {maker} makes such {what}" if maker else f"nothing makes {what} owned by a {gk[1]}"
    return [
        Violation(
            OWNER_CLAIM,
            f"the {noun} names {gk[1]} {name} as its controller, but "
            f"Kueue leaves the {what} of a {gk[1]} to it and does not queue this one ({by}): it would run "
            "outside the team's quota",
            f"remove the ownerReference (a {noun} of your own is queued by "
            f"Kueue like any other), or create the {gk[1]} and let it make its {what}",
            f"{OWNER_CLAIM}: {gk[0]}/{gk[1]} {name} {uid}",
        )
    ]


def check_owner_dropped(
    obj: Mapping[str, Any], old: Mapping[str, Any], user: str, kind: str = "Pod"
) -> list[Violation]:
    """owner-claim, on an UPDATE: only the owner's controller (or the garbage collector) takes a pod's
    controller reference away, and only the controller relabels a pod of a RELEASING_KINDS owner. Anyone else
    would turn a counted pod into an orphan that runs on while its owner makes a counted replacement."""
    old_meta = old.get("metadata")
    if type(old_meta) is not dict or old_meta.get("ownerReferences") is None:
        return []
    ref = controller_ref(old_meta, "request.oldObject.metadata")
    if ref is None:
        return []
    gk = ref_kind(ref)
    if gk not in KUEUE_OWNER_KINDS or user in (_makers(kind).get(gk), KCM_USER, GC_USER):
        return []
    meta = obj.get("metadata")
    meta = meta if type(meta) is dict else EMPTY
    now = None if meta.get("ownerReferences") is None else controller_ref(meta, "request.object.metadata")
    name = ref.get("name")
    noun = "pod" if kind == "Pod" else kind
    if now is None or now.get("uid") != ref.get("uid"):
        return [
            Violation(
                OWNER_CLAIM,
                f"the update takes away the {noun}'s controller reference to {gk[1]} {name}: the {noun} "
                f"would run on as an orphan while its {gk[1]} makes a counted replacement",
                f"leave ownerReferences as they are; to stop the {noun}, delete it (or its {gk[1]})",
                f"{OWNER_CLAIM}: drop {gk[0]}/{gk[1]} {name}",
            )
        ]
    if (
        kind == "Pod"
        and gk in RELEASING_KINDS
        and strmap_at(meta, "labels", "request.object.metadata")
        != strmap_at(old_meta, "labels", "request.oldObject.metadata")
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


# ---------------------------------------------------------------------------------------------------------
# CEL (the team policy).


def owner_kind(r: str) -> str:
    """CEL: an owner reference's `group/Kind` (core kinds: `/Pod`), as admission.envelope.ref_kind."""
    return f"(({r}.apiVersion.contains('/') ? {r}.apiVersion.split('/')[0] : '') + '/' + {r}.kind)"


_KINDS: Final = cel_list(sorted(f"{g}/{k}" for g, k in KUEUE_OWNER_KINDS))


def cel_variables(root: str, pre: str) -> list[tuple[str, str]]:
    """`ownerClaim`: a Pod's controller reference to one of KUEUE_OWNER_KINDS (the policy does not judge the
    pods their controller sends: matchConditions); a Job's, unless that owner's controller (JOB_MAKERS)
    sends it (the policy judges those Jobs: only the webhook skips them)."""
    refs = f"{root}.metadata.ownerReferences"
    gk = owner_kind("r")
    makers = "{" + ", ".join(f"{q(f'{g}/{k}')}: {q(u)}" for (g, k), u in JOB_MAKERS.items()) + "}"
    claim = (
        f"{old_skip(root)}!(request.kind.kind in ['Pod', 'Job']) || !has({refs}) ? [] :\n"
        f"request.kind.kind == 'Pod' ?\n"
        f"{refs}.filter(r, has(r.controller) && r.controller && {gk} in {_KINDS})"
        f".map(r, 'the pod names ' + r.kind + ' ' + r.name + ' (uid ' + r.uid + ') as its controller, but '"
        f" + 'Kueue leaves the pods of a ' + r.kind + ' to it and does not queue this one') :\n"
        f"{refs}.filter(r, has(r.controller) && r.controller && {gk} in {_KINDS} &&\n"
        f"!({gk} in {makers} && {makers}[{gk}] == request.userInfo.username))"
        f".map(r, 'the Job names ' + r.kind + ' ' + r.name + ' (uid ' + r.uid + ') as its controller, but '"
        f" + 'Kueue leaves the Jobs of a ' + r.kind + ' to it and does not queue this one')"
    )
    return [(var_name(pre, "ownerClaim"), claim)]


def cel_dropped() -> tuple[str, str]:
    """`ownerDropped`, on UPDATE (after every other variable: it reads labels and oldLabels): a pod's
    controller reference taken away, or a RELEASING_KINDS owner's pod relabelled, by anyone but its
    controller."""
    releasing = cel_list(sorted(f"{g}/{k}" for g, k in RELEASING_KINDS))
    kept = (
        "(has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(n, "
        "has(n.controller) && n.controller && n.uid == r.uid))"
    )
    makers = "{" + ", ".join(f"{q(f'{g}/{k}')}: {q(u)}" for (g, k), u in POD_MAKERS.items()) + "}"
    user = "request.userInfo.username"
    gk = owner_kind("r")
    return (
        "ownerDropped",
        f"request.operation != 'UPDATE' || request.kind.kind != 'Pod' ||\n"
        f"!has(oldObject.metadata.ownerReferences) || "
        f"{user} in {cel_list([KCM_USER, GC_USER])} ? [] :\n"
        f"oldObject.metadata.ownerReferences.filter(r, has(r.controller) && r.controller && "
        f"{gk} in {_KINDS} &&\n"
        f"!({gk} in {makers} && {makers}[{gk}] == {user}) &&\n"
        f"(!{kept} ||\n({gk} in {releasing} && variables.labels != variables.oldLabels)))\n"
        f".map(r, {kept} ?\n"
        "'the update changes the labels of a pod its ' + r.kind + ' ' + r.name + "
        "' controls: released, it would run on uncounted while its ' + r.kind + "
        "' makes a replacement' :\n"
        "'the update takes away the pod\\'s controller reference to ' + r.kind + ' ' + r.name)",
    )


CEL: Final = TeamCel("ownerClaim", cel_variables, cel_dropped)
