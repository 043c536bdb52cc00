"""gpuctl.service.access: the shipped caller roles, the role a refused request needs, asking once."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuctl.cluster import ApiError
from gpuctl.constants import ROLE_ADMIN, ROLE_POOL_VIEWER, ROLE_USER
from gpuctl.service import access
from gpuctl.service.errors import describe_exception

RBAC = Path(__file__).resolve().parents[2] / "manifests" / "api" / "rbac.yaml"


def _rules(role: str) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of a ClusterRole of the manifest."""
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    (doc,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == role]
    return {
        (g, r, v)
        for rule in doc["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


@pytest.mark.parametrize("role", [ROLE_USER, ROLE_POOL_VIEWER])
def test_grants_are_the_manifests_team_roles(role: str) -> None:
    """The table the CLI names roles from is the manifest the admin installs, rule for rule."""
    table = {(g.group, r, v) for g in access.GRANTS if g.role == role for r in g.resources for v in g.verbs}
    assert table == _rules(role)


def test_admin_may_do_everything_a_team_member_may() -> None:
    member = _rules(ROLE_USER) | _rules(ROLE_POOL_VIEWER)
    assert member <= _rules(ROLE_ADMIN)


def test_team_roles_never_read_every_pod_or_workload() -> None:
    """Team members read pods and Workloads only through the RoleBinding in their namespace."""
    viewer = _rules(ROLE_POOL_VIEWER)
    assert not {r for _, r, _ in viewer} & {"pods", "workloads", "pods/log", "jobs", "secrets"}


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (("list", "jobs", "batch", None), (ROLE_ADMIN, "ClusterRoleBinding")),
        (("list", "jobs", "batch", "team-a"), (ROLE_USER, "RoleBinding")),
        (("get", "pods/log", "", "team-b"), (ROLE_USER, "RoleBinding")),
        (("list", "clusterqueues", "kueue.x-k8s.io", None), (ROLE_POOL_VIEWER, "ClusterRoleBinding")),
        (("patch", "resourceflavors", "kueue.x-k8s.io", None), (ROLE_ADMIN, "ClusterRoleBinding")),
        (("patch", "nodes", "", None), (ROLE_ADMIN, "ClusterRoleBinding")),
        (("list", "pods", "", None), (ROLE_ADMIN, "ClusterRoleBinding")),
        (("get", "namespaces", "", "team-a"), (ROLE_USER, "RoleBinding")),
        (("patch", "namespaces", "", "team-a"), (ROLE_ADMIN, "ClusterRoleBinding")),
    ],
)
def test_role_for(request_: tuple, expected: tuple) -> None:
    assert access.role_for(*request_) == expected


def _forbidden(
    verb: str, resource: str, group: str, ns: str | None, user: str = "system:serviceaccount:ta:m"
):
    where = f'in the namespace "{ns}"' if ns else "at the cluster scope"
    msg = (
        f'{resource} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        f'in API group "{group}" {where}'
    )
    return ApiError(403, "Forbidden", msg, {"kind": "Status", "message": msg, "reason": "Forbidden"})


def test_a_refused_list_of_every_namespace_names_the_role_and_the_namespace_to_read() -> None:
    e = _forbidden("list", "jobs", "batch", None)
    assert access.refused(e) == {
        "verb": "list",
        "resource": "jobs",
        "group": "batch",
        "namespace": None,
        "user": "system:serviceaccount:ta:m",
    }
    assert describe_exception(e, "ta") == (
        "listing jobs.batch in every namespace needs gpuctl-admin (bind it with a ClusterRoleBinding) "
        "(system:serviceaccount:ta:m has no such role); you may read ta: pass -n ta"
    )
    assert "forbidden" not in describe_exception(e)


def test_refused_messages_by_kind_of_request() -> None:
    assert describe_exception(_forbidden("patch", "resourceflavors", "kueue.x-k8s.io", None)).startswith(
        "changing resourceflavors.kueue.x-k8s.io (pools) needs gpuctl-admin (bind it with a "
        "ClusterRoleBinding)"
    )
    assert describe_exception(_forbidden("get", "pods/log", "", "tb"), "ta").startswith(
        "reading pods/log in namespace tb needs gpuctl-user in tb (bind it with a RoleBinding)"
    )
    assert describe_exception(_forbidden("list", "nodes", "", None)).startswith(
        "listing nodes needs gpuctl-pool-viewer (bind it with a ClusterRoleBinding)"
    )
    # Other errors keep the API server's own message.
    other = ApiError(404, "Not Found", 'jobs.batch "x" not found', {"message": 'jobs.batch "x" not found'})
    assert describe_exception(other) == 'jobs.batch "x" not found'


class FakeCluster:
    def __init__(self, allowed: dict[tuple, bool] | None = None, error: int | None = None):
        self.allowed, self.error, self.asked = allowed or {}, error, []

    def request(self, method: str, path: str, *, body: dict, **_) -> dict:
        assert (method, path) == ("POST", access.SSAR_PATH)
        attrs = body["spec"]["resourceAttributes"]
        self.asked.append(attrs)
        if self.error:
            raise ApiError(self.error, "x", "no")
        key = (attrs["verb"], attrs["resource"], attrs.get("namespace"))
        return {"status": {"allowed": self.allowed.get(key, False)}}


def test_self_review_asks_each_question_once() -> None:
    c = FakeCluster({("list", "workloads", "ta"): True})
    review = access.permissions_of(c)
    assert access.permissions_of(c) is review
    assert review.allows("list", "pods") is False
    assert review.allows("list", "pods") is False
    assert access.readable_namespaces(review, "list", "workloads", "kueue.x-k8s.io", ["tb", "ta"]) == ["ta"]
    assert review.allows("get", "pods/log", "", "ta") is False
    assert c.asked[-1] == {
        "verb": "get",
        "resource": "pods",
        "subresource": "log",
        "group": "",
        "namespace": "ta",
    }
    assert len(c.asked) == 5  # pods, workloads (every namespace, tb, ta), pods/log


def test_self_review_without_an_answer_lets_the_read_decide() -> None:
    assert access.SelfReview(FakeCluster(error=404)).allows("list", "pods") is True


def test_a_watch_cache_reads_as_the_process_itself() -> None:
    class Cache:
        def list(self, *a, **k):
            return []

        def get(self, *a, **k):
            return None

    assert access.permissions_of(Cache()) is access.EVERYTHING
