"""`gpuctl create -f FILE...`: create jobs, pools and quotas; refuse what already exists.

kubectl's shape (pkg/cmd/create): CreateOptions is filled from the flags and the files (`complete`),
checked (`validate`), then `run`. `--dry-run` (a DryRun resolved by the flag's `type`) is passed to
every write: client prints what would be done and writes nothing (with -o yaml|json: the objects,
offline; a create of jobs needs no cluster at all), server sends every write with dryRun=All.
"""

from __future__ import annotations

import argparse

from gpuctl.cli.files import FileOptions, add_file_flags


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "create",
        help="create jobs, pools and quotas from YAML",
        parents=[common["cluster"], common["output"](("json", "yaml"))],
    )
    add_file_flags(p)
    p.set_defaults(run=run)


class CreateOptions(FileOptions):
    action = "create"


def run(args: argparse.Namespace) -> int:
    return CreateOptions.complete(args).validate().run()
