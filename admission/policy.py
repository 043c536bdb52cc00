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
    ALLOWED_WORKLOAD_CLASSES,
    CLASS_PREFIX,
    CONTROLLER_USERS,
    DEVICE_ACCESS,
    FOREGROUND_FINALIZER,
    HOST_PATH,
    JOB_TYPE,
    JOB_TYPES,
    KCM_USER,
    KNOWN_KEYS,
    KUEUE_GATE,
    KUEUE_GATES,
    KUEUE_NAMESPACE,
    KUEUE_OWNER_KINDS,
    KUEUE_USER,
    ORPHAN_BY_DEFAULT,
    ORPHAN_DELETE,
    ORPHAN_FINALIZER,
    ORPHAN_KINDS,
    OWNER_CLAIM,
    POD_MAKERS,
    PRIORITY,
    PRIORITY_CLASS_RULE,
    PRIORITY_CLASSES,
    PRIORITY_VALUES,
    RELEASING_KINDS,
    UNKNOWN_KEY,
)
from gpuctl.constants import (
    BASELINE_CAPABILITIES,
    DENIED_HOST_PATHS,
    DEVICE_HOST_PATHS,
    GC_USER,
    NAMESPACE_MARKER_VALUE,
    NVIDIA_DEVICE_ENV,
    PRIORITY_CLASS,
    PRIORITY_CLASS_PREEMPTION,
    Labels,
    Priority,
)
from gpuctl.spec.models import normalise_host_path

NAME: Final = "gpuctl-admission"
NAMESPACE: Final = "gpuctl-system"
SYSTEM_NAMESPACES: Final = ("kube-system", "kube-public", "kube-node-lease", KUEUE_NAMESPACE, NAMESPACE)
# The rules the policy carries, as named in denials.
POLICY_RULES: Final = (
    HOST_PATH,
    PRIORITY,
    JOB_TYPE,
    UNKNOWN_KEY,
    PRIORITY_CLASS_RULE,
    DEVICE_ACCESS,
    OWNER_CLAIM,
    KUEUE_GATE,
)
# The second policy: DELETEs (its own matchConstraints: `object` is null on DELETE).
DELETE_NAME: Final = f"{NAME}-delete"
DELETE_RULES: Final = (ORPHAN_DELETE,)
# The third: gpuctl's Kubernetes PriorityClasses keep preemptionPolicy Never (cluster-scoped).
PRIORITY_CLASSES_NAME: Final = "gpuctl-priority-classes"


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
        (
            _n(pre, "podSpec"),
            f"{guard}(request.kind.kind == 'Pod' ? {root}.spec : {tmpl}.spec)",
        ),
    ]
    return v + _finding_vars(pre) + _tenant_vars(root, pre)


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


def _gk(r: str) -> str:
    """CEL: an owner reference's `group/Kind` (core kinds: `/Pod`), as admission.rules._ref_kind."""
    return f"((r.apiVersion.contains('/') ? r.apiVersion.split('/')[0] : '') + '/' + {r}.kind)".replace(
        "r.apiVersion", f"{r}.apiVersion"
    )


def _tenant_vars(root: str, pre: str) -> list[tuple[str, str]]:
    """priority-class, device-access and owner-claim findings of `root` (admission.rules: the same table)."""
    skip = "request.operation != 'UPDATE' ? [] : " if root == "oldObject" else ""
    spec = f"(request.kind.kind == 'Pod' ? {root}.spec : {root}.spec.template.spec)"
    where = "(request.kind.kind == 'Pod' ? 'spec' : 'spec.template.spec')"
    pk, ck = q(Labels.PRIORITY), q(Labels.KUEUE_PRIORITY)
    labels, tmpl = _v(pre, "labels"), _v(pre, "tmplLabels")
    said = f"({pk} in {labels} ? {labels}[{pk}] : ({pk} in {tmpl} ? {tmpl}[{pk}] : ''))"
    class_of = "{" + ", ".join(f"{q(p.value)}: {q(PRIORITY_CLASS[p])}" for p in Priority) + "}"
    want = f"({said} in {cel_list(PRIORITY_VALUES)} ? {class_of}[{said}] : '')"
    wpc = " +\n".join(
        f"({ck} in {m} && {m}[{ck}] != '' && !({m}[{ck}] in {cel_list(sorted(ALLOWED_WORKLOAD_CLASSES))}) && "
        f"!{m}[{ck}].startsWith({q(CLASS_PREFIX)}) ? "
        f"['{place}[{Labels.KUEUE_PRIORITY}] is \"' + {m}[{ck}] + "
        "'\", not a gpuctl WorkloadPriorityClass'] : [])"
        for place, m in (("metadata.labels", labels), ("spec.template.metadata.labels", tmpl))
    )
    priority_class = (
        f"{skip}(has({spec}.priorityClassName) && {spec}.priorityClassName != '' &&\n"
        f"{spec}.priorityClassName != {want} ?\n"
        f"[{where} + '.priorityClassName is \"' + {spec}.priorityClassName + '\"'] : []) +\n{wpc}"
    )
    base = cel_list(BASELINE_CAPABILITIES)
    up = "(a.upperAscii().startsWith('CAP_') ? a.upperAscii().substring(4) : a.upperAscii())"
    env = cel_list(NVIDIA_DEVICE_ENV)
    parts = []
    for part in ("initContainers", "containers", "ephemeralContainers"):
        lst = f"(has({spec}.{part}) ? {spec}.{part} : [])"
        sc = "has(c.securityContext)"
        add = f"{sc} && has(c.securityContext.capabilities) && has(c.securityContext.capabilities.add)"
        parts += [
            f"{lst}.filter(c, {sc} && has(c.securityContext.privileged) && c.securityContext.privileged)"
            f".map(c, 'container ' + c.name + ' is privileged')",
            f"{lst}.filter(c, {add} && c.securityContext.capabilities.add.exists(a, !({up} in {base})))"
            f".map(c, 'container ' + c.name + ' adds capability ' + "
            f"c.securityContext.capabilities.add.filter(a, !({up} in {base})).join(', '))",
            f"{lst}.filter(c, has(c.env) && c.env.exists(e, e.name in {env}))"
            f".map(c, 'container ' + c.name + ' sets ' + c.env.filter(e, e.name in {env}).map(e, e.name)"
            f".join(', '))",
        ]
    allowed = "variables.allowedHostPaths.exists(a, a == '/' || h.norm == a || h.norm.startsWith(a + '/'))"
    dev = cel_list(DEVICE_HOST_PATHS)
    device = (
        f"{skip}(has({spec}.hostPID) && {spec}.hostPID ? [{where} + '.hostPID is true'] : []) +\n"
        f"(has({spec}.hostIPC) && {spec}.hostIPC ? [{where} + '.hostIPC is true'] : []) +\n"
        + " +\n".join(parts)
        + f" +\n{_v(pre, 'hostPaths')}.filter(h, h.raw.startsWith('/') && !({allowed}) &&\n"
        f"{dev}.exists(d, h.norm == d || h.norm.startsWith(d + '/')))"
        f".map(h, 'volume ' + h.name + ': host path ' + h.norm + ' holds the node\\'s device nodes')"
    )
    kinds = cel_list(sorted(f"{g}/{k}" for g, k in KUEUE_OWNER_KINDS))
    claim = (
        f"{skip}request.kind.kind != 'Pod' || !has({root}.metadata.ownerReferences) ? [] :\n"
        f"{root}.metadata.ownerReferences.filter(r, has(r.controller) && r.controller && "
        f"{_gk('r')} in {kinds})"
        f".map(r, 'the pod names ' + r.kind + ' ' + r.name + ' (uid ' + r.uid + ') as its controller, but '"
        f" + 'Kueue leaves the pods of a ' + r.kind + ' to it and does not queue this one')"
    )
    out = [
        (_n(pre, "priorityClass"), priority_class),
        (_n(pre, "deviceAccess"), device),
        (_n(pre, "ownerClaim"), claim),
    ]
    return out


def _owner_dropped_var() -> tuple[str, str]:
    """owner-claim on UPDATE (after every other variable: it reads labels and oldLabels): a pod's controller
    reference taken away, or a RELEASING_KINDS owner's pod relabelled, by anyone but its controller."""
    kinds = cel_list(sorted(f"{g}/{k}" for g, k in KUEUE_OWNER_KINDS))
    releasing = cel_list(sorted(f"{g}/{k}" for g, k in RELEASING_KINDS))
    kept = (
        "(has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(n, "
        "has(n.controller) && n.controller && n.uid == r.uid))"
    )
    makers = "{" + ", ".join(f"{q(f'{g}/{k}')}: {q(u)}" for (g, k), u in POD_MAKERS.items()) + "}"
    user = "request.userInfo.username"
    return (
        "ownerDropped",
        f"request.operation != 'UPDATE' || request.kind.kind != 'Pod' ||\n"
        f"!has(oldObject.metadata.ownerReferences) || "
        f"{user} in {cel_list([KCM_USER, GC_USER])} ? [] :\n"
        f"oldObject.metadata.ownerReferences.filter(r, has(r.controller) && r.controller && "
        f"{_gk('r')} in {kinds} &&\n"
        f"!({_gk('r')} in {makers} && {makers}[{_gk('r')}] == {user}) &&\n"
        f"(!{kept} ||\n({_gk('r')} in {releasing} && variables.labels != variables.oldLabels)))\n"
        f".map(r, {kept} ?\n"
        "'the update changes the labels of a pod its ' + r.kind + ' ' + r.name + "
        "' controls: released, it would run on uncounted while its ' + r.kind + "
        "' makes a replacement' :\n"
        "'the update takes away the pod\\'s controller reference to ' + r.kind + ' ' + r.name)",
    )


_FIXES: Final = {
    HOST_PATH: f"mount a directory outside {', '.join(DENIED_HOST_PATHS)}, or ask an admin to allow it "
    "(--allowed-host-path of the webhook and of python -m admission.policy)",
    PRIORITY: f"use one of {', '.join(PRIORITY_VALUES)} with the matching {Labels.KUEUE_PRIORITY} "
    f"({', '.join(f'{p.value}: {PRIORITY_CLASS[p]}' for p in Priority)}), the same on object and template",
    JOB_TYPE: f"use one of {', '.join(JOB_TYPES)}",
    UNKNOWN_KEY: "remove or rename it (`gpuctl` lists its keys in docs/admission.md)",
    PRIORITY_CLASS_RULE: f"remove priorityClassName (or use the gpuctl class of {Labels.PRIORITY}) and use "
    f"{Labels.KUEUE_PRIORITY} {', '.join(sorted(PRIORITY_CLASSES))} only: in a team namespace Kueue alone "
    "orders and preempts work",
    DEVICE_ACCESS: "no privileged containers, no capabilities beyond Pod Security baseline's, no hostPath "
    f"under {', '.join(DEVICE_HOST_PATHS)}, no {NVIDIA_DEVICE_ENV[0]} & co., no hostPID/hostIPC: "
    "request GPUs with nvidia.com/gpu (Kueue counts them)",
    KUEUE_GATE: "leave spec.suspend and Kueue's scheduling gates to Kueue: it starts the work when the "
    "team's quota has room (`gpuctl describe job` says why it waits)",
    OWNER_CLAIM: "remove the ownerReference (a pod of your own is queued by Kueue like any other) and leave "
    "the controller references of your pods as they are; to stop a pod, delete it",
}
_VAR: Final = {
    HOST_PATH: "hostPath",
    PRIORITY: "priority",
    JOB_TYPE: "jobType",
    UNKNOWN_KEY: "unknownKey",
    PRIORITY_CLASS_RULE: "priorityClass",
    DEVICE_ACCESS: "deviceAccess",
    OWNER_CLAIM: "ownerClaim",
}


# Rules judged on what an UPDATE changes rather than on findings of each object: their variable holds
# only what is new, and any entry denies.
_DIFF_VARS: Final = {OWNER_CLAIM: "ownerDropped", KUEUE_GATE: "kueueGate"}


def _validation(rule: str) -> dict:
    if rule in _VAR:
        new, old = _v("", _VAR[rule]), _v("old", _VAR[rule])
        found, expr = f"{new}.filter(f, !(f in {old}))", f"{new}.all(f, f in {old})"
    else:
        found, expr = "[]", "true"
    if rule in _DIFF_VARS:  # owner-claim also denies a controller reference taken away
        diff = f"variables.{_DIFF_VARS[rule]}"
        found, expr = f"({found} + {diff})", f"{expr} && {diff}.size() == 0".removeprefix("true && ")
    return {
        "expression": expr,
        "messageExpression": (
            f"'gpuctl policy: ' + request.kind.kind + ' ' + request.namespace + '/' + "
            f"(request.name != '' ? request.name : object.metadata.generateName + '*') + "
            f"' breaks [{rule}]: ' + {found}.join('; ') + "
            f"{q('. Fix: ' + _FIXES[rule])}"
        ),
        "reason": "Forbidden",
    }


def _kueue_gate_var() -> tuple[str, str]:
    """kueue-gate on UPDATE: a queued Job un-suspended, or Kueue's scheduling gates lifted from a pod."""
    qk = q(Labels.KUEUE_QUEUE)
    queue = (
        f"({qk} in variables.labels ? variables.labels[{qk}] : {qk} in variables.oldLabels ? "
        f"variables.oldLabels[{qk}] : {qk} in variables.annotations ? variables.annotations[{qk}] : '')"
    )
    gates = cel_list(sorted(KUEUE_GATES))
    return (
        "kueueGate",
        "request.operation != 'UPDATE' ? [] :\n"
        "(request.kind.kind == 'Job' && has(oldObject.spec.suspend) && oldObject.spec.suspend &&\n"
        f"!(has(object.spec.suspend) && object.spec.suspend) && {queue} != '' ?\n"
        f"['the update un-suspends a Job queued in LocalQueue ' + {queue}] : []) +\n"
        "(request.kind.kind == 'Pod' && has(oldObject.spec.schedulingGates) ?\n"
        f"oldObject.spec.schedulingGates.filter(g, g.name in {gates} &&\n"
        "!(has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(n, n.name == g.name)))\n"
        ".map(g, 'the update removes Kueue\\'s scheduling gate ' + g.name) : [])",
    )


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
# `kubectl debug` adds ephemeral containers through this subresource: device-access judges them (the other
# rules find nothing new there: an ephemeral container changes no label, volume or priority).
EPHEMERAL_RULE: Final = {**_rule("", "pods/ephemeralcontainers"), "operations": ["UPDATE"]}


def variables(allowed: tuple[str, ...] = ()) -> list[dict]:
    paths = cel_list(normalise_host_path(a) for a in allowed if a.startswith("/"))
    pairs = [
        ("allowedHostPaths", paths),
        *_root_vars("object", ""),
        *_root_vars("oldObject", "old"),
        _owner_dropped_var(),
        _kueue_gate_var(),
    ]
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
                "resourceRules": [POD_RULE, EPHEMERAL_RULE, *TEMPLATE_RULES],
                "matchPolicy": "Equivalent",
            },
            "matchConditions": match_conditions(),
            "variables": variables(allowed),
            "validations": [_validation(r) for r in POLICY_RULES],
        },
    }
    return [vap, binding(NAME, labels, team_namespaces())]


def _orphaning() -> str:
    """CEL: how a DELETE orphans the object's dependents, '' when it does not (admission.rules._orphaning,
    the API server store's shouldOrphanDependents)."""
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


def delete_policy() -> list[dict]:
    """orphan-delete: no orphaning DELETE of a Job or StatefulSet Kueue counts (its own policy: every
    expression of the main one reads `object`, which is null on DELETE)."""
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/managed-by": "gpuctl"}
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
    vap = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": DELETE_NAME, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": rules, "matchPolicy": "Equivalent"},
            "matchConditions": [match_conditions()[0]],  # not-kueue
            "variables": [
                {"name": "orphaning", "expression": _orphaning()},
                {"name": "queue", "expression": queue},
            ],
            "validations": [
                {
                    "expression": "variables.orphaning == '' || variables.queue == ''",
                    "messageExpression": (
                        "'gpuctl policy: ' + request.kind.kind + ' ' + request.namespace + '/' + "
                        "request.name + "
                        f"' breaks [{ORPHAN_DELETE}]: deleting it with ' + variables.orphaning + "
                        "' would leave its pods running while Kueue stops counting them (LocalQueue ' + "
                        "variables.queue + '). Fix: delete with propagationPolicy Background or Foreground "
                        "(kubectl delete\\'s default, --cascade=background; gpuctl delete)'"
                    ),
                    "reason": "Forbidden",
                }
            ],
        },
    }
    return [vap, binding(DELETE_NAME, labels, team_namespaces())]


def priority_class_policy() -> list[dict]:
    """gpuctl's Kubernetes PriorityClasses (the earlier gpuctl's names) keep preemptionPolicy Never, whoever
    writes them: a pod naming one never preempts through kube-scheduler (the earlier client re-creates
    them with PreemptLowerPriority on every `create` when it may)."""
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/managed-by": "gpuctl"}
    names = cel_list(sorted(PRIORITY_CLASSES))
    vap = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": PRIORITY_CLASSES_NAME, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["scheduling.k8s.io"],
                        "apiVersions": ["v1"],
                        "resources": ["priorityclasses"],
                        "operations": ["CREATE", "UPDATE"],
                    }
                ],
                "matchPolicy": "Equivalent",
            },
            "matchConditions": [{"name": "gpuctl-class", "expression": f"object.metadata.name in {names}"}],
            "validations": [
                {
                    "expression": (
                        "has(object.preemptionPolicy) && "
                        f"object.preemptionPolicy == {q(PRIORITY_CLASS_PREEMPTION)}"
                    ),
                    "messageExpression": (
                        "'gpuctl policy: PriorityClass ' + object.metadata.name + ' must have "
                        f"preemptionPolicy {PRIORITY_CLASS_PREEMPTION}: pods naming it must never preempt "
                        "through kube-scheduler (Kueue alone decides who runs on pool GPUs). Fix: leave "
                        "gpuctl\\'s PriorityClasses to `gpuctl adopt`'"
                    ),
                    "reason": "Forbidden",
                }
            ],
        },
    }
    return [vap, binding(PRIORITY_CLASSES_NAME, labels, None)]


def binding(name: str, labels: dict, namespaces: dict | None) -> dict:
    """The ValidatingAdmissionPolicyBinding of policy `name`: Deny, for objects in the namespaces matched
    by the selector `namespaces` (None: cluster-scoped objects, no selector)."""
    spec: dict = {"policyName": name, "validationActions": ["Deny"]}
    if namespaces is not None:
        spec["matchResources"] = {"namespaceSelector": namespaces}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def mutating_policy(
    name: str, labels: dict, rules: list[dict], conditions: list[dict], mutations: list[dict], variables=None
) -> list[dict]:
    """A MutatingAdmissionPolicy of gpuctl (fail closed, re-invoked after other mutations) and its binding
    to the team namespaces."""
    spec: dict = {
        "failurePolicy": "Fail",
        "reinvocationPolicy": "IfNeeded",
        "matchConstraints": {"resourceRules": rules, "matchPolicy": "Equivalent"},
        "matchConditions": conditions,
    }
    if variables is not None:
        spec["variables"] = variables
    spec["mutations"] = mutations
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name, "labels": dict(labels)},
            "spec": spec,
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": dict(labels)},
            "spec": {"policyName": name, "matchResources": {"namespaceSelector": team_namespaces()}},
        },
    ]


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
    docs = [*policy(allowed), *delete_policy(), *priority_class_policy()]
    return HEADER + yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, width=1000)


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
