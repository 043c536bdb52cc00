"""`gpuctl version`: client version, and the cluster's and Kueue's when reachable."""

from __future__ import annotations

import argparse

from gpuctl import __version__
from gpuctl.cli.output import print_data


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "version",
        help="print gpuctl's version",
        parents=[common["cluster"], common["output"](("json", "yaml"))],
    )
    p.add_argument("--client", action="store_true", help="client version only (no cluster access)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    info: dict = {"gpuctlVersion": __version__}
    if not args.client:
        try:
            from gpuctl.cluster import Cluster

            cluster = Cluster.connect(kubeconfig=args.kubeconfig, context=args.context)
            info["serverVersion"] = cluster.server_version()
        except Exception as e:
            info["serverVersion"] = None
            info["serverError"] = str(e).splitlines()[0] if str(e) else type(e).__name__
    if args.output:
        print_data(info, args.output)
        return 0
    print(f"gpuctl version: {__version__}")
    if not args.client:
        server = info.get("serverVersion") or f"unreachable ({info.get('serverError', '')})"
        print(f"server version: {server}")
    return 0
