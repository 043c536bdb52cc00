"""`gpuctl top [JOB] [-n NS | -A] [--pool P] [--kind K] [-o wide|json|yaml|...]`: the jobs holding GPUs,
busiest first (kubectl top's shape): GPUs held, GPU activity (the mean over --window), GPU memory in use,
and how long their GPUs have been idle. Read from NVIDIA dcgm-exporter's series through Prometheus
(--prometheus-url, $GPUCTL_PROMETHEUS_URL or `prometheusURL:` in gpuctl's config file), for the jobs the
caller may list (a team member: its own namespace). docs/utilisation.md.

Module level imports only the standard library and the CLI's light modules (start-up).
"""

from __future__ import annotations

import argparse
from typing import Self

from gpuctl.cli.cmdutil import add_prometheus_flag, guard, prometheus_of
from gpuctl.cli.errors import CommandError
from gpuctl.constants import JOB_KINDS

HELP = "GPU use of jobs, busiest first: GPUs held, activity, memory, idle for (dcgm-exporter via Prometheus)"
COLUMNS = ["NAMESPACE", "NAME", "KIND", "POOL", "GPUS", "ACTIVITY", "GPU MEMORY", "IDLE FOR"]
WIDE = ["STATUS", "DEVICES", "SOURCE"]


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "top",
        help=HELP,
        description=__doc__.split("\n\n", 1)[0] if __doc__ else HELP,
        parents=[common["cluster"], common["read"]()],
    )
    p.add_argument("job", nargs="?", metavar="JOB", help="only this job (its job.name)")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="jobs of every namespace")
    p.add_argument("--pool", help="only jobs of this pool")
    p.add_argument("--kind", choices=[k.value for k in JOB_KINDS], help="only jobs of this kind")
    add_prometheus_flag(p)
    p.add_argument(
        "--window",
        default="5m",
        metavar="DURATION",
        help="ACTIVITY is the mean over this long (default 5m; 30s, 1h, ...)",
    )
    p.set_defaults(run=guard(lambda args: TopOptions.complete(args).validate().run()))


class TopOptions:
    """Options -> complete (where: -n, -A, the context's namespace; the window) -> validate -> run."""

    def __init__(self, args: argparse.Namespace, namespace: str | None, window: int | None):
        self.args = args
        self.namespace = namespace  # None: every namespace
        self.window = window

    @classmethod
    def complete(cls, args: argparse.Namespace) -> Self:
        from gpuctl.cli.cmdutil import scope  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.quantity import parse_duration  # noqa: PLC0415 - lazy: CLI start-up

        return cls(args, scope(args), parse_duration(args.window))

    def validate(self) -> Self:
        if self.args.all_namespaces and self.args.namespace:
            raise CommandError("-A and -n go apart: -A reads every namespace, -n one")
        if not self.window:
            raise CommandError(f"--window {self.args.window}: use a duration such as 30s, 5m or 1h")
        if self.args.show_labels:
            raise CommandError("top does not take --show-labels")
        return self

    def run(self) -> int:
        from gpuctl.cli.cmdutil import connect  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.cli.printers import Listing, emit  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.domain.utilisation import (  # noqa: PLC0415 - lazy: CLI start-up
            SOURCE_NAMES,
            gpus_text,
            idle_text,
            memory_text,
            percent_text,
        )
        from gpuctl.service.gpu_use import Span, top  # noqa: PLC0415 - lazy: CLI start-up

        prom = prometheus_of(self.args)
        span = Span(window=self.window or 300)
        view = top(connect(self.args), self.namespace, prom, span, pool=self.args.pool, kind=self.args.kind)
        uses = [u for u in view.uses if not self.args.job or u.name == self.args.job]
        if self.args.job and not uses:
            raise CommandError(f'job "{self.args.job}" holds no GPU and was not measured', reason="NotFound")
        wide = self.args.output == "wide"
        rows = []
        for u in uses:
            row = [
                u.namespace,
                u.name,
                u.kind,
                u.pool or "-",
                gpus_text(u.gpus),
                percent_text(u.activity),
                memory_text(u.memory_mib),
                idle_text(u.idle_seconds, u.idle_at_least, span.lookback),
            ]
            if wide:
                devices = [d for p in u.pods for d in p.devices]
                sources = sorted({SOURCE_NAMES.get(d.source, d.source) for d in devices})
                row += [u.status, len(devices), ",".join(sources) or "-"]
            rows.append(row)
        where = f" in {self.namespace} namespace" if self.namespace else ""
        return emit(
            self.args,
            Listing(
                items=uses,
                doc=lambda u: u.as_dict(),
                headers=COLUMNS + (WIDE if wide else []),
                rows=rows,
                name=lambda u: f"job/{u.name}",
                single=bool(self.args.job),
                empty=f"No job holds GPUs{where}.",
            ),
        )
