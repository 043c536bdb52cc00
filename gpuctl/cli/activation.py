"""What `gpuctl stop` and `gpuctl resume` share (kueuectl's UpdateWorkloadActivationOptions): the flags,
Options -> complete -> validate -> run, and the printing. The verbs are gpuctl.cli.stop and
gpuctl.cli.resume; the change itself is gpuctl.service.activation.set_active (the API's too).

Module level imports only the standard library and the CLI's light modules (start-up).
"""

from __future__ import annotations

import argparse
import sys
from typing import ClassVar, Self

from gpuctl.cli.cmdutil import command_error
from gpuctl.cli.errors import CommandError
from gpuctl.cli.files import add_dry_run_flag

OUTPUTS = ("name", "json", "yaml")


def register_verb(
    sub: argparse._SubParsersAction, common: dict, verb: str, help_text: str, options: type[ActivationOptions]
) -> None:
    p = sub.add_parser(verb, help=help_text, description=options.description, parents=[common["cluster"]])
    p.add_argument("names", nargs="+", metavar="JOB", help="job name (or the name of one of its pods)")
    p.add_argument(
        "-o", "--output", choices=OUTPUTS, help="name: TYPE/NAME of each job; json|yaml: the outcome"
    )
    p.add_argument("--json", action="store_true", help="same as -o json")
    add_dry_run_flag(p)
    p.set_defaults(run=lambda args: options.complete(args).validate().run())


class ActivationOptions:
    """Options -> complete (the namespace, as kubectl finds it) -> validate -> run. A plain class:
    `dataclasses` would cost every command's start-up."""

    active: ClassVar[bool]
    description: ClassVar[str] = ""

    def __init__(self, args: argparse.Namespace, namespace: str | None):
        self.args = args
        self.namespace = namespace

    @classmethod
    def complete(cls, args: argparse.Namespace) -> Self:
        """Where the job is looked for: -n, else the context's namespace, else every namespace."""
        from gpuctl.cli.files import scope_namespace  # noqa: PLC0415 - lazy: CLI start-up

        return cls(args, scope_namespace(args))

    def validate(self) -> Self:
        if len(set(self.args.names)) != len(self.args.names):
            raise CommandError("a job is named twice: name each job once")
        return self

    def run(self) -> int:
        """Each job on its own (kubectl's way with several names): an error is printed and the others
        still go; exit 1 if any failed."""
        from gpuctl.cli.cmdutil import connect  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.service.activation import set_active  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.service.errors import ServiceError  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.service.history import caller_name  # noqa: PLC0415 - lazy: CLI start-up

        cluster = connect(self.args)
        actor = caller_name(cluster) if self.args.dry_run.persists else None
        done, failed = [], 0
        for name in self.args.names:
            try:
                done.append(
                    set_active(
                        cluster, name, self.namespace, self.active, dry_run=self.args.dry_run, actor=actor
                    )
                )
            except ServiceError as e:
                print(command_error(e).line(), file=sys.stderr)
                failed += 1
        self.print(done)
        return 1 if failed else 0

    def print(self, done: list) -> None:
        fmt = self.args.output
        if fmt in ("json", "yaml"):
            from gpuctl.cli.output import print_data  # noqa: PLC0415 - lazy: CLI start-up

            data = [{**a.as_dict(), "dryRun": str(self.args.dry_run)} for a in done]
            print_data(data[0] if len(data) == 1 else data, fmt)
        elif fmt == "name":  # kubectl's -o name: TYPE/NAME only, no verb, no dry-run note
            for a in done:
                print(a.object_name)
        else:
            from gpuctl.cli.report import print_lines  # noqa: PLC0415 - lazy: CLI start-up

            print_lines(self.args, [a.line() for a in done])
