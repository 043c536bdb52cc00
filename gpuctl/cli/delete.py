"""`gpuctl delete -f FILE...` or `gpuctl delete job|pool|quota|ns NAME...` (kubectl's pkg/cmd/delete:
DeleteOptions, complete, validate, run).

Only objects gpuctl created are deleted; a namespace only with --delete-namespace (or `delete ns`).
"""

from __future__ import annotations

import argparse

from gpuctl.cli.errors import CommandError
from gpuctl.cli.files import FileOptions, add_file_flags

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
    p.set_defaults(run=run)


def validate(args: argparse.Namespace) -> None:
    """Either -f FILE or TYPE NAME..., not both, not neither."""
    if args.files and args.type:
        raise CommandError("give either -f FILE or TYPE NAME, not both")
    if not args.files and (not args.type or not args.names):
        raise CommandError("nothing to delete: use -f FILE, or TYPE NAME (job, pool, quota, ns)")


class DeleteFileOptions(FileOptions):
    """`delete -f`: the documents' objects, in the reverse order of a create."""

    action = "delete"

    def submit_flags(self) -> dict:
        return {"keep_running": self.args.keep_running, "delete_namespace": self.args.delete_namespace}


def run(args: argparse.Namespace) -> int:
    validate(args)
    if args.files:
        return DeleteFileOptions.complete(args).validate().run()
    return delete_names(args)


def delete_names(args: argparse.Namespace) -> int:
    """`delete TYPE NAME...`: each name on its own (a client dry run only reads)."""
    from gpuctl.cli.cmdutil import connect  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cli.files import scope_namespace  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cli.report import print_results  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.lifecycle import delete_by_name  # noqa: PLC0415 - lazy: CLI start-up

    results = delete_by_name(
        connect(args),
        TYPES[args.type],
        args.names,
        namespace=scope_namespace(args),
        force=args.force,
        delete_namespace=args.delete_namespace,
        dry_run=args.dry_run,
        keep_running=args.keep_running,
    )
    return print_results(args, results)
