"""`gpuctl admission serve ...`: run the validating admission webhook (admission/).

Only the help entry lives here: gpuctl.cli must not import admission, so the console entry point
(gpuctl.main) runs the webhook and passes it in as `args.services["admission serve"]`.
"""

from __future__ import annotations

import argparse

from gpuctl.cli.errors import CommandError


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser("admission", help="the validating admission webhook")
    p.add_argument("action", choices=["serve"])
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options (see `gpuctl admission serve --help`)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    runner = getattr(args, "services", {}).get(f"admission {args.action}")
    if runner is None:
        raise CommandError(
            f"`gpuctl admission {args.action}` is run by the gpuctl command (gpuctl.main), not by gpuctl.cli"
        )
    rest = list(args.rest)
    return runner(rest[1:] if rest[:1] == ["--"] else rest)  # `gpuctl -v serve -- --flag ...`
