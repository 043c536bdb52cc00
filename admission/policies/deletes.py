"""`orphan-delete` as a ValidatingAdmissionPolicy (`gpuctl-admission-delete`): no orphaning DELETE of a Job
Kueue counts. The rule's CEL is admission/validators/orphan_delete.py's (beside its Python check); this module
compiles admission.registry's `gpuctl-admission-delete` rules into their own policy (every expression of the
team policy reads `object`, which is null on DELETE). Shipped in manifests/admission/policy.yaml
(admission.policies.team.render_manifest)."""

from __future__ import annotations

from typing import Final

from admission.policies.cel import DeleteCel
from admission.policies.skeleton import labels, team_match_conditions, team_namespaces, validating_policy
from admission.registry import DELETE_POLICY, compiled
from admission.validators.orphan_delete import ORPHAN_KINDS, cel_orphaning

__all__ = ["NAME", "orphaning", "policy"]

NAME: Final = "gpuctl-admission-delete"


def orphaning() -> str:
    """CEL: how a DELETE orphans the object's dependents, '' when it does not (the webhook entry's
    matchCondition too)."""
    return cel_orphaning()


def policy() -> list[dict]:
    """orphan-delete: no orphaning DELETE of a Job Kueue counts."""
    groups: dict[str, list[str]] = {}
    for g, k in sorted(ORPHAN_KINDS):
        groups.setdefault(g, []).append(f"{k.lower()}s")
    rules = [
        {"apiGroups": [g], "apiVersions": ["v1"], "resources": r, "operations": ["DELETE"]}
        for g, r in sorted(groups.items())
    ]
    cels = [c for _, c in compiled(DELETE_POLICY, DeleteCel)]
    return validating_policy(
        NAME,
        labels(),
        rules,
        [team_match_conditions()[0]],  # not-kueue
        [v for c in cels for v in c.variables()],
        [c.validation() for c in cels],
        team_namespaces(),
    )
