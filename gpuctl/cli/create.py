"""`gpuctl create -f FILE...`: create jobs, pools and quotas; refuse what already exists.

`--dry-run` (args.dry_run, a DryRun resolved by the flag's `type`) is passed to every write:
client prints what would be done and writes nothing (with -o yaml|json: the objects, offline; a
create of jobs needs no cluster at all), server sends every write with dryRun=All.
"""

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
    """create, apply and delete -f."""
    from gpuctl.domain.dryrun import DryRun  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.plan import needs_cluster  # noqa: PLC0415 - lazy: CLI start-up

    docs = load(args)
    if args.dry_run is DryRun.CLIENT and (
        args.output in ("json", "yaml") or not needs_cluster(docs, args.action)
    ):
        return print_client_dry_run(args, docs)
    from gpuctl.service.lifecycle import submit  # noqa: PLC0415 - lazy: CLI start-up

    results = submit(
        _session(args),
        docs,
        default_namespace(args),
        action=args.action,
        dry_run=args.dry_run,
        force=getattr(args, "force", False),
        keep_running=getattr(args, "keep_running", False),
        delete_namespace=getattr(args, "delete_namespace", False),
    )
    return print_results(args, results)


def _session(args: argparse.Namespace):
    from gpuctl.cluster import Cluster  # noqa: PLC0415 - lazy: CLI start-up

    return Cluster.connect(kubeconfig=args.kubeconfig, context=args.context)
