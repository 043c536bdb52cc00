"""The API server's streaming protocols over WebSocket, as kubectl 1.30+ speaks them: exec and attach
(subprotocol `v5.channel.k8s.io`, falling back to `v4.channel.k8s.io`) and port-forward (the kubelet's
WebSocket port-forward, `v4.channel.k8s.io`, which the API server proxies as it is).

Why a WebSocket client of its own (RFC 6455's client half, about a hundred lines) rather than the
`websockets` package: the handshake is one more request of gpuctl's one transport
(gpuctl.cluster.transport's Connection: TCP, the proxy's CONNECT, TLS with the kubeconfig's context and
tls-server-name) with the client's own headers (the credential, refreshed once on a 401, and --as
impersonation), so exec reaches exactly the API server, as exactly the user, that every other verb does;
and a command imports no event loop or thread machinery it does not use.

The channel protocol (k8s.io/streaming wsstream, client-go tools/remotecommand): every binary message's
first byte is its channel: 0 stdin, 1 stdout, 2 stderr, 3 the error channel (a metav1.Status as JSON
when the command ends), 4 terminal resizes ({"Width": w, "Height": h}). v5 adds the close signal: the
message [255, channel] half-closes a stream (stdin's end of file). Port-forward: for each port asked,
channel 2i carries data and 2i+1 errors, each opened by the server with the port as two little-endian
bytes; one WebSocket is one TCP connection to the pod's port.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import socket
import struct
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlencode

from gpuctl.cluster.client import ApiError, Cluster, loads
from gpuctl.cluster.transport import Connection, TransportError, _read_head

# Subprotocols (k8s.io/apimachinery remotecommand; wsstream.ChannelWebSocketProtocol).
EXEC_V5 = "v5.channel.k8s.io"
EXEC_V4 = "v4.channel.k8s.io"
EXEC_PROTOCOLS = (EXEC_V5, EXEC_V4)
PORT_FORWARD_PROTOCOLS = (EXEC_V4,)

# Channels.
STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
CLOSE_SIGNAL = 255  # v5: [255, channel] half-closes `channel`

# RFC 6455 opcodes.
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_MESSAGE = 64 << 20  # bytes of one message: more is a broken peer, not output

# A metav1.Status on the error channel (remotecommand's NonZeroExitCodeReason, ExitCodeCauseType).
NON_ZERO_EXIT = "NonZeroExitCode"
EXIT_CODE_CAUSE = "ExitCode"


class ProtocolError(TransportError):
    """The server broke the WebSocket or channel protocol."""


# ----------------------------------------------------------------------------- frames (RFC 6455)
def encode_frame(opcode: int, payload: bytes, *, mask: bytes | None = None, fin: bool = True) -> bytes:
    """One frame. A client masks every frame (`mask`: 4 bytes, random when None); mask=b"" leaves it
    unmasked (a server's frame, for tests)."""
    if mask is None:
        mask = os.urandom(4)
    head = bytes([(0x80 if fin else 0) | opcode])
    bit = 0x80 if mask else 0
    n = len(payload)
    if n < 126:
        head += bytes([bit | n])
    elif n < 1 << 16:
        head += bytes([bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    return head + mask + _mask(payload, mask)


def _mask(payload: bytes, key: bytes) -> bytes:
    """XOR with the 4-byte key, repeated (its own inverse)."""
    if not payload:
        return b""
    n = len(payload)
    k = int.from_bytes((key * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(payload, "big") ^ k).to_bytes(n, "big")


def _read_exact(fp: Any, n: int) -> bytes:
    out = fp.read(n) if n else b""
    if len(out) != n:
        raise ProtocolError("the WebSocket was cut mid-frame")
    return out


def read_frame(fp: Any) -> tuple[bool, int, bytes] | None:
    """(fin, opcode, payload) of the next frame of a buffered reader, unmasked; None at the end of the
    connection before a frame began."""
    first = fp.read(2)
    if not first:
        return None
    if len(first) != 2:
        raise ProtocolError("the WebSocket was cut mid-frame")
    b0, b1 = first
    if b0 & 0x70:
        raise ProtocolError("a frame with reserved bits set (no extension was negotiated)")
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", _read_exact(fp, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", _read_exact(fp, 8))[0]
    if n > MAX_MESSAGE:
        raise ProtocolError(f"a frame of {n} bytes")
    key = _read_exact(fp, 4) if b1 & 0x80 else b""
    payload = _read_exact(fp, n)
    return bool(b0 & 0x80), b0 & 0x0F, _mask(payload, key) if key else payload


def accept_key(key: str) -> str:
    """Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455, 4.2.2)."""
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


# ----------------------------------------------------------------------------- channel messages
def channel_message(channel: int, data: bytes) -> bytes:
    return bytes([channel]) + data


def close_signal(channel: int) -> bytes:
    """v5's half-close of `channel` (stdin's end of file)."""
    return bytes([CLOSE_SIGNAL, channel])


def resize_message(width: int, height: int) -> bytes:
    """A terminal size on the resize channel (remotecommand.TerminalSize's JSON)."""
    return channel_message(RESIZE, json.dumps({"Width": width, "Height": height}).encode())


def exit_status(message: bytes) -> tuple[int, str]:
    """(exit code, error text) from the error channel's metav1.Status, as client-go's errorDecoderV4: Success
    is (0, ""); a NonZeroExitCode failure is (its ExitCode cause, "command terminated with exit code N");
    any other failure is (1, its message) (kubectl exits 1 with the message)."""
    try:
        status = json.loads(message)
    except ValueError:
        return 1, f"error stream protocol error: {message[:200]!r}"
    if not isinstance(status, dict):
        return 1, f"error stream protocol error: {message[:200]!r}"
    if status.get("status") == "Success":
        return 0, ""
    if status.get("reason") == NON_ZERO_EXIT:
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == EXIT_CODE_CAUSE:
                try:
                    code = int(cause.get("message", ""))
                except ValueError:
                    break
                return code, f"command terminated with exit code {code}"
        return 1, "error stream protocol error: no ExitCode cause given"
    return 1, str(status.get("message") or "error stream protocol error: unknown error")


# ----------------------------------------------------------------------------- the connection
class WebSocket:
    """A client WebSocket on one of the transport's connections: binary messages in and out, pings
    answered, fragments joined. `send` may be called from any thread; `recv` from one."""

    def __init__(self, conn: Connection, protocol: str):
        self.conn, self.protocol = conn, protocol
        self._send_lock = threading.Lock()
        self.closed = False

    def _send(self, opcode: int, payload: bytes) -> None:
        sock = self.conn.sock
        if sock is None:
            raise TransportError("the WebSocket is closed")
        frame = encode_frame(opcode, payload)
        with self._send_lock:
            sock.sendall(frame)

    def send(self, data: bytes) -> None:
        self._send(OP_BINARY, data)

    def recv(self) -> bytes | None:
        """The next data message; None when the server closed the WebSocket (or the connection)."""
        parts: list[bytes] = []
        while True:
            try:
                frame = read_frame(self.conn.fp)
            except (OSError, ValueError) as e:
                if self.closed:
                    return None
                raise e if isinstance(e, OSError) else ProtocolError(str(e)) from e
            if frame is None:
                return None
            fin, opcode, payload = frame
            if opcode == OP_PING:
                self._send(OP_PONG, payload)
                continue
            if opcode == OP_PONG:
                continue
            if opcode == OP_CLOSE:
                self.close(payload[:2] if len(payload) >= 2 else b"")
                return None
            if opcode not in (OP_CONT, OP_TEXT, OP_BINARY):
                raise ProtocolError(f"an unknown WebSocket opcode {opcode}")
            parts.append(payload)
            if sum(map(len, parts)) > MAX_MESSAGE:
                raise ProtocolError("a message over 64 MiB")
            if fin:
                return b"".join(parts)

    def close(self, code: bytes = struct.pack("!H", 1000)) -> None:
        """Send a close frame (once) and shut the sending side."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):
            self._send(OP_CLOSE, code)

    def shutdown(self) -> None:
        """Drop the connection (unblocks a reader in another thread)."""
        self.closed = True
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.conn.close()


def _handshake_head(cluster: Cluster, target: str, key: str, protocols: Iterable[str]) -> bytes:
    headers: dict[str, str | list[str]] = dict(cluster._headers())
    headers.pop("Accept", None)  # the kubelet's streaming server answers 406 to `Accept: application/json`
    headers.update(
        {
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": key,
            "Sec-WebSocket-Protocol": ", ".join(protocols),
        }
    )
    return cluster._pool._head("GET", target, None, headers)


def _refusal(conn: Connection, status: int, reason: str, headers: Any) -> ApiError:
    """The API server's answer instead of 101 (403 Forbidden, 404, 400 "container not found", ...) as
    the ApiError every other request raises."""
    body = b""
    length = headers.get("content-length")
    try:
        if length is not None and length.isdigit():
            body = conn.fp.read(min(int(length), 1 << 20))
    except OSError:
        pass
    try:
        st = loads(body) if body else {}
        message = st.get("message", "") if isinstance(st, dict) else ""
    except ValueError:
        st, message = {}, body.decode(errors="replace")[:500]
    return ApiError(status, reason, message, st if isinstance(st, dict) else None)


def open_stream(
    cluster: Cluster,
    api_path: str,
    query: Mapping[str, Any] | Iterable[tuple[str, Any]],
    protocols: Iterable[str],
    *,
    timeout: float = 30,
) -> WebSocket:
    """A WebSocket to `api_path` (a pod's exec, attach or portforward) through the cluster's transport,
    as the cluster's user; ApiError when the API server answers anything but 101 (an expired credential
    is refreshed and the handshake tried once more, as every request does)."""
    protocols = tuple(protocols)
    pairs = list(query.items()) if isinstance(query, Mapping) else list(query)
    pairs = [(k, "true" if v is True else v) for k, v in pairs if v is not None and v is not False]
    target = api_path + ("?" + urlencode(pairs, doseq=True) if pairs else "")
    for attempt in (0, 1):
        conn = Connection(cluster._pool)
        key = base64.b64encode(os.urandom(16)).decode()
        try:
            conn.open(timeout)
            assert conn.sock is not None
            conn.sock.settimeout(timeout)
            conn.sock.sendall(_handshake_head(cluster, target, key, protocols))
            _version, status, reason, headers = _read_head(conn.fp, upgrade=True)
            if status == 401 and attempt == 0 and cluster.connection.auth.refresh():
                conn.close()
                continue
            if status != 101:
                raise _refusal(conn, status, reason, headers)
            if headers.get("sec-websocket-accept") != accept_key(key):
                raise ProtocolError("the server's Sec-WebSocket-Accept does not match the key sent")
            chosen = headers.get("sec-websocket-protocol") or ""
            if chosen not in protocols:
                raise ProtocolError(
                    f"the server chose subprotocol {chosen!r}, none of {', '.join(protocols)} "
                    "(an API server older than Kubernetes 1.30 speaks SPDY only for exec)"
                )
            conn.sock.settimeout(None)
            return WebSocket(conn, chosen)
        except BaseException:
            conn.close()
            raise
    raise AssertionError("unreachable")


__all__ = [
    "CLOSE_SIGNAL",
    "ERROR",
    "EXEC_PROTOCOLS",
    "EXEC_V4",
    "EXEC_V5",
    "PORT_FORWARD_PROTOCOLS",
    "RESIZE",
    "STDERR",
    "STDIN",
    "STDOUT",
    "ProtocolError",
    "WebSocket",
    "accept_key",
    "channel_message",
    "close_signal",
    "encode_frame",
    "exit_status",
    "open_stream",
    "read_frame",
    "resize_message",
]
