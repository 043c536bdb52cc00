"""`orphan-delete` as a ValidatingAdmissionPolicy (`gpuctl-admission-delete`): no orphaning DELETE of a Job
Kueue counts (admission/validators/orphan_delete.py). Its own policy: every expression of the team policy
reads `object`, which is null on DELETE. Shipped in manifests/admission/policy.yaml
(admission.policies.team.render_manifest)."""

from __future__ import annotations

from typing import Final

from admission.policies.cel import q
from admission.policies.skeleton import labels, team_match_conditions, team_namespaces, validating_policy
from admission.rule_names import ORPHAN_DELETE
from admission.validators.orphan_delete import (
    FOREGROUND_FINALIZER,
    ORPHAN_BY_DEFAULT,
    ORPHAN_FINALIZER,
    ORPHAN_KINDS,
)
from gpuctl.constants import Labels

__all__ = ["NAME", "orphaning", "policy"]

NAME: Final = "gpuctl-admission-delete"


def orphaning() -> str:
    """CEL: how a DELETE orphans the object's dependents, '' when it does not
    (admission.validators.orphan_delete.orphaning, the API server store's shouldOrphanDependents)."""
    o = "request.options"
    fins = "(has(oldObject.metadata.finalizers) ? oldObject.metadata.finalizers : [])"
    default = " || ".join(
        f"(request.kind.group == {q(g)} && request.kind.kind == {q(k)} && request.kind.version == {q(v)})"
        for g, k, v in sorted(ORPHAN_BY_DEFAULT)
    )
    return (
        f"has({o}.orphanDependents) ? ({o}.orphanDependents ? 'orphanDependents: true' : '') :\n"
        f"has({o}.propagationPolicy) ?\n"
        f"({o}.propagationPolicy == 'Orphan' ? 'propagationPolicy Orphan' : '') :\n"
        f"{q(ORPHAN_FINALIZER)} in {fins} ? "
        f"'no propagationPolicy while the object carries the {ORPHAN_FINALIZER} finalizer' :\n"
        f"!({q(FOREGROUND_FINALIZER)} in {fins}) && ({default}) ? "
        "'no propagationPolicy (for batch/v1 Jobs the API server then orphans the pods)' : ''"
    )


def policy() -> list[dict]:
    """orphan-delete: no orphaning DELETE of a Job or StatefulSet Kueue counts (its own policy: every
    expression of the main one reads `object`, which is null on DELETE)."""
    groups: dict[str, list[str]] = {}
    for g, k in sorted(ORPHAN_KINDS):
        groups.setdefault(g, []).append(f"{k.lower()}s")
    rules = [
        {"apiGroups": [g], "apiVersions": ["v1"], "resources": r, "operations": ["DELETE"]}
        for g, r in sorted(groups.items())
    ]
    qk = q(Labels.KUEUE_QUEUE)
    meta = "oldObject.metadata"
    queue = (
        f"has({meta}.labels) && {qk} in {meta}.labels ? {meta}.labels[{qk}] :\n"
        f"has({meta}.annotations) && {qk} in {meta}.annotations ? {meta}.annotations[{qk}] : ''"
    )
    message = (
        "'gpuctl policy: ' + request.kind.kind + ' ' + request.namespace + '/' + "
        "request.name + "
        f"' breaks [{ORPHAN_DELETE}]: deleting it with ' + variables.orphaning + "
        "' would leave its pods running while Kueue stops counting them (LocalQueue ' + "
        "variables.queue + '). Fix: delete with propagationPolicy Background or Foreground "
        "(kubectl delete\\'s default, --cascade=background; gpuctl delete)'"
    )
    return validating_policy(
        NAME,
        labels(),
        rules,
        [team_match_conditions()[0]],  # not-kueue
        [{"name": "orphaning", "expression": orphaning()}, {"name": "queue", "expression": queue}],
        [
            {
                "expression": "variables.orphaning == '' || variables.queue == ''",
                "messageExpression": message,
                "reason": "Forbidden",
            }
        ],
        team_namespaces(),
    )
