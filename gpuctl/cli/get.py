"""`gpuctl get jobs|pools|nodes|labels|quotas|ns`: tables like kubectl's, or -o json|yaml.

The work is in gpuctl.service (one call per type), the printing is here. Module level imports only the
standard library and the CLI's own light modules (start-up: tests/unit/test_cli_startup.py); each
type's handler imports its service call and the printers when it runs.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

from gpuctl.cli.cmdutil import (
    add_prometheus_flag,
    connect,
    guard,
    note,
    or_dash,
    prometheus_of,
    quota_gpu,
    scope,
)
from gpuctl.cli.errors import CommandError, not_found
from gpuctl.constants import JOB_KINDS

TYPES = {
    "job": "jobs",
    "jobs": "jobs",
    "pool": "pools",
    "pools": "pools",
    "node": "nodes",
    "nodes": "nodes",
    "label": "labels",
    "labels": "labels",
    "quota": "quotas",
    "quotas": "quotas",
    "ns": "namespaces",
    "namespace": "namespaces",
    "namespaces": "namespaces",
}


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "get",
        help="list jobs, pools, nodes, labels, quotas, namespaces",
        description="List jobs, pools, nodes, labels, quotas or namespaces. Namespaced reads (jobs, quotas) "
        "look in -n, else the context's namespace, else every gpuctl namespace; -A: every namespace.",
        parents=[common["cluster"], common["read"]()],
    )
    p.add_argument(
        "type", choices=sorted(TYPES), metavar="TYPE", help="jobs, pools, nodes, labels, quotas or ns"
    )
    p.add_argument("name", nargs="?", help="a node (labels), a namespace (quotas), or one object")
    p.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="jobs and quotas of every namespace (cluster-scoped types take it and list as without it)",
    )
    p.add_argument("--pool", help="only this pool (jobs, nodes)")
    p.add_argument("--kind", choices=[k.value for k in JOB_KINDS], help="only this job kind (jobs)")
    p.add_argument("-l", "--selector", help="label selector, e.g. runwhere.ai/priority=high (jobs)")
    p.add_argument("--gpu-type", help="only this GPU type (nodes)")
    p.add_argument("--key", help="only this key (labels)")
    p.add_argument(
        "-w", "--watch", action="store_true", help="after listing, print changes as they happen (jobs)"
    )
    p.add_argument(
        "--pods", action="store_true", help=argparse.SUPPRESS
    )  # earlier gpuctl; rows are pods anyway
    add_prometheus_flag(p)  # jobs -o wide: GPU use (docs/utilisation.md)
    p.set_defaults(run=run)


# The type-specific flags each type honours; any other given is refused, never ignored. The listing
# flags (-o, --no-headers, --sort-by, --field-selector) work on every type (gpuctl.cli.printers).
HONOURS: dict[str, set[str]] = {
    "jobs": {"pool", "kind", "selector", "watch", "show_labels", "all_namespaces", "prometheus_url"},
    # -A on a cluster-scoped type changes nothing, as kubectl's `get nodes -A` (accepted, not refused)
    "pools": {"watch", "all_namespaces"},
    "nodes": {"pool", "gpu_type", "watch", "all_namespaces"},
    "labels": {"key", "watch", "all_namespaces"},
    "quotas": {"all_namespaces", "watch"},
    "namespaces": {"show_labels", "watch", "all_namespaces"},
}
FLAG_NAMES = {
    "pool": "--pool",
    "kind": "--kind",
    "selector": "-l/--selector",
    "watch": "-w/--watch",
    "show_labels": "--show-labels",
    "all_namespaces": "-A/--all-namespaces",
    "gpu_type": "--gpu-type",
    "key": "--key",
    "prometheus_url": "--prometheus-url",
}


@guard
def run(args: argparse.Namespace) -> int:
    """The type's handler (get_jobs, get_pools, ...), after refusing a flag the type cannot honour."""
    handlers = {
        "jobs": get_jobs,
        "pools": get_pools,
        "nodes": get_nodes,
        "labels": get_labels,
        "quotas": get_quotas,
        "namespaces": get_namespaces,
    }
    kind = TYPES[args.type]
    given = [f for f in FLAG_NAMES if getattr(args, f, None) and f not in HONOURS[kind]]
    if given:
        takers = [t for t, flags in HONOURS.items() if given[0] in flags]
        raise CommandError(
            f"get {kind} does not take {FLAG_NAMES[given[0]]}"
            + (f" (only get {' and get '.join(takers)} does)" if takers else "")
        )
    return handlers[kind](args)


def _lists(
    build: Callable[[argparse.Namespace, Callable[[], Any]], Any],
) -> Callable[[argparse.Namespace], int]:
    """A type's handler from its listing: build(args, cluster) -> a Listing (None: printed in its own
    shape, get labels NODE), printed by gpuctl.cli.printers.emit; -w: then watched (_watch). cluster() is
    the connection, made once, when build has imported its service call (start-up: a read's imports come
    before the connection, tests/unit/test_cli_startup.py)."""

    @functools.wraps(build)
    def handler(args: argparse.Namespace) -> int:
        from gpuctl.cli.printers import emit  # noqa: PLC0415 - lazy: CLI start-up

        cluster = functools.cache(lambda: connect(args))
        listing = build(args, cluster)
        if listing is None:
            return 0
        if not args.watch:
            return emit(args, listing)
        return _watch(args, cluster(), TYPES[args.type], listing, lambda: build(args, cluster))

    return handler


def _watch(args, cluster, kind: str, listing, build) -> int:
    """-w on every type: the listing (with -o json|yaml|...: each object on its own, kubectl's watch
    stream), then what changes (gpuctl.cli.watch)."""
    from gpuctl.cli.printers import emit  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cli.watch import Printer, entries, first, watch  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cluster import path  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.constants import Labels  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.inventory import JOB_SELECTOR  # noqa: PLC0415 - lazy: CLI start-up

    printer = Printer(args, listing.name)
    shown = entries(args, listing, objects=printer.objects)
    if printer.objects:
        first(printer, shown, headers=not args.no_headers)
    else:
        emit(args, listing)
    # What wakes it: the objects each type is read from.
    nodes, queues = ("Node", path("Node"), None), ("ClusterQueue", path("ClusterQueue"), None)
    sources = {
        "jobs": [("Pod", path("Pod", namespace=scope(args)), JOB_SELECTOR)],
        "pools": [nodes, queues],
        "nodes": [nodes],
        "labels": [nodes],
        "quotas": [queues],
        "namespaces": [("Namespace", path("Namespace"), f"{Labels.NAMESPACE}=true"), queues],
    }[kind]

    def read() -> list:
        try:
            return entries(args, build(), objects=printer.objects)
        except CommandError as e:  # the one named object is gone: kubectl's -w then prints nothing
            if e.reason != "NotFound":
                raise
            return []

    watch(cluster, sources, read, shown, printer)
    return 0


# ----------------------------------------------------------------------------- get jobs
# The job table's columns (a job's own row, or one per pod): each a field of the job's object
# (gpuctl.cli.objects.job_cells). JOB ID is the job's name, stable from queued to finished; POD its pod.
JOB_COLUMNS = ["JOB ID", "POD", "NAMESPACE", "KIND", "STATUS", "READY", "NODE", "IP", "AGE"]
# BOUND: the start bound serve recorded and whether it was kept (docs/queueing.md "A bound gpuctl keeps").
WIDE_COLUMNS = ["POOL", "PRIORITY", "QUEUE", "POSITION", "BOUND", "REASON"]
# -o wide with a Prometheus configured (docs/utilisation.md): each row's GPU use, as `gpuctl top` reads it.
USE_COLUMNS = ["GPUS", "ACTIVITY", "GPU MEMORY", "IDLE FOR"]


def _job_columns(rows, wide: bool, use: bool = False) -> list[str]:
    """The job table's headers: CLUSTER (before NODE) when some job runs through MultiKueue
    (docs/multicluster.md); -o wide's, and the GPU use columns (docs/utilisation.md) when they were read."""
    cols = list(JOB_COLUMNS)
    if any(r.cluster for r in rows):
        cols.insert(cols.index("NODE"), "CLUSTER")
    return cols + (WIDE_COLUMNS if wide else []) + (USE_COLUMNS if wide and use else [])


def _job_table(rows, headers: list[str], use: dict | None = None) -> list[tuple[dict, list, list]]:
    """(the job's object, its rows, their cells by column name) per job, cells read from the object."""
    from gpuctl.cli.objects import job_cells, job_objects, job_row_pairs  # noqa: PLC0415 - lazy: CLI start-up

    out = []
    for obj, rs in job_objects(rows):
        named = []
        for r, pod in job_row_pairs(obj, rs):
            cells = job_cells(obj, pod)
            if use is not None:
                cells.update(zip(USE_COLUMNS, use.get((r.namespace, r.job_id)) or ["-"] * 4, strict=True))
            named.append({h: cells[h] for h in headers})
        out.append((obj, rs, named))
    return out


def _use_cells(prom, rows) -> dict | None:
    """-o wide's GPU use cells per row (namespace, pod or job name): one reading of Prometheus for the
    rows' namespaces (gpuctl.service.gpu_use.row_use); None when it could not be read (a note says why)."""
    import time  # noqa: PLC0415 - lazy: CLI start-up

    from gpuctl.domain.utilisation import (  # noqa: PLC0415 - lazy: CLI start-up
        gpus_text,
        idle_text,
        memory_text,
        percent_text,
    )
    from gpuctl.service.errors import ServiceError  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.gpu_use import Span, by_pod, read_devices, row_use  # noqa: PLC0415 - lazy: CLI start-up

    span, now = Span(), time.time()
    try:
        devices = by_pod(read_devices(prom, sorted({r.namespace for r in rows}), span, now))
    except ServiceError as e:
        note(f"GPU use not read: {e}")
        return None
    cells = {}
    for r in rows:
        f = row_use(r.namespace, r.job_id, r.name, devices, span, now, r.age)
        held = gpus_text(r.gpus) if r.gpus is not None else "-"
        if f is not None:
            idle = idle_text(f.idle_seconds, f.idle_at_least, span.lookback)
            cells[(r.namespace, r.job_id)] = [held, percent_text(f.activity), memory_text(f.memory_mib), idle]
        else:
            cells[(r.namespace, r.job_id)] = [held, "-", "-", "-"]
    return cells


@_lists
def get_jobs(args: argparse.Namespace, connection: Callable[[], Any]) -> Any:
    from gpuctl.cli.printers import Listing, structured  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cluster.paths import type_name  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.jobs import list_job_rows  # noqa: PLC0415 - lazy: CLI start-up

    namespace = scope(args)
    wide = args.output == "wide"
    full = structured(args.output) or bool(args.sort_by or args.field_selector)
    prom = prometheus_of(args, required=False) if wide and not args.watch else None
    rows = list_job_rows(
        connection(),
        namespace,
        pool=args.pool,
        kind=args.kind,
        selector=args.selector,
        positions=wide or full,
        gpus=full or prom is not None,  # tables show no GPU column but -o wide's GPU use: pods as Table rows
        estimates=full and not args.json,
    )
    if args.name:
        rows = [r for r in rows if r.name == args.name]
        if not rows:
            raise not_found("jobs", args.name)
    use = _use_cells(prom, rows) if prom is not None and rows else None
    headers = _job_columns(rows, wide, use is not None)
    jobs = _job_table(rows, headers, use)
    return Listing(
        items=[obj for obj, _, _ in jobs],
        headers=headers,
        rows=[[list(c.values()) for c in named] for _, _, named in jobs],
        grouped=True,
        # its own kind's TYPE/NAME (a LeaderWorkerSet's too), as kubectl reads it back
        name=lambda o: type_name(o["spec"]["resource"] or "Job", o["metadata"]["name"]),
        labels=lambda o: o["metadata"]["labels"],
        legacy=[r.as_dict() for r in rows] if args.json else None,
        single=bool(args.name),
        empty="No jobs found." if not namespace else f"No jobs found in {namespace} namespace.",
    )


# ----------------------------------------------------------------------------- get pools
@_lists
def get_pools(args: argparse.Namespace, connection: Callable[[], Any]) -> Any:
    from gpuctl.cli.objects import pool_object  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cli.printers import Listing, structured  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.usage import list_pools_everywhere  # noqa: PLC0415 - lazy: CLI start-up

    wide = args.output == "wide"
    # GPU QUEUED (the waiting Workloads: an access review and Kueue's visibility API) only where it is
    # printed or selected on: -o wide, the documents, --sort-by, --field-selector.
    queued = wide or structured(args.output) or bool(args.sort_by or args.field_selector)
    pools = list_pools_everywhere(connection(), queued=queued)
    if args.name:
        pools = [p for p in pools if p.name == args.name]
        if not pools:
            raise not_found("pools", args.name)
    headers = ["POOL NAME", "STATUS", "GPU TOTAL", "GPU USED", "GPU FREE", "NODE COUNT"]
    if wide:
        headers += ["GPU RESERVED", "GPU QUEUED", "GPU TYPES", "SHARING"]
        partial = next((p.queued_namespaces for p in pools if p.queued_namespaces is not None), None)
        if partial is not None:
            note(
                f"GPU QUEUED counts the waiting jobs of {', '.join(partial) or 'no namespace'} only: "
                "other teams' Workloads need a role that may list them all (gpuctl-admin)"
            )
    multi = wide and any(p.clusters for p in pools)
    if multi:
        headers.append("CLUSTERS (FREE/TOTAL)")
    objs = [pool_object(p) for p in pools]
    rows = []
    for o in objs:
        st = o["status"]
        r = [o["metadata"]["name"], st["phase"], st["gpus"]["total"], st["gpus"]["used"], st["gpus"]["free"]]
        r.append(st["nodes"]["total"])
        if wide:
            r += [
                st["gpus"]["reserved"],
                st["gpus"]["queued"],
                ",".join(st["gpuTypes"]) or "-",
                st["shared"] or "-",
            ]
        if multi:
            r.append(_clusters_cell(st["clusters"]))
        rows.append(r)
    for p in pools:
        for c, v in p.clusters.items():
            if "error" in v:
                note(f"pool {p.name}: cluster {c} not read: {v['error']}")
            elif "disconnected" in v:
                note(f"pool {p.name}: cluster {c} (*): {v['disconnected']}; jobs wait or go elsewhere")
    return Listing(
        items=objs,
        headers=headers,
        rows=rows,
        name=lambda item: f"pool/{item['metadata']['name']}",
        legacy=[p.as_dict() for p in pools] if args.json else None,
        single=bool(args.name),
        empty="No pools found: create one with `gpuctl create -f pool.yaml`.",
    )


def _clusters_cell(clusters: dict[str, dict]) -> str:
    """A pool's per-cluster GPUs (docs/multicluster.md, "What users see"): worker-a:8/8,worker-b:0/8; ? for a
    worker not read."""
    if not clusters:
        return "-"
    return ",".join(
        f"{c}:?"
        if "error" in v
        else f"{c}:{v['gpu_free']}/{v['gpu_total']}" + ("*" if "disconnected" in v else "")
        for c, v in sorted(clusters.items())
    )


# ----------------------------------------------------------------------------- get nodes / labels


@_lists
def get_nodes(args: argparse.Namespace, connection: Callable[[], Any]) -> Any:
    from gpuctl.cli.objects import node_object  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cli.printers import Listing, structured  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.nodes import list_nodes  # noqa: PLC0415 - lazy: CLI start-up

    rows = list_nodes(connection(), pool=args.pool, gpu_type=args.gpu_type, metadata=structured(args.output))
    if args.name:
        rows = [r for r in rows if r["name"] == args.name]
        if not rows:
            raise not_found("nodes", args.name)
    if any(r["gpu_used"] is None for r in rows) and not args.output:
        note(
            "GPU USED and GPU FREE per node need a role that may list every pod (gpuctl-admin); "
            "a pool's use, as Kueue counts it, is in `gpuctl get pools`"
        )
    objs = [node_object(r) for r in rows]
    return Listing(
        items=objs,
        headers=["NODE NAME", "STATUS", "GPU TOTAL", "GPU USED", "GPU FREE", "GPU TYPE", "IP", "POOL"],
        rows=[
            [
                o["metadata"]["name"],
                o["status"]["phase"],
                o["status"]["gpus"]["total"],
                or_dash(o["status"]["gpus"]["used"]),
                or_dash(o["status"]["gpus"]["free"]),
                o["spec"]["gpuType"] or "-",
                o["status"]["ip"],
                o["spec"]["pool"] or "-",
            ]
            for o in objs
        ],
        name=lambda item: f"node/{item['metadata']['name']}",
        single=bool(args.name),
        legacy=rows if args.json else None,
    )


@_lists
def get_labels(args: argparse.Namespace, connection: Callable[[], Any]) -> Any:
    from gpuctl.cli.objects import labels_object  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cli.output import print_data  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cli.printers import Listing, labels_cell  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.nodes import node_labels  # noqa: PLC0415 - lazy: CLI start-up

    rows = node_labels(connection(), args.name, args.key)
    if args.name and args.output in ("json", "yaml") and not args.watch:
        print_data(rows[0]["labels"], args.output)  # the earlier gpuctl's shape: the node's labels
        return None
    if args.name and args.key and not args.output and not args.watch:
        for k, v in rows[0]["labels"].items():
            print(f"{args.name} {k}={v}")
        return None
    objs = [labels_object(r) for r in rows]
    return Listing(
        items=objs,
        headers=["NODE", "LABELS"],
        rows=[[o["metadata"]["name"], labels_cell(o["metadata"]["labels"])] for o in objs],
        name=lambda item: f"node/{item['metadata']['name']}",
        legacy=rows if args.json else None,
    )


# ----------------------------------------------------------------------------- get quotas / ns


@_lists
def get_quotas(args: argparse.Namespace, connection: Callable[[], Any]) -> Any:
    from gpuctl.cli.objects import quota_object  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cli.printers import Listing, structured  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.quantity import format_bytes  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.quotas import quota_rows  # noqa: PLC0415 - lazy: CLI start-up

    rows = quota_rows(connection(), args.name or scope(args), metadata=structured(args.output))
    if args.name and not rows:
        raise not_found("quotas", args.name)
    objs = [quota_object(q) for q in rows]
    return Listing(
        items=objs,
        legacy=rows if args.json else None,
        headers=[
            "QUOTA NAME",
            "NAMESPACE",
            "GPU (USED/QUOTA)",
            "BORROWED",
            "BORROW LIMIT",
            "CPU",
            "MEMORY",
            "PENDING",
            "STATUS",
        ],
        rows=[
            [
                o["metadata"]["name"],
                o["metadata"]["namespace"],
                quota_gpu({"gpu": {"used": o["status"]["gpus"]["used"], "quota": o["spec"]["gpus"]}}),
                o["status"]["gpus"]["borrowed"],
                "none" if o["spec"]["borrowingLimit"] is None else o["spec"]["borrowingLimit"],
                f"{o['status']['cpu']['used']}/{o['spec']['cpu'] or 'unlimited'}",
                f"{format_bytes(o['status']['memory']['used'])}/{o['spec']['memory'] or 'unlimited'}",
                o["status"]["pendingWorkloads"],
                o["status"]["phase"],
            ]
            for o in objs
        ],
        name=lambda item: f"quota/{item['metadata']['name']}",
        empty="No quotas found.",
    )


@_lists
def get_namespaces(args: argparse.Namespace, connection: Callable[[], Any]) -> Any:
    from gpuctl.cli.objects import age_of, namespace_object  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cli.printers import Listing  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.domain.objects import short_age as age  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service import views as views_svc  # noqa: PLC0415 - lazy: CLI start-up

    rows = views_svc.list_namespaces(connection())
    if args.name:
        rows = [r for r in rows if r.name == args.name]
        if not rows:
            raise not_found("namespaces", args.name)
    objs = [namespace_object(r) for r in rows]
    return Listing(
        items=objs,
        headers=["NAME", "STATUS", "QUOTA", "AGE"],
        rows=[
            [
                o["metadata"]["name"],
                o["status"]["phase"],
                o["spec"]["quota"],
                age(age_of(o["metadata"]["creationTimestamp"])),
            ]
            for o in objs
        ],
        name=lambda item: f"namespace/{item['metadata']['name']}",
        labels=lambda item: item["metadata"]["labels"],
        legacy=[{**r.as_dict(), "labels": r.labels} for r in rows] if args.json else None,
        single=bool(args.name),
    )
