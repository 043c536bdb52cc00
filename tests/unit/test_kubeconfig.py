"""gpuctl's own kubeconfig loader (gpuctl.cluster.config): kubectl's merge rules, relative paths, every
credential form, against a real TLS server on loopback that checks client certificates and bearer
tokens (the API server's own authentication is exercised by tests/integration/test_transport.py)."""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuctl.cluster import Cluster
from gpuctl.cluster.client import MAX_RETRIES, VISIBILITY_VERSIONS, ApiError, retry_after
from gpuctl.cluster.config import (
    ConfigError,
    default_namespace,
    from_service_account,
    load,
    namespace_scope,
    read_kubeconfig,
)
from gpuctl.cluster.credentials import TokenFileAuth


def _write(path: Path, doc: dict) -> str:
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _config(server: str, *, user: dict | None = None, cluster: dict | None = None, ns: str = "") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [
            {"name": "c", "context": {"cluster": "k", "user": "u", **({"namespace": ns} if ns else {})}}
        ],
    }


# ----------------------------------------------------------------------------- merging
def test_kubeconfig_files_merge_like_kubectl(tmp_path, monkeypatch) -> None:
    a = _write(
        tmp_path / "a",
        {
            "current-context": "first",
            "clusters": [{"name": "k", "cluster": {"server": "https://a:1"}}],
            "contexts": [{"name": "first", "context": {"cluster": "k", "namespace": "team-a"}}],
        },
    )
    b = _write(
        tmp_path / "b",
        {
            "current-context": "second",
            "clusters": [
                {"name": "k", "cluster": {"server": "https://b:1"}},  # shadowed: a defines k first
                {"name": "other", "cluster": {"server": "https://other:1"}},
            ],
            "contexts": [{"name": "second", "context": {"cluster": "other", "namespace": "team-b"}}],
        },
    )
    kc = read_kubeconfig([a, b])
    assert kc.current_context == "first"
    _, cluster, _ = kc.resolve(None)
    assert cluster.value["server"] == "https://a:1"
    ctx, cluster, _ = kc.resolve("second")
    assert (ctx.value["namespace"], cluster.value["server"]) == ("team-b", "https://other:1")
    monkeypatch.setenv("KUBECONFIG", f"{a}:{b}")
    monkeypatch.delenv("DEFAULT_NAMESPACE", raising=False)
    assert default_namespace(None) == "team-a"
    assert default_namespace(None, context="second") == "team-b"
    assert default_namespace("explicit") == "explicit"
    # Namespaced reads (kubectl's rule): -n, -A (every namespace), the context's, else every namespace.
    assert namespace_scope(None) == "team-a"
    assert namespace_scope(None, True) is None
    assert namespace_scope("x", True) == "x"
    c = _write(tmp_path / "c", {"current-context": "bare", "contexts": [{"name": "bare", "context": {}}]})
    monkeypatch.setenv("KUBECONFIG", str(c))
    monkeypatch.setenv("DEFAULT_NAMESPACE", "team-z")
    assert namespace_scope(None) is None  # the earlier gpuctl's habit: every namespace
    assert default_namespace(None) == "team-z"  # where a job without a namespace is created


def test_errors_name_the_file_and_the_fix(tmp_path) -> None:
    f = _write(tmp_path / "kc", _config("https://x:1"))
    with pytest.raises(ConfigError, match=r"context 'nope' not found \(contexts: c\)"):
        load(f, "nope")
    bad = tmp_path / "bad"
    bad.write_text("clusters: [unclosed")
    with pytest.raises(ConfigError, match=f"kubeconfig {bad} is not valid YAML"):
        load(str(bad))
    nocur = _write(tmp_path / "nocur", {**_config("https://x:1"), "current-context": ""})
    with pytest.raises(ConfigError, match="no current-context; pass --context"):
        load(nocur)
    gcp = _write(tmp_path / "gcp", _config("https://x:1", user={"auth-provider": {"name": "gcp"}}))
    with pytest.raises(ConfigError, match="gke-gcloud-auth-plugin"):
        load(gcp)
    missing = _write(tmp_path / "m", _config("https://x:1", cluster={"certificate-authority": "ca.pem"}))
    with pytest.raises(ConfigError, match=f"certificate-authority {tmp_path}/ca.pem"):
        load(missing)


# ----------------------------------------------------------------------------- a TLS server
@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pki")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "1", "-subj", "/CN=test-ca")  # fmt: skip
    for name, cn, san in (("server", "localhost", "DNS:localhost,IP:127.0.0.1"), ("client", "alice", "")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={cn}")  # fmt: skip
        ext = d / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "1", "-extfile", str(ext))  # fmt: skip
    return d


class _Server:
    def __init__(self, pki: Path):
        self.tokens: set[str] = set()
        self.seen: list[tuple[str | None, str | None]] = []
        self.refusals: list[tuple[int, str | None]] = []  # answers to give first: (status, Retry-After)
        self.refusal_body: dict = {"message": "storage is (re)initializing"}
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a) -> None:
                pass

            def do_GET(self) -> None:
                cert = self.connection.getpeercert()
                cn = dict(x[0] for x in cert["subject"])["commonName"] if cert else None
                auth = self.headers.get("Authorization")
                outer.seen.append((cn, auth))
                ok = cn == "alice" or (auth or "").removeprefix("Bearer ") in outer.tokens
                body = json.dumps({"gitVersion": "v-test"} if ok else {"message": "Unauthorized"}).encode()
                if outer.refusals:
                    status, after = outer.refusals.pop(0)
                    body = json.dumps(outer.refusal_body).encode()
                    self.send_response(status)
                    if after is not None:
                        self.send_header("Retry-After", after)
                else:
                    self.send_response(200 if ok else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(pki / "server.crt", pki / "server.key")
        ctx.load_verify_locations(pki / "ca.crt")
        ctx.verify_mode = ssl.CERT_OPTIONAL
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def server(pki) -> Iterator[_Server]:
    s = _Server(pki)
    yield s
    s.httpd.shutdown()


def _cluster(path: str) -> Cluster:
    return Cluster._load(path, None)


def test_client_certificate_from_files_relative_to_the_kubeconfig(pki, server) -> None:
    kc = _write(
        pki / "kc-files",
        _config(
            server.url,
            user={"client-certificate": "client.crt", "client-key": "client.key"},
            cluster={"certificate-authority": "ca.crt"},
        ),
    )
    assert _cluster(kc).server_version() == "v-test"
    assert server.seen[-1] == ("alice", None)


@pytest.mark.parametrize("memfd", [True, False], ids=["memfd", "temporary-files"])
def test_client_certificate_and_ca_as_data(pki, server, tmp_path, monkeypatch, memfd) -> None:
    """The key pair is loaded from anonymous memory where the system has it, else from private
    temporary files: both reach the server as the client certificate."""
    if not memfd:
        monkeypatch.delattr("os.memfd_create", raising=False)
    b64 = {
        n: base64.b64encode((pki / n).read_bytes()).decode() for n in ("client.crt", "client.key", "ca.crt")
    }
    kc = _write(
        tmp_path / "kc",
        _config(
            server.url,
            user={"client-certificate-data": b64["client.crt"], "client-key-data": b64["client.key"]},
            cluster={"certificate-authority-data": b64["ca.crt"]},
        ),
    )
    assert _cluster(kc).server_version() == "v-test"
    assert server.seen[-1] == ("alice", None)


def test_the_server_certificate_is_verified(pki, server, tmp_path) -> None:
    kc = _write(tmp_path / "kc", _config(server.url, user={"token": "t"}))  # no CA: system roots only
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        _cluster(kc).server_version()
    server.tokens.add("t")
    insecure = _write(
        tmp_path / "kc2", _config(server.url, user={"token": "t"}, cluster={"insecure-skip-tls-verify": True})
    )
    assert _cluster(insecure).server_version() == "v-test"
    named = _write(
        tmp_path / "kc3",
        _config(
            server.url.replace("127.0.0.1", "localhost"),
            user={"token": "t"},
            cluster={"certificate-authority": str(pki / "ca.crt"), "tls-server-name": "localhost"},
        ),
    )
    assert _cluster(named).server_version() == "v-test"


def test_answers_that_say_retry_after_are_retried_like_client_go(pki, server, tmp_path) -> None:
    kc = _write(tmp_path / "kc", _config(server.url, cluster={"certificate-authority": str(pki / "ca.crt")}))
    server.tokens.add("")
    c = _cluster(kc)
    # 429 with and without Retry-After, 503 with it: asked again until the real answer.
    server.refusals = [(429, "0"), (429, None), (503, "0")]
    assert c.server_version() == "v-test"
    assert len(server.seen) == 4 and not server.refusals
    # A 5xx without Retry-After is final, as it is for kubectl.
    server.refusals = [(500, None)]
    with pytest.raises(ApiError, match="500"):
        c.server_version()
    # The server keeps refusing: give up after MAX_RETRIES retries with its own message.
    server.refusals = [(429, "0")] * (MAX_RETRIES + 1) + [(429, "0")]
    with pytest.raises(ApiError, match=r"initializing.*429"):
        c.server_version()
    assert len(server.refusals) == 1


def test_retry_after_reads_like_client_go() -> None:
    assert retry_after(200, None) is None and retry_after(404, "1") is None
    assert retry_after(500, None) is None and retry_after(503, "2") == 2.0
    assert retry_after(429, None) == 1.0 and retry_after(429, "0") == 0.0
    assert retry_after(429, "3600") == 10.0  # a long wait is shortened
    assert retry_after(503, "Wed, 21 Oct 2026 07:28:00 GMT") is None  # HTTP dates: not a count of seconds


def test_token_file_is_reread_after_a_401(pki, server, tmp_path) -> None:
    tok = tmp_path / "token"
    tok.write_text("old\n")
    kc = _write(
        tmp_path / "kc",
        _config(
            server.url, user={"tokenFile": "token"}, cluster={"certificate-authority": str(pki / "ca.crt")}
        ),
    )
    server.tokens.add("old")
    c = _cluster(kc)
    assert c.server_version() == "v-test"
    tok.write_text("new\n")  # rotated; the old one is revoked
    server.tokens = {"new"}
    assert c.server_version() == "v-test"
    assert [a for _, a in server.seen[-2:]] == ["Bearer old", "Bearer new"]


def test_token_file_refresh_period() -> None:
    now = [0.0]
    p = Path("/dev/null")
    auth = TokenFileAuth(p, clock=lambda: now[0])
    auth.path = Path(__file__)  # any readable file; only the re-read timing is under test
    first = auth.header()
    auth.path = p  # empty now
    now[0] = 59.0
    assert auth.header() == first
    now[0] = 60.0
    assert auth.header() is None


def test_exec_plugin_runs_with_its_env_and_again_after_a_401(pki, server, tmp_path) -> None:
    counter = tmp_path / "runs"
    plugin = tmp_path / "bin" / "plugin"
    plugin.parent.mkdir()
    plugin.write_text(
        "#!/bin/sh\n"
        f"echo x >> {counter}\n"
        "n=$(wc -l < " + str(counter) + ")\n"
        'echo "{\\"apiVersion\\":\\"client.authentication.k8s.io/v1\\",\\"kind\\":\\"ExecCredential\\",'
        '\\"status\\":{\\"token\\":\\"$PREFIX-$n\\"}}"\n'
    )
    plugin.chmod(0o755)
    kc = _write(
        tmp_path / "kc",
        _config(
            server.url,
            user={
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": "./bin/plugin",  # relative to the kubeconfig
                    "env": [{"name": "PREFIX", "value": "tok"}],
                }
            },
            cluster={"certificate-authority": str(pki / "ca.crt")},
        ),
    )
    server.tokens = {"tok-1"}
    c = _cluster(kc)
    assert c.server_version() == "v-test"
    assert c.server_version() == "v-test"  # cached: no expiry given
    assert len(counter.read_text().split()) == 1
    server.tokens = {"tok-2"}  # the credential expired server-side
    assert c.server_version() == "v-test"
    assert len(counter.read_text().split()) == 2


def test_exec_plugin_failure_is_reported(tmp_path) -> None:
    kc = _write(
        tmp_path / "kc",
        _config(
            "https://127.0.0.1:1",
            user={"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "false"}},
        ),
    )
    with pytest.raises(ConfigError, match="exec plugin false exited 1"):
        load(kc)
    missing = _write(
        tmp_path / "kc2",
        _config(
            "https://127.0.0.1:1",
            user={
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": "no-such-plugin",
                    "installHint": "install it with apt",
                }
            },
        ),
    )
    with pytest.raises(ConfigError, match=r"no-such-plugin.*install it with apt"):
        load(missing)


def test_service_account(pki, tmp_path) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "namespace").write_text("gpuctl-system\n")
    (tmp_path / "ca.crt").write_bytes((pki / "ca.crt").read_bytes())
    conn = from_service_account(
        tmp_path, {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    )
    assert conn.host == "https://[fd00::1]:6443"
    assert conn.namespace == "gpuctl-system"
    assert conn.auth.header() == "Bearer sa-token"


def test_visibility_api_forbidden_is_not_served_to_us_but_not_remembered(pki, server, tmp_path) -> None:
    kc = _write(tmp_path / "kc", _config(server.url, cluster={"certificate-authority": str(pki / "ca.crt")}))
    server.tokens.add("")
    c = _cluster(kc)
    # 403 (no RBAC on clusterqueues/pendingworkloads): None, so callers compute from the Workloads...
    server.refusals = [(403, None)]
    assert c.pending_workloads("team-a") is None
    # ... and another ClusterQueue (RBAC may name resources) is still asked.
    asked = len(server.seen)
    assert c.pending_workloads("team-b") == []
    assert len(server.seen) == asked + 1
    # 404 for every version: not served at all, remembered (no more requests).
    c2 = _cluster(kc)
    server.refusals = [(404, None)] * len(VISIBILITY_VERSIONS)
    assert c2.pending_workloads("team-a") is None
    asked = len(server.seen)
    assert c2.pending_workloads("team-b") is None and len(server.seen) == asked
    # A team member's LocalQueue Kueue does not know: Kueue's own NotFound (it names the kind), so the
    # API is served and the next queue is still asked.
    c3 = _cluster(kc)
    server.refusal_body = {"message": 'localqueue "default" not found', "details": {"kind": "localqueue"}}
    server.refusals = [(404, None)]
    assert c3.pending_in_local_queue("team-a", "default") is None
    assert c3.pending_in_local_queue("team-b", "default") == []
