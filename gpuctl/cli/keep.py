"""`gpuctl keep JOB... --for 4h [-n NS] [--dry-run=client|server] [-o name|json|yaml]`: hold jobs back from
their idle policy (`gpuctl serve --idle`) for a while, e.g. a notebook whose kernel waits for you over
lunch. At most the policy's keepMax (default 8h); `--for 0` ends a keep. docs/utilisation.md.

Module level imports only the standard library and the CLI's light modules (start-up).
"""

from __future__ import annotations

import argparse
import sys
from typing import Self

from gpuctl.cli.cmdutil import command_error
from gpuctl.cli.errors import CommandError
from gpuctl.cli.files import add_dry_run_flag

HELP = "keep jobs from being stopped or scaled down for idle GPUs, for a bounded time"
OUTPUTS = ("name", "json", "yaml")


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "keep",
        help=HELP,
        description=__doc__.split("\n\n", 1)[0] if __doc__ else HELP,
        parents=[common["cluster"]],
    )
    p.add_argument("names", nargs="+", metavar="JOB", help="job name (or the name of one of its pods)")
    p.add_argument(
        "--for",
        dest="duration",
        required=True,
        metavar="DURATION",
        help="how long: 30m, 4h, 1h30m (at most the idle policy's keepMax); 0 ends a keep",
    )
    p.add_argument("-o", "--output", choices=OUTPUTS, help="name: TYPE/NAME of each job; json|yaml: the keep")
    add_dry_run_flag(p)
    p.set_defaults(run=lambda args: KeepOptions.complete(args).validate().run())


class KeepOptions:
    """Options -> complete (the namespace; the duration) -> validate -> run."""

    def __init__(self, args: argparse.Namespace, namespace: str | None, seconds: int | None):
        self.args = args
        self.namespace = namespace
        self.seconds = seconds

    @classmethod
    def complete(cls, args: argparse.Namespace) -> Self:
        from gpuctl.cli.files import scope_namespace  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.quantity import parse_duration  # noqa: PLC0415 - lazy: CLI start-up

        return cls(args, scope_namespace(args), parse_duration(args.duration))

    def validate(self) -> Self:
        if self.seconds is None:
            raise CommandError(
                f"--for {self.args.duration}: use a duration such as 30m, 4h or 1h30m (0 ends a keep)"
            )
        if len(set(self.args.names)) != len(self.args.names):
            raise CommandError("a job is named twice: name each job once")
        return self

    def run(self) -> int:
        """Each job on its own (kubectl's way with several names): errors printed, the others still go."""
        from gpuctl.cli.cmdutil import connect  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.service.errors import ServiceError  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.service.keep import keep_job  # noqa: PLC0415 - lazy: CLI start-up

        cluster = connect(self.args)
        done, failed = [], 0
        for name in self.args.names:
            try:
                done.append(
                    keep_job(cluster, name, self.namespace, self.seconds or 0, dry_run=self.args.dry_run)
                )
            except ServiceError as e:
                print(command_error(e).line(), file=sys.stderr)
                failed += 1
        fmt = self.args.output
        if fmt in ("json", "yaml"):
            from gpuctl.cli.output import print_data  # noqa: PLC0415 - lazy: CLI start-up

            data = [{**k.as_dict(), "dryRun": str(self.args.dry_run)} for k in done]
            print_data(data[0] if len(data) == 1 else data, fmt)
        elif fmt == "name":
            for k in done:
                print(k.object_name)
        else:
            from gpuctl.cli.report import print_lines  # noqa: PLC0415 - lazy: CLI start-up

            print_lines(self.args, [k.line() for k in done])
        return 1 if failed else 0
