"""Raw kubectl work in team namespaces asks Kueue for node placement: a MutatingAdmissionPolicy.

Every pool ResourceFlavor is a Topology Aware Scheduling flavor, and Kueue admits a pod set on such a
flavor only if the pod set asks for TAS (`checkPodSetAndFlavorMatchForTAS` in Kueue's
pkg/scheduler/flavorassigner/tas_flavorassigner.go: "Flavor ... supports only TopologyAwareScheduling").
Kueue implies TAS only for a ClusterQueue whose flavors are *all* TAS (`isTASImplied`, `IsTASOnly`), and
a team ClusterQueue also holds the non-TAS budget flavor; making the budget a TAS flavor does not help
(a pod set assigned two TAS flavors fails with MultipleTASFlavorsAssignedError, `onlyTASFlavor`). So a
raw Job, Deployment, StatefulSet, ReplicaSet or Pod in a team namespace without a topology annotation
would wait forever. This policy adds `kueue.x-k8s.io/podset-unconstrained-topology: "true"` (what
gpuctl's own builders write) where none of TAS_REQUEST_KEYS is present, as Kueue's own webhooks default
the queue name: CEL in the API server, no webhook round trip, and it holds while gpuctl's webhook is down.

    python -m admission.policies.topology > manifests/admission/topology.yaml

Scope: team namespaces (the webhook's namespaceSelector); only work for gpuctl's LocalQueue (queue-name
`default` or none, which Kueue defaults to `default` there), so a user's own LocalQueue to a non-TAS
ClusterQueue is left alone; not Kueue's own requests; not pods their Job/ReplicaSet/StatefulSet
controller makes (their template was mutated); on UPDATE only when the pod template is rewritten (an
unrelated update of an older object never changes its template). MutatingAdmissionPolicy is GA (on by
default) from Kubernetes 1.36; the chart installs it there (`topologyPolicy.enabled`, docs/admission.md).
"""

from __future__ import annotations

import sys
from typing import Final

from admission.policies.cel import cel_list, gang, q
from admission.policies.skeleton import (
    TEMPLATE_RULES,
    labels,
    mutating_policy,
    mutating_template_and_pod,
    not_a_jobsets_job,
    not_an_lws_statefulset,
    render,
    team_match_conditions,
)
from gpuctl.constants import (
    GANG_PLACEMENT,
    LOCAL_QUEUE_NAME,
    SET_ASIDE_TAINT_KEYS,
    TAS_REQUEST_KEYS,
    TAS_UNCONSTRAINED,
    Labels,
)

TEMPLATES: Final = "gpuctl-topology-templates"
PODS: Final = "gpuctl-topology-pods"
GANGS: Final = "gpuctl-topology-gangs"


def _map(meta: str, key: str) -> str:
    """CEL: `meta`'s labels/annotations map, {} when absent (a pod template may have no metadata)."""
    guard = "has(object.spec.template.metadata) && " if meta.startswith("object.spec.template") else ""
    return f"({guard}has({meta}.{key}) ? {meta}.{key} : {{}})"


def _gpuctl_queue(meta: str) -> str:
    lab, qn = _map(meta, "labels"), q(Labels.KUEUE_QUEUE)
    return f"!({qn} in {lab}) || {lab}[{qn}] == {q(LOCAL_QUEUE_NAME)}"


def _no_request(meta: str) -> str:
    return f"!{cel_list(TAS_REQUEST_KEYS)}.exists(k, k in {_map(meta, 'annotations')})"


def _conditions(pod: bool) -> list[dict]:
    tmpl = "object.spec.template"
    tmeta = f"{tmpl}.metadata"
    if pod:
        queue = _gpuctl_queue("object.metadata")
        none = _no_request("object.metadata")
    else:
        queue = f"({_gpuctl_queue('object.metadata')}) &&\n({_gpuctl_queue(tmeta)})"
        none = _no_request(tmeta)
    conds = [
        *team_match_conditions(),
        {"name": "gpuctl-queue", "expression": queue},
        {"name": "no-topology-request", "expression": none},
    ]
    if not pod:
        conds.append(not_a_jobsets_job())
        conds.append(not_an_lws_statefulset())
        conds.append(
            {
                "name": "template-written",
                "expression": f"request.operation == 'CREATE' || {tmpl} != oldObject.spec.template",
            }
        )
        conds.append({"name": "not-a-gang", "expression": f"!({gang('object')})"})
    return conds


def _gang_conditions() -> list[dict]:
    """A multi-node job of gpuctl's LocalQueue, its template written (the template policy's, bar the last)."""
    conds = [c for c in _conditions(False) if c["name"] not in ("no-topology-request", "not-a-gang")]
    return [*conds, {"name": "gang", "expression": gang("object")}]


def _gang_patches() -> str:
    """CEL JSONPatch list: gpuctl's gang topology annotation where the template asks Kueue for none, and the
    tolerations of the job's own set-aside (runwhere.ai/set-aside=<its namespace>, set-aside-job=<its name>:
    gpuctl.domain.gang.set_aside_tolerations, what `gpuctl create` renders) for each key it has none of; none
    under generateName (no name yet: set-aside-toleration lets such a gang tolerate no set-aside)."""
    tmpl = "object.spec.template"
    ((key, value),) = GANG_PLACEMENT.items()
    ann = f"{{{q(key)}: {q(value)}}}"
    escaped = key.replace("~", "~0").replace("/", "~1")
    annotate = (
        f"!has({tmpl}.metadata) ? [JSONPatch{{op: 'add', path: '/spec/template/metadata', "
        f"value: {{'annotations': {ann}}}}}] :\n"
        f"!has({tmpl}.metadata.annotations) ? [JSONPatch{{op: 'add', "
        f"path: '/spec/template/metadata/annotations', value: {ann}}}] :\n"
        f"{cel_list(TAS_REQUEST_KEYS)}.exists(k, k in {tmpl}.metadata.annotations) ? [] :\n"
        f"[JSONPatch{{op: 'add', path: '/spec/template/metadata/annotations/{escaped}', value: {q(value)}}}]"
    )
    # (string(): in a JSONPatch value a map literal is typed by its entries, and metadata.name is dyn.)
    own = zip(
        SET_ASIDE_TAINT_KEYS, ("string(request.namespace)", "string(object.metadata.name)"), strict=True
    )
    tols = [
        (q(k), f"{{'key': {q(k)}, 'operator': 'Equal', 'value': {v}, 'effect': 'NoSchedule'}}")
        for k, v in own
    ]
    each = " +\n".join(
        f"({tmpl}.spec.tolerations.exists(t, has(t.key) && t.key == {key}) ? [] : "
        f"[JSONPatch{{op: 'add', path: '/spec/template/spec/tolerations/-', value: {tol}}}])"
        for key, tol in tols
    )
    tolerate = (
        "!has(object.metadata.name) || object.metadata.name == '' ? [] :\n"
        f"!has({tmpl}.spec.tolerations) ? [JSONPatch{{op: 'add', path: '/spec/template/spec/tolerations', "
        f"value: [{', '.join(t for _, t in tols)}]}}] :\n"
        f"{each}"
    )
    return f"({annotate}) +\n({tolerate})"


def _apply(pod: bool) -> str:
    ann = f"{{{q(TAS_UNCONSTRAINED)}: 'true'}}"
    if pod:
        return f"Object{{metadata: Object.metadata{{annotations: {ann}}}}}"
    return (
        "Object{spec: Object.spec{template: Object.spec.template{"
        f"metadata: Object.spec.template.metadata{{annotations: {ann}}}}}}}}}"
    )


def _mutations(pod: bool) -> list[dict]:
    return [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": _apply(pod)}}]


def policies() -> list[dict]:
    """The three MutatingAdmissionPolicies (pod templates, pods, multi-node jobs) and their bindings."""
    gangs = [{"patchType": "JSONPatch", "jsonPatch": {"expression": _gang_patches()}}]
    return [
        *mutating_template_and_pod(TEMPLATES, PODS, _conditions, _mutations),
        *mutating_policy(GANGS, labels(), [dict(TEMPLATE_RULES[0])], _gang_conditions(), gangs),
    ]


HEADER: Final = """\
# GENERATED by `python -m admission.policies.topology > manifests/admission/topology.yaml`
# (admission/policies/topology.py; tests/unit/test_admission_topology.py fails when this file and the
# generator disagree). Do not edit by hand.
#
# Raw kubectl work in team namespaces asks Kueue for node placement, as gpuctl's own jobs do: every pool
# flavor is a Topology Aware Scheduling flavor, and Kueue never admits a pod set there that carries no
# topology annotation ("Flavor ... supports only TopologyAwareScheduling"). These MutatingAdmissionPolicies
# add kueue.x-k8s.io/podset-unconstrained-topology: "true" to the pod template of Jobs, Deployments,
# StatefulSets and ReplicaSets, and to Pods, in team namespaces, for gpuctl's LocalQueue, when no topology
# annotation is there; an explicit one is kept. Kubernetes >= 1.36 (GA); docs/admission.md, docs/queueing.md.
"""


def render_manifest() -> str:
    """manifests/admission/topology.yaml."""
    return render(HEADER, policies())


if __name__ == "__main__":
    sys.stdout.write(render_manifest())
