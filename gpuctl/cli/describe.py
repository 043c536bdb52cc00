"""`gpuctl describe job|pool|node|quota|ns NAME`: one object in detail, or -o json|yaml.

The views are gpuctl.service's (gpuctl.service.views and the pool and node services), the printing is
here; module level imports only the standard library and the CLI's light modules (start-up).
"""

from __future__ import annotations

import argparse

from gpuctl.cli.cmdutil import connect, guard, job_object_name, kv, note, or_dash, quota_gpu, scope

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
    p.add_argument("name", metavar="NAME")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    handlers = {
        "job": describe_job,
        "pool": describe_pool,
        "node": describe_node,
        "quota": describe_quota,
        "namespace": describe_namespace,
    }
    return handlers[TYPES[args.type]](args)


@guard
def describe_job(args: argparse.Namespace) -> int:
    from gpuctl.cli.output import table  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cli.printers import print_one  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.domain.workload import format_duration  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service import views as views_svc  # noqa: PLC0415 - lazy: CLI start-up

    d = views_svc.describe_job(connect(args), args.name, scope(args))
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
            ("Pool", d.pool),
            ("Priority", d.priority or ("floor/burst (docs/serving.md)" if d.autoscaling else "-")),
            ("Queue", d.queue),
            ("Position", d.position or "-"),
            ("GPUs", d.gang["text"] if d.gang else d.gpus),
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
    if d.autoscaling:
        _autoscaling(d.autoscaling)
    if d.moved:
        kv([("Moved", d.moved)])
    if d.set_aside_ended:
        kv([("Set-aside ended", d.set_aside_ended)])
    if data["service"]:
        s = data["service"]
        kv([("Service", f"{s['name']} {s['type']} {s['port']}->{s['targetPort']} nodePort {s['nodePort']}")])
    if data["env"]:
        print("Env:")
        for e in data["env"]:
            ref = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            print(f"  {e.get('name')}={e.get('value', '')}" + (f"<{ref}>" if ref else ""))
    print(f"Kueue Workload: {data['workload'] or '<none yet>'}")
    if data["conditions"]:
        table(
            ["  TYPE", "STATUS", "REASON", "MESSAGE"],
            [
                [f"  {x['type']}", x["status"], x["reason"] or "", (x["message"] or "")[:120]]
                for x in data["conditions"]
            ],
        )
    if d.pods_error:
        print(f"Pods: not read: {d.pods_error}")
        return 0
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
        return 0
    print("Pods:" if d.pods else "Pods: <none>")
    for p in data["pods"]:
        print(f"  {p['name']}  {p['phase']}  {p['node'] or '<unscheduled>'}")
    return 0


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
        now = m["current"] if m["current"] is not None else "<not read yet>"
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
            ["  TEAM", "GPUS IN USE", "GUARANTEED"],
            [[f"  {t['team']}", t["gpus_in_use"], t["guaranteed"]] for t in d["teams"]],
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
        print(f"  {k}={v}")
    print("Conditions:")
    for cond in d["conditions"]:
        print(f"  {cond['type']}={cond['status']} {cond['reason']}")
    if d["pods_namespaces"] is not None:
        note(
            f"pods of {', '.join(d['pods_namespaces']) or 'no namespace'} only (the namespaces you may "
            "read); GPU Used and Free need a role that may list every pod (gpuctl-admin)"
        )
    print("Jobs:" if d["jobs"] else "Jobs: <none>")
    for j in d["jobs"]:
        print(f"  {j['namespace']}/{j['pod']}  {j['kind']}  {j['job']}")
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
        print(f"  {k}={v}")
    if d.quota:
        _print_quota(d.quota)
    else:
        print("Quota: <none> (create one with kind: quota)")
    return 0
