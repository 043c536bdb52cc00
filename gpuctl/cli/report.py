"""Printing the outcome of create/apply/delete: kubectl-like lines, or JSON results."""

from __future__ import annotations

import argparse
import sys

from gpuctl.cli.output import print_data


def print_results(args: argparse.Namespace, results: list) -> int:
    """`results` are gpuctl.service.lifecycle.Result objects. Exit 1 if any failed."""
    failed = [r for r in results if r.error]
    if args.output in ("json", "yaml"):
        print_data([r.as_dict() for r in results], args.output)
    else:
        suffix = {"client": " (dry run)", "server": " (server dry run)"}.get(
            getattr(args, "dry_run", "none"), ""
        )
        for r in results:
            if r.error:
                print(f"error: {r.error}", file=sys.stderr)
            else:
                for line in r.lines:
                    print(line + suffix)
    return 1 if failed else 0
