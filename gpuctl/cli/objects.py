"""What `-o json|yaml|jsonpath|custom-columns`, `--sort-by` and `--field-selector` of `get` and `history`
read: Kubernetes-shaped objects (docs/cli.md, "The objects of `get`"), and the tables' cells read from
them (one source: a column is a field of the object).

Every object has `apiVersion: gpuctl.runwhere.ai/v1alpha1` (a view gpuctl computes, not an API the
server stores: nothing can be created or read at that group), a `kind`, `metadata` (the name, namespace,
uid, creationTimestamp and labels of the Kubernetes object it stands for), `spec` (what was asked) and
`status` (what is). kubectl's recipes work on them: `{.items[*].metadata.name}`,
`--sort-by=.metadata.creationTimestamp`, `custom-columns=NAME:.metadata.name,POOL:.spec.pool`.

Light: standard library only at import (CLI start-up); the domain's helpers are imported when a
listing is built.
"""

from __future__ import annotations

from typing import Any

from gpuctl.constants import VIEW_API_VERSION
from gpuctl.domain.objects import rfc3339


def view(
    kind: str,
    name: str,
    namespace: str | None,
    identity: dict | None,
    spec: dict[str, Any],
    status: dict[str, Any],
) -> dict[str, Any]:
    """One object: metadata from the object it stands for (`identity`: gpuctl.domain.objects.identity)."""
    ident = identity or {}
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata.update(
        uid=ident.get("uid") or "",
        creationTimestamp=ident.get("creationTimestamp"),
        labels=dict(ident.get("labels") or {}),
    )
    return {
        "apiVersion": VIEW_API_VERSION,
        "kind": kind,
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }


def gpus(units: int | None, whole: int | None = None) -> int | float | None:
    """GPUs as one number, slices included (budget units -> 1, 0.14, 2.5: gpuctl.domain.sharing)."""
    from gpuctl.domain.sharing import units_to_gpus  # noqa: PLC0415 - lazy: CLI start-up

    if units is None:
        return whole
    return units_to_gpus(units)


def row_units(r: Any) -> int | None:
    """Budget units a `get jobs` row holds (its whole GPUs and slices); None: not read."""
    from gpuctl.constants import GPU_UNITS  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.domain.sharing import resource_units  # noqa: PLC0415 - lazy: CLI start-up

    if r.gpus is None:
        return None
    return r.gpus * GPU_UNITS + sum((resource_units(k) or 0) * n for k, n in (r.slices or {}).items())


# ----------------------------------------------------------------------------- jobs
def _pod(r: Any) -> dict[str, Any]:
    return {
        "name": r.job_id,
        "phase": str(r.status),
        "ready": r.ready,
        "node": r.node,
        "ip": r.ip,
        "creationTimestamp": r.created or _timestamp(r.age),
        "gpus": gpus(row_units(r)),
        "priority": r.priority,
        "position": r.position,
        "reason": r.reason,
    }


def _timestamp(age: float | None) -> str | None:
    import time  # noqa: PLC0415 - lazy: CLI start-up

    if age is None:
        return None
    return rfc3339(time.time() - age)


def job_objects(rows: list[Any]) -> list[tuple[dict, list[Any]]]:
    """`get jobs` rows (gpuctl.service.jobs.JobRow, a job's rows together) as one object per job, with
    its rows: kind Job; spec: kind, resource, pool, priority, queue, gpus (asked, slices included),
    nodes, replicas; status: phase, ready, nodes, ip, position, reason, estimate (RFC 3339, when asked),
    startsBy and bound (the recorded start bound, RFC 3339, and Pending, Kept or Missed), gpus (held),
    cluster, replicas (an autoscaled service's scale), pods (one per pod row)."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for r in rows:
        groups.setdefault((r.namespace, r.name), []).append(r)
    return [(_job_object(rs), rs) for rs in groups.values()]


def _job_object(rows: list[Any]) -> dict[str, Any]:
    from gpuctl.domain.promise import RecordedBound  # noqa: PLC0415 - lazy: CLI start-up

    first, facts = rows[0], rows[0].owner
    own = next((r for r in rows if r.job_id == first.name), None)  # the job's own row (no pod, a gang)
    pods = [r for r in rows if r is not own]
    if own is not None:
        ready, nodes, ip = own.ready, [n for n in own.node.split(",") if n not in ("", "<none>", "-")], own.ip
        held = row_units(own)
        reason, position = own.reason, own.position
    else:
        ready = f"{sum(1 for r in pods if _all_ready(r.ready))}/{len(pods)}"
        nodes = list(dict.fromkeys(r.node for r in pods if r.node not in ("", "<none>")))
        ip = pods[0].ip if len(pods) == 1 else ""
        held = None if any(r.gpus is None for r in pods) else sum(row_units(r) or 0 for r in pods)
        reason = next((r.reason for r in pods if r.reason), "")
        position = min((r.position for r in pods if r.position), default=None)
    status: dict[str, Any] = {
        "phase": str(facts.status if facts else first.status),
        "ready": ready,
        "nodes": nodes,
        "ip": ip if ip not in ("<none>", "-") else "",
        "position": position if position is not None else (facts.position if facts else None),
        "reason": reason,
        "estimate": facts.starts_by if facts else None,
        # The bound serve recorded and keeps (docs/queueing.md "A bound gpuctl keeps"), and its outcome.
        **RecordedBound.fields(facts.bound if facts else None),
        "gpus": gpus(held),
        "cluster": first.cluster,
        "pods": [_pod(r) for r in pods],
    }
    if own is not None and own.replicas is not None:
        status["replicas"] = dict(own.replicas)
    spec = {
        "kind": first.kind,
        "resource": facts.resource if facts else "",
        "pool": first.pool,
        "priority": first.labels.get("runwhere.ai/priority", first.priority),
        "queue": first.queue,
        "gpus": gpus(facts.units) if facts else None,
        "nodes": facts.nodes if facts else 1,
        "replicas": facts.replicas if facts else None,
    }
    identity = {
        "uid": facts.uid if facts else "",
        "creationTimestamp": facts.created if facts else None,
        "labels": first.labels,
    }
    return view("Job", first.name, first.namespace, identity, spec, status)


def _all_ready(ready: str) -> bool:
    r, _, t = ready.partition("/")
    return bool(t) and r == t and t != "0"


def job_cells(obj: dict, pod: dict | None) -> dict[str, Any]:
    """One table row of a job, by column name: the job's own row (pod None: queued, a gang, a service
    of multi-node replicas, an autoscaled service's own row) or one of its pods."""
    from gpuctl.domain.objects import short_age  # noqa: PLC0415 - lazy: CLI start-up

    m, spec, st = obj["metadata"], obj["spec"], obj["status"]
    src = pod if pod is not None else st
    node = (
        pod["node"]
        if pod is not None
        else (",".join(st["nodes"]) or ("-" if st.get("replicas") else "<none>"))
    )
    ip = src["ip"] or ("-" if pod is None and st.get("replicas") else "<none>")
    created = src["creationTimestamp"] if pod is not None else m["creationTimestamp"]
    position = src["position"]
    return {
        "JOB ID": m["name"],
        "POD": pod["name"] if pod is not None else ("-" if st["pods"] or st.get("replicas") else "<none>"),
        "NAMESPACE": m["namespace"],
        "KIND": spec["kind"],
        "STATUS": src["phase"],
        "READY": src["ready"],
        "CLUSTER": st["cluster"] or "-",
        "NODE": node,
        "IP": ip,
        "AGE": short_age(age_of(created)),
        "POOL": spec["pool"],
        "PRIORITY": pod["priority"] if pod is not None else spec["priority"],
        "QUEUE": spec["queue"],
        "POSITION": position if position else "-",
        "BOUND": " ".join(v for v in (st["startsBy"], st["bound"]) if v) or "-",
        "REASON": src["reason"] or "-",
    }


def job_row_pairs(obj: dict, rows: list[Any]) -> list[tuple[Any, dict | None]]:
    """(row, its pod entry or None for the job's own row), in the rows' order."""
    pods = iter(obj["status"]["pods"])
    return [(r, None if r.job_id == obj["metadata"]["name"] else next(pods)) for r in rows]


def age_of(timestamp: str | None) -> float | None:
    import time  # noqa: PLC0415 - lazy: CLI start-up

    from gpuctl.domain.objects import parse_time  # noqa: PLC0415 - lazy: CLI start-up

    t = parse_time(timestamp) if timestamp else None
    return None if t is None else max(time.time() - t, 0.0)


# ----------------------------------------------------------------------------- pools, nodes, quotas, ns
def pool_object(p: Any) -> dict[str, Any]:
    """A pool (gpuctl.service.usage.PoolUsage) as kind Pool; metadata: its ResourceFlavor's."""
    status: dict[str, Any] = {
        "phase": p.status,
        "gpus": {
            "total": p.capacity,  # GPU TOTAL: the GPUs of its Ready nodes
            "used": p.taken,  # GPU USED: what Kueue reserved for admitted work (or pods hold)
            "free": p.free,
            "reserved": p.reserved,
            "queued": p.queued,
            "allNodes": p.total,  # every node's, Ready or not
        },
        "nodes": {"total": len(p.nodes), "ready": p.nodes_ready},
        "gpuTypes": list(p.gpu_types),
        "sharing": p.sharing,
        "shared": p.shared,
        "slices": dict(p.slices),
        "clusters": dict(p.clusters),
    }
    if p.used is not None:
        status["gpus"]["bound"] = p.used  # GPUs of the pods bound to its nodes (an admin's reading)
    if p.queued_namespaces is not None:
        status["queuedNamespaces"] = list(p.queued_namespaces)
    return view("Pool", p.name, None, p.meta, {"description": p.description, "nodes": list(p.nodes)}, status)


def node_object(r: dict) -> dict[str, Any]:
    """A node row (gpuctl.service.nodes.list_nodes(metadata=True)) as kind Node."""
    return view(
        "Node",
        r["name"],
        None,
        r.get("metadata"),
        {"pool": r["pool"], "gpuType": r["gpu_type"]},
        {
            "phase": r["status"],
            "gpus": {"total": r["gpu_total"], "used": r["gpu_used"], "free": r["gpu_free"]},
            "ip": r["ip"],
        },
    )


def quota_object(q: dict) -> dict[str, Any]:
    """A team's quota row (gpuctl.service.quotas.quota_rows(metadata=True)) as kind Quota; metadata:
    its ClusterQueue's (the namespace is the team's)."""
    g = q["gpu"]
    return view(
        "Quota",
        q["name"],
        q["namespace"],
        q.get("metadata"),
        {
            "gpus": g["quota"],
            "borrowingLimit": g["borrowing_limit"],
            "cpu": q["cpu"]["quota"],
            "memory": q["memory"]["quota"],
            "guarantees": dict(q["guarantees"]),
            "description": q["description"],
        },
        {
            "phase": q["status"],
            "gpus": {"used": g["used"], "free": g["free"], "borrowed": g["borrowed"]},
            "cpu": {"used": q["cpu"]["used"]},
            "memory": {"used": q["memory"]["used"]},
            "pendingWorkloads": q["pending_workloads"],
            "admittedWorkloads": q["admitted_workloads"],
        },
    )


def namespace_object(r: Any) -> dict[str, Any]:
    """A team namespace (gpuctl.service.views.NamespaceRow) as kind Namespace."""
    ident = {"uid": r.uid, "creationTimestamp": r.created_at, "labels": r.labels}
    return view("Namespace", r.name, None, ident, {"quota": r.quota}, {"phase": r.status})


def labels_object(r: dict) -> dict[str, Any]:
    """`get labels`' row: kind NodeLabels, the node's name and the labels shown."""
    return view("NodeLabels", r["node"], None, {"labels": r["labels"]}, {}, {})


def history_object(rec: Any, resource: str = "") -> dict[str, Any]:
    """One record of the audit trail (gpuctl.domain.history.Record) as kind HistoryRecord: metadata names
    the job (its Workload's uid), creationTimestamp the record's time; spec the action, actor, reason."""
    ident = {"uid": rec.uid, "creationTimestamp": rec.time}
    spec = {
        "job": rec.job,
        "resource": resource,
        "action": rec.action,
        "actor": rec.actor,
        "reason": rec.reason,
    }
    return view("HistoryRecord", rec.job, rec.namespace, ident, spec, {})
