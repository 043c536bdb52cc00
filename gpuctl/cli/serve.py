"""`gpuctl serve [--metrics] [--api] ...`: the long-running service (metrics, reconciler, REST API).

Only the help entry lives here: gpuctl.cli must not import gpuctl.server, so the console entry point
(gpuctl.main) runs the service and passes it in as `args.services["serve"]`.
"""

from __future__ import annotations

import argparse

from gpuctl.cli.errors import CommandError


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser("serve", help="run gpuctl's service: pool reconciler, /metrics, REST API")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options (see `gpuctl serve --help`)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    runner = getattr(args, "services", {}).get("serve")
    if runner is None:
        raise CommandError("`gpuctl serve` is run by the gpuctl command (gpuctl.main), not by gpuctl.cli")
    rest = list(args.rest)
    return runner(rest[1:] if rest[:1] == ["--"] else rest)  # `gpuctl -v serve -- --flag ...`
