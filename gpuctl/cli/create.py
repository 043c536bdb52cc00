"""`gpuctl create -f FILE...`: create jobs, pools and quotas; refuse what already exists."""

from __future__ import annotations

import argparse

from gpuctl.cli.files import add_file_flags, default_namespace, load, print_client_dry_run
from gpuctl.cli.report import print_results


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "create",
        help="create jobs, pools and quotas from YAML",
        parents=[common["cluster"], common["output"](("json", "yaml"))],
    )
    add_file_flags(p)
    p.set_defaults(run=run, action="create")


def run(args: argparse.Namespace) -> int:
    docs = load(args)
    if args.dry_run == "client" and args.output in ("json", "yaml"):
        return print_client_dry_run(args, docs)
    from gpuctl.service.lifecycle import submit

    session = _session(args)
    results = submit(
        session,
        docs,
        default_namespace(args),
        action=args.action,
        dry_run=args.dry_run,
        force=getattr(args, "force", False),
    )
    return print_results(args, results)


def _session(args: argparse.Namespace):
    from gpuctl.cluster import Cluster

    return Cluster.connect(kubeconfig=args.kubeconfig, context=args.context)
