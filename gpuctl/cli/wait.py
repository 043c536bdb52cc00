"""`gpuctl wait job NAME... --for=admitted|running|complete|failed|deleted [--timeout=30s]`: block until
each job reaches the state, as `kubectl wait --for=condition=complete job/x` does in CI pipelines.

Exit codes and lines as kubectl wait's: 0 and `job.batch/x condition met` per job when met; 1 with
`error: timed out waiting for the condition on jobs/x` at the timeout (default 30s; 0: look once;
a negative one: a week, as kubectl); 1 with `Error from server (NotFound): jobs "x" not found` when
a job to wait for does not exist (`--for=deleted`: that is met at once, silently, as kubectl's).

What each state means is the domain's rule (gpuctl.domain.status.reached, on the status word `get jobs`
shows): admitted: Admitted, Running, Partially Running, Succeeded, or its Workload is Admitted;
running: Running; complete: Succeeded; failed: Failed; deleted: gone (this command's own: not found).
A job that ended the other way can never get there: the wait stops at once with exit 1 rather than
sitting out its timeout (kubectl's condition wait would time out).

It asks the API server about once a second (each time the same reads as `describe job`), until the
deadline. Module level imports only the standard library (CLI start-up).
"""

from __future__ import annotations

import argparse
import sys
import time

from gpuctl.cli.cmdutil import connect, interruptible, job_object_name, scope
from gpuctl.cli.errors import CommandError, not_found

FOR = ("admitted", "running", "complete", "failed", "deleted")  # gpuctl.domain.status.WAIT_FOR + deleted
DEFAULT_TIMEOUT = "30s"
FOREVER = 7 * 24 * 3600.0  # kubectl: a negative --timeout waits a week
POLL = 1.0  # seconds between two looks


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "wait",
        help="wait until jobs are admitted, running, complete, failed or deleted",
        description=__doc__.split("\n\n", 1)[0] if __doc__ else "",
        parents=[common["cluster"]],
    )
    p.add_argument("type", choices=["job", "jobs"], metavar="TYPE", help="job")
    p.add_argument("names", nargs="+", metavar="NAME", help="job.name (or the name of one of its pods)")
    p.add_argument(
        "--for",
        dest="condition",
        required=True,
        type=condition_of,
        metavar="STATE",
        help="admitted, running, complete, failed or deleted (kubectl's condition=complete, "
        "condition=failed and delete too)",
    )
    p.add_argument(
        "--timeout",
        default=DEFAULT_TIMEOUT,
        help="how long to wait (30s, 5m, 1h; 0: look once; negative: a week). Default 30s",
    )
    p.set_defaults(run=run)


def condition_of(text: str) -> str:
    """--for's value; kubectl's spellings (`condition=complete`, `condition=Failed`, `delete`) too."""
    word = text.removeprefix("condition=").lower()
    word = {"delete": "deleted", "completed": "complete", "succeeded": "complete"}.get(word, word)
    if word not in FOR:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: use one of {', '.join(FOR)}")
    return word


def timeout_seconds(text: str) -> float:
    from gpuctl.cluster.config import ConfigError, parse_timeout  # noqa: PLC0415 - lazy: CLI start-up

    t = text.strip()
    if t.startswith("-"):
        return FOREVER
    try:
        return parse_timeout(t) or 0.0
    except ConfigError:
        raise CommandError(f"invalid --timeout {text!r}: a duration such as 30s, 5m, 1h") from None


def run(args: argparse.Namespace) -> int:
    from gpuctl.domain.status import reached  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.errors import NotFound, ServiceError  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.jobs import find_job  # noqa: PLC0415 - lazy: CLI start-up

    deadline = time.monotonic() + timeout_seconds(args.timeout)
    cluster = connect(args)
    namespace = scope(args)
    interruptible()
    pending = list(dict.fromkeys(args.names))
    shown: dict[str, str] = {}  # job name -> its kubectl TYPE/NAME, once found
    while True:
        for name in list(pending):
            try:
                job = find_job(cluster, name, namespace)
            except NotFound:
                if args.condition == "deleted":
                    if name in shown:  # never seen: nothing to say (kubectl's wait --for=delete)
                        print(f"{shown[name]} condition met", flush=True)
                    pending.remove(name)
                    continue
                raise not_found("jobs", name) from None
            except ServiceError as e:
                raise CommandError(str(e)) from None
            shown[name] = job_object_name(job.kind, job.name)
            if args.condition == "deleted":
                continue
            got = reached(args.condition, job.status, job.workload)
            if got:
                print(f"{shown[name]} condition met", flush=True)
                pending.remove(name)
            elif got is None:
                raise CommandError(
                    f"{shown[name]} is {job.status}: it will not become {args.condition}", code=1
                )
        if not pending:
            return 0
        left = deadline - time.monotonic()
        if left <= 0:
            for name in pending:
                print(f"error: timed out waiting for the condition on jobs/{name}", file=sys.stderr)
            return 1
        try:
            time.sleep(min(POLL, left))
        except KeyboardInterrupt:
            return 130
