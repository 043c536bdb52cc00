"""Read commands (get, describe, logs, label): the work is in gpuctl.service, the printing is here.

Imported only when one of these verbs runs (gpuctl.cli.get/describe/logs import it inside `run`),
so its imports of the service layer cost nothing at start-up of other commands.
"""

from __future__ import annotations

import argparse
import sys

from gpuctl.cli.errors import CommandError
from gpuctl.cli.output import print_data, table
from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.cluster.config import namespace_scope
from gpuctl.domain.objects import short_age as age
from gpuctl.quantity import format_bytes
from gpuctl.service.errors import ServiceError
from gpuctl.service.inventory import JOB_SELECTOR
from gpuctl.service.jobs import job_pods_for_logs, list_job_rows, read_logs


def _cluster(args: argparse.Namespace):

    return Cluster.connect(kubeconfig=args.kubeconfig, context=args.context)


def _scope(args: argparse.Namespace) -> str | None:
    """Where a namespaced read looks (kubectl's rule): -n; -A: every namespace; else the context's
    namespace; else every namespace (the earlier gpuctl's habit, kept for admins)."""
    return namespace_scope(
        args.namespace,
        getattr(args, "all_namespaces", False),
        kubeconfig=args.kubeconfig,
        context=args.context,
    )


def _note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)


def _guard(fn):
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except ServiceError as e:
            raise CommandError(str(e)) from None

    return wrapper


# ----------------------------------------------------------------------------- get jobs
JOB_COLUMNS = ["JOB ID", "NAME", "NAMESPACE", "KIND", "STATUS", "READY", "NODE", "IP", "AGE"]
WIDE_COLUMNS = ["POOL", "PRIORITY", "QUEUE", "POSITION", "REASON"]


def _job_cells(r, wide: bool) -> list:
    cells = [r.job_id, r.name, r.namespace, r.kind, r.status, r.ready, r.node, r.ip, age(r.age)]
    if wide:
        cells += [r.pool, r.priority, r.queue, r.position if r.position else "-", r.reason or "-"]
    return cells


@_guard
def get_jobs(args: argparse.Namespace) -> int:

    cluster = _cluster(args)
    namespace = _scope(args)
    wide = args.output == "wide"
    rows = list_job_rows(
        cluster,
        namespace,
        pool=args.pool,
        kind=args.kind,
        selector=args.selector,
        positions=wide or args.output in ("json", "yaml"),
        gpus=args.output in ("json", "yaml"),  # tables show no GPU column: pods come as Table rows
    )
    if args.name:
        rows = [r for r in rows if r.name == args.name]
    wide = args.output == "wide"
    if args.output in ("json", "yaml"):
        print_data([r.as_dict() for r in rows], args.output)
    elif not rows:
        print(
            "No jobs found." if not namespace else f"No jobs found in {namespace} namespace.", file=sys.stderr
        )
    else:
        table(JOB_COLUMNS + (WIDE_COLUMNS if wide else []), [_job_cells(r, wide) for r in rows])
    if args.watch:
        _watch_jobs(args, cluster, namespace, rows, wide)
    return 0


def _watch_jobs(args, cluster, namespace, rows, wide) -> None:
    """Like kubectl -w: after the list, print a job's row again whenever it changes.

    A watch on gpuctl's pods (and their Kueue gates) wakes us; rows are then recomputed through the
    same service call as the list, so -w shows exactly what `get jobs` would.
    """

    seen = {(r.namespace, r.job_id): _job_cells(r, wide) for r in rows}
    pods = path("Pod", namespace=namespace)
    try:
        while True:
            _, rv = cluster.list_with_version(pods, label_selector=JOB_SELECTOR)
            try:
                for _event in cluster.watch(
                    pods, resource_version=rv, label_selector=JOB_SELECTOR, timeout_seconds=60
                ):
                    for r in list_job_rows(
                        cluster,
                        namespace,
                        pool=args.pool,
                        kind=args.kind,
                        selector=args.selector,
                        positions=wide,
                        gpus=False,
                    ):
                        cells = _job_cells(r, wide)
                        key = (r.namespace, r.job_id)
                        old = seen.get(key)
                        if old is None or old[:8] != cells[:8] or old[9:] != cells[9:]:
                            print("   ".join(str(c) for c in cells), flush=True)
                        seen[key] = cells
            except ApiError as e:
                if e.status != 410:  # 410 Gone: our resourceVersion expired; list again
                    raise
    except KeyboardInterrupt:
        return


# ----------------------------------------------------------------------------- get pools
@_guard
def get_pools(args: argparse.Namespace) -> int:
    from gpuctl.service.pools import list_pools  # noqa: PLC0415 - lazy: get jobs needs no pool/quota model

    pools = list_pools(_cluster(args))
    if args.name:
        pools = [p for p in pools if p.name == args.name]
        if not pools:
            raise CommandError(f"pool {args.name} not found")
    if args.output in ("json", "yaml"):
        print_data([p.as_dict() for p in pools], args.output)
        return 0
    headers = ["POOL NAME", "STATUS", "GPU TOTAL", "GPU USED", "GPU FREE", "NODE COUNT"]
    wide = args.output == "wide"
    if wide:
        headers += ["GPU RESERVED", "GPU QUEUED", "GPU TYPES"]
        partial = next((p.queued_namespaces for p in pools if p.queued_namespaces is not None), None)
        if partial is not None:
            _note(
                f"GPU QUEUED counts the waiting jobs of {', '.join(partial) or 'no namespace'} only: "
                "other teams' Workloads need a role that may list them all (gpuctl-admin)"
            )
    rows = []
    for p in pools:
        r = [p.name, p.status, p.capacity, p.taken, p.free, len(p.nodes)]
        if wide:
            r += [p.reserved, p.queued, ",".join(p.gpu_types) or "-"]
        rows.append(r)
    if not rows:
        print("No pools found: create one with `gpuctl create -f pool.yaml`.", file=sys.stderr)
        return 0
    table(headers, rows)
    return 0


# ----------------------------------------------------------------------------- get nodes / labels
def _or_dash(v: object) -> object:
    return "-" if v is None else v


@_guard
def get_nodes(args: argparse.Namespace) -> int:
    from gpuctl.service.nodes import list_nodes  # noqa: PLC0415 - lazy: get jobs needs no pool/quota model

    rows = list_nodes(_cluster(args), pool=args.pool, gpu_type=args.gpu_type)
    if args.name:
        rows = [r for r in rows if r["name"] == args.name]
    if args.output in ("json", "yaml"):
        print_data(rows, args.output)
        return 0
    if any(r["gpu_used"] is None for r in rows):
        _note(
            "GPU USED and GPU FREE per node need a role that may list every pod (gpuctl-admin); "
            "a pool's use, as Kueue counts it, is in `gpuctl get pools`"
        )
    table(
        ["NODE NAME", "STATUS", "GPU TOTAL", "GPU USED", "GPU FREE", "GPU TYPE", "IP", "POOL"],
        [
            [
                r["name"],
                r["status"],
                r["gpu_total"],
                _or_dash(r["gpu_used"]),
                _or_dash(r["gpu_free"]),
                r["gpu_type"] or "-",
                r["ip"],
                r["pool"] or "-",
            ]
            for r in rows
        ],
    )
    return 0


@_guard
def get_labels(args: argparse.Namespace) -> int:
    from gpuctl.service.nodes import node_labels  # noqa: PLC0415 - lazy: get jobs needs no pool/quota model

    rows = node_labels(_cluster(args), args.name, args.key)
    if args.output in ("json", "yaml"):
        print_data(rows if not args.name else rows[0]["labels"], args.output)
        return 0
    if args.name and args.key:
        for k, v in rows[0]["labels"].items():
            print(f"{args.name} {k}={v}")
        return 0
    table(
        ["NODE", "LABELS"],
        [[r["node"], ",".join(f"{k}={v}" for k, v in sorted(r["labels"].items())) or "<none>"] for r in rows],
    )
    return 0


# ----------------------------------------------------------------------------- get quotas / ns
def _quota_gpu(q: dict) -> str:
    g = q["gpu"]
    total = "unlimited" if g["quota"] is None else g["quota"]
    return f"{g['used']}/{total}"


@_guard
def get_quotas(args: argparse.Namespace) -> int:
    from gpuctl.service.quotas import quota_rows  # noqa: PLC0415 - lazy: get jobs needs no pool/quota model

    rows = quota_rows(_cluster(args), args.name or _scope(args))
    if args.output in ("json", "yaml"):
        print_data(rows, args.output)
        return 0
    if not rows:
        print("No quotas found.", file=sys.stderr)
        return 0 if not args.name else 1
    table(
        [
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
        [
            [
                q["name"],
                q["namespace"],
                _quota_gpu(q),
                q["gpu"]["borrowed"],
                "none" if q["gpu"]["borrowing_limit"] is None else q["gpu"]["borrowing_limit"],
                f"{q['cpu']['used']}/{q['cpu']['quota'] or 'unlimited'}",
                f"{format_bytes(q['memory']['used'])}/{q['memory']['quota'] or 'unlimited'}",
                q["pending_workloads"],
                q["status"],
            ]
            for q in rows
        ],
    )
    return 0


@_guard
def get_namespaces(args: argparse.Namespace) -> int:
    from gpuctl.service import views as views_svc  # noqa: PLC0415 - lazy: get jobs needs no pool/quota model

    rows = views_svc.list_namespaces(_cluster(args))
    if args.name:
        rows = [r for r in rows if r.name == args.name]
    if args.output in ("json", "yaml"):
        print_data([r.as_dict() for r in rows], args.output)
        return 0
    table(["NAME", "STATUS", "QUOTA", "AGE"], [[r.name, r.status, r.quota, age(r.age)] for r in rows])
    return 0


# ----------------------------------------------------------------------------- describe
def _kv(pairs: list[tuple[str, object]], indent: int = 0) -> None:
    width = max((len(k) for k, _ in pairs), default=0) + 2
    for k, v in pairs:
        print(" " * indent + f"{k + ':':<{width}}{'' if v is None else v}")


@_guard
def describe_job(args: argparse.Namespace) -> int:
    from gpuctl.service import views as views_svc  # noqa: PLC0415 - lazy: get jobs needs no pool/quota model

    d = views_svc.describe_job(_cluster(args), args.name, _scope(args))
    data = d.as_dict()
    if args.output in ("json", "yaml"):
        print_data(data, args.output)
        return 0
    _kv(
        [
            ("Name", d.name),
            ("Namespace", d.namespace),
            ("Kind", d.kind),
            ("Resource", f"{d.resource_type}/{d.name}"),
            ("Status", d.status),
            ("Pool", d.pool),
            ("Priority", d.priority),
            ("Queue", d.queue),
            ("Position", d.position or "-"),
            ("GPUs", d.gpus),
            ("Image", d.image),
            ("Requests", ", ".join(f"{k}={v}" for k, v in d.resources.items())),
        ]
    )
    if d.why:
        _kv([("Why not running", d.why)])
    if data["service"]:
        s = data["service"]
        _kv([("Service", f"{s['name']} {s['type']} {s['port']}->{s['targetPort']} nodePort {s['nodePort']}")])
    if data["env"]:
        print("Env:")
        for e in data["env"]:
            print(f"  {e.get('name')}={e.get('value', '')}")
    print(f"Kueue Workload: {data['workload'] or '<none yet>'}")
    if data["conditions"]:
        table(
            ["  TYPE", "STATUS", "REASON", "MESSAGE"],
            [
                [f"  {x['type']}", x["status"], x["reason"] or "", (x["message"] or "")[:120]]
                for x in data["conditions"]
            ],
        )
    print("Pods:" if d.pods else "Pods: <none>")
    for p in data["pods"]:
        print(f"  {p['name']}  {p['phase']}  {p['node'] or '<unscheduled>'}")
    return 0


@_guard
def describe_pool(args: argparse.Namespace) -> int:
    from gpuctl.service import pools as pools_svc  # noqa: PLC0415 - lazy: get jobs needs no pool/quota model

    d = pools_svc.describe_pool(_cluster(args), args.name)
    if args.output in ("json", "yaml"):
        print_data(d, args.output)
        return 0
    _kv(
        [
            ("Name", d["name"]),
            ("Description", d["description"] or "-"),
            ("Status", d["status"]),
            ("GPU Total", d["gpu_total"]),
            ("GPU Used", d["gpu_used"]),
            ("GPU Allocated", _or_dash(d["gpu_allocated"])),
            ("GPU Reserved", d["gpu_reserved"]),
            ("GPU Free", d["gpu_free"]),
            ("GPU Queued", d["gpu_queued"]),
            ("GPU Types", ", ".join(d["gpu_types"]) or "-"),
            ("Node Count", len(d["nodes"])),
        ]
    )
    print("Nodes:")
    table(
        ["  NAME", "READY", "GPUS", "GPU TYPE"],
        [[f"  {n['name']}", n["ready"], n["gpus"], n["gpu_type"] or "-"] for n in d["nodes"]],
    )
    if d["teams"]:
        print("Teams:")
        table(
            ["  TEAM", "GPUS IN USE", "GUARANTEED"],
            [[f"  {t['team']}", t["gpus_in_use"], t["guaranteed"]] for t in d["teams"]],
        )
    if d["jobs_namespaces"] is not None:
        _note(
            f"jobs of {', '.join(d['jobs_namespaces']) or 'no namespace'} only (the namespaces you may "
            "read); GPU Allocated (pods) needs a role that may list every pod"
        )
    for title, key in (("Running jobs", "running"), ("Queued jobs", "queued")):
        print(f"{title}:" if d[key] else f"{title}: <none>")
        if d[key]:
            table(
                ["  NAME", "NAMESPACE", "KIND", "STATUS", "GPUS", "POSITION"],
                [
                    [
                        f"  {j['name']}",
                        j["namespace"],
                        j["kind"],
                        j["status"],
                        j["gpus"],
                        j["position"] or "-",
                    ]
                    for j in d[key]
                ],
            )
    return 0


@_guard
def describe_node(args: argparse.Namespace) -> int:
    from gpuctl.service import nodes as nodes_svc  # noqa: PLC0415 - lazy: get jobs needs no pool/quota model

    d = nodes_svc.describe_node(_cluster(args), args.name)
    if args.output in ("json", "yaml"):
        print_data(d, args.output)
        return 0
    _kv(
        [
            ("Name", d["name"]),
            ("Status", d["status"]),
            ("Pool", d["pool"] or "-"),
            ("IP", d["ip"]),
            ("GPU Type", d["gpu_type"] or "-"),
            ("GPU Total", d["gpu_total"]),
            ("GPU Used", _or_dash(d["gpu_used"])),
            ("GPU Free", _or_dash(d["gpu_free"])),
            ("Capacity", ", ".join(f"{k}={v}" for k, v in sorted(d["capacity"].items()))),
        ]
    )
    print("Labels:")
    for k, v in sorted(d["labels"].items()):
        print(f"  {k}={v}")
    print("Conditions:")
    for cond in d["conditions"]:
        print(f"  {cond['type']}={cond['status']} {cond['reason']}")
    if d["pods_namespaces"] is not None:
        _note(
            f"pods of {', '.join(d['pods_namespaces']) or 'no namespace'} only (the namespaces you may "
            "read); GPU Used and Free need a role that may list every pod (gpuctl-admin)"
        )
    print("Jobs:" if d["jobs"] else "Jobs: <none>")
    for j in d["jobs"]:
        print(f"  {j['namespace']}/{j['pod']}  {j['kind']}  {j['job']}")
    return 0


def _print_quota(q: dict) -> None:
    _kv(
        [
            ("Quota", q["name"]),
            ("Namespace", q["namespace"]),
            ("Status", q["status"]),
            (
                "GPU",
                f"{_quota_gpu(q)} (borrowed {q['gpu']['borrowed']}, borrow limit "
                f"{'none' if q['gpu']['borrowing_limit'] is None else q['gpu']['borrowing_limit']})",
            ),
            ("CPU", f"{q['cpu']['used']}/{q['cpu']['quota'] or 'unlimited'}"),
            ("Memory", f"{format_bytes(q['memory']['used'])}/{q['memory']['quota'] or 'unlimited'}"),
            ("Guaranteed", ", ".join(f"{p}={g}" for p, g in q["guarantees"].items()) or "-"),
            ("Workloads", f"{q['admitted_workloads']} admitted, {q['pending_workloads']} pending"),
        ]
    )


@_guard
def describe_quota(args: argparse.Namespace) -> int:
    from gpuctl.service import views as views_svc  # noqa: PLC0415 - lazy: get jobs needs no pool/quota model

    rows = views_svc.describe_quota(_cluster(args), args.name)
    if args.output in ("json", "yaml"):
        print_data(rows if len(rows) > 1 else rows[0], args.output)
        return 0
    for q in rows:
        _print_quota(q)
    return 0


@_guard
def describe_namespace(args: argparse.Namespace) -> int:
    from gpuctl.service import views as views_svc  # noqa: PLC0415 - lazy: get jobs needs no pool/quota model

    d = views_svc.describe_namespace(_cluster(args), args.name)
    if args.output in ("json", "yaml"):
        print_data(d.as_dict(), args.output)
        return 0
    _kv([("Name", d.namespace.name), ("Status", d.namespace.status), ("Age", age(d.namespace.age))])
    print("Labels:")
    for k, v in sorted(d.namespace.labels.items()):
        print(f"  {k}={v}")
    if d.quota:
        _print_quota(d.quota)
    else:
        print("Quota: <none> (create one with kind: quota)")
    return 0


# ----------------------------------------------------------------------------- logs
@_guard
def logs(args: argparse.Namespace) -> int:

    cluster = _cluster(args)
    _, pods = job_pods_for_logs(cluster, args.job, _scope(args))
    targets = pods if args.all_pods else pods[:1]
    if args.follow:
        pod = targets[0]
        resp = read_logs(cluster, pod, tail=args.tail, timestamps=args.timestamps, follow=True, stream=True)
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
