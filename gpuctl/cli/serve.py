"""`gpuctl serve [--metrics] [--api] ...`: the long-running service (metrics, reconciler, REST API)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser("serve", help="run gpuctl's service: pool reconciler, /metrics, REST API")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options (see `gpuctl serve -- --help`)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from gpuctl.server.main import main

    return main(list(args.rest))
