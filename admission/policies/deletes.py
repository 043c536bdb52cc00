"""`orphan-delete` as a ValidatingAdmissionPolicy (`gpuctl-admission-delete`): no orphaning DELETE of a Job
Kueue counts. The rule's CEL is admission/validators/orphan_delete.py's (beside its Python check); this module
compiles admission.registry's `gpuctl-admission-delete` rules into their own policy (every expression of the
team policy reads `object`, which is null on DELETE). Shipped in manifests/admission/policy.yaml
(admission.policies.team.render_manifest)."""

from __future__ import annotations

from typing import Final

from admission.policies.cel import DeleteCel, cel_list
from admission.policies.skeleton import labels, team_match_conditions, team_namespaces, validating_policy
from admission.registry import DELETE_POLICY, compiled
from admission.validators.orphan_delete import cel_orphaning
from gpuctl.constants import MAX_TERMINATION_GRACE_SECONDS

__all__ = ["NAME", "orphaning", "policy"]

NAME: Final = "gpuctl-admission-delete"


def orphaning() -> str:
    """CEL: how a DELETE orphans the object's dependents, '' when it does not (the webhook entry's
    matchCondition too)."""
    return cel_orphaning()


def policy(max_grace: int = MAX_TERMINATION_GRACE_SECONDS) -> list[dict]:
    """The DELETE rules (admission.registry's `gpuctl-admission-delete` ones): each rule's validation
    applies to its own kinds; `max_grace` compiled in as `variables.maxTerminationGrace`."""
    cels = [c for _, c in compiled(DELETE_POLICY, DeleteCel)]
    versions: dict[tuple[str, str], list[str]] = {}
    for c in cels:
        for g, k, v in c.kinds:
            versions.setdefault((g, v), []).append(f"{k.lower()}s")
    rules = [
        {"apiGroups": [g], "apiVersions": [v], "resources": r, "operations": ["DELETE"]}
        for (g, v), r in sorted(versions.items())
    ]
    variables = [{"name": "maxTerminationGrace", "expression": str(max_grace)}]
    variables += [v for c in cels for v in c.variables()]
    return validating_policy(
        NAME,
        labels(),
        rules,
        [team_match_conditions()[0]],  # not-kueue
        variables,
        [_scoped(c) for c in cels],
        team_namespaces(),
    )


def _scoped(c: DeleteCel) -> dict:
    """The rule's validation, for its kinds only."""
    v = c.validation()
    kinds = cel_list(sorted({k for _, k, _ in c.kinds}))
    return {**v, "expression": f"!(request.kind.kind in {kinds}) || ({v['expression']})"}
