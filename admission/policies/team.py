"""gpuctl's stateless team-namespace rules as a ValidatingAdmissionPolicy (`gpuctl-admission`), compiled from
each rule's own CEL (admission.registry's `gpuctl-admission` rules, in its order; each rule's CEL sits beside
its Python check in admission/validators/<file>.py).

The rules that need no cluster state (`unknown-key`, `job-type`, `priority`, `host-path`, and the tenant
rules `priority-class`, `device-access`, `gpu-resource`, `set-aside-toleration`, `kueue-gate`,
`owner-claim`) also hold inside the API server, in CEL: no network hop, no outage risk, so they hold while
the webhook is down or its configuration was deleted in an emergency. `manifests/admission/policy.yaml`
holds it with the `orphan-delete` policy (admission/policies/deletes.py) and the PriorityClass one
(admission/policies/priority_classes.py), and a unit test keeps it current:

    python -m admission.policies.team [--allowed-host-path /data ...] > manifests/admission/policy.yaml

Semantics match admission/rules.py: each rule yields *findings* (strings naming the place and the value);
CREATE is denied by any finding, UPDATE only by findings the old object did not have, but for the rules
judged on what an UPDATE changes (`TeamCel.change`: `kueue-gate`, owner-claim's dropped reference). Pods
the Job, ReplicaSet or StatefulSet controller sends, ReplicaSets the Deployment controller sends, and
everything Kueue sends are not evaluated (matchConditions on `request.userInfo.username`, as in
webhook.yaml). Allowed host paths (the webhook's --allowed-host-path / $GPUCTL_ALLOWED_HOST_PATHS) are
compiled into the policy; a unit test keeps the shipped webhook Deployment's $GPUCTL_ALLOWED_HOST_PATHS equal
to the shipped policy's list. (Not a params ConfigMap: the API server's param informer for built-in kinds is
the shared one, and deleting the last policy that uses it stops it for good -- later ConfigMap-param
policies then never find their params until the API server restarts; seen on 1.36.3, k8s.io/apiserver
policy_source.go ensureParamsForPolicyLocked.)
"""

from __future__ import annotations

import argparse
import sys
from typing import Final

from admission.policies import deletes, priority_classes
from admission.policies.cel import TeamCel, Variables, cel_list, q, var, var_name
from admission.policies.skeleton import (
    EPHEMERAL_RULE,
    POD_RULE,
    TEMPLATE_RULES,
    labels,
    render,
    team_match_conditions,
    team_namespaces,
    validating_policy,
)
from admission.registry import TEAM_POLICY, Rule, compiled
from gpuctl.constants import DEFAULT_ALLOWED_EXTENDED_RESOURCES, MAX_TERMINATION_GRACE_SECONDS
from gpuctl.spec.models import normalise_host_path

__all__ = ["NAME", "POLICY_RULES", "policy", "render_manifest", "variables"]

NAME: Final = "gpuctl-admission"


def _cels() -> list[tuple[Rule, TeamCel]]:
    """The rules the policy carries, with their CEL."""
    return compiled(TEAM_POLICY, TeamCel)


# The rules the policy carries, as named in denials.
POLICY_RULES: Final = tuple(r.name for r, _ in _cels())


def _shared_vars(root: str, pre: str) -> list[tuple[str, str]]:
    """What every rule reads of `root` (object or oldObject); for oldObject every one is empty on CREATE."""
    guard = "request.operation == 'UPDATE' && " if root == "oldObject" else ""
    tmpl = f"{root}.spec.template"
    not_pod = "request.kind.kind != 'Pod'"
    return [
        (var_name(pre, "labels"), f"{guard}has({root}.metadata.labels) ? {root}.metadata.labels : {{}}"),
        (
            var_name(pre, "annotations"),
            f"{guard}has({root}.metadata.annotations) ? {root}.metadata.annotations : {{}}",
        ),
        (
            var_name(pre, "tmplLabels"),
            f"{guard}{not_pod} && has({tmpl}.metadata) && has({tmpl}.metadata.labels) ? "
            f"{tmpl}.metadata.labels : {{}}",
        ),
        (
            var_name(pre, "tmplAnnotations"),
            f"{guard}{not_pod} && has({tmpl}.metadata) && has({tmpl}.metadata.annotations) ? "
            f"{tmpl}.metadata.annotations : {{}}",
        ),
        (
            var_name(pre, "volumes"),
            f"{guard}(request.kind.kind == 'Pod' ? has({root}.spec.volumes) : "
            f"has({tmpl}.spec.volumes)) ? "
            f"(request.kind.kind == 'Pod' ? {root}.spec.volumes : {tmpl}.spec.volumes) : []",
        ),
        (var_name(pre, "podSpec"), f"{guard}(request.kind.kind == 'Pod' ? {root}.spec : {tmpl}.spec)"),
    ]


def _root_vars(root: str, pre: str) -> list[tuple[str, str]]:
    """The shared variables of `root`, then each rule's (a builder shared by several rules, once)."""
    out = _shared_vars(root, pre)
    seen: list[Variables] = []
    for _, cel in _cels():
        if cel.variables is not None and cel.variables not in seen:
            seen.append(cel.variables)
            out += cel.variables(root, pre)
    return out


def _validation(rule: Rule, cel: TeamCel) -> dict:
    if cel.finding:
        new, old = var("", cel.finding), var("old", cel.finding)
        found, expr = f"{new}.filter(f, !(f in {old}))", f"{new}.all(f, f in {old})"
    else:
        found, expr = "[]", "true"
    if cel.change is not None:  # judged on what the update changes: any entry denies
        diff = f"variables.{cel.change()[0]}"
        found, expr = f"({found} + {diff})", f"{expr} && {diff}.size() == 0".removeprefix("true && ")
    return {
        "expression": expr,
        "messageExpression": (
            f"'gpuctl policy: ' + request.kind.kind + ' ' + request.namespace + '/' + "
            f"(request.name != '' ? request.name : object.metadata.generateName + '*') + "
            f"' breaks [{rule.name}]: ' + {found}.join('; ') + "
            f"{q('. Fix: ' + rule.fix)}"
        ),
        "reason": "Forbidden",
    }


def variables(
    allowed: tuple[str, ...] = (),
    max_grace: int = MAX_TERMINATION_GRACE_SECONDS,
    extended: tuple[str, ...] = DEFAULT_ALLOWED_EXTENDED_RESOURCES,
) -> list[dict]:
    """Every variable: the admin's settings compiled in (the chart rewrites these three from its values),
    then each root's, then the UPDATE-change ones."""
    paths = cel_list(normalise_host_path(a) for a in allowed if a.startswith("/"))
    pairs = [
        ("allowedHostPaths", paths),
        ("maxTerminationGrace", str(max_grace)),
        ("allowedExtendedResources", cel_list(extended)),
        *_root_vars("object", ""),
        *_root_vars("oldObject", "old"),
        *(cel.change() for _, cel in _cels() if cel.change is not None),
    ]
    return [{"name": name, "expression": expr} for name, expr in pairs]


def policy(
    allowed: tuple[str, ...] = (),
    max_grace: int = MAX_TERMINATION_GRACE_SECONDS,
    extended: tuple[str, ...] = DEFAULT_ALLOWED_EXTENDED_RESOURCES,
) -> list[dict]:
    """The ValidatingAdmissionPolicy and its Binding; `allowed`: host paths allowed despite the deny list;
    `max_grace`: the longest termination grace; `extended`: extended resources allowed uncharged."""
    return validating_policy(
        NAME,
        labels(NAME),
        [POD_RULE, EPHEMERAL_RULE, *TEMPLATE_RULES],
        team_match_conditions(),
        variables(allowed, max_grace, extended),
        [_validation(r, cel) for r, cel in _cels()],
        team_namespaces(),
    )


HEADER: Final = """\
# GENERATED by `python -m admission.policies.team > manifests/admission/policy.yaml` from the tables of
# admission/validators (tests/unit/test_admission_policy.py fails when this file and the generator disagree).
# Do not edit by hand.
#
# gpuctl's stateless rules (host-path, priority, job-type, unknown-key) as a ValidatingAdmissionPolicy: CEL in
# the API server, so they hold while the webhook is down or deleted. Same scope as the webhook (team
# namespaces), same identity skips (Kueue; pods their controller sends; a Deployment's ReplicaSets), and on
# UPDATE only findings the old object did not have are denied. Allowed host paths are compiled in
# (variables.allowedHostPaths; generate with --allowed-host-path, the same list as the webhook's
# $GPUCTL_ALLOWED_HOST_PATHS). Roll out with validationActions [Warn, Audit] first if the cluster has
# objects that break the rules. docs/admission.md.
"""


def render_manifest(
    allowed: tuple[str, ...] = (),
    max_grace: int = MAX_TERMINATION_GRACE_SECONDS,
    extended: tuple[str, ...] = DEFAULT_ALLOWED_EXTENDED_RESOURCES,
) -> str:
    """manifests/admission/policy.yaml: this policy, the orphan-delete one and the PriorityClass one."""
    return render(
        HEADER,
        [*policy(allowed, max_grace, extended), *deletes.policy(max_grace), *priority_classes.policy()],
    )


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m admission.policies.team", description="Print gpuctl's admission policy."
    )
    ap.add_argument("--allowed-host-path", action="append", default=[], metavar="PATH",
                    help="absolute host path allowed despite the deny list (repeatable)")  # fmt: skip
    ap.add_argument("--max-termination-grace", type=int, default=MAX_TERMINATION_GRACE_SECONDS,
                    metavar="SECONDS", help="the longest terminationGracePeriodSeconds a team pod may ask "
                    f"(default {MAX_TERMINATION_GRACE_SECONDS})")  # fmt: skip
    ap.add_argument("--allowed-extended-resource", action="append", metavar="NAME",
                    help="extended resource (NAME or PREFIX*) a team pod may request uncharged (repeatable; "
                    f"default {', '.join(DEFAULT_ALLOWED_EXTENDED_RESOURCES)}; '' for none)")  # fmt: skip
    args = ap.parse_args(argv)
    bad = [a for a in args.allowed_host_path if not a.startswith("/")]
    if bad:
        ap.error(f"--allowed-host-path must be absolute: {', '.join(bad)}")
    if args.max_termination_grace < 0:
        ap.error("--max-termination-grace must be 0 or more")
    extended = (
        DEFAULT_ALLOWED_EXTENDED_RESOURCES
        if args.allowed_extended_resource is None
        else tuple(a for a in args.allowed_extended_resource if a)
    )
    sys.stdout.write(render_manifest(tuple(args.allowed_host_path), args.max_termination_grace, extended))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
