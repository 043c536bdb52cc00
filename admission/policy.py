"""gpuctl's stateless admission rules as a ValidatingAdmissionPolicy, generated from admission/rules.py.

The rules that need no cluster state (`host-path`, `priority`, `job-type`, `unknown-key`) also hold inside the
API server, in CEL: no network hop, no outage risk, so they hold while the webhook is down or its
configuration was deleted in an emergency. The CEL is generated here from the same constants the Python
rules use (DENIED_HOST_PATHS, the priority classes, the job kinds, the known keys, the trusted usernames);
`manifests/admission/policy.yaml` is this module's output and a unit test keeps it so:

    python -m admission.policy > manifests/admission/policy.yaml

Semantics match admission/rules.py: each rule yields *findings* (strings naming the place and the value);
CREATE is denied by any finding, UPDATE only by findings the old object did not have. Pods the Job,
ReplicaSet or StatefulSet controller sends, ReplicaSets the Deployment controller sends, and everything
Kueue sends are not evaluated (matchConditions on `request.userInfo.username`, as in webhook.yaml).
Allowed host paths (the webhook's --allowed-host-path / $GPUCTL_ALLOWED_HOST_PATHS) are compiled into the
policy: `python -m admission.policy --allowed-host-path /data ...`; a unit test keeps the shipped webhook
Deployment's $GPUCTL_ALLOWED_HOST_PATHS equal to the shipped policy's list. (Not a params ConfigMap: the API
server's param informer for built-in kinds is the shared one, and deleting the last policy that uses it
stops it for good -- later ConfigMap-param policies then never find their params until the API server
restarts; seen on 1.36.3, k8s.io/apiserver policy_source.go ensureParamsForPolicyLocked.)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Final

import yaml

from admission.rules import (
    CLASS_PREFIX,
    CONTROLLER_USERS,
    HOST_PATH,
    JOB_TYPE,
    JOB_TYPES,
    KCM_USER,
    KNOWN_KEYS,
    KUEUE_USER,
    PRIORITY,
    PRIORITY_CLASSES,
    PRIORITY_VALUES,
    UNKNOWN_KEY,
)
from gpuctl.constants import DENIED_HOST_PATHS, NAMESPACE_MARKER_VALUE, PRIORITY_CLASS, Labels, Priority
from gpuctl.spec.models import normalise_host_path

NAME: Final = "gpuctl-admission"
NAMESPACE: Final = "gpuctl-system"
SYSTEM_NAMESPACES: Final = ("kube-system", "kube-public", "kube-node-lease", "kueue-system", NAMESPACE)
# The rules the policy carries, as named in denials.
POLICY_RULES: Final = (HOST_PATH, PRIORITY, JOB_TYPE, UNKNOWN_KEY)


def q(s: str) -> str:
    """A CEL string literal."""
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cel_list(items: Any) -> str:
    return "[" + ", ".join(q(i) for i in items) + "]"


def _n(pre: str, base: str) -> str:
    """A variable's name: `labels` for the object, `oldLabels` for the old object."""
    return f"{pre}{base[0].upper()}{base[1:]}" if pre else base


def _v(pre: str, base: str) -> str:
    return f"variables.{_n(pre, base)}"


def _norm(p: str) -> str:
    """CEL for normalise_host_path(): drop empty and '.' segments ('..' never passes API validation)."""
    return f"'/' + {p}.split('/').filter(s, s != '' && s != '.').join('/')"


def _root_vars(root: str, pre: str) -> list[tuple[str, str]]:
    """Variables describing `root` (object or oldObject); for oldObject every one is empty on CREATE."""
    guard = "request.operation == 'UPDATE' && " if root == "oldObject" else ""
    tmpl = f"{root}.spec.template"
    not_pod = "request.kind.kind != 'Pod'"
    v = [
        (_n(pre, "labels"), f"{guard}has({root}.metadata.labels) ? {root}.metadata.labels : {{}}"),
        (
            _n(pre, "annotations"),
            f"{guard}has({root}.metadata.annotations) ? {root}.metadata.annotations : {{}}",
        ),
        (
            _n(pre, "tmplLabels"),
            f"{guard}{not_pod} && has({tmpl}.metadata) && has({tmpl}.metadata.labels) ? "
            f"{tmpl}.metadata.labels : {{}}",
        ),
        (
            _n(pre, "tmplAnnotations"),
            f"{guard}{not_pod} && has({tmpl}.metadata) && has({tmpl}.metadata.annotations) ? "
            f"{tmpl}.metadata.annotations : {{}}",
        ),
        (
            _n(pre, "volumes"),
            f"{guard}(request.kind.kind == 'Pod' ? has({root}.spec.volumes) : "
            f"has({tmpl}.spec.volumes)) ? "
            f"(request.kind.kind == 'Pod' ? {root}.spec.volumes : {tmpl}.spec.volumes) : []",
        ),
    ]
    return v + _finding_vars(pre)


def _finding_vars(pre: str) -> list[tuple[str, str]]:
    denied = cel_list(DENIED_HOST_PATHS)
    # Two steps (the API server's CEL has no cel.bind): each hostPath volume as {name, raw, norm}, then the
    # findings. `norm` is normalise_host_path(); '..' never passes the API server's own validation.
    paths = (
        f"{_v(pre, 'volumes')}.filter(v, has(v.hostPath)).map(v, "
        f"{{'name': string(v.name), 'raw': string(v.hostPath.path),\n"
        f"'norm': {_norm('string(v.hostPath.path)')}}})"
    )
    under = "h.norm == d || (d != '/' && h.norm.startsWith(d + '/'))"
    host_path = (
        f"{_v(pre, 'hostPaths')}.map(h,\n"
        f"!h.raw.startsWith('/') ?\n"
        f"'volume ' + h.name + ': hostPath ' + h.raw + ' is not an absolute path' :\n"
        f"variables.allowedHostPaths.exists(a, a == '/' || h.norm == a || h.norm.startsWith(a + '/')) ?\n"
        f"'' :\n"
        f"{denied}.exists(d, {under}) ?\n"
        f"'volume ' + h.name + ': mounting host path ' + h.norm + ' (inside ' + "
        f"{denied}.filter(d, {under})[0] + ') is not allowed' : '')"
        f".filter(f, f != '')"
    )
    places = (
        ("metadata.labels", "labels"),
        ("metadata.annotations", "annotations"),
        ("spec.template.metadata.labels", "tmplLabels"),
        ("spec.template.metadata.annotations", "tmplAnnotations"),
    )
    known = cel_list(sorted(KNOWN_KEYS))
    unknown = " +\n".join(
        f"{_v(pre, v)}.filter(k, k.startsWith({q(Labels.PREFIX)}) && !(k in {known}))"
        f".map(k, 'unknown key ' + k + ' in {where}')"
        for where, v in places
    )
    jt, types = q(Labels.JOB_TYPE), cel_list(JOB_TYPES)
    job_type = " +\n".join(
        f"({jt} in {_v(pre, v)} && !({_v(pre, v)}[{jt}] in {types}) ? "
        f"['{where}[{Labels.JOB_TYPE}] is \"' + {_v(pre, v)}[{jt}] + '\"'] : [])"
        for where, v in (("metadata.labels", "labels"), ("spec.template.metadata.labels", "tmplLabels"))
    )
    return [
        (_n(pre, "hostPaths"), paths),
        (_n(pre, "hostPath"), host_path),
        (_n(pre, "unknownKey"), unknown),
        (_n(pre, "jobType"), job_type),
        *_priority_vars(pre),
    ]


def _priority_vars(pre: str) -> list[tuple[str, str]]:
    """admission.rules._check_keys' priority part: the first finding in the same order, or none."""
    pk, ck = q(Labels.PRIORITY), q(Labels.KUEUE_PRIORITY)
    values, classes = cel_list(PRIORITY_VALUES), cel_list(sorted(PRIORITY_CLASSES))
    class_of = "{" + ", ".join(f"{q(p.value)}: {q(PRIORITY_CLASS[p])}" for p in Priority) + "}"
    lp, tp = _v(pre, "priorityObj"), _v(pre, "priorityTmpl")
    lc, tc = _v(pre, "classObj"), _v(pre, "classTmpl")
    said = _v(pre, "prioritySaid")
    labels, tmpl = _v(pre, "labels"), _v(pre, "tmplLabels")
    where_l, where_t = "metadata.labels", "spec.template.metadata.labels"
    steps = [
        (f"{lp} != '' && !({lp} in {values})", f"'{where_l}[{Labels.PRIORITY}] is \"' + {lp} + '\"'"),
        (f"{tp} != '' && !({tp} in {values})", f"'{where_t}[{Labels.PRIORITY}] is \"' + {tp} + '\"'"),
        (
            f"{lp} != '' && {tp} != '' && {lp} != {tp}",
            f"'{Labels.PRIORITY} is \"' + {lp} + '\" on the object but \"' + {tp} + '\" on its pod template'",
        ),
    ]
    for where, c in ((where_l, lc), (where_t, tc)):
        steps += [
            (
                f"{c}.startsWith({q(CLASS_PREFIX)}) && !({c} in {classes})",
                f"'{where}[{Labels.KUEUE_PRIORITY}] is \"' + {c} + '\", not a gpuctl priority class'",
            ),
            (
                f"{said} != '' && {c} != '' && {c} != {class_of}[{said}]",
                f"'{Labels.PRIORITY} is \"' + {said} + '\" but {where}[{Labels.KUEUE_PRIORITY}] is \"' + "
                f"{c} + '\"'",
            ),
        ]
    steps.append(
        (
            f"{said} != '' && !({ck} in {labels})",
            f"'{Labels.PRIORITY} is \"' + {said} + '\" but the object has no {Labels.KUEUE_PRIORITY} label'",
        )
    )
    chain = "".join(f"{cond} ? [{msg}] :\n" for cond, msg in steps) + "[]"
    return [
        (_n(pre, "priorityObj"), f"{pk} in {labels} ? {labels}[{pk}] : ''"),
        (_n(pre, "priorityTmpl"), f"{pk} in {tmpl} ? {tmpl}[{pk}] : ''"),
        (_n(pre, "classObj"), f"{ck} in {labels} ? {labels}[{ck}] : ''"),
        (_n(pre, "classTmpl"), f"{ck} in {tmpl} ? {tmpl}[{ck}] : ''"),
        (_n(pre, "prioritySaid"), f"{lp} != '' ? {lp} : {tp}"),
        (_n(pre, "priority"), chain),
    ]


_FIXES: Final = {
    HOST_PATH: f"mount a directory outside {', '.join(DENIED_HOST_PATHS)}, or ask an admin to allow it "
    "(--allowed-host-path of the webhook and of python -m admission.policy)",
    PRIORITY: f"use one of {', '.join(PRIORITY_VALUES)} with the matching {Labels.KUEUE_PRIORITY} "
    f"({', '.join(f'{p.value}: {PRIORITY_CLASS[p]}' for p in Priority)}), the same on object and template",
    JOB_TYPE: f"use one of {', '.join(JOB_TYPES)}",
    UNKNOWN_KEY: "remove or rename it (`gpuctl` lists its keys in docs/admission.md)",
}
_VAR: Final = {HOST_PATH: "hostPath", PRIORITY: "priority", JOB_TYPE: "jobType", UNKNOWN_KEY: "unknownKey"}


def _validation(rule: str) -> dict:
    new, old = _v("", _VAR[rule]), _v("old", _VAR[rule])
    return {
        "expression": f"{new}.all(f, f in {old})",
        "messageExpression": (
            f"'gpuctl policy: ' + request.kind.kind + ' ' + request.namespace + '/' + "
            f"(request.name != '' ? request.name : object.metadata.generateName + '*') + "
            f"' breaks [{rule}]: ' + {new}.filter(f, !(f in {old})).join('; ') + "
            f"{q('. Fix: ' + _FIXES[rule])}"
        ),
        "reason": "Forbidden",
    }


def _from(user: str) -> str:
    """CEL: the request comes from this controller (its own ServiceAccount, or the shared kcm identity)."""
    return f"(request.userInfo.username == {q(user)} || request.userInfo.username == {q(KCM_USER)})"


def match_conditions() -> list[dict]:
    """The identity skips of webhook.yaml, from the same table."""
    pod_owners = [(gk, u) for gk, u in CONTROLLER_USERS.items() if gk[1] != "Deployment"]
    owned = " ||\n".join(
        f"(r.kind == {q(kind)} && r.apiVersion.startsWith({q(group + '/')}) && {_from(user)})"
        for (group, kind), user in pod_owners
    )
    dep_user = CONTROLLER_USERS[("apps", "Deployment")]
    return [
        {"name": "not-kueue", "expression": f"request.userInfo.username != {q(KUEUE_USER)}"},
        {
            "name": "not-made-by-its-controller",
            "expression": (
                "request.kind.kind != 'Pod' || !has(object.metadata.ownerReferences) ||\n"
                "!object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller && (\n"
                f"{owned}))"
            ),
        },
        {
            "name": "not-a-deployments-replicaset-from-its-controller",
            "expression": (
                f"!(request.kind.kind == 'ReplicaSet' && {_from(dep_user)} &&\n"
                "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r,\n"
                "has(r.controller) && r.controller && r.kind == 'Deployment' &&\n"
                "r.apiVersion.startsWith('apps/')))"
            ),
        },
    ]


def _rule(group: str, *resources: str) -> dict:
    return {
        "apiGroups": [group],
        "apiVersions": ["v1"],
        "resources": list(resources),
        "operations": ["CREATE", "UPDATE"],
    }


# What the webhook and the policies review: pods, and the kinds that carry a pod template.
POD_RULE: Final = _rule("", "pods")
TEMPLATE_RULES: Final = (_rule("batch", "jobs"), _rule("apps", "deployments", "statefulsets", "replicasets"))


def variables(allowed: tuple[str, ...] = ()) -> list[dict]:
    paths = cel_list(normalise_host_path(a) for a in allowed if a.startswith("/"))
    pairs = [("allowedHostPaths", paths), *_root_vars("object", ""), *_root_vars("oldObject", "old")]
    return [{"name": name, "expression": expr} for name, expr in pairs]


def policy(allowed: tuple[str, ...] = ()) -> list[dict]:
    """The ValidatingAdmissionPolicy and its Binding; `allowed`: host paths allowed despite the deny list."""
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/managed-by": "gpuctl"}
    vap = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [POD_RULE, *TEMPLATE_RULES],
                "matchPolicy": "Equivalent",
            },
            "matchConditions": match_conditions(),
            "variables": variables(allowed),
            "validations": [_validation(r) for r in POLICY_RULES],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NAME, "labels": labels},
        "spec": {
            "policyName": NAME,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": team_namespaces()},
        },
    }
    return [vap, binding]


def team_namespaces() -> dict:
    return {
        "matchExpressions": [
            {"key": Labels.NAMESPACE, "operator": "In", "values": [NAMESPACE_MARKER_VALUE]},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(SYSTEM_NAMESPACES)},
        ]
    }


HEADER: Final = """\
# GENERATED by `python -m admission.policy > manifests/admission/policy.yaml` from admission/rules.py's tables
# (tests/unit/test_admission_policy.py fails when this file and the generator disagree). Do not edit by hand.
#
# gpuctl's stateless rules (host-path, priority, job-type, unknown-key) as a ValidatingAdmissionPolicy: CEL in
# the API server, so they hold while the webhook is down or deleted. Same scope as the webhook (team
# namespaces), same identity skips (Kueue; pods their controller sends; a Deployment's ReplicaSets), and on
# UPDATE only findings the old object did not have are denied. Allowed host paths are compiled in
# (variables.allowedHostPaths; generate with --allowed-host-path, the same list as the webhook's
# $GPUCTL_ALLOWED_HOST_PATHS). Roll out with validationActions [Warn, Audit] first if the cluster has
# objects that break the rules. docs/admission.md.
"""


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, s: str) -> yaml.Node:
    style = "|" if "\n" in s or len(s) > 100 else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=style)


_Dumper.add_representer(str, _str)


def render(allowed: tuple[str, ...] = ()) -> str:
    return HEADER + yaml.dump_all(policy(allowed), Dumper=_Dumper, sort_keys=False, width=1000)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m admission.policy", description="Print gpuctl's admission policy."
    )
    ap.add_argument("--allowed-host-path", action="append", default=[], metavar="PATH",
                    help="absolute host path allowed despite the deny list (repeatable)")  # fmt: skip
    args = ap.parse_args(argv)
    bad = [a for a in args.allowed_host_path if not a.startswith("/")]
    if bad:
        ap.error(f"--allowed-host-path must be absolute: {', '.join(bad)}")
    sys.stdout.write(render(tuple(args.allowed_host_path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
