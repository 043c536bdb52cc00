"""`gpuctl history [JOB] [-n NS | -A] [-o json|yaml]`: who submitted, stopped, preempted, moved or deleted
which job, when and why: the team's audit trail that `gpuctl serve` keeps in the namespace's ConfigMap
gpuctl-history (gpuctl.service.history; docs/audit.md says what each actor means). Oldest first, as
`kubectl get events` lists. A team member reads its own namespace (gpuctl-user); -A is an admin's.

Module level imports only the standard library and the CLI's light modules (start-up).
"""

from __future__ import annotations

import argparse
from typing import Self

from gpuctl.cli.cmdutil import guard
from gpuctl.cli.errors import CommandError

HELP = "who submitted, stopped, preempted, moved or deleted which job, when and why (the audit trail)"


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "history",
        help=HELP,
        description=__doc__.split("\n\n", 1)[0] if __doc__ else HELP,
        parents=[common["cluster"], common["read"]()],
    )
    p.add_argument("job", nargs="?", metavar="JOB", help="only this job (its job.name)")
    p.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every team namespace (needs gpuctl-admin)"
    )
    p.set_defaults(run=guard(lambda args: HistoryOptions.complete(args).validate().run()))


class HistoryOptions:
    """Options -> complete (where to read: -n, -A, the context's namespace) -> validate -> run."""

    def __init__(self, args: argparse.Namespace, namespace: str | None):
        self.args = args
        self.namespace = namespace  # None: every namespace

    @classmethod
    def complete(cls, args: argparse.Namespace) -> Self:
        from gpuctl.cli.cmdutil import scope  # noqa: PLC0415 - lazy: CLI start-up

        if args.json:  # history never printed a bare array: --json is -o json, a List with its items
            args.output, args.json = "json", False
        return cls(args, scope(args))

    def validate(self) -> Self:
        if self.args.all_namespaces and self.args.namespace:
            raise CommandError("-A and -n go apart: -A reads every namespace, -n one")
        return self

    def run(self) -> int:
        from gpuctl.cli.cmdutil import connect  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.cli.objects import history_object  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.cli.printers import (  # noqa: PLC0415 - lazy: CLI start-up
            Listing,
            emit,
            fmt_of,
        )
        from gpuctl.cluster.paths import type_name  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.service import history  # noqa: PLC0415 - lazy: CLI start-up

        if self.args.show_labels:
            raise CommandError("history does not take --show-labels: its records carry no labels")
        cluster = connect(self.args)
        if self.namespace is None:
            records = history.read_all(cluster, self.args.job)
        else:
            records = history.read(cluster, self.namespace, self.args.job)
        every = self.namespace is None
        where = f"namespace {self.namespace}" if self.namespace else "any namespace"
        what = f" of job {self.args.job}" if self.args.job else ""
        kinds = _live_kinds(cluster, records) if fmt_of(self.args.output)[0] == "name" else {}
        objs = [history_object(r, r.kind or kinds.get((r.namespace, r.job), "")) for r in records]
        return emit(
            self.args,
            Listing(
                items=objs,
                headers=[*(["NAMESPACE"] if every else []), "TIME", "JOB", "ACTION", "ACTOR", "REASON"],
                rows=[
                    [
                        *([o["metadata"]["namespace"]] if every else []),
                        o["metadata"]["creationTimestamp"],
                        o["spec"]["job"],
                        o["spec"]["action"],
                        o["spec"]["actor"],
                        o["spec"]["reason"],
                    ]
                    for o in objs
                ],
                # the jobs that have records, each once, as kubectl reads them (statefulset.apps/x)
                name=lambda item: type_name(item["spec"]["resource"] or "Job", item["spec"]["job"]),
                empty=f"No history{what} in {where} (gpuctl serve --history writes it; docs/audit.md)",
            ),
        )


def _live_kinds(cluster, records) -> dict[tuple[str, str], str]:
    """The kind of each job whose records were written before records kept it (Record.kind ""), read
    from the job's object if it still exists (Job, then StatefulSet, Deployment, LeaderWorkerSet): for
    `-o name`. A job gone and unrecorded stays a Job."""
    from gpuctl.cluster import path  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.inventory import CONTROLLER_KINDS  # noqa: PLC0415 - lazy: CLI start-up

    out: dict[tuple[str, str], str] = {}
    for ns, job in dict.fromkeys((r.namespace, r.job) for r in records if not r.kind):
        for kind in CONTROLLER_KINDS:
            if cluster.get_or_none(path(kind, job, namespace=ns)) is not None:
                out[(ns, job)] = kind
                break
    return out
