"""gpuctl's stateless team-namespace rules as a ValidatingAdmissionPolicy (`gpuctl-admission`), generated from
the tables admission/validators/ use.

The rules that need no cluster state (`host-path`, `priority`, `job-type`, `unknown-key`, and the tenant
rules `priority-class`, `device-access`, `owner-claim`, `kueue-gate`) also hold inside the API server, in CEL:
no network hop, no outage risk, so they hold while the webhook is down or its configuration was deleted in
an emergency. The CEL is generated here from the same constants the Python rules use (DENIED_HOST_PATHS,
the priority classes, the job kinds, the known keys, the trusted usernames); `manifests/admission/policy.yaml`
holds it with the `orphan-delete` policy (admission/policies/deletes.py) and the PriorityClass one
(admission/policies/priority_classes.py), and a unit test keeps it current:

    python -m admission.policies.team [--allowed-host-path /data ...] > manifests/admission/policy.yaml

Semantics match admission/rules.py (admission/validators): each rule yields *findings* (strings naming the
place and the value); CREATE is denied by any finding, UPDATE only by findings the old object did not have.
Pods the Job, ReplicaSet or StatefulSet controller sends, ReplicaSets the Deployment controller sends, and
everything Kueue sends are not evaluated (matchConditions on `request.userInfo.username`, as in webhook.yaml).
Allowed host paths (the webhook's --allowed-host-path / $GPUCTL_ALLOWED_HOST_PATHS) are compiled into the
policy; a unit test keeps the shipped webhook Deployment's $GPUCTL_ALLOWED_HOST_PATHS equal to the shipped
policy's list. (Not a params ConfigMap: the API server's param informer for built-in kinds is the shared
one, and deleting the last policy that uses it stops it for good -- later ConfigMap-param policies then
never find their params until the API server restarts; seen on 1.36.3, k8s.io/apiserver policy_source.go
ensureParamsForPolicyLocked.)
"""

from __future__ import annotations

import argparse
import sys
from typing import Final

from admission.identities import GC_USER, KCM_USER, KUEUE_OWNER_KINDS, POD_MAKERS, RELEASING_KINDS
from admission.policies import deletes, priority_classes
from admission.policies.cel import cel_list, gang, q
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
from admission.rule_names import (
    DEVICE_ACCESS,
    GPU_RESOURCE_RULE,
    HOST_PATH,
    JOB_TYPE,
    KUEUE_GATE,
    OWNER_CLAIM,
    PRIORITY,
    PRIORITY_CLASS_RULE,
    SET_ASIDE_TOLERATION,
    UNKNOWN_KEY,
)
from admission.validators.gpu_resources import COUNTED_GPU_RESOURCES
from admission.validators.kueue_gate import KUEUE_GATES
from admission.validators.labels import CLASS_PREFIX, JOB_TYPES, KNOWN_KEYS, PRIORITY_CLASSES, PRIORITY_VALUES
from admission.validators.priority_class import ALLOWED_WORKLOAD_CLASSES
from admission.validators.set_aside import SET_ASIDE_FIX
from gpuctl.constants import (
    BASELINE_CAPABILITIES,
    DENIED_HOST_PATHS,
    DEVICE_HOST_PATHS,
    GPU_RESOURCE,
    GPU_RESOURCE_PREFIXES,
    NVIDIA_DEVICE_ENV,
    PRIORITY_CLASS,
    SET_ASIDE_TAINT_KEY,
    Labels,
    Priority,
)
from gpuctl.spec.models import normalise_host_path

__all__ = ["NAME", "POLICY_RULES", "policy", "render_manifest", "variables"]

NAME: Final = "gpuctl-admission"
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
    GPU_RESOURCE_RULE,
    SET_ASIDE_TOLERATION,
)


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
    return (
        v
        + _finding_vars(pre)
        + _tenant_vars(root, pre)
        + [_gpu_resource_var(root, pre), _set_aside_var(root, pre)]
    )


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
    """admission.validators.labels' priority part: the first finding in the same order, or none."""
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
    """CEL: an owner reference's `group/Kind` (core kinds: `/Pod`), as admission.envelope.ref_kind."""
    return f"((r.apiVersion.contains('/') ? r.apiVersion.split('/')[0] : '') + '/' + {r}.kind)".replace(
        "r.apiVersion", f"{r}.apiVersion"
    )


def _tenant_vars(root: str, pre: str) -> list[tuple[str, str]]:
    """priority-class, device-access and owner-claim findings of `root` (admission/validators: the same
    table)."""
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


def _gpu_resource_var(root: str, pre: str) -> tuple[str, str]:
    """gpu-resource findings of `root`: per container or init container, the GPU resources
    (constants.GPU_RESOURCE_PREFIXES) it requests or limits that Kueue does not charge
    (admission.validators.gpu_resources.COUNTED_GPU_RESOURCES)."""
    skip = "request.operation != 'UPDATE' ? [] : " if root == "oldObject" else ""
    spec = f"(request.kind.kind == 'Pod' ? {root}.spec : {root}.spec.template.spec)"
    gpu = (
        f"({cel_list(GPU_RESOURCE_PREFIXES)}.exists(p, k.startsWith(p)) && "
        f"!(k in {cel_list(sorted(COUNTED_GPU_RESOURCES))}))"
    )
    req = "(has(c.resources) && has(c.resources.requests) ? c.resources.requests : {})"
    lim = "(has(c.resources) && has(c.resources.limits) ? c.resources.limits : {})"
    parts = [
        f"(has({spec}.{part}) ? {spec}.{part} : [])"
        f".filter(c, {req}.exists(k, {gpu}) || {lim}.exists(k, {gpu}))"
        f".map(c, 'container ' + c.name + ' requests ' + "
        f"({req}.filter(k, {gpu}) + {lim}.filter(k, {gpu} && !(k in {req}))).join(', '))"
        for part in ("containers", "initContainers")
    ]
    return (_n(pre, "gpuResource"), skip + " +\n".join(parts))


def _set_aside_var(root: str, pre: str) -> tuple[str, str]:
    """set-aside-toleration findings of `root` (admission.validators.set_aside): a toleration of the set-aside
    taint (its key, or every key) for NoSchedule, on anything but a gang (gpuctl.domain.gang.gang_nodes:
    an Indexed Job with min(parallelism, completions) >= 2)."""
    skip = "request.operation != 'UPDATE' ? [] : " if root == "oldObject" else ""
    spec = f"(request.kind.kind == 'Pod' ? {root}.spec : {root}.spec.template.spec)"
    where = "(request.kind.kind == 'Pod' ? 'spec' : 'spec.template.spec')"
    is_gang = gang(root)
    tolerates = (
        "(!has(t.effect) || t.effect == '' || t.effect == 'NoSchedule') && "
        f"((has(t.key) && t.key == {q(SET_ASIDE_TAINT_KEY)}) || "
        "((!has(t.key) || t.key == '') && has(t.operator) && t.operator == 'Exists'))"
    )
    return (
        _n(pre, "setAside"),
        f"{skip}{is_gang} || !has({spec}.tolerations) ? [] :\n"
        f"{spec}.tolerations.exists(t, {tolerates}) ?\n"
        f"[{where} + '.tolerations tolerates {SET_ASIDE_TAINT_KEY}, the taint of nodes set aside for a "
        "multi-node job'] : []",
    )


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
    "(--allowed-host-path of the webhook and of python -m admission.policies.team)",
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
    GPU_RESOURCE_RULE: f"request whole GPUs with {GPU_RESOURCE}, or a slice with gpuctl's gpu-share: Kueue "
    "charges only whole GPUs, time-slicing replicas and the MIG profiles of docs/sharing.md to the team's "
    "budget",
    SET_ASIDE_TOLERATION: SET_ASIDE_FIX,
}
_VAR: Final = {
    HOST_PATH: "hostPath",
    PRIORITY: "priority",
    JOB_TYPE: "jobType",
    UNKNOWN_KEY: "unknownKey",
    PRIORITY_CLASS_RULE: "priorityClass",
    DEVICE_ACCESS: "deviceAccess",
    OWNER_CLAIM: "ownerClaim",
    GPU_RESOURCE_RULE: "gpuResource",
    SET_ASIDE_TOLERATION: "setAside",
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
    return validating_policy(
        NAME,
        labels(NAME),
        [POD_RULE, EPHEMERAL_RULE, *TEMPLATE_RULES],
        team_match_conditions(),
        variables(allowed),
        [_validation(r) for r in POLICY_RULES],
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


def render_manifest(allowed: tuple[str, ...] = ()) -> str:
    """manifests/admission/policy.yaml: this policy, the orphan-delete one and the PriorityClass one."""
    return render(HEADER, [*policy(allowed), *deletes.policy(), *priority_classes.policy()])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m admission.policies.team", description="Print gpuctl's admission policy."
    )
    ap.add_argument("--allowed-host-path", action="append", default=[], metavar="PATH",
                    help="absolute host path allowed despite the deny list (repeatable)")  # fmt: skip
    args = ap.parse_args(argv)
    bad = [a for a in args.allowed_host_path if not a.startswith("/")]
    if bad:
        ap.error(f"--allowed-host-path must be absolute: {', '.join(bad)}")
    sys.stdout.write(render_manifest(tuple(args.allowed_host_path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
