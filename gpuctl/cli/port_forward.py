"""`gpuctl port-forward JOB [[LOCAL]:REMOTE ...] [--address 127.0.0.1] [--rank N | --pod P]`: forward local
ports to a running pod of a job, as `kubectl port-forward` does, until interrupted. Without a port, the
job's own: a notebook's or service's `service.port` (the target port of its Service), else its first
container port; `8888` listens on 8888, `9000:8888` on 9000, `:8888` on a free port (printed). REMOTE may
be a container port's name.

Each local connection is one WebSocket to the pod's portforward subresource (`v4.channel.k8s.io`, the
kubelet's WebSocket port-forward, which the API server proxies as it is): channel 0 carries the data and
channel 1 the kubelet's error for that connection, each opened with the port as two bytes
(gpuctl.cluster.streaming).
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
from typing import Any

from gpuctl.cli.cmdutil import guard, interruptible
from gpuctl.cli.errors import CommandError
from gpuctl.cli.exec import add_pod_flags, target

PORT_HEADER = 2  # bytes: the port, little-endian, first on each channel


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "port-forward",
        help="forward local ports to a running job's pod (a notebook's, a service's port by default)",
        description=__doc__.split("\n\n", 1)[0] if __doc__ else "",
        parents=[common["cluster"]],
    )
    add_pod_flags(p)
    p.add_argument("ports", nargs="*", metavar="[LOCAL:]REMOTE", help="default: the job's service port")
    p.add_argument(
        "--address",
        default="localhost",
        help="local addresses to listen on, comma separated (default localhost: 127.0.0.1)",
    )
    p.set_defaults(run=run)


def forward_command(namespace: str, name: str, service: dict) -> str:
    """What `describe job` of a notebook or service prints as the way in from a laptop: the Service's
    target port (the pod's), forwarded from the same local port."""
    port = service.get("targetPort") or service.get("port")
    return f"gpuctl port-forward -n {namespace} {name} {port}"


def parse_ports(specs: list[str]) -> list[tuple[int | None, str]]:
    """(local port: None = the remote's number, 0 = any free one; remote: a number or a port name) of each
    `[LOCAL:]REMOTE`, as kubectl reads them."""
    out: list[tuple[int | None, str]] = []
    for spec in specs:
        local_text, sep, remote = spec.rpartition(":")
        if not sep:
            local_text, remote = "", spec
        if not remote:
            raise CommandError(f"invalid port {spec!r}: write [LOCAL:]REMOTE, e.g. 8888 or 9000:8888")
        local: int | None = None
        if sep:
            if local_text == "":
                local = 0
            elif local_text.isdigit() and 0 <= int(local_text) < 65536:
                local = int(local_text)
            else:
                raise CommandError(f"invalid local port {local_text!r} in {spec!r}: a number 0 to 65535")
        if remote.isdigit() and not 0 < int(remote) < 65536:
            raise CommandError(f"invalid remote port {remote!r} in {spec!r}: a number 1 to 65535")
        out.append((local, remote))
    return out


def addresses(value: str) -> list[str]:
    out = []
    for a in (x.strip() for x in value.split(",")):
        if not a:
            continue
        out.append("127.0.0.1" if a == "localhost" else a)
    if not out:
        raise CommandError("--address names no address: e.g. --address 127.0.0.1")
    return out


def _forward(conn: socket.socket, cluster: Any, pod: dict, local: int, remote: int) -> None:
    """One local connection: a WebSocket of its own, copied both ways until either side ends."""
    from gpuctl.cluster import path  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cluster.streaming import (  # noqa: PLC0415 - lazy: CLI start-up
        PORT_FORWARD_PROTOCOLS,
        channel_message,
        open_stream,
    )
    from gpuctl.service.errors import describe_exception  # noqa: PLC0415 - lazy: CLI start-up

    meta = pod["metadata"]
    try:
        ws = open_stream(
            cluster,
            path("Pod", meta["name"], meta["namespace"], "portforward"),
            [("ports", remote)],
            PORT_FORWARD_PROTOCOLS,
        )
    except Exception as e:
        print(f"error: forwarding {local} -> {remote}: {describe_exception(e)}", file=sys.stderr)
        conn.close()
        return

    def upstream() -> None:
        try:
            while data := conn.recv(32768):
                ws.send(channel_message(0, data))
        except OSError:
            pass
        ws.close()

    threading.Thread(target=upstream, daemon=True).start()
    skip = {0: PORT_HEADER, 1: PORT_HEADER}
    errors = b""
    try:
        while (msg := ws.recv()) is not None:
            if not msg or msg[0] not in skip:
                continue
            channel, data = msg[0], msg[1:]
            cut = min(skip[channel], len(data))
            skip[channel] -= cut
            data = data[cut:]
            if channel == 0 and data:
                conn.sendall(data)
            elif channel == 1:
                errors += data
    except OSError:
        pass
    finally:
        ws.shutdown()
        conn.close()
    if errors:
        text = errors.decode(errors="replace").strip()
        print(f"error: an error occurred forwarding {local} -> {remote}: {text}", file=sys.stderr)


@guard
def run(args: argparse.Namespace) -> int:
    import selectors  # noqa: PLC0415 - lazy: CLI start-up

    from gpuctl.service.exec import remote_port, require_stream  # noqa: PLC0415 - lazy: CLI start-up

    wanted = parse_ports(args.ports)
    hosts = addresses(args.address)
    job, pod, cluster = target(args, "forward a port of")
    require_stream(cluster, pod, "portforward")
    pairs = [(local, remote_port(job, pod, remote)) for local, remote in wanted] or [
        (None, remote_port(job, pod, None))
    ]
    sel = selectors.DefaultSelector()
    for local, remote in pairs:
        for host in hosts:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, remote if local is None else local))
            except OSError as e:
                raise CommandError(
                    f"unable to listen on {host}:{local or remote}: {e.strerror or e}"
                ) from None
            s.listen(64)
            bound = s.getsockname()[1]
            shown = f"[{host}]" if family == socket.AF_INET6 else host
            print(f"Forwarding from {shown}:{bound} -> {remote}", flush=True)
            sel.register(s, selectors.EVENT_READ, (bound, remote))
    interruptible()
    try:
        while True:
            for key, _ in sel.select():
                conn, _addr = key.fileobj.accept()  # type: ignore[union-attr]
                bound, remote = key.data
                print(f"Handling connection for {bound}", flush=True)
                threading.Thread(
                    target=_forward, args=(conn, cluster, pod, bound, remote), daemon=True
                ).start()
    except KeyboardInterrupt:
        return 0
    finally:
        for key in list(sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
