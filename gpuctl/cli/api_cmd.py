"""`gpuctl api serve ...`: run the REST API alone (gpuctl.server.api; `gpuctl serve --api` mounts it instead).

Only the help entry lives here: gpuctl.cli must not import gpuctl.server, so the console entry point
(gpuctl.main) runs the API and passes it in as `args.services["api serve"]`.
"""

from __future__ import annotations

import argparse

from gpuctl.cli.errors import CommandError


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser("api", help="the REST API alone (gpuctl serve --api also serves it)")
    p.add_argument("action", choices=["serve"])
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options (see `gpuctl api serve --help`)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    runner = getattr(args, "services", {}).get(f"api {args.action}")
    if runner is None:
        raise CommandError(
            f"`gpuctl api {args.action}` is run by the gpuctl command (gpuctl.main), not by gpuctl.cli"
        )
    rest = list(args.rest)
    return runner(rest[1:] if rest[:1] == ["--"] else rest)  # `gpuctl -v api serve -- --flag ...`
