"""`gpuctl version`: the client's version and, as `kubectl version` does, the API server's.

`--client` prints the client's only and touches nothing else: no kubeconfig, no cluster client.
"""

from __future__ import annotations

import argparse

from gpuctl import __version__


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "version",
        help="print gpuctl's version (and the cluster's)",
        parents=[common["cluster"], common["output"](("json", "yaml"))],
    )
    p.add_argument("--client", action="store_true", help="client version only (no cluster access)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    info: dict = {"gpuctlVersion": __version__}
    if not args.client:
        info.update(_server_version(args))
    if args.output:
        from gpuctl.cli.output import print_data  # noqa: PLC0415 - lazy: CLI start-up

        print_data(info, args.output)
        return 0
    print(f"gpuctl version: {__version__}")
    if not args.client:
        server = info.get("serverVersion") or f"unreachable ({info.get('serverError', '')})"
        print(f"server version: {server}")
    return 0


def _server_version(args: argparse.Namespace) -> dict:
    """`{"serverVersion": "v1.36.3"}`, or `{"serverVersion": None, "serverError": ...}`: an unreachable
    cluster is part of the answer, not a failure (exit code 0, as before)."""
    try:
        from gpuctl.cli.cmdutil import connect  # noqa: PLC0415 - lazy: CLI start-up

        cluster = connect(args)
        return {"serverVersion": cluster.server_version()}
    except Exception as e:
        return {"serverVersion": None, "serverError": str(e).splitlines()[0] if str(e) else type(e).__name__}
