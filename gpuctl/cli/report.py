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


def print_results(args: argparse.Namespace, results: list, *, objects: bool = False) -> int:
    """`results` are gpuctl.service.lifecycle.Result objects. Exit 1 if any failed. objects: -o json|yaml
    prints the objects written (create, apply), not one summary per document."""
    failed = [r for r in results if r.error]
    if args.output in ("json", "yaml") and objects and not getattr(args, "json", False):
        # create|apply -o json|yaml: the objects written, as the API server answered (kubectl's create
        # -o yaml); a failure is still said on stderr.
        from gpuctl.cli.output import print_objects  # noqa: PLC0415 - lazy: CLI start-up

        objs = [_shown(o) for r in results for o in r.written]
        if objs:
            print_objects(objs, args.output)
        for r in failed:
            print(f"error: {r.error}", file=sys.stderr)
    elif args.output in ("json", "yaml"):
        from gpuctl.cli.output import print_data  # noqa: PLC0415 - lazy: CLI start-up

        # the earlier gpuctl's --json (and delete's -o json): one summary per document or name
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


def _shown(obj: dict) -> dict:
    """An object as kubectl prints it: without metadata.managedFields (--show-managed-fields=false)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}
