"""Printing the outcome of create/apply/delete/label: kubectl-like lines, or JSON results."""

from __future__ import annotations

import argparse
import sys

from gpuctl.cli.errors import not_found


def print_lines(args: argparse.Namespace, lines: list[str]) -> None:
    """kubectl's lines, each with " (dry run)" or " (server dry run)" when nothing was stored."""
    suffix = args.dry_run.suffix()
    for line in lines:
        print(line + suffix)


def print_results(args: argparse.Namespace, results: list) -> int:
    """`results` are gpuctl.service.lifecycle.Result objects. Exit 1 if any failed."""
    failed = [r for r in results if r.error]
    if args.output in ("json", "yaml"):
        from gpuctl.cli.output import print_data  # noqa: PLC0415 - lazy: CLI start-up

        print_data([r.as_dict() for r in results], args.output)
    else:
        for r in results:
            if r.missing:
                print(not_found(r.missing, r.name).line(), file=sys.stderr)
            elif r.error:
                print(f"error: {r.error}", file=sys.stderr)
            else:
                print_lines(args, r.lines)
    return 1 if failed else 0
