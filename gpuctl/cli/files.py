"""What create, apply and delete -f share: file flags, loading, dry-run printing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuctl.cli.errors import CommandError
from gpuctl.cli.output import print_objects
from gpuctl.spec import Document, SpecConfig, SpecError, load_files


def add_file_flags(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    p.add_argument(
        "-f",
        "--filename",
        "--file",
        dest="files",
        action="extend",
        nargs="+",
        default=[],
        required=required,
        metavar="FILE",
        help="YAML file(s); repeat -f or list several; '-' reads stdin",
    )
    p.add_argument(
        "--dry-run",
        nargs="?",
        const="client",
        default="none",
        choices=["none", "client", "server"],
        help="client: print the objects without sending them; server: send them for validation only",
    )
    p.add_argument("--strict", action="store_true", help="unknown YAML keys are errors, not warnings")


def load(args: argparse.Namespace) -> list[Document]:
    """Load and validate every document of every file, or fail with all problems at once."""
    try:
        docs = load_files(expand(args.files), SpecConfig.from_env(strict=args.strict))
    except SpecError as e:
        raise CommandError(str(e)) from None
    for d in docs:
        for w in d.warnings:
            print(f"warning: {w}", file=sys.stderr)
    return docs


def expand(paths: list[str]) -> list[str]:
    """A directory stands for its *.yaml and *.yml files, in name order (as kubectl -f DIR)."""
    out = []
    for p in paths:
        d = Path(p)
        if p != "-" and d.is_dir():
            found = sorted(str(f) for f in d.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file())
            if not found:
                raise CommandError(f"{p}: no .yaml or .yml files in this directory")
            out += found
        else:
            out.append(p)
    return out


def default_namespace(args: argparse.Namespace) -> str:
    from gpuctl.cluster.config import default_namespace as ns

    return ns(
        args.namespace, kubeconfig=getattr(args, "kubeconfig", None), context=getattr(args, "context", None)
    )


def print_client_dry_run(args: argparse.Namespace, docs: list[Document]) -> int:
    from gpuctl.service.plan import plan_documents

    plan = plan_documents(docs, default_namespace(args))
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    print_objects(plan.objects, "json" if args.output == "json" else "yaml")
    return 0
