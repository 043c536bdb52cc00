"""REST paths of the kinds gpuctl touches, without discovery (one fewer round trip per command)."""

from __future__ import annotations

from typing import NamedTuple


class Resource(NamedTuple):
    api_version: str
    plural: str
    namespaced: bool


RESOURCES: dict[str, Resource] = {
    "Namespace": Resource("v1", "namespaces", False),
    "Node": Resource("v1", "nodes", False),
    "Pod": Resource("v1", "pods", True),
    "Service": Resource("v1", "services", True),
    "Event": Resource("v1", "events", True),
    "Secret": Resource("v1", "secrets", True),
    "ServiceAccount": Resource("v1", "serviceaccounts", True),
    "ResourceQuota": Resource("v1", "resourcequotas", True),
    "LimitRange": Resource("v1", "limitranges", True),
    "Job": Resource("batch/v1", "jobs", True),
    "Deployment": Resource("apps/v1", "deployments", True),
    "StatefulSet": Resource("apps/v1", "statefulsets", True),
    "ReplicaSet": Resource("apps/v1", "replicasets", True),
    "LeaderWorkerSet": Resource("leaderworkerset.x-k8s.io/v1", "leaderworkersets", True),
    "HorizontalPodAutoscaler": Resource("autoscaling/v2", "horizontalpodautoscalers", True),
    "ResourceFlavor": Resource("kueue.x-k8s.io/v1beta2", "resourceflavors", False),
    "ClusterQueue": Resource("kueue.x-k8s.io/v1beta2", "clusterqueues", False),
    "LocalQueue": Resource("kueue.x-k8s.io/v1beta2", "localqueues", True),
    "Cohort": Resource("kueue.x-k8s.io/v1beta2", "cohorts", False),
    "Topology": Resource("kueue.x-k8s.io/v1beta2", "topologies", False),
    "Workload": Resource("kueue.x-k8s.io/v1beta2", "workloads", True),
    "WorkloadPriorityClass": Resource("kueue.x-k8s.io/v1beta2", "workloadpriorityclasses", False),
    "AdmissionCheck": Resource("kueue.x-k8s.io/v1beta2", "admissionchecks", False),
    "MultiKueueCluster": Resource("kueue.x-k8s.io/v1beta2", "multikueueclusters", False),
    "MultiKueueConfig": Resource("kueue.x-k8s.io/v1beta2", "multikueueconfigs", False),
    "ValidatingWebhookConfiguration": Resource(
        "admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", False
    ),
    "ValidatingAdmissionPolicy": Resource(
        "admissionregistration.k8s.io/v1", "validatingadmissionpolicies", False
    ),
    "ValidatingAdmissionPolicyBinding": Resource(
        "admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings", False
    ),
    "ConfigMap": Resource("v1", "configmaps", True),
    "Lease": Resource("coordination.k8s.io/v1", "leases", True),
    "ClusterRole": Resource("rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": Resource("rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "RoleBinding": Resource("rbac.authorization.k8s.io/v1", "rolebindings", True),
    "PriorityClass": Resource("scheduling.k8s.io/v1", "priorityclasses", False),
}


def api_group(kind: str) -> str:
    """The API group of a kind ("" for the core group): `Job` -> "batch"."""
    v = RESOURCES[kind].api_version
    return v.split("/", 1)[0] if "/" in v else ""


def type_name(kind: str, name: str) -> str:
    """kubectl's TYPE/NAME of an object, as `-o name` prints it and kubectl reads it back: `job.batch/x`,
    `leaderworkerset.leaderworkerset.x-k8s.io/y`, `service/z`."""
    group = api_group(kind)
    return f"{kind.lower()}.{group}/{name}" if group else f"{kind.lower()}/{name}"


def path(
    kind: str, name: str | None = None, namespace: str | None = None, subresource: str | None = None
) -> str:
    """`/api/v1/namespaces/ns/pods/name`; namespace None on a namespaced kind means all namespaces."""
    r = RESOURCES[kind]
    base = "/api/v1" if r.api_version == "v1" else f"/apis/{r.api_version}"
    if r.namespaced and namespace:
        base += f"/namespaces/{namespace}"
    p = f"{base}/{r.plural}"
    if name:
        p += f"/{name}"
        if subresource:
            p += f"/{subresource}"
    return p


def object_path(obj: dict) -> str:
    meta = obj.get("metadata", {})
    return path(obj["kind"], meta.get("name"), meta.get("namespace"))
