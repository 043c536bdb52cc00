"""The REST API without a cluster: authentication first, errors as JSON, permission reviews per request."""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketDenialResponse

from gpuctl.server.api import create_app, mount
from gpuctl.server.api.auth import SAR_PATH, TOKEN_REVIEW_PATH, Authenticator
from gpuctl.server.main import ServerContext
from gpuctl.server.main import create_app as create_serve_app
from gpuctl.spec import SpecConfig

USER = {"username": "alice", "uid": "1", "groups": ["team-a"]}


class FakeKube:
    """TokenReview knows one token; SubjectAccessReview allows what `grants` lists. Anything else the
    service layer would ask raises `other` (nothing in these tests may reach the cluster)."""

    def __init__(self) -> None:
        self.reviews: list[dict] = []
        self.grants: list[dict] = []
        self.other: Exception = AssertionError("no cluster call expected")

    def request(self, method: str, path: str, *, body: dict | None = None, **_: object) -> dict:
        if path == TOKEN_REVIEW_PATH:
            ok = body["spec"]["token"] == "good"
            return {"status": {"authenticated": ok, **({"user": USER} if ok else {})}}
        if path == SAR_PATH:
            attrs = body["spec"]["resourceAttributes"]
            self.reviews.append(attrs)
            return {
                "status": {"allowed": any(all(attrs.get(k) == v for k, v in g.items()) for g in self.grants)}
            }
        raise self.other

    def get(self, *a, **k):
        raise self.other

    def get_or_none(self, *a, **k):
        raise self.other

    def list(self, *a, **k):
        raise self.other


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
def client(kube) -> TestClient:
    app = create_app(lambda: kube, Authenticator(lambda: kube), spec_config=SpecConfig())
    return TestClient(app, raise_server_exceptions=False)


GOOD = {"Authorization": "Bearer good"}
TRAINING = (
    "kind: training\njob: {name: t1, namespace: team-b}\nenvironment: {image: busybox}\n"
    "resources: {pool: p, gpu: 1, cpu: 1, memory: 1Gi}\n"
)


def _operations(client: TestClient) -> list[tuple[str, str]]:
    spec = client.get("/openapi.json").json()
    out = []
    for p, ops in spec["paths"].items():
        concrete = (
            p.replace("{jobId}", "j1")
            .replace("{poolName}", "p1")
            .replace("{nodeName}", "n1")
            .replace("{namespaceName}", "team-a")
            .replace("{key}", "pool")
        )
        out += [(m.upper(), concrete) for m in ops]
    return out


def test_health_docs_and_openapi_need_no_token(client):
    assert client.get("/health").json()["status"] == "healthy"
    assert client.get("/").json()["message"] == "GPU Control API"
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for p, ops in spec["paths"].items():
        for op in ops.values():
            assert ("security" in op) == p.startswith("/api/"), p


def test_every_api_operation_answers_401_without_a_valid_token(client, kube):
    ops = [(m, p) for m, p in _operations(client) if p.startswith("/api/")]
    assert len(ops) >= 30
    for method, p in ops:
        for headers in ({}, {"Authorization": "Bearer bad"}, {"Authorization": "Basic Zm9vOmJhcg=="}):
            # A broken body must not get past authentication either.
            r = client.request(
                method, p, headers={**headers, "content-type": "application/json"}, content=b"{"
            )
            assert r.status_code == 401, (method, p, r.text)
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert "error" in r.json()
    assert kube.reviews == []


def test_validation_errors_are_422_with_a_message(client):
    r = client.get("/api/v1/jobs?pageSize=1000&namespace=Bad_NS", headers=GOOD)
    assert r.status_code == 422
    body = r.json()
    assert body["error"].startswith("invalid request: ") and "pageSize" in body["error"]
    assert {tuple(d["loc"]) for d in body["detail"]} == {("query", "pageSize"), ("query", "namespace")}
    r = client.post("/api/v1/jobs", headers=GOOD, content=b"{not json")
    assert r.status_code == 422 and "error" in r.json()


def test_bad_yaml_is_400_with_every_issue_before_any_permission_review(client, kube):
    r = client.post(
        "/api/v1/jobs",
        headers=GOOD,
        json={"yamlContent": "kind: training\njob: {name: Bad_Name}\nresources: {cpu: 1, memory: lots}\n"},
    )
    assert r.status_code == 400
    body = r.json()
    assert "resources.memory" in body["error"] and "environment" in body["error"]
    assert len(body["issues"]) >= 3
    assert kube.reviews == []


def test_jobs_route_takes_only_job_kinds(client):
    r = client.post(
        "/api/v1/jobs", headers=GOOD, json={"yamlContent": "kind: pool\npool: {name: p}\nnodes: {n1: {}}\n"}
    )
    assert r.status_code == 400 and "/api/v1/pools" in r.json()["error"]


def test_the_yaml_namespace_decides_which_permission_is_reviewed(client, kube):
    kube.grants = [{"verb": "create", "namespace": "team-a"}]
    r = client.post("/api/v1/jobs", headers=GOOD, json={"yamlContent": TRAINING, "namespace": "team-a"})
    assert r.status_code == 403
    assert r.json()["error"] == (
        "forbidden: alice may not create jobs.batch in namespace team-b (Kubernetes RBAC): creating "
        "jobs.batch in namespace team-b needs gpuctl-user in team-b (bind it with a RoleBinding)"
    )
    assert kube.reviews == [{"verb": "create", "resource": "jobs", "group": "batch", "namespace": "team-b"}]


def test_client_dry_run_returns_the_objects_without_touching_the_cluster(client, kube):
    kube.grants = [{"verb": "create", "namespace": "team-b"}]
    r = client.post("/api/v1/jobs", headers=GOOD, json={"yamlContent": TRAINING, "dryRun": "client"})
    assert r.status_code == 200, r.text
    assert [o["kind"] for o in r.json()["objects"]] == ["Job"]


def test_yaml_alias_bombs_are_refused_quickly(client):
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    lines += ["kind: training", "job: {name: x}", "environment: {image: x, command: *a8}"]
    t0 = time.monotonic()
    r = client.post("/api/v1/jobs", headers=GOOD, json={"yamlContent": "\n".join(lines)})
    assert r.status_code == 400 and "aliases" in r.json()["error"]
    assert time.monotonic() - t0 < 2


def test_admin_routes_are_refused_without_cluster_rights(client, kube):
    cases = [
        (
            "POST",
            "/api/v1/pools",
            {"name": "p1", "nodes": ["n1"]},
            "create resourceflavors.kueue.x-k8s.io p1",
        ),
        ("DELETE", "/api/v1/pools/p1", None, "delete resourceflavors.kueue.x-k8s.io p1"),
        ("POST", "/api/v1/nodes/n1/labels", {"key": "a", "value": "b"}, "patch nodes n1"),
        ("DELETE", "/api/v1/quotas/team-a", None, "delete clusterqueues.kueue.x-k8s.io team-a"),
        ("DELETE", "/api/v1/namespaces/team-a", None, "delete namespaces team-a in namespace team-a"),
        ("GET", "/api/v1/nodes", None, "list nodes cluster-wide"),
    ]
    for method, p, body, what in cases:
        r = client.request(method, p, headers=GOOD, json=body)
        assert r.status_code == 403, (p, r.text)
        assert what in r.json()["error"], r.json()
        role = "gpuctl-pool-viewer" if p == "/api/v1/nodes" else "gpuctl-admin"
        assert f"needs {role} (bind it with a ClusterRoleBinding)" in r.json()["error"], r.json()


def test_unmapped_errors_are_500_without_internals_and_unreachable_is_503(kube):
    app = create_app(lambda: kube, Authenticator(lambda: kube), spec_config=SpecConfig())

    @app.get("/api/v1/boom")
    async def boom() -> dict:
        raise KeyError("secret internals")

    @app.get("/api/v1/down")
    async def down() -> dict:
        raise ConnectionRefusedError("refused")

    client = TestClient(app, raise_server_exceptions=False)
    r = client.get("/api/v1/boom", headers=GOOD)
    assert r.status_code == 500
    assert r.json()["error"].startswith("internal error (reference ")
    assert "secret" not in r.text and "Traceback" not in r.text
    r = client.get("/api/v1/down", headers=GOOD)
    assert r.status_code == 503 and "cannot reach" in r.json()["error"]


def test_cluster_unreachable_during_a_route_is_503(client, kube):
    import urllib3

    kube.grants = [{"verb": "list"}]
    kube.other = urllib3.exceptions.MaxRetryError(None, "/api/v1/pods", "refused")
    r = client.get("/api/v1/jobs", headers=GOOD)
    assert r.status_code == 503, r.text


def test_websocket_refuses_before_the_handshake(client):
    for headers, status in (({}, 401), ({"Authorization": "Bearer bad"}, 401)):
        with (
            pytest.raises(WebSocketDenialResponse) as e,
            client.websocket_connect("/api/v1/jobs/j1/logs/ws", headers=headers),
        ):
            pass
        assert e.value.status_code == status
    with (
        pytest.raises(WebSocketDenialResponse) as e,
        client.websocket_connect("/api/v1/jobs/Bad_Name/logs/ws", headers=GOOD),
    ):
        pass
    assert e.value.status_code == 422
    # A pod and a rank: the same 400 as GET .../logs (one rule, in _log_target), not a 502.
    with (
        pytest.raises(WebSocketDenialResponse) as e,
        client.websocket_connect("/api/v1/jobs/j1/logs/ws?pod=j1-0-x&rank=1", headers=GOOD),
    ):
        pass
    assert e.value.status_code == 400
    assert "only one of pod or rank" in e.value.json()["error"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("rank=abc", "query.rank"),
        ("rank=-1", "query.rank"),
        ("rank=100001", "query.rank"),
        ("tail=abc", "query.tail"),
        ("tail=-2", "query.tail"),
        ("tail=99999999999999999999", "query.tail"),
        ("tail=1000001", "query.tail"),
        ("timestamps=maybe", "query.timestamps"),
        ("pod=Bad_Pod", "query.pod"),
        ("namespace=Bad_NS", "query.namespace"),
    ],
)
def test_log_parameters_are_judged_alike_over_http_and_the_websocket(client, query, field):
    """Issue 43: the WebSocket answered `rank=abc` with an empty 403 and passed any tail on to the API
    server (a huge one its 400); both routes now answer the same 422 naming the field, before any
    cluster call."""
    r = client.get(f"/api/v1/jobs/j1/logs?{query}", headers=GOOD)
    assert r.status_code == 422, r.text
    with (
        pytest.raises(WebSocketDenialResponse) as e,
        client.websocket_connect(f"/api/v1/jobs/j1/logs/ws?{query}", headers=GOOD),
    ):
        pass
    assert e.value.status_code == 422
    ws = e.value.json()
    assert field in ws["error"] and ws["error"] == r.json()["error"]
    assert ws["detail"] == r.json()["detail"]


def test_mounted_into_gpuctl_serve(kube):
    ctx = ServerContext(cluster=kube, cache=SimpleNamespace(informers={}), options=argparse.Namespace())
    client = TestClient(create_serve_app(ctx, [mount]))
    assert client.get("/healthz").json() == {"ok": True}  # serve's own routes keep priority
    assert client.get("/readyz").status_code == 200
    assert client.get("/api/v1/whoami").status_code == 401
    assert client.get("/api/v1/whoami", headers=GOOD).json()["username"] == "alice"
    assert "/api/v1/jobs" in client.get("/openapi.json").json()["paths"]


def test_oversized_bodies_are_refused_before_they_are_read(client):
    big = b'{"yamlContent": "' + b"x" * (9 * 1024 * 1024) + b'"}'
    r = client.post("/api/v1/jobs", headers={**GOOD, "content-type": "application/json"}, content=big)
    assert r.status_code == 413 and "request body over" in r.json()["error"]

    def chunks():
        for _ in range(10):
            yield b"x" * (1024 * 1024)

    r = client.post("/api/v1/jobs", headers={**GOOD, "content-type": "application/json"}, content=chunks())
    assert r.status_code == 413 and "request body over" in r.json()["error"]
    # Anonymous callers still get 401 first.
    assert client.post("/api/v1/jobs", content=big).status_code == 401


@pytest.mark.parametrize("text", ["---\n", "# nothing\n", "\n\n", "---\n---\n"])
def test_yaml_without_documents_is_400(client, text):
    r = client.post("/api/v1/jobs", headers=GOOD, json={"yamlContent": text})
    assert r.status_code == 400 and "no YAML document" in r.json()["error"]
    r = client.post("/api/v1/jobs/batch", headers=GOOD, json={"yamlContents": [text]})
    assert r.status_code == 400 and r.json()["failed"][0]["status"] == 400
    r = client.post("/api/v1/quotas", headers=GOOD, json={"yamlContent": text})
    assert r.status_code == 400


def test_a_quota_needs_the_right_to_create_or_label_its_namespace(kube):
    # No cache: the grants change between the requests.
    app = create_app(lambda: kube, Authenticator(lambda: kube, ttl=0), spec_config=SpecConfig())
    client = TestClient(app, raise_server_exceptions=False)
    kube.grants = [{"resource": "clusterqueues"}]
    existing = {"/api/v1/namespaces/team-a"}
    kube.get_or_none = lambda p, **_: {"metadata": {}} if p in existing else None
    text = "kind: quota\nquota: {name: q}\nnamespace: {team-a: {gpu: 1}, team-new: {gpu: 1}}\n"
    r = client.post("/api/v1/quotas", headers=GOOD, json={"yamlContent": text})
    assert r.status_code == 403
    assert "may not patch namespaces team-a in namespace team-a" in r.json()["error"]
    kube.grants.append({"resource": "namespaces", "verb": "patch", "namespace": "team-a"})
    r = client.post("/api/v1/quotas", headers=GOOD, json={"yamlContent": text})
    assert r.status_code == 403 and "may not create namespaces cluster-wide" in r.json()["error"]


def test_history_is_read_only_by_who_may_get_the_teams_configmap(client, kube):
    r = client.get("/api/v1/history/team-a", headers=GOOD)
    assert r.status_code == 403, r.text
    assert "needs gpuctl-user in team-a" in r.json()["error"]
    assert kube.reviews[-1] == {
        "verb": "get",
        "resource": "configmaps",
        "group": "",
        "namespace": "team-a",
        "name": "gpuctl-history",
    }
    assert client.get("/api/v1/history/team-a?job=Not_A_Name", headers=GOOD).status_code in (400, 422)


class CountingPrometheus:
    """Stands in for Prometheus' HTTP API: records every query, answers none (nothing may be asked here)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def query(self, expr: str, at: float) -> dict:
        self.asked.append(expr)
        return {"resultType": "vector", "result": []}

    def query_range(self, expr: str, start: float, end: float, step: int) -> dict:
        self.asked.append(expr)
        return {"resultType": "matrix", "result": []}


def test_gpu_use_is_read_for_the_namespaces_the_caller_may_list_only(kube):
    """GET /api/v1/usage (issue 40): another team's namespace is refused before Prometheus is asked; without
    a configured Prometheus the route says so (503)."""
    prom = CountingPrometheus()
    app = create_app(lambda: kube, Authenticator(lambda: kube), spec_config=SpecConfig(), prometheus=prom)
    c = TestClient(app, raise_server_exceptions=False)
    kube.grants = [{"verb": "list", "resource": "jobs", "namespace": "team-a"}]
    r = c.get("/api/v1/usage?namespace=team-b", headers=GOOD)
    assert r.status_code == 403 and prom.asked == []
    assert "team-b" in r.json()["error"]
    r = c.get("/api/v1/usage?namespace=team-a&window=soon", headers=GOOD)
    assert r.status_code == 400 and "window" in r.json()["error"]
    bare = TestClient(
        create_app(lambda: kube, Authenticator(lambda: kube), spec_config=SpecConfig()),
        raise_server_exceptions=False,
    )
    r = bare.get("/api/v1/usage?namespace=team-a", headers=GOOD)
    assert r.status_code == 503 and "--prometheus-url" in r.json()["error"]
