"""Who submitted a job, said by the API server: a MutatingAdmissionPolicy writes `runwhere.ai/submitted-by`.

The audit trail (gpuctl.domain.history, docs/audit.md) names a job's submitter from the annotation
`runwhere.ai/submitted-by` on its controller (Job, Deployment, StatefulSet; a bare Pod is its own). A
client wrote it (gpuctl's SelfSubjectReview of its own credential), so a namespace editor could write
anyone's name (docs/audit.md, "Who can write the trail"). This policy sets it from the request instead:

- CREATE of a Job, Deployment, StatefulSet or Pod in a team namespace: the annotation is
  `request.userInfo.username`, whatever the object said (a forged value is overwritten). Only gpuctl's own
  REST API (SUBMITTER_PROXIES: it creates for its authenticated callers with its own credential) may name
  someone else, its caller.
- UPDATE: the annotation keeps the value it was created with (restored if changed, removed if added to an
  object created without it).

The same for stops and resumes (gpuctl-active-set-by): an UPDATE of a Workload in a team namespace that
changes `spec.active` gets `runwhere.ai/active-set-by` = the requester (a proxy's caller, as above), from
anyone (Kueue's own deactivations too: the trail names those from their conditions); an UPDATE that leaves
spec.active alone keeps the annotation's value. `gpuctl history` shows it as the stop/resume actor.

Scope and identity skips as the other team policies (Kueue's requests; pods their controller makes). No
webhook round trip; MutatingAdmissionPolicy is GA from Kubernetes 1.36 (the chart installs it with the
topology policies, `topologyPolicy.enabled`, `auto`). `gpuctl create` no longer asks the API server who its
caller is.

    python -m admission.policies.submitted_by > manifests/admission/submitted-by.yaml
"""

from __future__ import annotations

import sys
from typing import Final

from admission.policies.cel import cel_list, q
from admission.policies.skeleton import (
    POD_RULE,
    TEMPLATE_RULES,
    labels,
    mutating_policy,
    render,
    team_match_conditions,
)
from gpuctl.constants import AUDIT_ACTIVE_SET_BY_ANNOTATION, AUDIT_SUBMITTED_BY_ANNOTATION, SERVE_USER

NAME: Final = "gpuctl-submitted-by"
# gpuctl's REST API identities (manifests/api, manifests/serve; the chart writes its release namespace):
# they create jobs for their authenticated callers and name them (gpuctl.server.api, `submitted_by`).
SUBMITTER_PROXIES: Final = ("system:serviceaccount:gpuctl-system:gpuctl-api", SERVE_USER)
_KEY: Final = q(AUDIT_SUBMITTED_BY_ANNOTATION)
_NEW: Final = (
    f"(has(object.metadata.annotations) && {_KEY} in object.metadata.annotations ? "
    f"object.metadata.annotations[{_KEY}] : '')"
)
_OLD: Final = (
    f"(request.operation == 'UPDATE' && has(oldObject.metadata.annotations) && {_KEY} in "
    f"oldObject.metadata.annotations ? oldObject.metadata.annotations[{_KEY}] : '')"
)
_PROXY: Final = f"request.userInfo.username in {cel_list(SUBMITTER_PROXIES)}"
# What the annotation must say: on CREATE the requester (or a proxy's caller), on UPDATE what it said.
_WANT: Final = (
    f"request.operation == 'CREATE' ? ({_PROXY} && {_NEW} != '' ? {_NEW} : request.userInfo.username) "
    f": {_OLD}"
)
# The JSON pointer of the annotation (`/` in a key is `~1`, RFC 6901).
_POINTER: Final = "/metadata/annotations/" + AUDIT_SUBMITTED_BY_ANNOTATION.replace("~", "~0").replace(
    "/", "~1"
)


def policies() -> list[dict]:
    """The MutatingAdmissionPolicy and its binding (team namespaces)."""
    rules = [{**POD_RULE, "operations": ["CREATE"]}, *(dict(r) for r in TEMPLATE_RULES)]
    # Deployment's ReplicaSets carry no submitter (and the Deployment controller's own are skipped).
    rules[-1] = {**rules[-1], "resources": [r for r in rules[-1]["resources"] if r != "replicasets"]}
    conditions = [
        *team_match_conditions(),
        {"name": "not-already-right", "expression": f"{_NEW} != ({_WANT})"},
    ]
    variables = [{"name": "want", "expression": _WANT}]
    return mutating_policy(NAME, labels(), rules, conditions, _stamp(_KEY, _POINTER), variables)


def _stamp(key: str, pointer: str) -> list[dict]:
    """Mutations: the annotation `key` (CEL-quoted) set to variables.want, or removed (JSON Pointer
    `pointer`) when want is '' (an apply configuration cannot remove a key)."""
    set_it = f"Object{{metadata: Object.metadata{{annotations: {{{key}: variables.want}}}}}}"
    return [
        {
            "patchType": "ApplyConfiguration",
            "applyConfiguration": {"expression": f"variables.want != '' ? {set_it} : Object{{}}"},
        },
        {
            "patchType": "JSONPatch",
            "jsonPatch": {
                "expression": f"variables.want == '' ? [JSONPatch{{op: 'remove', path: {q(pointer)}}}] : []"
            },
        },
    ]


ACTIVE_NAME: Final = "gpuctl-active-set-by"
_AKEY: Final = q(AUDIT_ACTIVE_SET_BY_ANNOTATION)
_ANEW: Final = f"(has(object.metadata.annotations) ? object.metadata.annotations[?{_AKEY}].orValue('') : '')"
_AOLD: Final = (
    f"(has(oldObject.metadata.annotations) ? oldObject.metadata.annotations[?{_AKEY}].orValue('') : '')"
)
_ACTIVE_CHANGED: Final = (
    "(has(object.spec.active) ? object.spec.active : true) != "
    "(has(oldObject.spec.active) ? oldObject.spec.active : true)"
)
# On a change of spec.active the requester (a proxy may name its caller); otherwise what it said before.
_AWANT: Final = (
    f"{_ACTIVE_CHANGED} ? ({_PROXY} && {_ANEW} != '' && {_ANEW} != {_AOLD} ? {_ANEW} : "
    f"request.userInfo.username) : {_AOLD}"
)


def active_policies() -> list[dict]:
    """The MutatingAdmissionPolicy stamping who changed a Workload's spec.active, and its binding."""
    rules = [
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "apiVersions": ["*"],
            "resources": ["workloads"],
            "operations": ["UPDATE"],
        }
    ]
    conditions = [{"name": "not-already-right", "expression": f"{_ANEW} != ({_AWANT})"}]
    pointer = "/metadata/annotations/" + AUDIT_ACTIVE_SET_BY_ANNOTATION.replace("/", "~1")
    variables = [{"name": "want", "expression": _AWANT}]
    return mutating_policy(ACTIVE_NAME, labels(), rules, conditions, _stamp(_AKEY, pointer), variables)


HEADER: Final = """\
# GENERATED by `python -m admission.policies.submitted_by > manifests/admission/submitted-by.yaml`
# (admission/policies/submitted_by.py; tests/unit/test_admission_submitted_by.py fails when this file and the
# generator disagree). Do not edit by hand.
#
# runwhere.ai/submitted-by, the audit trail's submitter, written by the API server from the request: on
# CREATE of a Job, Deployment, StatefulSet or Pod in a team namespace it is the requesting user (a forged
# value is overwritten; gpuctl's REST API may name its caller), on UPDATE it keeps its value. And
# runwhere.ai/active-set-by, the stop/resume actor: on an UPDATE of a Workload that changes spec.active, the
# requesting user; otherwise unchanged. Kubernetes >= 1.36 (MutatingAdmissionPolicy GA). docs/admission.md,
# docs/audit.md.
"""


def render_manifest() -> str:
    """manifests/admission/submitted-by.yaml."""
    return render(HEADER, [*policies(), *active_policies()])


if __name__ == "__main__":
    sys.stdout.write(render_manifest())
