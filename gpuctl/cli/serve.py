"""`gpuctl serve [--metrics] [--api] ...`: the long-running service (metrics, reconciler, REST API).

Only the help entries live here (and in admission_cmd, api_cmd): gpuctl.cli must not import
gpuctl.server or admission, so the console entry point (gpuctl.main) runs the services and passes them
in as `args.services["serve"]`, `["admission serve"]`, `["api serve"]`.
"""

from __future__ import annotations

import argparse

from gpuctl.cli.errors import CommandError


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser("serve", help="run gpuctl's service: pool reconciler, /metrics, REST API")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options (see `gpuctl serve --help`)")
    p.set_defaults(run=run)


def register_group(sub: argparse._SubParsersAction, verb: str, help: str) -> None:
    """`gpuctl VERB serve ...` (admission, api): the service's own parser reads the rest."""
    p = sub.add_parser(verb, help=help)
    p.add_argument("action", choices=["serve"])
    p.add_argument("rest", nargs=argparse.REMAINDER, help=f"options (see `gpuctl {verb} serve --help`)")
    p.set_defaults(run=lambda args: run_service(args, f"{verb} {args.action}"))


def run_service(args: argparse.Namespace, name: str) -> int:
    runner = getattr(args, "services", {}).get(name)
    if runner is None:
        raise CommandError(f"`gpuctl {name}` is run by the gpuctl command (gpuctl.main), not by gpuctl.cli")
    rest = list(args.rest)
    return runner(rest[1:] if rest[:1] == ["--"] else rest)  # `gpuctl -v serve -- --flag ...`


def run(args: argparse.Namespace) -> int:
    return run_service(args, "serve")
