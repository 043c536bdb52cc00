"""`gpuctl describe job|pool|node|quota|ns NAME`: one object in detail, or -o json|yaml.

The views are gpuctl.service's (gpuctl.service.views and the pool and node services), the printing is
here; module level imports only the standard library and the CLI's light modules (start-up).
"""

from __future__ import annotations

import argparse
import sys

from gpuctl.cli.cmdutil import (
    add_prometheus_flag,
    connect,
    guard,
    job_object_name,
    kv,
    note,
    or_dash,
    prometheus_of,
    quota_gpu,
    scope,
)
from gpuctl.cli.terminal import escape_terminal

TYPES = {
    "job": "job",
    "jobs": "job",
    "pool": "pool",
    "pools": "pool",
    "node": "node",
    "nodes": "node",
    "quota": "quota",
    "quotas": "quota",
    "ns": "namespace",
    "namespace": "namespace",
}


DESCRIBE_OUTPUTS = ("json", "yaml", "name", "jsonpath", "jsonpath-file")


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "describe",
        help="show one job, pool, node, quota or namespace in detail",
        parents=[common["cluster"], common["output"](DESCRIBE_OUTPUTS)],
    )
    p.add_argument("type", choices=sorted(TYPES), metavar="TYPE")
    p.add_argument("names", nargs="+", metavar="NAME", help="one or more (TYPE/NAME too, as kubectl)")
    add_prometheus_flag(p)  # a job's GPU use (docs/utilisation.md)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Each NAME described in turn, a blank line between (kubectl describe); one that fails prints its
    error and the others are still described, exit 1. -o prints one object: several names are refused."""
    from gpuctl.cli.errors import CommandError  # noqa: PLC0415 - lazy: CLI start-up

    handlers = {
        "job": describe_job,
        "pool": describe_pool,
        "node": describe_node,
        "quota": describe_quota,
        "namespace": describe_namespace,
    }
    handler = handlers[TYPES[args.type]]
    if len(args.names) > 1 and getattr(args, "output", None):
        raise CommandError(f"describe -o {args.output} takes one NAME; `gpuctl get` lists several")
    if len(args.names) == 1:
        args.name = args.names[0]
        return handler(args)
    rc = 0
    for i, name in enumerate(args.names):
        if i:
            print()
        try:
            rc = max(rc, handler(argparse.Namespace(**{**vars(args), "name": name})))
        except CommandError as e:
            print(e.line(), file=sys.stderr)
            rc = max(rc, e.code)
    return rc


@guard
def describe_job(args: argparse.Namespace) -> int:
    from gpuctl.cli.output import table  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cli.printers import print_one  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.domain.workload import format_duration  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service import views as views_svc  # noqa: PLC0415 - lazy: CLI start-up

    prom = prometheus_of(args, required=False)
    d = views_svc.describe_job(connect(args), args.name, scope(args), prom=prom, events=True)
    data = d.as_dict()
    if print_one(args, data, job_object_name(d.kind, d.name)):
        return 0
    kv(
        [
            ("Name", d.name),
            ("Namespace", d.namespace),
            ("Kind", d.kind),
            ("Resource", f"{d.resource_type}/{d.name}"),
            ("Status", d.status),
            *_lifetime(d),
            ("Pool", d.pool),
            ("Priority", d.priority or ("floor/burst (docs/serving.md)" if d.autoscaling else "-")),
            ("Queue", d.queue),
            ("Position", d.position or "-"),
            ("GPUs", d.gang["text"] if d.gang else d.replicas["text"] if d.replicas else d.gpus_text),
            ("Max runtime", format_duration(d.max_runtime) if d.max_runtime else "none"),
            ("Image", d.image),
            ("Requests", ", ".join(f"{k}={v}" for k, v in d.resources.items())),
        ]
    )
    if d.cluster:
        mk = d.multikueue or {}
        state = f" (MultiKueue {mk['state']}: {mk['message']})" if mk.get("state") else ""
        kv([("Cluster", f"{d.cluster}{state}")])
    if d.why:
        kv([("Why not running", d.why)])
    if d.estimate:
        kv([("When", d.estimate["summary"])])
    if d.starts_by and d.estimate:  # waiting in the queue
        word = "Bound missed" if d.bound == "Missed" else "Bound kept"
        kv([(word, f"{d.starts_by}, the start bound it was first shown (docs/queueing.md)")])
    if d.autoscaling:
        _autoscaling(d.autoscaling)
    if d.moved:
        kv([("Moved", d.moved)])
    if d.set_aside_ended:
        kv([("Set-aside ended", d.set_aside_ended)])
    if data["service"]:
        s = data["service"]
        kv([("Service", _service_line(s))])
        from gpuctl.cli.port_forward import forward_command  # noqa: PLC0415 - lazy: CLI start-up

        kv([("Port-forward", forward_command(d.namespace, d.name, s))])
    if data["env"]:
        print("Env:")
        for e in data["env"]:
            ref = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            print(escape_terminal(f"  {e.get('name')}={e.get('value', '')}" + (f"<{ref}>" if ref else "")))
    _print_gpu_use(d.gpu_use, d.gpu_use_error)
    if len(d.workloads) > 1:  # a Deployment's, one per pod; a LeaderWorkerSet's, one per replica
        print(escape_terminal(f"Kueue Workloads: {len(d.workloads)}: {', '.join(d.workloads)}"))
    print(escape_terminal(f"Kueue Workload: {data['workload'] or '<none yet>'}"))
    if data["conditions"]:
        table(
            ["  TYPE", "STATUS", "REASON", "MESSAGE"],
            [
                [f"  {x['type']}", x["status"], x["reason"] or "", x["message"] or ""]  # whole, as kubectl
                for x in data["conditions"]
            ],
        )
    _job_pods(d, data)
    _events(d.events, d.events_error)
    return 0


def _job_pods(d, data: dict) -> None:
    """A job's pods: its ranks (a gang), its replicas' groups (a LeaderWorkerSet), or one line each."""
    from gpuctl.cli.output import table  # noqa: PLC0415 - lazy: CLI start-up

    if d.pods_error:
        print(escape_terminal(f"Pods: not read: {d.pods_error}"))
        return
    if d.gang and d.pods:  # a multi-node job: rank -> pod -> node -> its topology domains
        levels = d.gang["topology"]
        print("Ranks:")
        table(
            ["  RANK", "POD", "NODE", *(lv.rsplit("/", 1)[-1].upper() for lv in levels)],
            [
                [f"  {r['rank']}", r["pod"], r["node"] or "<unscheduled>", *r["domains"].values()]
                for r in d.gang["ranks"]
            ],
        )
        return
    if d.replicas:  # a service of multi-node replicas: replica -> its state -> rank -> pod -> node
        print("Replicas:")
        rows = []
        for g in d.replicas["groups"]:
            for i, p in enumerate(g["pods"] or [{"rank": "-", "pod": "<none>", "node": None}]):
                head = [f"  {g['replica']}", g["state"]] if i == 0 else ["  ", ""]
                rows.append([*head, str(p["rank"]), p["pod"], p["node"] or "<unscheduled>"])
        table(["  REPLICA", "STATE", "RANK", "POD", "NODE"], rows)
        waiting = [g for g in d.replicas["groups"] if "waits_for" in g]
        if waiting:
            print("Waiting replicas:")
            table(
                ["  REPLICA", "WAITS FOR", "RUNS AT THE LATEST"],
                [[f"  {g['replica']}", g["waits_for"], g["runs_by"] or "-"] for g in waiting],
            )
        return
    print("Pods:" if d.pods else "Pods: <none>")
    for p in data["pods"]:
        print(escape_terminal(f"  {p['name']}  {p['phase']}  {p['node'] or '<unscheduled>'}"))


def _lifetime(d) -> list[tuple[str, str]]:
    """kubectl describe's Start Time, Completed At (here Failed At too) and Duration, and how its containers
    last ended (gpuctl.domain.lifetime), as lines of the describe block; none before it started."""
    import time  # noqa: PLC0415 - lazy: CLI start-up

    from gpuctl.domain.lifetime import Times  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.domain.workload import format_duration  # noqa: PLC0415 - lazy: CLI start-up

    out = []
    if d.started:
        out.append(("Start Time", _when(d.started)))
    if d.ended:
        out.append(("Failed At" if d.status == "Failed" else "Completed At", _when(d.ended)))
    seconds, running = Times(d.started, d.ended).duration(time.time())
    if seconds is not None:
        out.append(("Duration", format_duration(seconds) + (" (running)" if running else "")))
    if d.exit:
        e = d.exit
        out.append(
            (
                "Exit Code",
                f"{e['code']} ({e['reason'] or 'ended'}: pod {e['pod']}, container {e['container']})",
            )
        )
    return out


def _when(ts: str) -> str:
    """A time as kubectl's describe prints one (RFC 1123 with the zone offset, local time)."""
    import time  # noqa: PLC0415 - lazy: CLI start-up

    from gpuctl.domain.objects import parse_time  # noqa: PLC0415 - lazy: CLI start-up

    t = parse_time(ts)
    return ts if t is None else time.strftime("%a, %d %b %Y %H:%M:%S %z", time.localtime(t))


def _events(events: list[dict] | None, error: str | None) -> None:
    """kubectl describe's Events table: Type, Reason, Age ("5m (x3 over 10m)" for a repeated one), From,
    Message; oldest first."""
    import time  # noqa: PLC0415 - lazy: CLI start-up

    from gpuctl.cli.output import table  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.domain.objects import parse_time, short_age  # noqa: PLC0415 - lazy: CLI start-up

    if error:
        print(escape_terminal(f"Events: not read: {error}"))
        return
    if not events:
        print("Events: <none>")
        return
    now = time.time()

    def age(ts: str | None) -> str:
        t = parse_time(ts)
        return short_age(now - t) if t is not None else "<unknown>"

    rows = []
    for e in events:
        when = age(e["firstTimestamp"])
        if e["count"] > 1:
            when = f"{age(e['lastTimestamp'])} (x{e['count']} over {when})"
        rows.append([f"  {e['type']}", e["reason"], when, e["from"], e["message"]])
    print("Events:")
    table(
        ["  Type", "Reason", "Age", "From", "Message"],
        [["  ----", "------", "----", "----", "-------"], *rows],
    )


def _print_gpu_use(use: dict | None, error: str | None) -> None:
    """GPU use (docs/utilisation.md): the job's figures, then one line per device of each pod (rank, replica,
    MIG
    slice), as `gpuctl top` reads them."""
    from gpuctl.cli.output import table  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.constants import USE_LOOKBACK_SECONDS, USE_WINDOW_SECONDS  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.domain.utilisation import (  # noqa: PLC0415 - lazy: CLI start-up
        SOURCE_NAMES,
        gpus_text,
        idle_text,
        memory_text,
        percent_text,
    )
    from gpuctl.domain.workload import format_duration  # noqa: PLC0415 - lazy: CLI start-up

    if error:
        kv([("GPU use", f"not read: {error}")])
        return
    if use is None:
        return
    if not use["measured"]:
        kv([("GPU use", f"{gpus_text(use['gpus'])} GPU(s) held, nothing measured (no dcgm-exporter series)")])
        return
    idle = idle_text(use["idle_seconds"], use["idle_at_least"], USE_LOOKBACK_SECONDS)
    mean = f"{percent_text(use['activity'])} (mean over {format_duration(USE_WINDOW_SECONDS)})"
    held = f"{gpus_text(use['gpus'])} GPU(s) held"
    kv([("GPU use", f"{held}, activity {mean}, memory {memory_text(use['memory_mib'])}, idle for {idle}")])
    rows = []
    for p in use["pods"]:
        where = "-" if p["rank"] is None else str(p["rank"])
        if p.get("replica") is not None:  # a multi-node replica (LeaderWorkerSet group)
            where = f"{p['replica']}/{where}"
        for dev in p["devices"] or [None]:
            if dev is None:
                rows.append([f"  {p['pod']}", where, "<not measured>", "-", "-", "-"])
                continue
            rows.append(
                [
                    f"  {p['pod']}",
                    where,
                    dev["device"],
                    percent_text(dev["activity"]),
                    memory_text(dev["memory_mib"]),
                    SOURCE_NAMES.get(dev["source"], dev["source"]) or "-",
                ]
            )
    table(["  POD", "RANK", "DEVICE", "ACTIVITY", "MEMORY", "SOURCE"], rows)


def _autoscaling(a: dict) -> None:
    """An autoscaled service (docs/serving.md): its replicas, the HPA's metric, each waiting replica."""
    from gpuctl.cli.output import table  # noqa: PLC0415 - lazy: CLI start-up

    kv(
        [
            (
                "Replicas",
                f"floor {a['minReplicas']} (never preempted within quota), burst {a['burst']['replicas']} "
                f"of at most {a['burst']['max']} (yields first); desired {a['desired']}, running "
                f"{a['running']}, ready {a['ready']}, waiting {a['waiting']}",
            )
        ]
    )
    m, hpa = a.get("metric"), a.get("autoscaler")
    if m:
        idle = "<none: no burst replica to average over>" if not a["burst"]["replicas"] else "<not read yet>"
        now = m["current"] if m["current"] is not None else idle
        kv(
            [
                (
                    "Autoscaler",
                    f"HorizontalPodAutoscaler {hpa['name'] if hpa else '<missing>'}: {m['name']} per "
                    f"replica, target {m['target']}; the load above the floor's {m['floorLoad']} is {now} "
                    f"per burst replica",
                )
            ]
        )
    if hpa:
        off = [
            c
            for c in hpa["conditions"]
            if c["status"] == "False" and c["type"] in ("AbleToScale", "ScalingActive")
        ]
        for c in off:
            kv([("Autoscaler problem", f"{c['type']} {c['reason']}: {c['message']}")])
    if a["waitingReplicas"]:
        print("Waiting replicas:")
        table(
            ["  POD", "TIER", "WAITS FOR", "RUNS AT THE LATEST"],
            [
                [f"  {w['pod']}", w["tier"], w["reason"] or "-", w["when"] or "-"]
                for w in a["waitingReplicas"]
            ],
        )


@guard
def describe_pool(args: argparse.Namespace) -> int:
    from gpuctl.cli.output import table  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cli.printers import print_one  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service import pools as pools_svc  # noqa: PLC0415 - lazy: CLI start-up

    d = pools_svc.describe_pool(connect(args), args.name)
    if print_one(args, d, f"{TYPES[args.type]}/{args.name}"):
        return 0
    kv(
        [
            ("Name", d["name"]),
            ("Description", d["description"] or "-"),
            ("Status", d["status"]),
            ("GPU Total", d["gpu_total"]),
            ("GPU Used", d["gpu_used"]),
            ("GPU Allocated", or_dash(d["gpu_allocated"])),
            ("GPU Reserved", d["gpu_reserved"]),
            ("GPU Free", d["gpu_free"]),
            ("GPU Queued", d["gpu_queued"]),
            ("GPU Types", ", ".join(d["gpu_types"]) or "-"),
            ("Sharing", d["shared"] or "none"),
            ("Node Count", len(d["nodes"])),
        ]
    )
    if d["slices"]:  # slices per MIG profile / shared replicas (docs/sharing.md, What gpuctl shows)
        print("Slices:")
        table(
            ["  PROFILE", "RESOURCE", "TOTAL", "USED", "FREE"],
            [
                [f"  {p}", v["resource"], v["total"], or_dash(v["used"]), or_dash(v["free"])]
                for p, v in d["slices"].items()
            ],
        )
    print("Nodes:")
    table(
        ["  NAME", "READY", "GPUS", "GPU TYPE"],
        [[f"  {n['name']}", n["ready"], n["gpus"], n["gpu_type"] or "-"] for n in d["nodes"]],
    )
    if d["teams"]:
        print("Teams:")
        table(
            ["  TEAM", "GPUS IN USE", "GUARANTEED (ANY POOL)"],
            [
                [
                    f"  {t['team']}",
                    t["gpus_in_use"],
                    "unlimited" if t["guaranteed"] is None else t["guaranteed"],
                ]
                for t in d["teams"]
            ],
        )
    if d["jobs_namespaces"] is not None:
        note(
            f"jobs of {', '.join(d['jobs_namespaces']) or 'no namespace'} only (the namespaces you may "
            "read); GPU Allocated (pods) needs a role that may list every pod"
        )
    for title, key in (("Running jobs", "running"), ("Queued jobs", "queued"), ("Stopped jobs", "stopped")):
        if key == "stopped" and not d[key]:
            continue
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


@guard
def describe_node(args: argparse.Namespace) -> int:
    from gpuctl.cli.printers import print_one  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service import nodes as nodes_svc  # noqa: PLC0415 - lazy: CLI start-up

    d = nodes_svc.describe_node(connect(args), args.name)
    if print_one(args, d, f"{TYPES[args.type]}/{args.name}"):
        return 0
    kv(
        [
            ("Name", d["name"]),
            ("Status", d["status"]),
            ("Pool", d["pool"] or "-"),
            ("IP", d["ip"]),
            ("GPU Type", d["gpu_type"] or "-"),
            ("GPU Total", d["gpu_total"]),
            ("GPU Used", or_dash(d["gpu_used"])),
            ("GPU Free", or_dash(d["gpu_free"])),
            ("Capacity", ", ".join(f"{k}={v}" for k, v in sorted(d["capacity"].items()))),
        ]
    )
    print("Labels:")
    for k, v in sorted(d["labels"].items()):
        print(escape_terminal(f"  {k}={v}"))
    print("Conditions:")
    for cond in d["conditions"]:
        print(escape_terminal(f"  {cond['type']}={cond['status']} {cond['reason']}"))
    if d["pods_namespaces"] is not None:
        note(
            f"pods of {', '.join(d['pods_namespaces']) or 'no namespace'} only (the namespaces you may "
            "read); GPU Used and Free need a role that may list every pod (gpuctl-admin)"
        )
    print("Jobs:" if d["jobs"] else "Jobs: <none>")
    for j in d["jobs"]:
        print(escape_terminal(f"  {j['namespace']}/{j['pod']}  {j['kind']}  {j['job']}"))
    return 0


def _print_quota(q: dict) -> None:
    from gpuctl.quantity import format_bytes  # noqa: PLC0415 - lazy: CLI start-up

    kv(
        [
            ("Quota", q["name"]),
            ("Namespace", q["namespace"]),
            ("Status", q["status"]),
            (
                "GPU",
                f"{quota_gpu(q)} (borrowed {q['gpu']['borrowed']}, borrow limit "
                f"{'none' if q['gpu']['borrowing_limit'] is None else q['gpu']['borrowing_limit']})",
            ),
            ("CPU", f"{q['cpu']['used']}/{q['cpu']['quota'] or 'unlimited'}"),
            ("Memory", f"{format_bytes(q['memory']['used'])}/{q['memory']['quota'] or 'unlimited'}"),
            ("Guaranteed", ", ".join(f"{p}={g}" for p, g in q["guarantees"].items()) or "-"),
            ("Workloads", f"{q['admitted_workloads']} admitted, {q['pending_workloads']} pending"),
        ]
    )


@guard
def describe_quota(args: argparse.Namespace) -> int:
    from gpuctl.cli.printers import print_one  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service import views as views_svc  # noqa: PLC0415 - lazy: CLI start-up

    rows = views_svc.describe_quota(connect(args), args.name)
    if print_one(args, rows if len(rows) > 1 else rows[0], f"quota/{args.name}"):
        return 0
    for q in rows:
        _print_quota(q)
    return 0


@guard
def describe_namespace(args: argparse.Namespace) -> int:
    from gpuctl.cli.printers import print_one  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.domain.objects import short_age as age  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service import views as views_svc  # noqa: PLC0415 - lazy: CLI start-up

    d = views_svc.describe_namespace(connect(args), args.name)
    if print_one(args, d.as_dict(), f"namespace/{args.name}"):
        return 0
    kv([("Name", d.namespace.name), ("Status", d.namespace.status), ("Age", age(d.namespace.age))])
    print("Labels:")
    for k, v in sorted(d.namespace.labels.items()):
        print(escape_terminal(f"  {k}={v}"))
    if d.quota:
        _print_quota(d.quota)
    else:
        print("Quota: <none> (create one with kind: quota)")
    return 0


def _service_line(s: dict) -> str:
    """`svc-x ClusterIP 10.0.0.7 80->8080`, `svc-nb ClusterIP None (headless) 8888->8888`, a NodePort's
    node port after its ports: what kubectl describe service says of each, on one line."""
    ip = s.get("clusterIP")
    where = " None (headless)" if ip == "None" else f" {ip}" if ip else ""
    node = f" nodePort {s['nodePort']}" if s.get("nodePort") else ""
    return f"{s['name']} {s['type']}{where} {s['port']}->{s['targetPort']}{node}"
