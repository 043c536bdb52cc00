"""`gpuctl apply -f FILE...`: create, or update in place where Kubernetes allows."""

from __future__ import annotations

import argparse

from gpuctl.cli import create
from gpuctl.cli.files import add_file_flags


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "apply",
        help="create or update jobs, pools and quotas from YAML",
        parents=[common["cluster"], common["output"](("json", "yaml"))],
    )
    add_file_flags(p)
    p.add_argument("--force", action="store_true", help="re-create a running Job whose pod template changed")
    p.set_defaults(run=create.run, action="apply")
