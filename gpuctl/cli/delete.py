"""`gpuctl delete -f FILE...` or `gpuctl delete job|pool|quota|ns NAME`.

Only objects gpuctl created are deleted; a namespace only with --delete-namespace (or `delete ns`).
"""

from __future__ import annotations

import argparse

from gpuctl.cli import create
from gpuctl.cli.errors import CommandError
from gpuctl.cli.files import add_file_flags, scope_namespace
from gpuctl.cli.report import print_results

TYPES = {
    "job": "job",
    "jobs": "job",
    "pool": "pool",
    "pools": "pool",
    "quota": "quota",
    "quotas": "quota",
    "ns": "namespace",
    "namespace": "namespace",
    "namespaces": "namespace",
}


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "delete",
        help="delete jobs, pools, quotas (from YAML or by name)",
        parents=[common["cluster"], common["output"](("json", "yaml"))],
    )
    p.add_argument("type", nargs="?", choices=sorted(TYPES), metavar="TYPE", help="job, pool, quota or ns")
    p.add_argument("names", nargs="*", metavar="NAME")
    add_file_flags(p, required=False)
    p.add_argument("--force", action="store_true", help="jobs: delete pods immediately (grace period 0)")
    p.add_argument(
        "--delete-namespace",
        action="store_true",
        help="quota: also delete the team namespaces that gpuctl created for it",
    )
    p.add_argument(
        "--keep-running",
        action="store_true",
        help="pool: delete it even while jobs use it; they keep running, new work for the pool is refused",
    )
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(run=run, action="delete")


def run(args: argparse.Namespace) -> int:
    if args.files:
        if args.type:
            raise CommandError("give either -f FILE or TYPE NAME, not both")
        return create.run(args)
    if not args.type or not args.names:
        raise CommandError("nothing to delete: use -f FILE, or TYPE NAME (job, pool, quota, ns)")
    from gpuctl.service.lifecycle import delete_by_name  # noqa: PLC0415 - lazy: CLI start-up

    results = delete_by_name(
        create._session(args),
        TYPES[args.type],
        args.names,
        namespace=scope_namespace(args),
        force=args.force,
        delete_namespace=args.delete_namespace,
        dry_run=args.dry_run,  # a DryRun (files.add_dry_run_flag); client only reads
        keep_running=args.keep_running,
    )
    return print_results(args, results)
