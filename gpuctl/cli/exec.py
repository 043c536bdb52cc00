"""`gpuctl exec JOB [--rank N | --pod P] [-c C] [-i] [-t] [--pod-running-timeout 1m0s] -- CMD [ARG...]`:
run a command in a running pod of a job, as `kubectl exec` does in a pod, over the API server's
WebSocket exec protocol (gpuctl.cluster.streaming). The pod: a gang's rank 0 or `--rank N`, a service's
replica `--pod P`, else the job's first running pod (gpuctl.service.exec); a job still queued or starting
is waited for up to --pod-running-timeout, a job that ended or was stopped is refused at once. The exit
code is the command's own (kubectl's), printed as `command terminated with exit code N` when not 0.

`gpuctl attach` (gpuctl.cli.attach) shares the pod choice and the session: `run_session` copies stdin to
channel 0 (its end of file half-closes it, v5.channel.k8s.io), channels 1 and 2 to stdout and stderr,
sends the terminal's size on channel 4 with -t (and again on SIGWINCH), and reads the exit status from
channel 3.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from gpuctl.cli.cmdutil import connect, guard, interruptible, scope
from gpuctl.cli.errors import CommandError

if TYPE_CHECKING:
    from gpuctl.cluster.streaming import WebSocket

DEFAULT_POD_RUNNING_TIMEOUT = "1m0s"  # kubectl's --pod-running-timeout default


def add_pod_flags(p: argparse.ArgumentParser) -> None:
    """Which pod of the job, and how long to wait for it to run (exec, attach, port-forward)."""
    p.add_argument("job", metavar="JOB", help="the job.name from the YAML (or one of its pods)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--rank", type=int, metavar="N", help="a multi-node job's rank N (default 0)")
    which.add_argument("--pod", metavar="POD", help="one of the job's pods (a service's replica)")
    p.add_argument(
        "--pod-running-timeout",
        default=DEFAULT_POD_RUNNING_TIMEOUT,
        metavar="DURATION",
        help="how long to wait until the pod runs (5s, 2m; default 1m0s, as kubectl's)",
    )


def add_stream_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--container", help="the container (default: the pod's first)")
    p.add_argument("-i", "--stdin", action="store_true", help="pass stdin to the container")
    p.add_argument("-t", "--tty", action="store_true", help="stdin is a TTY (a shell: -it)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only what the container prints")


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "exec",
        help="run a command in a running job's pod",
        description=__doc__.split("\n\n", 1)[0] if __doc__ else "",
        parents=[common["cluster"]],
    )
    add_pod_flags(p)
    add_stream_flags(p)
    p.add_argument("command", nargs="*", metavar="-- COMMAND [ARG...]")
    p.set_defaults(run=run)


def pod_running_timeout(value: str) -> float:
    from gpuctl.cluster.config import ConfigError, parse_timeout  # noqa: PLC0415 - lazy: CLI start-up

    try:
        seconds = parse_timeout(value)
    except ConfigError:
        seconds = None
    if seconds is None or seconds <= 0:
        raise CommandError(
            f"invalid --pod-running-timeout {value!r}: a duration above 0 such as 30s, 1m0s, 5m"
        ) from None
    return seconds


def command_of(args: argparse.Namespace) -> list[str]:
    """The command after `--` (kubectl's `exec POD -- CMD`), at least one word."""
    cmd = list(args.command or [])
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if not cmd:
        raise CommandError(
            f"you must specify at least one command for the container: gpuctl exec {args.job} -- CMD"
        )
    return cmd


def target(args: argparse.Namespace, verb: str) -> tuple[Any, dict, Any]:
    """(job, running pod, the cluster that runs it) for exec, attach and port-forward."""
    from gpuctl.service.exec import running_pod  # noqa: PLC0415 - lazy: CLI start-up

    timeout = pod_running_timeout(args.pod_running_timeout)
    return running_pod(
        connect(args), args.job, scope(args), verb=verb, rank=args.rank, pod=args.pod, timeout=timeout
    )


def container_of(pod: dict, container: str | None) -> str:
    """-c, checked against the pod's containers (kubectl's error otherwise), else the first container."""
    names = [c["name"] for c in pod["spec"]["containers"]]
    if container is None:
        return names[0]
    if container not in names:
        raise CommandError(
            f"container {container} is not valid for pod {pod['metadata']['name']}: choose one of "
            f"[{' '.join(names)}]"
        )
    return container


def stream_query(args: argparse.Namespace, pod: dict, tty: bool) -> list[tuple[str, Any]]:
    """The exec/attach query (PodExecOptions): container, stdin, stdout, stderr (not with a TTY, which
    merges them, as kubectl), tty."""
    return [
        ("container", container_of(pod, args.container)),
        ("stdin", bool(args.stdin)),
        ("stdout", True),
        ("stderr", not tty),
        ("tty", tty),
    ]


def use_tty(args: argparse.Namespace) -> bool:
    """-t only when stdin is a terminal (kubectl's warning otherwise) and -i passes it."""
    if not args.tty:
        return False
    if not args.stdin:
        if not args.quiet:
            print("Unable to use a TTY - input is not passed: add -i (-it for a shell)", file=sys.stderr)
        return False
    if not sys.stdin.isatty():
        if not args.quiet:
            print("Unable to use a TTY - input is not a terminal or the right kind of file", file=sys.stderr)
        return False
    return True


@guard
def run(args: argparse.Namespace) -> int:
    from gpuctl.cluster import path  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cluster.streaming import EXEC_PROTOCOLS, open_stream  # noqa: PLC0415 - lazy: CLI start-up

    cmd = command_of(args)
    tty = use_tty(args)
    _job, pod, cluster = target(args, "exec into")
    query = [*stream_query(args, pod, tty), *(("command", word) for word in cmd)]
    ws = open_stream(
        cluster,
        path("Pod", pod["metadata"]["name"], pod["metadata"]["namespace"], "exec"),
        query,
        EXEC_PROTOCOLS,
    )
    return run_session(ws, stdin=bool(args.stdin), tty=tty, quiet=args.quiet)


def _stdin_pump(ws: WebSocket, fd: int) -> None:
    """stdin to channel 0 until its end of file, then v5's half-close (v4 has none: the command reads
    until it ends on its own)."""
    from gpuctl.cluster.streaming import (  # noqa: PLC0415 - lazy: CLI start-up
        EXEC_V5,
        STDIN,
        channel_message,
        close_signal,
    )

    try:
        while True:
            data = os.read(fd, 32768)
            if not data:
                break
            ws.send(channel_message(STDIN, data))
        if ws.protocol == EXEC_V5:
            ws.send(close_signal(STDIN))
    except OSError:
        pass  # the session ended while stdin was read


def _send_size(ws: WebSocket) -> None:
    from gpuctl.cluster.streaming import resize_message  # noqa: PLC0415 - lazy: CLI start-up

    try:
        size = os.get_terminal_size(sys.stdout.fileno())
    except OSError:
        return
    with contextlib.suppress(OSError):
        ws.send(resize_message(size.columns, size.lines))


def run_session(ws: WebSocket, *, stdin: bool, tty: bool, quiet: bool = False) -> int:
    """Copy the streams until the server closes the WebSocket; the remote command's exit code."""
    from gpuctl.cluster.streaming import ERROR, STDERR, STDOUT, exit_status  # noqa: PLC0415 - lazy: CLI start-up

    restore = None
    if tty:
        import signal  # noqa: PLC0415 - lazy: CLI start-up
        import termios  # noqa: PLC0415 - lazy: CLI start-up (only -t needs it)
        import tty as ttymod  # noqa: PLC0415 - lazy: CLI start-up (only -t needs it)

        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
        ttymod.setraw(fd)
        restore = lambda: termios.tcsetattr(fd, termios.TCSADRAIN, saved)  # noqa: E731
        _send_size(ws)
        signal.signal(signal.SIGWINCH, lambda *_: _send_size(ws))
    interruptible()
    if stdin:
        threading.Thread(target=_stdin_pump, args=(ws, sys.stdin.fileno()), daemon=True).start()
    out, err = sys.stdout.buffer, sys.stderr.buffer
    status = b""
    try:
        while True:
            msg = ws.recv()
            if msg is None:
                break
            if not msg:
                continue
            channel, data = msg[0], msg[1:]
            if channel == STDOUT:
                out.write(data)
                out.flush()
            elif channel == STDERR:
                err.write(data)
                err.flush()
            elif channel == ERROR:
                status += data
    finally:
        if restore is not None:
            restore()
        ws.close()
        ws.shutdown()
    if not status:
        return 0  # closed without a status: kubectl's nil error
    code, text = exit_status(status)
    if code and not quiet:
        print(text if text.startswith("command terminated") else f"error: {text}", file=sys.stderr)
    return code
