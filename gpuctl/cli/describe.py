"""`gpuctl describe job|pool|node|quota|ns NAME`."""

from __future__ import annotations

import argparse

TYPES = {
    "job": "job",
    "jobs": "job",
    "pool": "pool",
    "pools": "pool",
    "node": "node",
    "nodes": "node",
    "quota": "quota",
    "quotas": "quota",
    "ns": "namespace",
    "namespace": "namespace",
}


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "describe",
        help="show one job, pool, node, quota or namespace in detail",
        parents=[common["cluster"], common["output"](("json", "yaml"))],
    )
    p.add_argument("type", choices=sorted(TYPES), metavar="TYPE")
    p.add_argument("name", metavar="NAME")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from gpuctl.cli import views  # noqa: PLC0415 - lazy: CLI start-up

    handlers = {
        "job": views.describe_job,
        "pool": views.describe_pool,
        "node": views.describe_node,
        "quota": views.describe_quota,
        "namespace": views.describe_namespace,
    }
    return handlers[TYPES[args.type]](args)
