"""What a caller may read, decided in one place, and a refused request turned into the role to bind.

Team members hold two roles (manifests/api/rbac.yaml, docs/api.md "Roles"): `gpuctl-user` by a
RoleBinding in their team namespace and `gpuctl-pool-viewer` by a ClusterRoleBinding. Neither lets
them list every pod or every Workload of the cluster (other teams' pod specs and env are not theirs),
so a view that would read those asks first, here, and reads what the caller may instead:

- `Permissions.allows(verb, resource, group, namespace)`: may the caller do this? The CLI asks the
  API server about its own credential (`SelfReview`: a SelfSubjectAccessReview, cached per process);
  the REST API asks about its caller (gpuctl.server.api.deps.CallerPermissions: a SubjectAccessReview),
  so the same service code gives the same caller the same answer through both.
- `permissions_of(source)`: the permissions a service function uses when its caller passed none.
- `GRANTS`: what each shipped caller role grants (tests/unit/test_access.py checks it against the
  manifest), `role_for` the least role that allows a request, and `forbidden_message` the one line a
  refused request becomes: what was refused and which role to bind, never a raw "forbidden".
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Iterable
from typing import Any, NamedTuple, Protocol, runtime_checkable

from gpuctl.cluster.client import ApiError
from gpuctl.cluster.reader import ClusterReader
from gpuctl.constants import KUEUE_GROUP, LWS_GROUP, ROLE_ADMIN, ROLE_POOL_VIEWER, ROLE_USER, VISIBILITY_GROUP

SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
READ = ("get", "list", "watch")
WRITE = ("create", "patch", "update", "delete")
CLUSTER_BINDING = "ClusterRoleBinding"
NAMESPACE_BINDING = "RoleBinding"
REVIEW_THREADS = 4


@runtime_checkable
class Permissions(Protocol):
    def allows(self, verb: str, resource: str, group: str = "", namespace: str | None = None) -> bool:
        """Whether the caller may `verb` `resource` (may be "pods/log") of `group` in `namespace`
        (None: cluster-scoped, or in every namespace for a namespaced resource)."""
        ...


class Everything:
    """A caller allowed every read: the process's own identity where it is trusted (metrics, the
    reconciler, a watch cache)."""

    def allows(self, verb: str, resource: str, group: str = "", namespace: str | None = None) -> bool:
        return True


EVERYTHING = Everything()


def attributes(verb: str, resource: str, group: str, namespace: str | None) -> dict[str, str]:
    """resourceAttributes of an access review ("pods/log" splits into resource and subresource)."""
    res, _, sub = resource.partition("/")
    attrs = {"verb": verb, "resource": res, "group": group}
    if sub:
        attrs["subresource"] = sub
    if namespace:
        attrs["namespace"] = namespace
    return attrs


class SelfReview:
    """The CLI's own credential, asked with SelfSubjectAccessReviews (every authenticated user may
    send them: system:basic-user), each question once per process."""

    def __init__(self, cluster: Any):
        self.cluster = cluster
        self._answers: dict[tuple[str, str, str, str | None], bool] = {}
        self._lock = threading.Lock()

    def allows(self, verb: str, resource: str, group: str = "", namespace: str | None = None) -> bool:
        key = (verb, resource, group, namespace)
        with self._lock:
            if key in self._answers:
                return self._answers[key]
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes(verb, resource, group, namespace)},
        }
        try:
            status = self.cluster.request("POST", SSAR_PATH, body=body).get("status") or {}
            ok = bool(status.get("allowed")) and not status.get("denied")
        except ApiError:
            ok = True  # no answer: read, and let the API server's own answer decide
        with self._lock:
            self._answers[key] = ok
        return ok


_reviews: weakref.WeakKeyDictionary[Any, SelfReview] = weakref.WeakKeyDictionary()
_reviews_lock = threading.Lock()


def permissions_of(source: Any, perms: Permissions | None = None) -> Permissions:
    """`perms` if given; else the credential behind `source` (a Cluster, or a ClusterReader over one)
    asked about itself; anything else (a watch cache) reads as the process's trusted identity."""
    if perms is not None:
        return perms
    cluster = source.cluster if isinstance(source, ClusterReader) else source
    if not hasattr(cluster, "request"):
        return EVERYTHING
    with _reviews_lock:
        try:
            review = _reviews.get(cluster)
        except TypeError:  # not weakly referenceable (a test double): ask each time
            return SelfReview(cluster)
        if review is None:
            review = _reviews[cluster] = SelfReview(cluster)
        return review


def readable_namespaces(
    perms: Permissions, verb: str, resource: str, group: str, candidates: Iterable[str]
) -> list[str] | None:
    """None when the caller may `verb` `resource` in every namespace; else the `candidates` where it
    may (asked concurrently: a cold cache with many teams would otherwise cost one round trip each)."""
    if perms.allows(verb, resource, group, None):
        return None
    spaces = sorted(set(candidates))
    if not spaces:
        return []
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 - lazy: CLI start-up

    with ThreadPoolExecutor(min(len(spaces), REVIEW_THREADS)) as pool:
        ok = list(pool.map(lambda ns: perms.allows(verb, resource, group, ns), spaces))
    return [ns for ns, yes in zip(spaces, ok, strict=True) if yes]


# ----------------------------------------------------------------------------- the shipped roles
class Grant(NamedTuple):
    """One rule of a shipped caller role (manifests/api/rbac.yaml). (A NamedTuple: a dataclass compiles
    its methods when the module loads, and every read loads this one.)"""

    role: str
    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]

    @property
    def binding(self) -> str:
        return NAMESPACE_BINDING if self.role == ROLE_USER else CLUSTER_BINDING


# Kueue's cluster-scoped objects: what pools, quotas and priorities are (capacity, not workloads).
CLUSTER_KUEUE = ("resourceflavors", "clusterqueues", "cohorts", "topologies", "workloadpriorityclasses")

# What team members may do, least privilege: every read a verb makes for a team member is here (docs/api.md
# "Roles" lists which verb reads what). gpuctl-admin may do everything gpuctl does.
GRANTS: tuple[Grant, ...] = (
    Grant(ROLE_USER, "batch", ("jobs",), READ + WRITE),
    Grant(ROLE_USER, "apps", ("deployments", "statefulsets"), READ + WRITE),
    Grant(ROLE_USER, LWS_GROUP, ("leaderworkersets",), READ + WRITE),
    # An autoscaled service's HPA, and its status once at creation (docs/serving.md).
    Grant(ROLE_USER, "autoscaling", ("horizontalpodautoscalers",), READ + WRITE),
    Grant(ROLE_USER, "autoscaling", ("horizontalpodautoscalers/status",), ("patch",)),
    Grant(ROLE_USER, "", ("services",), READ + WRITE),
    Grant(ROLE_USER, "", ("pods",), (*READ, "delete")),
    Grant(ROLE_USER, "", ("pods/log",), ("get",)),
    # `describe job`: the Events about the job, its pods and its Workloads.
    Grant(ROLE_USER, "", ("events",), READ),
    # `gpuctl exec`, `attach`, `port-forward` (and kubectl's): WebSocket upgrades are a GET that the API
    # server also authorizes as create (docs/cli.md, "Into a running job").
    Grant(ROLE_USER, "", ("pods/exec", "pods/attach", "pods/portforward"), ("create", "get")),
    # Through a RoleBinding, `get namespaces` covers the binding's own namespace only.
    Grant(ROLE_USER, "", ("namespaces",), ("get",)),
    Grant(ROLE_USER, KUEUE_GROUP, ("localqueues", "workloads"), READ),
    # `stop`/`resume`: spec.active of its Workloads (the admission policy gpuctl-workload-edit keeps a
    # team member's patch to that one field).
    Grant(ROLE_USER, KUEUE_GROUP, ("workloads",), ("patch",)),
    # Kueue's visibility API for the team's own LocalQueue: queue positions (`get jobs -o wide`).
    Grant(ROLE_USER, VISIBILITY_GROUP, ("localqueues/pendingworkloads",), ("get",)),
    # `gpuctl history`: the team's audit trail, the ConfigMap gpuctl-history only (resourceNames).
    Grant(ROLE_USER, "", ("configmaps",), ("get",)),
    Grant(ROLE_POOL_VIEWER, KUEUE_GROUP, CLUSTER_KUEUE, READ),
    Grant(ROLE_POOL_VIEWER, "", ("nodes",), READ),
)

# Names users know the Kueue objects by.
_FRIENDLY = {"resourceflavors": "pools", "clusterqueues": "quotas", "localqueues": "queues"}
_ACTIONS = {
    "get": "reading",
    "list": "listing",
    "watch": "watching",
    "create": "creating",
    "patch": "changing",
    "update": "changing",
    "delete": "deleting",
}


def role_for(verb: str, resource: str, group: str, namespace: str | None) -> tuple[str, str]:
    """(role, binding) of the least shipped role allowing the request. A namespaced resource in every
    namespace (namespace None) is no team member's: gpuctl-admin."""
    for g in GRANTS:
        if g.group != group or resource not in g.resources or verb not in g.verbs:
            continue
        if g.binding == NAMESPACE_BINDING and namespace is None:
            continue
        return g.role, g.binding
    return ROLE_ADMIN, CLUSTER_BINDING


_CLUSTER_SCOPED = {"nodes", "namespaces", *CLUSTER_KUEUE}


def forbidden_message(
    verb: str,
    resource: str,
    group: str,
    namespace: str | None,
    *,
    user: str = "",
    readable: str | None = None,
) -> str:
    """One line for a refused request: what, the role to bind, and, for a read of every namespace,
    the namespace the caller may read instead (readable). E.g. "listing jobs.batch in every namespace
    needs gpuctl-admin (bind it with a ClusterRoleBinding); you may read team-a: pass -n team-a"."""
    role, binding = role_for(verb, resource, group, namespace)
    what = resource + (f".{group}" if group else "")
    if resource in _FRIENDLY:
        what += f" ({_FRIENDLY[resource]})"
    if namespace:
        where = f" in namespace {namespace}"
    elif resource in _CLUSTER_SCOPED:
        where = ""
    else:
        where = " in every namespace"
    whom = f" ({user} has no such role)" if user else ""
    where_bound = f" in {namespace}" if binding == NAMESPACE_BINDING and namespace else ""
    msg = (
        f"{_ACTIONS.get(verb, verb)} {what}{where} needs {role}{where_bound} (bind it with a {binding}){whom}"
    )
    if readable and where == " in every namespace":
        msg += f"; you may read {readable}: pass -n {readable}"
    elif where == " in every namespace":
        msg += (
            "; a team member reads its team's namespace: pass -n NAMESPACE, or set it in the context "
            "(kubectl config set-context --current --namespace=NAMESPACE)"
        )
    return msg


_REFUSED = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) resource "(?P<resource>[^"]+)" in API group '
    r'"(?P<group>[^"]*)"(?: in the namespace "(?P<ns>[^"]+)")?'
)


def refused(e: BaseException) -> dict[str, str | None] | None:
    """The request a 403 of the API server refused (verb, resource, group, namespace, user), read from
    its message ('... User "u" cannot list resource "jobs" in API group "batch" at the cluster scope');
    None for anything else."""
    if not isinstance(e, ApiError) or e.status != 403:
        return None
    m = _REFUSED.search(e.message or "")
    if not m:
        return None
    return {
        "verb": m["verb"],
        "resource": m["resource"],
        "group": m["group"],
        "namespace": m["ns"],
        "user": m["user"],
    }


def describe_forbidden(e: BaseException, readable: str | None = None) -> str | None:
    """forbidden_message for a 403 ApiError (None if `e` is not one gpuctl can read)."""
    r = refused(e)
    if r is None:
        return None
    return forbidden_message(
        str(r["verb"]),
        str(r["resource"]),
        str(r["group"]),
        r["namespace"],
        user=str(r["user"] or ""),
        readable=readable,
    )


__all__ = [
    "EVERYTHING",
    "GRANTS",
    "Grant",
    "Permissions",
    "SelfReview",
    "describe_forbidden",
    "forbidden_message",
    "permissions_of",
    "readable_namespaces",
    "refused",
    "role_for",
]
