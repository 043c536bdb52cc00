"""`gpuctl attach JOB [--rank N | --pod P] [-c C] [-i] [-t]`: attach to the running process of a job's pod
(its container's main process), as `kubectl attach` does, over the WebSocket attach protocol. The pod is
chosen, waited for and refused as by `gpuctl exec` (gpuctl.cli.exec); -i needs the container to keep
stdin open (`stdin: true` in its spec)."""

from __future__ import annotations

import argparse
import sys

from gpuctl.cli.cmdutil import guard
from gpuctl.cli.exec import add_pod_flags, add_stream_flags, run_session, stream_query, target, use_tty


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "attach",
        help="attach to the main process of a running job's pod",
        description=__doc__.split("\n\n", 1)[0] if __doc__ else "",
        parents=[common["cluster"]],
    )
    add_pod_flags(p)
    add_stream_flags(p)
    p.set_defaults(run=run)


@guard
def run(args: argparse.Namespace) -> int:
    from gpuctl.cluster import path  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cluster.streaming import EXEC_PROTOCOLS, open_stream  # noqa: PLC0415 - lazy: CLI start-up

    tty = use_tty(args)
    _job, pod, cluster = target(args, "attach to")
    meta = pod["metadata"]
    ws = open_stream(
        cluster,
        path("Pod", meta["name"], meta["namespace"], "attach"),
        stream_query(args, pod, tty),
        EXEC_PROTOCOLS,
    )
    if tty and not args.quiet:
        print("If you don't see a command prompt, try pressing enter.", file=sys.stderr)
    return run_session(ws, stdin=bool(args.stdin), tty=tty, quiet=args.quiet)
