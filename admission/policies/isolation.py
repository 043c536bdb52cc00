"""The stateless rules outside team namespaces as a ValidatingAdmissionPolicy (from admission/isolation.py).

`pool-toleration` and `pool-selection` need no cluster state, so they also run in the API server as CEL
(each rule's in admission/validators/isolation.py; this module compiles admission.registry's
`gpuctl-isolation` rules in its order): no network hop, no outage risk; they hold while the webhook is
down or deleted.
`manifests/admission/isolation.yaml` is this module's output and a unit test keeps it so:

    python -m admission.policies.isolation > manifests/admission/isolation.yaml

Scope: the Binding's namespaceSelector matches every namespace that is NOT a team namespace
(`runwhere.ai/namespace` NotIn ["true"], which also matches namespaces without the label) and not a system
namespace (`kubernetes.io/metadata.name` NotIn the list). Every kind matched is namespaced: the API server
(k8s.io/apiserver pkg/admission/plugin/webhook/predicates/namespace/matcher.go, shared by policies and
webhooks) evaluates a namespaceSelector against the request's namespace's labels, and would match a
cluster-scoped object unconditionally (only a Namespace itself is judged by its own labels).

The same CEL builds the matchConditions of the webhook's `isolation.admission.runwhere.ai` entry
(`webhook_entry()`, checked against manifests/admission/webhook.yaml by a unit test), which adds the one
stateful rule, `pool-node-name`: the webhook is called only for an object that sets nodeName or that the
stateless rules would refuse anyway, so while it is down only pods with nodeName (not made by a controller)
outside team namespaces are refused.
"""

from __future__ import annotations

import argparse
import sys
from typing import Final

from admission.identities import KUEUE_USER
from admission.isolation import (
    ISOLATION_CONTROLLER_USERS,
    NODE_USER_PREFIX,
    POD_OWNERS,
    TEMPLATE_OWNERS,
)
from admission.policies.cel import IsolationCel, from_controller, q
from admission.policies.skeleton import labels, non_team_namespaces, render, validating_policy
from admission.registry import ISOLATION_POLICY, Rule, compiled
from admission.validators.isolation import (
    POD_SPEC_PATHS,
    daemonset_without_gpus,
    gpus,
    selects_pool,
    spec_of,
    tolerates,
)
from gpuctl.constants import EXEMPT_NAMESPACES

NAME: Final = "gpuctl-isolation"
WEBHOOK_NAME: Final = "isolation.admission.runwhere.ai"
WEBHOOK_PATH: Final = "/isolation"


def _rules() -> list[dict]:
    """One resource rule per API group: every kind admission/isolation.py reads a pod spec from."""
    plural = {"Pod": "pods", "ReplicationController": "replicationcontrollers", "Job": "jobs",
              "CronJob": "cronjobs", "Deployment": "deployments", "StatefulSet": "statefulsets",
              "ReplicaSet": "replicasets", "DaemonSet": "daemonsets"}  # fmt: skip
    by_group: dict[str, list[str]] = {}
    for group, kind in POD_SPEC_PATHS:
        by_group.setdefault(group, []).append(plural[kind])
    return [
        {"apiGroups": [g], "apiVersions": ["v1"], "resources": r, "operations": ["CREATE", "UPDATE"]}
        for g, r in by_group.items()
    ]


def _cels() -> list[tuple[Rule, IsolationCel]]:
    """The rules the policy carries, with their CEL."""
    return compiled(ISOLATION_POLICY, IsolationCel)


def _finding_vars(pre: str, root: str) -> list[tuple[str, str]]:
    """The variables of one object: its pod spec, whether it requests GPUs, each rule's findings."""

    def name(base: str) -> str:
        return f"{pre}{base[0].upper()}{base[1:]}" if pre else base

    spec_expr = spec_of(root)
    if root == "oldObject":
        spec_expr = f"request.operation == 'UPDATE' ? {spec_expr} : {{}}"
    spec, gpu = f"variables.{name('spec')}", f"variables.{name('gpus')}"
    return [
        (name("spec"), spec_expr),
        (name("gpus"), gpus(spec)),
        *((name(cel.name), cel.finding(spec, gpu)) for _, cel in _cels()),
    ]


def variables() -> list[dict]:
    pairs = [*_finding_vars("", "object"), *_finding_vars("old", "oldObject")]
    return [{"name": n, "expression": e} for n, e in pairs]


def _validation(rule: Rule, cel: IsolationCel) -> dict:
    new, old = f"variables.{cel.name}", f"variables.old{cel.name[0].upper()}{cel.name[1:]}"
    return {
        "expression": f"{new}.all(f, f in {old})",
        "messageExpression": (
            f"'gpuctl policy: ' + request.kind.kind + ' ' + request.namespace + '/' + "
            f"(request.name != '' ? request.name : object.metadata.generateName + '*') + "
            f"' breaks [{rule.name}]: ' + {new}.filter(f, !(f in {old})).join('; ') + "
            f"{q('. Fix: ' + rule.fix)}"
        ),
        "reason": "Forbidden",
    }


def _api(group: str) -> str:
    return "r.apiVersion == 'v1'" if not group else f"r.apiVersion.startsWith({q(group + '/')})"


def match_conditions() -> list[dict]:
    """The identity skips (admission.isolation.skip_reason), as CEL on who sends the request."""
    owned = " ||\n".join(
        f"(r.kind == {q(kind)} && {_api(group)} && "
        f"{from_controller(ISOLATION_CONTROLLER_USERS[(group, kind)])})"
        for group, kind in sorted(POD_OWNERS)
    )
    made = " ||\n".join(
        f"(request.kind.kind == {q(kind)} && {from_controller(ISOLATION_CONTROLLER_USERS[owner])} &&\n"
        "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r,\n"
        f"has(r.controller) && r.controller && r.kind == {q(owner[1])} && {_api(owner[0])}))"
        for (_, kind), owner in sorted(TEMPLATE_OWNERS.items())
    )
    return [
        {"name": "not-kueue", "expression": f"request.userInfo.username != {q(KUEUE_USER)}"},
        {
            "name": "not-a-mirror-pod",
            "expression": (
                "!(request.kind.kind == 'Pod' && "
                f"request.userInfo.username.startsWith({q(NODE_USER_PREFIX)}))"
            ),
        },
        {
            "name": "not-made-by-its-controller",
            "expression": (
                "request.kind.kind != 'Pod' || !has(object.metadata.ownerReferences) ||\n"
                "!object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller && (\n"
                f"{owned}))"
            ),
        },
        {"name": "not-made-from-a-reviewed-template", "expression": f"!(\n{made})"},
    ]


def policy(exempt_namespaces: tuple[str, ...] = EXEMPT_NAMESPACES) -> list[dict]:
    """The ValidatingAdmissionPolicy and its Binding (to every namespace but team, system and exempt ones)."""
    return validating_policy(
        NAME,
        labels(NAME),
        _rules(),
        match_conditions(),
        variables(),
        [_validation(r, cel) for r, cel in _cels()],
        non_team_namespaces(exempt_namespaces),
    )


def webhook_match_conditions() -> list[dict]:
    """The webhook entry's conditions: the same identity skips, then only UPDATEs that change the pod spec,
    and only objects that set nodeName or that the stateless rules refuse (so an outage of the webhook
    blocks nothing else: the VAP refuses the latter first)."""
    s, old = spec_of("object"), spec_of("oldObject")
    relevant = (
        f"(has({s}.nodeName) && {s}.nodeName != '') ||\n"
        f"(!{daemonset_without_gpus(s)} && has({s}.tolerations) && "
        f"{s}.tolerations.exists(t, {tolerates('t')})) ||\n"
        f"({gpus(s)} && {selects_pool(s)})"
    )
    return [
        *match_conditions(),
        {"name": "changed", "expression": f"request.operation != 'UPDATE' || {s} != {old}"},
        {"name": "relevant", "expression": relevant},
    ]


def webhook_entry(exempt_namespaces: tuple[str, ...] = EXEMPT_NAMESPACES) -> dict:
    """The `isolation.admission.runwhere.ai` entry of manifests/admission/webhook.yaml."""
    return {
        "name": WEBHOOK_NAME,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "timeoutSeconds": 3,
        "clientConfig": {
            "service": {
                "name": "gpuctl-admission",
                "namespace": "gpuctl-system",
                "path": WEBHOOK_PATH,
                "port": 443,
            }
        },
        "rules": [{**r, "scope": "Namespaced"} for r in _rules()],
        "namespaceSelector": non_team_namespaces(exempt_namespaces),
        "matchConditions": webhook_match_conditions(),
    }


HEADER: Final = """\
# GENERATED by `python -m admission.policies.isolation > manifests/admission/isolation.yaml` from
# admission/isolation.py's tables (tests/unit/test_admission_isolation.py fails when this file and the
# generator disagree). Do not edit by hand.
#
# Pool GPUs run only Kueue-admitted work (docs/security.md, 2). Outside team namespaces (runwhere.ai/namespace
# != true) and system namespaces, no pod or pod template may tolerate the pool taint
# runwhere.ai/pool=<pool>:NoSchedule (pool-toleration; DaemonSets that request no GPUs may) or select a pool
# while requesting GPUs (pool-selection); exempt namespaces (the last namespaceSelector expression; default
# the GPU Operator's) may. CEL in the API server: it holds while the webhook is down. nodeName on a pool node
# needs the cluster's nodes: the webhook's isolation.admission.runwhere.ai entry (webhook.yaml). Same identity
# skips as the webhook (Kueue; pods, ReplicaSets and Jobs their controller makes; kubelets' mirror pods); on
# UPDATE only findings the old object did not have are denied. docs/admission.md.
"""


def render_manifest(exempt_namespaces: tuple[str, ...] = EXEMPT_NAMESPACES) -> str:
    """manifests/admission/isolation.yaml."""
    return render(HEADER, policy(exempt_namespaces))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m admission.policies.isolation",
        description="Print the isolation policy (> manifests/admission/isolation.yaml).",
    )
    ap.add_argument("--exempt-namespace", action="append", metavar="NS",
                    help=f"namespace whose pods may run on pool nodes (repeatable; default: "
                    f"{', '.join(EXEMPT_NAMESPACES)}; --exempt-namespace '' for none)")  # fmt: skip
    args = ap.parse_args(argv)
    exempt = (
        EXEMPT_NAMESPACES if args.exempt_namespace is None else tuple(n for n in args.exempt_namespace if n)
    )
    sys.stdout.write(render_manifest(exempt))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
