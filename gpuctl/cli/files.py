"""What create, apply, delete -f and label share: file flags, the --dry-run flag, loading, printing.

Module level imports only the standard library (CLI start-up); the spec loader (pydantic), YAML and
the service layer are imported when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Self

from gpuctl.cli.errors import CommandError

if TYPE_CHECKING:
    from gpuctl.domain.dryrun import DryRun
    from gpuctl.spec import Document

DRY_RUN_CHOICES = ("none", "client", "server")


def parse_dry_run(value: str) -> DryRun:
    """argparse `type=` of --dry-run: the one place a flag value becomes a DryRun. Only kubectl's
    three values (the API also takes true/false, the flag does not)."""
    from gpuctl.domain.dryrun import DryRun  # noqa: PLC0415 - lazy: CLI start-up

    if value not in DRY_RUN_CHOICES:
        raise argparse.ArgumentTypeError(f'invalid value "{value}": use none, client or server')
    return DryRun.parse(value)


def add_dry_run_flag(p: argparse.ArgumentParser) -> None:
    """`--dry-run` alone is client (kubectl); argparse passes const and default through `type` too,
    so args.dry_run is always a DryRun."""
    p.add_argument(
        "--dry-run",
        nargs="?",
        const="client",
        default="none",
        type=parse_dry_run,
        choices=DRY_RUN_CHOICES,
        help="client: print what would be done (or the objects, with -o yaml|json) and change nothing; "
        "server: send every write with dryRun=All (validated by the API server, not stored)",
    )


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
    add_dry_run_flag(p)
    p.add_argument("--strict", action="store_true", help="unknown YAML keys are errors, not warnings")


def load(args: argparse.Namespace) -> list[Document]:
    """Load and validate every document of every file, or fail with all problems at once."""
    from gpuctl.spec import SpecConfig, SpecError, load_files  # noqa: PLC0415 - lazy: CLI start-up

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
    from gpuctl.cluster.config import default_namespace as ns  # noqa: PLC0415 - lazy: CLI start-up

    return ns(
        args.namespace, kubeconfig=getattr(args, "kubeconfig", None), context=getattr(args, "context", None)
    )


def scope_namespace(args: argparse.Namespace) -> str | None:
    """Where a job named on the command line is looked for: -n, else the context's namespace, else
    every namespace (gpuctl.cluster.config.namespace_scope)."""
    from gpuctl.cluster.config import namespace_scope  # noqa: PLC0415 - lazy: CLI start-up

    return namespace_scope(
        args.namespace, kubeconfig=getattr(args, "kubeconfig", None), context=getattr(args, "context", None)
    )


def print_client_dry_run(args: argparse.Namespace, docs: list[Document]) -> int:
    """`--dry-run=client`, offline: the objects with -o yaml|json, else the lines of what would be done."""
    from gpuctl.cli.output import print_objects  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.plan import plan_documents  # noqa: PLC0415 - lazy: CLI start-up

    plan = plan_documents(docs, default_namespace(args))
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.output in ("json", "yaml"):
        print_objects(plan.objects, args.output)
    else:
        for line in plan.lines:
            print(line + args.dry_run.suffix())
    return 0


class FileOptions:
    """create / apply / delete -f: Options -> complete (flags and files) -> validate -> run. (A plain
    class: `dataclasses` would cost every command's start-up.)"""

    action: ClassVar[str] = ""

    def __init__(self, args: argparse.Namespace, docs: list[Document], namespace: str):
        self.args = args
        self.docs = docs
        self.namespace = namespace

    @classmethod
    def complete(cls, args: argparse.Namespace) -> Self:
        """Load and validate every document (all problems at once), and the namespace of jobs without
        one (-n, else the context's)."""
        return cls(args, load(args), default_namespace(args))

    def validate(self) -> Self:
        return self

    def submit_flags(self) -> dict:
        """The verb's own flags, as gpuctl.service.lifecycle.submit takes them."""
        return {}

    def run(self) -> int:
        from gpuctl.domain.dryrun import DryRun  # noqa: PLC0415 - lazy: CLI start-up

        if self.args.dry_run is DryRun.CLIENT:
            from gpuctl.service.plan import needs_cluster  # noqa: PLC0415 - lazy: CLI start-up

            if self.args.output in ("json", "yaml") or not needs_cluster(self.docs, self.action):
                return print_client_dry_run(self.args, self.docs)
        from gpuctl.cli.cmdutil import connect  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.cli.report import print_results  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.service.lifecycle import submit  # noqa: PLC0415 - lazy: CLI start-up

        cluster = connect(self.args)
        # No submitter: the API server writes runwhere.ai/submitted-by from the request's user (the
        # submitted-by MutatingAdmissionPolicy, docs/audit.md), so no SelfSubjectReview round trip.
        results = submit(
            cluster,
            self.docs,
            self.namespace,
            action=self.action,
            dry_run=self.args.dry_run,
            **self.submit_flags(),
        )
        return print_results(self.args, results, objects=self.action in ("create", "apply"))
