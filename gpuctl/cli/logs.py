"""`gpuctl logs JOB [-f] [--tail N] [--all-pods]`: a job's container logs, found by job.name."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "logs", help="print a job's logs", parents=[common["cluster"], common["output"](("json",))]
    )
    p.add_argument("job", metavar="JOB", help="the job.name from the YAML")
    p.add_argument("-f", "--follow", action="store_true", help="stream new lines until the pod ends")
    p.add_argument("--tail", type=int, default=100, help="lines from the end (default 100; -1 for all)")
    p.add_argument(
        "--all-pods", action="store_true", help="every pod of the job, each line prefixed by its pod"
    )
    p.add_argument(
        "--timestamps",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="prefix each line with its RFC3339 time (default on)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from gpuctl.cli import views  # noqa: PLC0415 - lazy: CLI start-up

    return views.logs(args)
