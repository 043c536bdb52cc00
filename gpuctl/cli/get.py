"""`gpuctl get jobs|pools|nodes|labels|quotas|ns`: tables like kubectl's, or -o json|yaml."""

from __future__ import annotations

import argparse

from gpuctl.constants import JOB_KINDS

TYPES = {
    "job": "jobs",
    "jobs": "jobs",
    "pool": "pools",
    "pools": "pools",
    "node": "nodes",
    "nodes": "nodes",
    "label": "labels",
    "labels": "labels",
    "quota": "quotas",
    "quotas": "quotas",
    "ns": "namespaces",
    "namespace": "namespaces",
    "namespaces": "namespaces",
}


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "get",
        help="list jobs, pools, nodes, labels, quotas, namespaces",
        parents=[common["cluster"], common["output"]()],
    )
    p.add_argument(
        "type", choices=sorted(TYPES), metavar="TYPE", help="jobs, pools, nodes, labels, quotas or ns"
    )
    p.add_argument("name", nargs="?", help="a node (labels), a namespace (quotas), or one object")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="jobs in every team namespace")
    p.add_argument("--pool", help="only this pool")
    p.add_argument("--kind", choices=[k.value for k in JOB_KINDS], help="only this job kind")
    p.add_argument("-l", "--selector", help="label selector, e.g. runwhere.ai/priority=high")
    p.add_argument("--gpu-type", help="nodes: only this GPU type")
    p.add_argument("--key", help="labels: only this key")
    p.add_argument("-w", "--watch", action="store_true", help="after listing, print changes as they happen")
    p.add_argument(
        "--pods", action="store_true", help=argparse.SUPPRESS
    )  # earlier gpuctl; rows are pods anyway
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from gpuctl.cli import views  # noqa: PLC0415 - lazy: CLI start-up

    handlers = {
        "jobs": views.get_jobs,
        "pools": views.get_pools,
        "nodes": views.get_nodes,
        "labels": views.get_labels,
        "quotas": views.get_quotas,
        "namespaces": views.get_namespaces,
    }
    return handlers[TYPES[args.type]](args)
