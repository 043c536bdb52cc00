"""The Kubernetes permission each API operation needs, in one table.

Why these: an API request is allowed when the caller could do the same thing with kubectl. Jobs are
Kubernetes Jobs, Deployments and StatefulSets (plus a Service), so creating one needs `create` on
exactly the objects gpuctl would create, in the namespace they go to; reading gpuctl's jobs needs
`list`/`get` on `jobs.batch` there. Pools are Kueue ResourceFlavors plus node labels, quotas are
ClusterQueues: cluster-scoped objects only cluster admins get (a RoleBinding in a team namespace
cannot grant them), so only admins change pools and quotas.
"""

from __future__ import annotations

from gpuctl.cluster.paths import RESOURCES, api_group
from gpuctl.constants import KUEUE_GROUP
from gpuctl.server.api.auth import Access


def group_of(kind: str) -> tuple[str, str]:
    """(API group, plural) of a kind gpuctl knows (`Job` -> ("batch", "jobs"))."""
    return api_group(kind), RESOURCES[kind].plural


def on_object(verb: str, obj: dict) -> Access:
    """`verb` on a Kubernetes object gpuctl would send (its kind, namespace; no name for create)."""
    group, plural = group_of(obj["kind"])
    meta = obj.get("metadata") or {}
    return Access(verb, plural, group, meta.get("namespace"), None if verb == "create" else meta.get("name"))


def on_kind(verb: str, kind: str, namespace: str | None, name: str | None = None) -> Access:
    group, plural = group_of(kind)
    return Access(verb, plural, group, namespace, name)


def jobs(verb: str, namespace: str | None, name: str | None = None) -> Access:
    """gpuctl jobs are read as `jobs.batch` (the training kind; the one a team role always has)."""
    return Access(verb, "jobs", "batch", namespace, name)


def pod_logs(namespace: str, pod: str | None = None) -> Access:
    return Access("get", "pods", "", namespace, pod, "log")


def pools(verb: str, name: str | None = None) -> Access:
    return Access(verb, "resourceflavors", KUEUE_GROUP, None, name)


def nodes(verb: str, name: str | None = None) -> Access:
    return Access(verb, "nodes", "", None, name)


def quotas(verb: str, name: str | None = None) -> Access:
    """A team's quota is its ClusterQueue, named after the team namespace."""
    return Access(verb, "clusterqueues", KUEUE_GROUP, None, name)


def team_queue(verb: str, namespace: str) -> Access:
    """The team's own view of its quota: the LocalQueue in its namespace."""
    return Access(verb, "localqueues", KUEUE_GROUP, namespace)


def namespaces(verb: str, name: str | None = None) -> Access:
    """On a Namespace object the API server's request namespace is the name itself, so a RoleBinding
    in team-a may grant `get namespaces` for team-a; the review says the same."""
    return Access(verb, "namespaces", "", name, name)
