"""`gpuctl apply -f FILE...`: create, or update in place where Kubernetes allows (kubectl's
pkg/cmd/apply: ApplyOptions, complete, validate, run)."""

from __future__ import annotations

import argparse

from gpuctl.cli.files import FileOptions, add_file_flags


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "apply",
        help="create or update jobs, pools and quotas from YAML",
        parents=[common["cluster"], common["output"](("json", "yaml"))],
    )
    add_file_flags(p)
    p.add_argument("--force", action="store_true", help="re-create a running Job whose pod template changed")
    p.set_defaults(run=run)


class ApplyOptions(FileOptions):
    action = "apply"

    def submit_flags(self) -> dict:
        return {"force": self.args.force}


def run(args: argparse.Namespace) -> int:
    return ApplyOptions.complete(args).validate().run()
