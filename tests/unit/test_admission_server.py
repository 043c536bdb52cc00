"""The webhook's HTTP surface: AdmissionReview in, AdmissionReview out; 400 (never 5xx) for bad input;
health, readiness and metrics; the cache-lag re-check; and the real HTTPS server started by `main`, with
certificate hot reload."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from admission import command
from admission import metrics as metrics_mod
from admission import server as server_mod
from admission.command import allowed_host_paths
from admission.rules import AdmissionConfig, Mode, Verdict
from admission.server import AdmissionApp, CertReloader, parse_review, response_body
from admission.state import ClusterState, StaticState
from admission.tuning import request_sched_slice
from tests.unit.test_admission_fixtures import cluster_objects, queued_pod, raw_pod, review, state

ROOT = Path(__file__).resolve().parents[2]


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status_code, self.headers, self.content = status, headers, body
        self.text = body.decode(errors="replace")


class TestClient:
    """Drives the ASGI app in-process, the way uvicorn does for one request (no HTTP, no TLS)."""

    __test__ = False  # not a test class

    def __init__(self, app: AdmissionApp) -> None:
        self.app = app

    def request(self, method: str, path: str, body: bytes = b"", chunk: int = 0) -> Response:
        parts = [body[i : i + chunk] for i in range(0, len(body), chunk)] if chunk and body else [body]
        messages = [
            {"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)
        ]
        sent: list[dict] = []

        async def receive() -> dict:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "http", "method": method, "path": path, "headers": []}
        asyncio.run(self.app(scope, receive, send))
        start = sent[0]
        headers = {k.decode(): v.decode() for k, v in start["headers"]}
        return Response(start["status"], headers, b"".join(m.get("body", b"") for m in sent[1:]))

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def post(self, path: str, content: bytes, chunk: int = 0) -> Response:
        return self.request("POST", path, content, chunk)


def client(config: AdmissionConfig | None = None, st: ClusterState | None = None, **kw) -> TestClient:
    app = AdmissionApp(StaticState(st or state()), config or AdmissionConfig(), **kw)
    return TestClient(app)


def post(c: TestClient, body, chunk: int = 0) -> tuple[int, dict | str]:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    r = c.post("/validate", data, chunk)
    if r.headers["content-type"].startswith("application/json"):
        return r.status_code, orjson.loads(r.content)
    return r.status_code, r.text


def test_allowed_review_echoes_the_uid():
    body = review(queued_pod())
    status, out = post(client(), body)
    assert status == 200
    assert out == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": body["request"]["uid"], "allowed": True},
    }


def test_denied_review_carries_403_and_the_rule():
    body = review(raw_pod(gpus=1))
    status, out = post(client(), body)
    assert status == 200
    resp = out["response"]
    assert resp["uid"] == body["request"]["uid"] and resp["allowed"] is False
    assert resp["status"]["code"] == 403 and resp["status"]["reason"] == "Forbidden"
    assert "[gpu-queue]" in resp["status"]["message"] and "Fix:" in resp["status"]["message"]


def test_warn_mode_allows_with_warnings():
    status, out = post(client(AdmissionConfig(mode=Mode.WARN)), review(raw_pod(gpus=1)))
    assert status == 200
    assert out["response"]["allowed"] is True
    assert "status" not in out["response"]
    assert out["response"]["warnings"][0].startswith("gpuctl would deny Pod team-a/p: [gpu-queue]")


def test_dry_run_is_judged_like_the_real_request():
    c = client()
    _, real = post(c, review(raw_pod(gpus=1)))
    _, dry = post(c, review(raw_pod(gpus=1), dry_run=True))
    assert dry["response"]["allowed"] is False
    assert dry["response"]["status"] == real["response"]["status"]


def test_update_with_old_object():
    old = queued_pod()
    new = queued_pod(labels={"runwhere.ai/poool": "x"})
    _, out = post(client(), review(new, op="UPDATE", old=old))
    assert out["response"]["allowed"] is False and "[unknown-key]" in out["response"]["status"]["message"]
    _, same = post(client(), review(old, op="UPDATE", old=old))
    assert same["response"]["allowed"] is True


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (b"", "body is not JSON"),
        (b"{not json", "body is not JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', "expected apiVersion"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request must be an object"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}', "uid must be"),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}}',
            "request.kind.kind is missing",
        ),
        ("\udcff".encode("utf-8", "surrogatepass"), "body is not JSON"),
    ],
)
def test_malformed_bodies_get_400_with_a_message(body, text):
    status, out = post(client(), body)
    assert status == 400
    assert isinstance(out, str) and text in out


def test_malformed_object_inside_a_valid_review_gets_400():
    body = review(queued_pod())
    body["request"]["object"]["spec"]["containers"] = "busybox"
    status, out = post(client(), body)
    assert status == 400 and "spec.containers must be a list" in out


def test_a_bug_in_a_rule_is_a_400_not_a_500(monkeypatch):
    def boom(*a, **k):
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(server_mod, "review", boom)
    status, out = post(client(), review(queued_pod()))
    assert status == 400 and "ZeroDivisionError: oops" in out


def test_wrong_method_path_and_oversized_body():
    c = client(max_body=1000)
    assert c.get("/validate").status_code == 405
    assert c.get("/nope").status_code == 404
    assert c.post("/validate", b"x" * 1001).status_code == 413
    assert c.post("/validate", b"x" * 1001, chunk=100).status_code == 413


def test_body_in_several_chunks_is_reassembled():
    status, out = post(client(), review(queued_pod()), chunk=64)
    assert status == 200 and out["response"]["allowed"] is True


def test_health_readiness_and_metrics():
    c = client()
    assert c.get("/healthz").text == "ok\n"
    assert c.get("/readyz").status_code == 200
    post(c, review(queued_pod()))
    post(c, review(raw_pod(gpus=1)))
    post(c, b"junk")
    text = c.get("/metrics").text
    allow = 'decision="allow",dry_run="false",kind="Pod",operation="CREATE",rule=""'
    assert f"gpuctl_webhook_requests_total{{{allow}}} 1.0" in text
    assert 'decision="deny",dry_run="false",kind="Pod",operation="CREATE",rule="gpu-queue"} 1.0' in text
    assert 'decision="error"' in text
    assert 'gpuctl_webhook_cache_objects{resource="pools"} 3.0' in text
    assert "gpuctl_webhook_duration_seconds_bucket" in text

    unsynced = client(st=ClusterState())
    r = unsynced.get("/readyz")
    assert r.status_code == 503 and "not synced" in r.text


def test_unbounded_kind_values_do_not_become_metric_labels():
    c = client()
    body = review(queued_pod())
    body["request"]["kind"]["kind"] = "Pod" + "x" * 50
    post(c, body)
    assert "Podxxx" not in c.get("/metrics").text


# ---------------------------------------------------------------------------------------------------------
# Watch lag: a cache-dependent denial is re-checked when the cache moves.


class _Moving:
    """A state source whose snapshot changes after `after` seconds (a watch event arriving)."""

    def __init__(self, before: ClusterState, later: ClusterState, after: float) -> None:
        self.before, self.later, self.t = before, later, time.monotonic() + after

    @property
    def state(self) -> ClusterState:
        return self.later if time.monotonic() >= self.t else self.before

    def start(self) -> None: ...

    def stop(self) -> None: ...


def _without_pool(pool: str) -> ClusterState:
    return ClusterState.from_objects(o for o in cluster_objects() if o["metadata"]["name"] != pool)


def test_denial_caused_by_cache_lag_turns_into_an_allow_when_the_cache_catches_up():
    later = replace(state(), generation=7)
    app = AdmissionApp(_Moving(_without_pool("a100"), later, 0.15), AdmissionConfig(), stale_wait=2.0)
    t0 = time.monotonic()
    status, out = post(TestClient(app), review(queued_pod()))
    took = time.monotonic() - t0
    assert status == 200 and out["response"]["allowed"] is True
    assert 0.1 < took < 1.5


def test_genuine_cache_dependent_denial_waits_at_most_stale_wait():
    c = client(st=_without_pool("a100"), stale_wait=0.3)
    t0 = time.monotonic()
    _, out = post(c, review(queued_pod()))
    took = time.monotonic() - t0
    assert out["response"]["allowed"] is False and "[pool-exists]" in out["response"]["status"]["message"]
    assert 0.25 < took < 1.0


def test_other_denials_do_not_wait():
    c = client(stale_wait=5.0)
    t0 = time.monotonic()
    _, out = post(c, review(queued_pod(labels={"runwhere.ai/poool": "x"}, pool="nope")))
    assert out["response"]["allowed"] is False  # pool-exists *and* unknown-key: no reason to wait
    assert time.monotonic() - t0 < 1.0


# ---------------------------------------------------------------------------------------------------------
# Config.


def test_allowed_host_paths_from_flags_and_env():
    assert allowed_host_paths(["/data/", "/scratch"], "/var/run/nvidia::/data") == (
        "/data",
        "/scratch",
        "/var/run/nvidia",
    )
    with pytest.raises(ValueError, match="not absolute"):
        allowed_host_paths(["data"], "")


def test_parse_review_returns_uid_and_request():
    body = review(queued_pod())
    uid, request = parse_review(orjson.dumps(body))
    assert uid == body["request"]["uid"] and request["operation"] == "CREATE"


def test_the_precomputed_allow_answer_is_the_general_encoding():
    for uid in ("0f4a7b6e-6a5e-4f7e-9a53-3f0a4d3f3c11", 'q"u\\o\nte\u2028é'):
        full = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": True},
        }
        assert response_body(uid, Verdict(allowed=True, subject="Pod a/b")) == orjson.dumps(full)
        assert orjson.loads(response_body(uid, Verdict(allowed=True, warnings=("w",))))["response"] == {
            "uid": uid,
            "allowed": True,
            "warnings": ["w"],
        }


# ---------------------------------------------------------------------------------------------------------
# The real server: `python -m admission serve` over HTTPS, and certificate hot reload.

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def make_ca_and_cert(d: Path, cn: str = "localhost") -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for 127.0.0.1 signed by it (ca.crt, tls.crt, tls.key)."""
    d.mkdir(parents=True, exist_ok=True)
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True)  # noqa: E731
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    if not (d / "ca.crt").exists():
        run(
            "req",
            "-x509",
            *ec,
            "-days",
            "2",
            "-subj",
            "/CN=test-ca",
            "-keyout",
            d / "ca.key",
            "-out",
            d / "ca.crt",
        )
    run("req", *ec, "-subj", f"/CN={cn}", "-keyout", d / "tls.key", "-out", d / "tls.csr")
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    run(
        "x509",
        "-req",
        "-in",
        d / "tls.csr",
        "-CA",
        d / "ca.crt",
        "-CAkey",
        d / "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        d / "ext",
        "-out",
        d / "tls.crt",
    )
    return d / "ca.crt", d / "tls.crt", d / "tls.key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def https(
    port: int, ca: Path, path: str, body: bytes | None = None
) -> tuple[int, bytes, ssl.SSLObject | None]:
    import http.client

    ctx = ssl.create_default_context(cafile=str(ca))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
    try:
        conn.request("POST" if body is not None else "GET", path, body=body)
        r = conn.getresponse()
        return r.status, r.read(), conn.sock
    finally:
        conn.close()


@needs_openssl
def test_python_m_admission_serve_answers_over_https(tmp_path):
    ca, crt, key = make_ca_and_cert(tmp_path / "tls")
    objects = tmp_path / "state.json"
    objects.write_text(json.dumps(cluster_objects()))
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "admission",
            "serve",
            "--tls-cert",
            str(crt),
            "--tls-key",
            str(key),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--mode",
            "warn",
            "--static-state",
            str(objects),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60  # a cold Python start on a loaded 2-core machine took over 20 s
        while True:
            try:
                status, text, _ = https(port, ca, "/readyz")
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.1)
        assert status == 200 and text == b"ok\n"
        status, body, _ = https(port, ca, "/validate", orjson.dumps(review(raw_pod(gpus=1))))
        resp = orjson.loads(body)["response"]
        assert status == 200 and resp["allowed"] is True and "[gpu-queue]" in resp["warnings"][0]
        status, body, _ = https(port, ca, "/validate", b"\x00\x01")
        assert status == 400
    finally:
        proc.terminate()
        proc.wait(10)


@needs_openssl
def test_cert_reloader_serves_the_new_certificate_on_new_connections(tmp_path):
    ca, crt, key = make_ca_and_cert(tmp_path / "tls", cn="first")
    reloader = CertReloader(str(crt), str(key), interval=3600)

    def default() -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(crt), str(key))
        return ctx

    ctx = reloader.factory(None, default)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert reloader.check() is False  # nothing changed
    time.sleep(0.01)
    make_ca_and_cert(tmp_path / "tls", cn="second")  # same CA, new leaf, files rewritten in place
    assert reloader.check() is True
    # A handshake on the same context now presents the new leaf.
    server_sock, client_sock = socket.socketpair()
    cctx = ssl.create_default_context(cafile=str(ca))
    cctx.check_hostname = False
    import threading

    srv = ctx.wrap_socket(server_sock, server_side=True, do_handshake_on_connect=False)
    t = threading.Thread(target=srv.do_handshake)
    t.start()
    cli = cctx.wrap_socket(client_sock, server_hostname="localhost")
    t.join(5)
    subject = dict(x[0] for x in cli.getpeercert()["subject"])
    cli.close()
    srv.close()
    assert subject["commonName"] == "second"


def test_main_rejects_relative_allowed_host_paths(tmp_path, capsys):
    crt = tmp_path / "c"
    crt.write_text("x")
    code = command.main(
        ["serve", "--tls-cert", str(crt), "--tls-key", str(crt), "--allowed-host-path", "rel"]
    )
    assert code == 2 and "not absolute" in capsys.readouterr().err


def test_main_rejects_unreadable_tls_files(tmp_path, capsys):
    code = command.main(["--tls-cert", str(tmp_path / "none"), "--tls-key", str(tmp_path / "none")])
    assert code == 2 and "cannot read" in capsys.readouterr().err


def test_main_reports_an_unusable_kubeconfig(tmp_path, capsys):
    crt = tmp_path / "c"
    crt.write_text("x")
    bad = tmp_path / "kubeconfig"
    bad.write_text("not: [a kubeconfig")
    code = command.main(["serve", "--tls-cert", str(crt), "--tls-key", str(crt), "--kubeconfig", str(bad)])
    assert code == 2 and "cannot load the cluster configuration" in capsys.readouterr().err


def _sched_fields(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep and v.strip().lstrip("-").isdigit():
            out[k.strip()] = int(v.strip())
    return out


def _kernel() -> tuple[int, int]:
    major, minor = platform.release().split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


@pytest.mark.skipif(
    sys.platform != "linux" or _kernel() < (6, 12), reason="custom EEVDF slices need Linux 6.12+"
)
def test_sched_slice_is_requested_for_the_calling_thread_only_at_unchanged_priority():
    got: dict[str, str] = {}

    def worker() -> None:
        got["error"] = request_sched_slice(250)
        got["sched"] = Path("/proc/thread-self/sched").read_text()

    before = os.getpriority(os.PRIO_PROCESS, 0)
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert got["error"] == ""
    fields = _sched_fields(got["sched"])
    assert fields["se.slice"] == 250_000
    assert fields["prio"] == 120 + before  # nice unchanged
    mine = _sched_fields(Path("/proc/thread-self/sched").read_text())
    assert mine["se.slice"] != 250_000  # the test's own thread keeps the default


def test_request_metrics_keep_prometheus_semantics():
    reg = CollectorRegistry()
    m = metrics_mod.Metrics(reg)
    for seconds in (0.0005, 0.0004, 0.0006, 2.0):  # a value on a bound counts in that bucket (le)
        m.observe("Pod", "CREATE", seconds)
    m.count("Pod", "CREATE", "allow", "", "false")
    m.count("Pod", "CREATE", "allow", "", "false")
    text = generate_latest(reg).decode()
    b = 'gpuctl_webhook_duration_seconds_bucket{kind="Pod",le="%s",operation="CREATE"} %s'
    assert b % ("0.00025", "0.0") in text
    assert b % ("0.0005", "2.0") in text
    assert b % ("0.001", "3.0") in text
    assert b % ("1.0", "3.0") in text and b % ("+Inf", "4.0") in text
    assert 'gpuctl_webhook_duration_seconds_count{kind="Pod",operation="CREATE"} 4.0' in text
    allow = 'decision="allow",dry_run="false",kind="Pod",operation="CREATE",rule=""'
    assert f"gpuctl_webhook_requests_total{{{allow}}} 2.0" in text
