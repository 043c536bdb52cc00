"""The one skeleton of gpuctl's admission policies: a ValidatingAdmissionPolicy or MutatingAdmissionPolicy
with its Binding, the namespaces they bind to, the kinds they match, the identity skips they share, and
the YAML they are written as. Every generator of admission/policies/ builds its objects here.

All `admissionregistration.k8s.io/v1` (ValidatingAdmissionPolicy GA since Kubernetes 1.30,
MutatingAdmissionPolicy GA and on by default since 1.36); every policy fails closed (`failurePolicy:
Fail`) and matches equivalent versions of its kinds (`matchPolicy: Equivalent`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import yaml

from admission.identities import CONTROLLER_USERS, JOB_MAKERS, KUEUE_NAMESPACE, KUEUE_USER, STS_MAKERS
from admission.policies.cel import from_controller, q
from gpuctl.constants import EXEMPT_NAMESPACES, NAMESPACE_MARKER_VALUE, Labels

__all__ = [
    "API_VERSION",
    "EPHEMERAL_RULE",
    "NAMESPACE",
    "POD_RULE",
    "SYSTEM_NAMESPACES",
    "TEMPLATE_RULES",
    "binding",
    "labels",
    "mutating_policy",
    "mutating_template_and_pod",
    "non_team_namespaces",
    "not_a_jobsets_job",
    "not_an_lws_statefulset",
    "render",
    "resource_rule",
    "team_match_conditions",
    "team_namespaces",
    "validating_policy",
]

API_VERSION: Final = "admissionregistration.k8s.io/v1"
NAMESPACE: Final = "gpuctl-system"
SYSTEM_NAMESPACES: Final = ("kube-system", "kube-public", "kube-node-lease", KUEUE_NAMESPACE, NAMESPACE)


def labels(name: str = "gpuctl-admission") -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "gpuctl"}


def resource_rule(group: str, *resources: str) -> dict:
    return {
        "apiGroups": [group],
        "apiVersions": ["v1"],
        "resources": list(resources),
        "operations": ["CREATE", "UPDATE"],
    }


# What the webhook and the team policies review: pods, and the kinds that carry a pod template.
POD_RULE: Final = resource_rule("", "pods")
TEMPLATE_RULES: Final = (
    resource_rule("batch", "jobs"),
    resource_rule("apps", "deployments", "statefulsets", "replicasets"),
)
# `kubectl debug` adds ephemeral containers through this subresource: device-access judges them (the other
# rules find nothing new there: an ephemeral container changes no label, volume or priority).
EPHEMERAL_RULE: Final = {**resource_rule("", "pods/ephemeralcontainers"), "operations": ["UPDATE"]}


def team_namespaces() -> dict:
    """The webhook's namespaceSelector: gpuctl's team namespaces, never a system namespace."""
    return {
        "matchExpressions": [
            {"key": Labels.NAMESPACE, "operator": "In", "values": [NAMESPACE_MARKER_VALUE]},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(SYSTEM_NAMESPACES)},
        ]
    }


def non_team_namespaces(exempt: tuple[str, ...] = EXEMPT_NAMESPACES) -> dict:
    """Every other namespace (also those without the label), but the system ones and the admin's `exempt`
    ones (their own expression, the last: the chart rewrites it from exemptNamespaces)."""
    exprs = [
        {"key": Labels.NAMESPACE, "operator": "NotIn", "values": [NAMESPACE_MARKER_VALUE]},
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(SYSTEM_NAMESPACES)},
    ]
    if exempt:  # NotIn needs values
        exprs.append({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(exempt)})
    return {"matchExpressions": exprs}


def team_match_conditions() -> list[dict]:
    """The team rules' identity skips (webhook.yaml's, admission.rules' `_trusted`): Kueue's requests, pods
    their Job/ReplicaSet/StatefulSet controller sends, ReplicaSets the Deployment controller sends."""
    pod_owners = [(gk, u) for gk, u in CONTROLLER_USERS.items() if gk[1] != "Deployment"]
    owned = " ||\n".join(
        f"(r.kind == {q(kind)} && r.apiVersion.startsWith({q(group + '/')}) && {from_controller(user)})"
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
                f"!(request.kind.kind == 'ReplicaSet' && {from_controller(dep_user)} &&\n"
                "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r,\n"
                "has(r.controller) && r.controller && r.kind == 'Deployment' &&\n"
                "r.apiVersion.startsWith('apps/')))"
            ),
        },
    ]


def not_a_jobsets_job() -> dict:
    """The matchCondition skipping the Jobs a JobSet's controller sends (webhook.yaml's, admission.rules'
    `_trusted`): Kueue admitted the JobSet as they are, nothing is to be added to them."""
    return _not_made_by("Job", JOB_MAKERS, "not-a-jobsets-job-from-its-controller")


def not_an_lws_statefulset() -> dict:
    """The matchCondition skipping the StatefulSets the LeaderWorkerSet controller sends (a LeaderWorkerSet's
    leader StatefulSet, a group's workers' StatefulSet: admission.rules' `_trusted`): made from the
    LeaderWorkerSet's templates, reviewed at the LeaderWorkerSet."""
    return _not_made_by("StatefulSet", STS_MAKERS, "not-a-leaderworkersets-statefulset-from-its-controller")


def _not_made_by(kind: str, makers: Mapping[tuple[str, str], str], name: str) -> dict:
    """A `kind` whose controller is one of `makers`' owner kinds, sent by that owner's controller user."""
    owned = " ||\n".join(
        f"(r.kind == {q(owner)} && "
        + (f"r.apiVersion.startsWith({q(group + '/')})" if group else "r.apiVersion == 'v1'")
        + f" && request.userInfo.username == {q(user)})"
        for (group, owner), user in makers.items()
    )
    return {
        "name": name,
        "expression": (
            f"request.kind.kind != {q(kind)} || !has(object.metadata.ownerReferences) ||\n"
            f"!object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller && (\n{owned}))"
        ),
    }


def _spec(resource_rules: list[dict], conditions: list[dict]) -> dict[str, Any]:
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": resource_rules, "matchPolicy": "Equivalent"},
        "matchConditions": conditions,
    }


def validating_policy(
    name: str,
    meta_labels: dict[str, str],
    resource_rules: list[dict],
    conditions: list[dict],
    variables: list[dict] | None,
    validations: list[dict],
    namespaces: dict | None,
) -> list[dict]:
    """A ValidatingAdmissionPolicy and its Binding (Deny) to the namespaces the selector `namespaces`
    matches (None: cluster-scoped objects, no selector)."""
    spec = _spec(resource_rules, conditions)
    if variables is not None:
        spec["variables"] = variables
    spec["validations"] = validations
    vap = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": meta_labels},
        "spec": spec,
    }
    return [vap, binding(name, meta_labels, namespaces)]


def binding(name: str, meta_labels: dict[str, str], namespaces: dict | None) -> dict:
    """The ValidatingAdmissionPolicyBinding of policy `name`: Deny, for objects in the namespaces matched
    by the selector `namespaces` (None: cluster-scoped objects, no selector)."""
    spec: dict = {"policyName": name, "validationActions": ["Deny"]}
    if namespaces is not None:
        spec["matchResources"] = {"namespaceSelector": namespaces}
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": meta_labels},
        "spec": spec,
    }


def mutating_policy(
    name: str,
    meta_labels: dict[str, str],
    resource_rules: list[dict],
    conditions: list[dict],
    mutations: list[dict],
    variables: list[dict] | None = None,
) -> list[dict]:
    """A MutatingAdmissionPolicy of gpuctl (fail closed, re-invoked after other mutations) and its binding
    to the team namespaces."""
    spec = _spec(resource_rules, conditions)
    spec = {"failurePolicy": spec.pop("failurePolicy"), "reinvocationPolicy": "IfNeeded", **spec}
    if variables is not None:
        spec["variables"] = variables
    spec["mutations"] = mutations
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name, "labels": dict(meta_labels)},
            "spec": spec,
        },
        {
            "apiVersion": API_VERSION,
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": dict(meta_labels)},
            "spec": {"policyName": name, "matchResources": {"namespaceSelector": team_namespaces()}},
        },
    ]


def mutating_template_and_pod(
    templates: str,
    pods: str,
    conditions: Callable[[bool], list[dict]],
    mutations: Callable[[bool], list[dict]],
    variables: Callable[[bool], list[dict]] | None = None,
) -> list[dict]:
    """Two MutatingAdmissionPolicies (and bindings) that write the same thing: `templates` on the pod
    templates of Jobs, Deployments, StatefulSets and ReplicaSets (every write), `pods` on Pods at creation
    (what Kueue reads of a pod it reads once). conditions/mutations/variables(pod) build each one's parts."""
    out: list[dict] = []
    for name, pod in ((templates, False), (pods, True)):
        rules = [{**POD_RULE, "operations": ["CREATE"]}] if pod else [dict(r) for r in TEMPLATE_RULES]
        out += mutating_policy(
            name, labels(), rules, conditions(pod), mutations(pod), variables(pod) if variables else None
        )
    return out


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # a generated manifest repeats, it never refers


def _str(dumper: yaml.SafeDumper, s: str) -> yaml.Node:
    style = "|" if "\n" in s or len(s) > 100 else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=style)


_Dumper.add_representer(str, _str)


def render(header: str, docs: list[dict]) -> str:
    """A generated manifest: its header (what generated it, what it holds), then the objects."""
    return header + yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, width=1000)
