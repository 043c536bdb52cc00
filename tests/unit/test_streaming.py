"""gpuctl.cluster.streaming and the exec/attach/port-forward verbs' arguments (docs/cli.md, "Into a running
job"): RFC 6455 frames, the channel protocol's messages and exit status, the handshake through gpuctl's
transport with the client's credential and --as headers, a whole exec session against a local WebSocket
server speaking v5.channel.k8s.io, and the pod choice of a job."""

from __future__ import annotations

import io
import json
import socket
import struct
import threading

import pytest

from gpuctl.cli.errors import CommandError
from gpuctl.cli.exec import command_of, container_of, pod_running_timeout, run_session
from gpuctl.cli.main import build_parser, main
from gpuctl.cli.port_forward import addresses, forward_command, parse_ports
from gpuctl.cluster import ApiError, Cluster
from gpuctl.cluster.config import Connection, StaticAuth
from gpuctl.cluster.streaming import (
    EXEC_PROTOCOLS,
    EXEC_V5,
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    ProtocolError,
    accept_key,
    channel_message,
    close_signal,
    encode_frame,
    exit_status,
    open_stream,
    read_frame,
    resize_message,
)
from gpuctl.service.errors import NotFound, ServiceError
from gpuctl.service.exec import choose_pod, remote_port
from gpuctl.service.jobs import Job


# ----------------------------------------------------------------------------- frames
@pytest.mark.parametrize("n", [0, 1, 125, 126, 65535, 65536, 70000])
def test_a_masked_frame_decodes_to_its_payload_at_every_length_encoding(n: int) -> None:
    payload = bytes(i % 251 for i in range(n))
    frame = encode_frame(OP_BINARY, payload, mask=b"\x01\x02\x03\x04")
    header = 2 + (2 if 126 <= n < 65536 else 8 if n >= 65536 else 0)
    assert len(frame) == header + 4 + n  # the 4-byte mask key after the length
    assert frame[1] & 0x80  # a client's frame is masked
    if n:
        assert frame[header + 4 :] != payload or n < 4  # masked on the wire
    assert read_frame(io.BytesIO(frame)) == (True, OP_BINARY, payload)


def test_an_unmasked_server_frame_and_the_end_of_the_connection() -> None:
    stream = io.BytesIO(encode_frame(OP_BINARY, b"\x01hi", mask=b"") + encode_frame(OP_CLOSE, b"", mask=b""))
    assert read_frame(stream) == (True, OP_BINARY, b"\x01hi")
    assert read_frame(stream) == (True, OP_CLOSE, b"")
    assert read_frame(stream) is None


def test_a_frame_cut_short_or_with_reserved_bits_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="cut"):
        read_frame(io.BytesIO(encode_frame(OP_BINARY, b"abcdef", mask=b"")[:-2]))
    with pytest.raises(ProtocolError, match="reserved"):
        read_frame(io.BytesIO(bytes([0xC2, 0])))


def test_the_accept_key_is_rfc_6455s_example() -> None:
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


# ----------------------------------------------------------------------------- channel messages
def test_channel_messages_as_client_go_writes_them() -> None:
    assert channel_message(0, b"abc") == b"\x00abc"
    assert close_signal(0) == b"\xff\x00"
    assert resize_message(80, 24)[0] == 4
    assert json.loads(resize_message(80, 24)[1:]) == {"Width": 80, "Height": 24}


def _status(code: int) -> bytes:
    return json.dumps(
        {
            "metadata": {},
            "status": "Failure",
            "message": f"command terminated with non-zero exit code: exit status {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
        }
    ).encode()


def test_exit_status_reads_the_kubelets_status() -> None:
    assert exit_status(b'{"metadata":{},"status":"Success"}') == (0, "")
    assert exit_status(_status(3)) == (3, "command terminated with exit code 3")
    code, text = exit_status(
        b'{"status":"Failure","message":"executable file not found in $PATH","reason":"InternalError"}'
    )
    assert (code, text) == (1, "executable file not found in $PATH")
    assert exit_status(b"not json")[0] == 1
    assert exit_status(b'{"status":"Failure","reason":"NonZeroExitCode","details":{}}') == (
        1,
        "error stream protocol error: no ExitCode cause given",
    )


# ----------------------------------------------------------------------------- a local WebSocket server
class Server:
    """One connection: the handshake (its request kept), then `script(conn, recv)` speaks frames."""

    def __init__(self, script, *, status: str = "101 Switching Protocols", body: bytes = b""):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.request = b""
        self.received: list[bytes] = []
        self.error: BaseException | None = None
        self._script, self._status, self._body = script, status, body
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        try:
            fp = conn.makefile("rb")
            while not self.request.endswith(b"\r\n\r\n"):
                self.request += fp.readline()
            head = {
                k.strip().lower(): v.strip()
                for k, _, v in (
                    line.partition(":") for line in self.request.decode().split("\r\n")[1:] if line
                )
            }
            if not self._status.startswith("101"):
                conn.sendall(
                    f"HTTP/1.1 {self._status}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(self._body)}\r\n\r\n".encode()
                    + self._body
                )
                return
            chosen = head["sec-websocket-protocol"].split(",")[0].strip()
            conn.sendall(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                + f"Sec-WebSocket-Accept: {accept_key(head['sec-websocket-key'])}\r\n".encode()
                + f"Sec-WebSocket-Protocol: {chosen}\r\n\r\n".encode()
            )

            def recv() -> tuple[bool, int, bytes] | None:
                frame = read_frame(fp)
                if frame is not None:
                    self.received.append(bytes([frame[1]]) + frame[2])
                return frame

            self._script(conn, recv)
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            conn.close()
            self.listener.close()

    def header(self, name: str) -> list[str]:
        lines = self.request.decode().split("\r\n")[1:]
        return [v.strip() for k, _, v in (x.partition(":") for x in lines) if k.lower() == name.lower()]


def _cluster(port: int) -> Cluster:
    conn = Connection(
        f"http://127.0.0.1:{port}",
        auth=StaticAuth("Bearer t0ken"),
        impersonate={"Impersonate-User": ["jane"], "Impersonate-Group": ["team-a", "devs"]},
    )
    return Cluster(conn)


def _send(conn: socket.socket, opcode: int, payload: bytes, fin: bool = True) -> None:
    conn.sendall(encode_frame(opcode, payload, mask=b"", fin=fin))


def test_an_exec_session_copies_the_streams_and_returns_the_commands_exit_code(capfdbinary) -> None:
    def script(conn, recv):
        _send(conn, OP_BINARY, b"\x01hello ")
        _send(conn, OP_PING, b"p")
        assert recv()[1:] == (OP_PONG, b"p")  # answered
        _send(conn, OP_BINARY, b"\x02oops ", fin=False)  # a fragmented stderr message
        _send(conn, OP_CONT, b"again\n")
        _send(conn, OP_BINARY, b"\x01world\n")
        _send(conn, OP_BINARY, b"\x03" + _status(7))
        _send(conn, OP_CLOSE, struct.pack("!H", 1000))
        recv()  # the client's close

    server = Server(script)
    ws = open_stream(
        _cluster(server.port),
        "/api/v1/namespaces/a/pods/p-0/exec",
        [("container", "main"), ("stdout", True), ("stdin", False), ("command", "sh"), ("command", "-c")],
        EXEC_PROTOCOLS,
    )
    assert ws.protocol == EXEC_V5
    code = run_session(ws, stdin=False, tty=False)
    server.thread.join(5)
    assert server.error is None
    out, err = capfdbinary.readouterr()
    assert code == 7
    assert out == b"hello world\n"
    assert err == b"oops again\ncommand terminated with exit code 7\n"
    line = server.request.split(b"\r\n")[0].decode()
    assert (
        line
        == "GET /api/v1/namespaces/a/pods/p-0/exec?container=main&stdout=true&command=sh&command=-c HTTP/1.1"
    )
    assert server.header("Authorization") == ["Bearer t0ken"]
    assert server.header("Impersonate-User") == ["jane"]
    assert server.header("Impersonate-Group") == ["team-a", "devs"]
    assert server.header("Sec-WebSocket-Protocol") == ["v5.channel.k8s.io, v4.channel.k8s.io"]
    assert server.header("Accept") == []  # the kubelet's streaming server answers 406 to application/json
    assert server.received[-1][0] == OP_CLOSE


def test_stdin_is_sent_on_channel_0_and_its_end_half_closes_it(monkeypatch, capfdbinary) -> None:
    got = threading.Event()

    def script(conn, recv):
        data = b""
        while True:
            frame = recv()
            assert frame is not None
            if frame[2] == close_signal(0):
                break
            data += frame[2][1:]
        _send(conn, OP_BINARY, b"\x01" + data)
        _send(conn, OP_BINARY, b'\x03{"status":"Success"}')
        _send(conn, OP_CLOSE, struct.pack("!H", 1000))
        got.set()

    r, w = socket.socketpair()
    w.sendall(b"round trip\n")
    w.close()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(r.makefile("rb")))
    server = Server(script)
    ws = open_stream(
        _cluster(server.port), "/api/v1/namespaces/a/pods/p/exec", [("stdin", True)], EXEC_PROTOCOLS
    )
    assert run_session(ws, stdin=True, tty=False) == 0
    assert got.is_set() and server.error is None
    assert capfdbinary.readouterr().out == b"round trip\n"


def test_a_refused_upgrade_is_the_api_servers_error() -> None:
    body = json.dumps(
        {
            "kind": "Status",
            "status": "Failure",
            "reason": "Forbidden",
            "code": 403,
            "message": 'pods "p" is forbidden: User "u" cannot create resource "pods/exec" in API group "" '
            'in the namespace "b"',
        }
    ).encode()
    server = Server(None, status="403 Forbidden", body=body)
    with pytest.raises(ApiError) as e:
        open_stream(_cluster(server.port), "/api/v1/namespaces/b/pods/p/exec", [], EXEC_PROTOCOLS)
    assert e.value.status == 403
    assert 'cannot create resource "pods/exec"' in e.value.message


# ----------------------------------------------------------------------------- arguments
def test_exec_takes_the_command_after_the_double_dash(monkeypatch) -> None:
    seen = {}
    monkeypatch.setattr("gpuctl.cli.exec.run", lambda args: seen.setdefault("args", args) and 0)
    argv = ["exec", "job-a", "--rank", "1", "-c", "main", "-i", "--", "sh", "-c", "exit 3", "--rank", "2"]
    assert main(argv) == 0
    args = seen["args"]
    assert (args.job, args.rank, args.container, args.stdin, args.tty) == ("job-a", 1, "main", True, False)
    assert command_of(args) == ["sh", "-c", "exit 3", "--rank", "2"]
    assert args.pod_running_timeout == "1m0s"
    with pytest.raises(CommandError, match="at least one command"):
        command_of(build_parser("exec").parse_args(["exec", "job-a"]))


def test_rank_and_pod_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        build_parser("exec").parse_args(["exec", "j", "--rank", "0", "--pod", "p", "--", "ls"])


def test_pod_running_timeout_is_a_positive_duration() -> None:
    assert pod_running_timeout("1m0s") == 60
    assert pod_running_timeout("5s") == 5
    for bad in ("0s", "soon", "-1s"):
        with pytest.raises(CommandError, match="--pod-running-timeout"):
            pod_running_timeout(bad)


def test_port_forward_ports_as_kubectl_reads_them() -> None:
    assert parse_ports(["8888", "9000:8888", ":80", "8080:http"]) == [
        (None, "8888"),
        (9000, "8888"),
        (0, "80"),
        (8080, "http"),
    ]
    for bad in ("x:80", "80:", "70000", "1:0"):
        with pytest.raises(CommandError):
            parse_ports([bad])
    assert addresses("localhost,::1") == ["127.0.0.1", "::1"]


def test_container_must_be_one_of_the_pods() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "main"}, {"name": "side"}]}}
    assert container_of(pod, None) == "main"
    assert container_of(pod, "side") == "side"
    with pytest.raises(CommandError, match=r"choose one of \[main side\]"):
        container_of(pod, "nope")


# ----------------------------------------------------------------------------- which pod
def _pod(name: str, phase: str, rank: int | None = None, ports: list | None = None) -> dict:
    ann = {"batch.kubernetes.io/job-completion-index": str(rank)} if rank is not None else {}
    return {
        "metadata": {"name": name, "annotations": ann, "creationTimestamp": "2026-11-29T08:00:00Z"},
        "spec": {"containers": [{"name": "main", "ports": ports or []}]},
        "status": {"phase": phase},
    }


def _job(pods: list[dict], *, gang: int = 1, service: dict | None = None) -> Job:
    spec = {"completionMode": "Indexed", "parallelism": gang, "completions": gang} if gang > 1 else {}
    obj = {"kind": "Job", "metadata": {"name": "j", "namespace": "a"}, "spec": spec}
    return Job("training", "Job", obj, None, pods, "Running", service=service)


def test_a_gangs_rank_0_by_default_and_rank_n_on_request() -> None:
    pods = [_pod("j-1", "Running", 1), _pod("j-0", "Pending", 0)]
    job = _job(pods, gang=2)
    assert choose_pod(job)["metadata"]["name"] == "j-0"
    assert choose_pod(job, rank=1)["metadata"]["name"] == "j-1"
    with pytest.raises(ServiceError, match="ranks 0 to 1"):
        choose_pod(job, rank=5)


def test_a_services_replica_by_name_else_its_first_running_pod() -> None:
    job = _job([_pod("s-a", "Pending"), _pod("s-b", "Running"), _pod("s-c", "Running")])
    assert choose_pod(job)["metadata"]["name"] == "s-b"
    assert choose_pod(job, pod="s-c")["metadata"]["name"] == "s-c"
    with pytest.raises(NotFound, match="no pod s-z"):
        choose_pod(job, pod="s-z")
    assert choose_pod(_job([])) is None


def test_the_default_port_is_the_services_target_port_else_the_first_container_port() -> None:
    pod = _pod("nb-0", "Running", ports=[{"name": "http", "containerPort": 8888}])
    svc = {"spec": {"ports": [{"port": 80, "targetPort": 8888}]}}
    assert remote_port(_job([pod], service=svc), pod, None) == 8888
    assert (
        remote_port(_job([pod], service={"spec": {"ports": [{"port": 80, "targetPort": "http"}]}}), pod, None)
        == 8888
    )
    assert remote_port(_job([pod]), pod, None) == 8888
    assert remote_port(_job([pod]), pod, "http") == 8888
    assert remote_port(_job([pod]), pod, "9000") == 9000
    with pytest.raises(ServiceError, match="no container port named"):
        remote_port(_job([pod]), pod, "grpc")
    bare = _pod("t-0", "Running")
    with pytest.raises(ServiceError, match="declares no port"):
        remote_port(_job([bare]), bare, None)


def test_describe_prints_the_port_forward_command_of_a_notebook_or_service() -> None:
    service = {"name": "svc-nb", "type": "NodePort", "port": 80, "targetPort": 8888, "nodePort": 30888}
    assert (
        forward_command("team-b", "alice-notebook", service)
        == "gpuctl port-forward -n team-b alice-notebook 8888"
    )
    assert forward_command("a", "web", {"port": 80, "targetPort": None}) == "gpuctl port-forward -n a web 80"
