"""`gpuctl logs JOB [-c CONTAINER] [-f] [--tail N] [--since 5m | --since-time T] [--previous]
[--timestamps] [--prefix] [--all-pods]`: a job's container logs, found by job.name, with kubectl logs'
flags and meanings: -c picks the container (default: the pod's first), --since/--since-time start
later, --previous reads the container's previous run, --timestamps (off by default, as kubectl's)
adds each line's RFC 3339 time, --prefix adds `[pod/NAME/CONTAINER]`. --all-pods (gpuctl's own) reads
every pod of the job, each line prefixed by its pod.

A multi-node job (a gang, docs/distributed.md) shows rank 0 by default; `--rank N` picks rank N (its
completion index, gpuctl.domain.gang.pod_rank) and `--all-pods` reads every rank in order, each line
prefixed `[rank N pod/NAME] ` (with --prefix `[rank N pod/NAME/CONTAINER] `).

kubectl logs' flags are added by `add_log_flags` and read by `log_options`, so that another selector
of the pod (a rank of a distributed job) is one more argument of `register`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from gpuctl.cli.cmdutil import connect, guard, interruptible, scope
from gpuctl.cli.errors import CommandError


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "logs",
        help="print a job's logs",
        description=__doc__.split("\n\n", 1)[0] if __doc__ else "",
        parents=[common["cluster"], common["output"](("json",))],
    )
    p.add_argument("job", metavar="JOB", help="the job.name from the YAML (or one of its pods)")
    add_log_flags(p)
    p.add_argument(
        "--all-pods",
        action="store_true",
        help="every pod of the job, each line prefixed by its pod (a gang's: rank and pod)",
    )
    p.add_argument(
        "--rank", type=int, metavar="N", help="a multi-node job's rank N (its completion index; default 0)"
    )
    p.set_defaults(run=run)


def add_log_flags(p: argparse.ArgumentParser) -> None:
    """kubectl logs' flags."""
    p.add_argument("-c", "--container", help="the container (default: the pod's first)")
    p.add_argument("-f", "--follow", action="store_true", help="stream new lines until the pod ends")
    p.add_argument(
        "--tail", type=int, default=-1, help="lines from the end (default -1: every line, as kubectl's)"
    )
    p.add_argument("--since", metavar="DURATION", help="only lines newer than this (5s, 2m, 3h)")
    p.add_argument(
        "--since-time", metavar="RFC3339", help="only lines after this time (2026-01-02T15:04:05Z)"
    )
    p.add_argument("-p", "--previous", action="store_true", help="the previous run of a restarted container")
    p.add_argument(
        "--timestamps",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="prefix each line with its RFC3339 time (off by default, as kubectl's)",
    )
    p.add_argument("--prefix", action="store_true", help="prefix each line with [pod/NAME/CONTAINER]")


def log_options(args: argparse.Namespace) -> dict[str, Any]:
    """read_logs' keyword arguments from the flags; --since and --since-time go apart (kubectl)."""
    from gpuctl.cluster.config import ConfigError, parse_timeout  # noqa: PLC0415 - lazy: CLI start-up

    if args.since and args.since_time:
        raise CommandError("at most one of --since or --since-time may be given")
    since = None
    if args.since:
        try:
            seconds = parse_timeout(args.since)
        except ConfigError:
            raise CommandError(f"invalid --since {args.since!r}: a duration such as 30s, 5m, 1h") from None
        since = max(1, int(seconds or 0)) if seconds else None
    if args.since_time:
        from datetime import datetime  # noqa: PLC0415 - lazy: CLI start-up

        try:
            datetime.fromisoformat(args.since_time.replace("Z", "+00:00"))
        except ValueError:
            raise CommandError(f"invalid --since-time {args.since_time!r}: an RFC 3339 time") from None
    return {
        "tail": args.tail,
        "timestamps": args.timestamps,
        "container": args.container,
        "since_seconds": since,
        "since_time": args.since_time,
        "previous": args.previous,
    }


def _prefix(args: argparse.Namespace, pod: dict, gang: bool = False) -> str:
    """`[pod/NAME/CONTAINER] ` (--prefix), `[NAME] ` (--all-pods); a gang's pod adds its rank in front
    (`[rank 1 pod/NAME] `) wherever a prefix is printed."""
    from gpuctl.domain.gang import pod_rank  # noqa: PLC0415 - lazy: CLI start-up

    name = pod["metadata"]["name"]
    rank = pod_rank(pod) if gang else None
    head = f"rank {rank} " if rank is not None else ""
    if args.prefix:
        container = args.container or pod["spec"]["containers"][0]["name"]
        return f"[{head}pod/{name}/{container}] "
    if not args.all_pods:
        return ""
    return f"[{head}pod/{name}] " if head else f"[{name}] "


def log_targets(
    job: Mapping[str, Any], pods: list[dict], rank: int | None, all_pods: bool
) -> tuple[list[dict], bool]:
    """(the pods to read, whether the job is a gang). `pods` come named pod first, then (a gang) in rank
    order (job_pods_for_logs): the first is the default. --rank picks that rank's live pod (rank_target)."""
    from gpuctl.domain.gang import gang_nodes  # noqa: PLC0415 - lazy: CLI start-up

    gang = gang_nodes(job) > 1
    if all_pods:
        if rank is not None:
            raise CommandError("only one of --rank or --all-pods may be given")
        return pods, gang
    if rank is None:
        return pods[:1], gang
    from gpuctl.service.errors import ServiceError  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.logs import rank_target  # noqa: PLC0415 - lazy: CLI start-up

    try:
        return [rank_target(job, pods, rank)], gang
    except ServiceError as e:
        raise CommandError(str(e)) from None


@guard
def run(args: argparse.Namespace) -> int:
    from gpuctl.cli.output import print_data  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.logs import job_pods_for_logs, read_logs  # noqa: PLC0415 - lazy: CLI start-up

    options = log_options(args)
    if args.follow and args.previous:
        raise CommandError("only one of --follow or --previous may be given")
    job, pods = job_pods_for_logs(connect(args), args.job, scope(args))
    cluster = job.member or connect(args)  # a MultiKueue manager's job: its pods are in the worker
    targets, gang = log_targets(job.obj, pods, args.rank, args.all_pods)
    if args.follow:
        pod = targets[0]
        resp = read_logs(cluster, pod, follow=True, stream=True, **options)
        interruptible()
        prefix = _prefix(args, pod, gang).encode()
        try:
            start = True
            for chunk in resp.stream(4096, decode_content=True):
                if prefix:
                    chunk = (prefix if start else b"") + chunk.replace(b"\n", b"\n" + prefix)
                    start = chunk.endswith(b"\n" + prefix)
                    if start:
                        chunk = chunk[: -len(prefix)]
                sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
        except KeyboardInterrupt:
            pass
        finally:
            resp.release_conn()
        return 0
    out = {pod["metadata"]["name"]: read_logs(cluster, pod, **options) for pod in targets}
    if args.output == "json":
        from gpuctl.domain.gang import pod_rank  # noqa: PLC0415 - lazy: CLI start-up

        rank = {p["metadata"]["name"]: pod_rank(p) for p in targets} if gang else {}
        name, text = next(iter(out.items()))
        print_data(
            {
                "pod_name": name,
                "namespace": targets[0]["metadata"]["namespace"],
                **({"rank": rank[name]} if gang else {}),
                "logs": text.splitlines(),
            }
            if not args.all_pods
            else [
                {"pod_name": n, **({"rank": rank[n]} if gang else {}), "logs": t.splitlines()}
                for n, t in out.items()
            ],
            "json",
        )
        return 0
    for pod in targets:
        prefix = _prefix(args, pod, gang)
        for line in out[pod["metadata"]["name"]].splitlines():
            print(prefix + line)
    return 0
