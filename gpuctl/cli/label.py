"""`gpuctl label node NODE... KEY=VALUE... [--overwrite]`, `KEY-` or `--delete KEY` removes.

kubectl semantics: changing an existing value needs --overwrite. A key without a prefix gets
`runwhere.ai/`; an already-prefixed key is used as is. The earlier form `gpuctl label NODE... K=V`
(without the word `node`) is accepted too. `--dry-run=client` reads the nodes and pools, checks, and
prints what would change; `--dry-run=server` sends the patches with dryRun=All.
"""

from __future__ import annotations

import argparse

from gpuctl.cli.files import add_dry_run_flag
from gpuctl.cli.report import print_lines


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "label",
        help="add, change or remove node labels",
        parents=[common["cluster"], common["output"](("json", "yaml"))],
    )
    p.add_argument("args", nargs="+", metavar="ARG", help="[node] NODE... KEY=VALUE... | KEY-")
    p.add_argument("--overwrite", action="store_true", help="allow changing an existing value")
    p.add_argument("--delete", action="append", default=[], metavar="KEY", help="remove this label")
    add_dry_run_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from gpuctl.cli.cmdutil import command_error, connect  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.errors import ServiceError  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.nodes import label_nodes, parse_label_args  # noqa: PLC0415 - lazy: CLI start-up

    try:
        nodes, changes = parse_label_args(args.args, args.delete)
        lines = label_nodes(connect(args), nodes, changes, overwrite=args.overwrite, dry_run=args.dry_run)
    except ServiceError as e:
        raise command_error(e) from None
    if args.output in ("json", "yaml"):
        from gpuctl.cli.output import print_data  # noqa: PLC0415 - lazy: CLI start-up

        print_data([{"node": n, "labels": changes, "success": True} for n in nodes], args.output)
    else:
        print_lines(args, lines)
    return 0
