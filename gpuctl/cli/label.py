"""`gpuctl label node NODE... KEY=VALUE... [--overwrite]`, `KEY-` or `--delete KEY` removes.

kubectl semantics: changing an existing value needs --overwrite. A key without a prefix gets
`runwhere.ai/`; an already-prefixed key is used as is. The earlier form `gpuctl label NODE... K=V`
(without the word `node`) is accepted too.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "label",
        help="add, change or remove node labels",
        parents=[common["cluster"], common["output"](("json", "yaml"))],
    )
    p.add_argument("args", nargs="+", metavar="ARG", help="[node] NODE... KEY=VALUE... | KEY-")
    p.add_argument("--overwrite", action="store_true", help="allow changing an existing value")
    p.add_argument("--delete", action="append", default=[], metavar="KEY", help="remove this label")
    p.add_argument(
        "--dry-run", nargs="?", const="client", default="none", choices=["none", "client", "server"]
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from gpuctl.cli import views

    return views.label(args)
