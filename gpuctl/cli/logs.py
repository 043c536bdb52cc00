"""`gpuctl logs JOB [-f] [--tail N] [--all-pods]`: a job's container logs, found by job.name."""

from __future__ import annotations

import argparse
import sys

from gpuctl.cli.cmdutil import connect, guard, interruptible, scope


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "logs", help="print a job's logs", parents=[common["cluster"], common["output"](("json",))]
    )
    p.add_argument("job", metavar="JOB", help="the job.name from the YAML")
    p.add_argument("-f", "--follow", action="store_true", help="stream new lines until the pod ends")
    p.add_argument("--tail", type=int, default=100, help="lines from the end (default 100; -1 for all)")
    p.add_argument(
        "--all-pods", action="store_true", help="every pod of the job, each line prefixed by its pod"
    )
    p.add_argument(
        "--timestamps",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="prefix each line with its RFC3339 time (default on)",
    )
    p.set_defaults(run=run)


@guard
def run(args: argparse.Namespace) -> int:
    from gpuctl.cli.output import print_data  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.jobs import job_pods_for_logs, read_logs  # noqa: PLC0415 - lazy: CLI start-up

    job, pods = job_pods_for_logs(connect(args), args.job, scope(args))
    cluster = job.member or connect(args)  # a MultiKueue manager's job: its pods are in the worker
    targets = pods if args.all_pods else pods[:1]
    if args.follow:
        pod = targets[0]
        resp = read_logs(cluster, pod, tail=args.tail, timestamps=args.timestamps, follow=True, stream=True)
        interruptible()
        try:
            for chunk in resp.stream(4096, decode_content=True):
                sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
        except KeyboardInterrupt:
            pass
        finally:
            resp.release_conn()
        return 0
    out = {}
    for pod in targets:
        out[pod["metadata"]["name"]] = read_logs(cluster, pod, tail=args.tail, timestamps=args.timestamps)
    if args.output == "json":
        name, text = next(iter(out.items()))
        print_data(
            {"pod_name": name, "namespace": targets[0]["metadata"]["namespace"], "logs": text.splitlines()}
            if not args.all_pods
            else [{"pod_name": n, "logs": t.splitlines()} for n, t in out.items()],
            "json",
        )
        return 0
    for name, text in out.items():
        for line in text.splitlines():
            print(f"[{name}] {line}" if args.all_pods else line)
    return 0
