"""create / apply / delete of YAML documents, and delete by name: the write path of CLI and API.

Order inside one submission: pools, then quotas, then jobs, so one file can hold all three. Every
document is checked against the cluster before anything is written; a job whose second object fails
is rolled back, so nothing is left half created.

Every function takes a gpuctl.domain.dryrun.DryRun: CLIENT runs every check (reads only) and returns
the lines of what would be done before the first write; SERVER sends every write with dryRun=All
(the API server persists nothing); only NONE rolls back, re-creates Jobs or syncs the queues.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpuctl.builders import WHOLE_GPUS, build
from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.cluster.reader import Reader, as_reader
from gpuctl.constants import (
    AUDIT_SUBMITTED_BY_ANNOTATION,
    DEFAULT_POOL,
    GPU_TYPE_LABEL_KEYS,
    JOB_KINDS,
    KIND_TO_RESOURCE,
    KUEUE_GROUP,
    MANAGED_BY_VALUE,
    SERVICE_PREFIX,
    SPEC_HASH_ANNOTATION,
    Kind,
    Labels,
)
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.multicluster import refused_kind, remote_pools
from gpuctl.domain.pools import pool_names
from gpuctl.domain.teams import team_queues
from gpuctl.service.access import Permissions, permissions_of
from gpuctl.service.errors import Conflict, NotFound, ServiceError, describe_exception, require
from gpuctl.service.inventory import JOB_SELECTOR, MANAGED_SELECTOR
from gpuctl.service.plan import object_label
from gpuctl.service.sharing import share_facts
from gpuctl.spec import Document, PoolSpec, QuotaSpec, spec_namespace

if TYPE_CHECKING:
    from gpuctl.domain.explain import Snapshot

# What only some submissions need is imported where it is used (marked "lazy: job create"): a
# `create -f` of jobs, the common case, needs neither the server dry run's estimate (gpuctl.domain.
# explain/estimate) nor the pool, quota and delete paths (gpuctl.service.pools and its usage
# accounting, .quotas, .jobs): ~70 ms of imports on a 2-core machine under load (bench/submit.py).

SPEC_HASH = SPEC_HASH_ANNOTATION  # the webhook knows this key


@dataclass
class Result:
    """Outcome of one document or one name."""

    kind: str
    name: str
    namespace: str | None = None
    source: str | None = None
    action: str = ""
    lines: list[str] = field(default_factory=list)
    error: str | None = None
    # HTTP-style status of the error (ServiceError.status, or the API server's for ApiError), so the
    # REST API can answer 404/409/403 instead of a blanket 400; None for other errors.
    error_status: int | None = None
    objects: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        d = {
            "file": self.source,
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "status": "error" if self.error else self.action,
            "message": self.error or "; ".join(self.lines),
        }
        if self.objects:
            d["objects"] = [f"{o['kind']}/{o['metadata']['name']}" for o in self.objects]
        return d


def _spec_hash(obj: dict) -> str:
    return hashlib.sha256(json.dumps(obj.get("spec"), sort_keys=True).encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- pre-checks
# At most this many names of one kind in one namespace are looked up one GET each; more (a sweep of
# many jobs in one file) are found in one list of the namespace's object metadata instead.
NAME_GETS_MAX = 2
CONTROLLER_KINDS = ("Job", "Deployment", "StatefulSet")


def _existing(
    cluster: Cluster, reader: Reader, kind: str, namespace: str, names: set[str], *, gpuctl_only: bool
) -> dict[str, dict]:
    """name -> metadata of the objects of `kind` named `names` in `namespace`. gpuctl_only: gpuctl's
    objects suffice (read from the reader's list, a watch cache's memory inside `gpuctl serve`)."""
    if gpuctl_only:
        objs = reader.list(kind, namespace, label_selector=JOB_SELECTOR)
        return {o["metadata"]["name"]: o["metadata"] for o in objs if o["metadata"]["name"] in names}
    if len(names) <= NAME_GETS_MAX:
        found = {n: reader.get(kind, n, namespace) for n in sorted(names)}
        return {n: o["metadata"] for n, o in found.items() if o is not None}
    return {
        m["name"]: m for m in cluster.list_metadata(path(kind, namespace=namespace)) if m["name"] in names
    }


def _precheck_jobs(
    cluster: Cluster,
    docs: list[Document],
    default_ns: str,
    action: str,
    reader: Reader | None = None,
    read: dict[str, list[dict]] | None = None,
) -> dict[int, list[dict]]:
    """Check every job against the cluster before writing anything; return its objects by doc index.
    `read` gets the lists it read that a later step needs too ("ClusterQueue": gpuctl's).

    What it reads, and only when a job needs it: gpuctl's ResourceFlavors (do the pools exist) and
    ClusterQueues (has the namespace a quota), both through the managed-by selector, and, for a create,
    the names already taken. A job name is one per namespace across gpuctl's Jobs, Deployments and
    StatefulSets (`get jobs` and `describe job` find a job by name); an object of the same kind by
    anyone is refused by the API server itself (409, _write_objects). One job alone (the REST API's
    request) is checked against gpuctl's objects from `reader` (the watch cache in `gpuctl serve`),
    since the create's own 409 covers the rest before anything is written; several are checked against
    every object of the namespace first, one GET per name or one metadata list per kind."""
    jobs = [(i, d) for i, d in enumerate(docs) if Kind(d.spec.kind) in JOB_KINDS]
    if not jobs:
        return {}
    reader = as_reader(reader if reader is not None else cluster)
    new_pools = {d.spec.pool.name for d in docs if isinstance(d.spec, PoolSpec)}
    new_teams = {ns for d in docs if isinstance(d.spec, QuotaSpec) for ns in d.spec.entries()}
    wanted_ns = {spec_namespace(d.spec, default_ns) for _, d in jobs}
    wanted_pools = {p for _, d in jobs for p in d.spec.resources.pools_allowed or ()}
    teams = set(new_teams)
    if wanted_ns - teams:
        cluster_queues = reader.list("ClusterQueue", label_selector=MANAGED_SELECTOR)
        teams |= set(team_queues(cluster_queues))
        if read is not None:
            read["ClusterQueue"] = cluster_queues
    pools = set(new_pools)
    flavors: list[dict] = []
    if wanted_pools - pools:
        flavors = reader.list("ResourceFlavor", label_selector=MANAGED_SELECTOR)
        pools |= set(pool_names(flavors))
    # Pools in worker clusters (issue 24) take only the kinds MultiKueue carries.
    remote = remote_pools(flavors)
    remote.update(
        {d.spec.pool.name: sorted(d.spec.pool.clusters) for d in docs if isinstance(d.spec, PoolSpec)}
    )
    remote = {p: cs for p, cs in remote.items() if cs}
    planned: dict[int, list[dict]] = {}
    for i, doc in jobs:
        spec = doc.spec
        ns = spec_namespace(spec, default_ns)
        where = f"{doc.source}: job {spec.job.name}"
        _check_multicluster_kind(where, spec.kind, spec.resources.pools_allowed or [], remote)
        if ns not in teams:
            if cluster.get_or_none(path("Namespace", ns)) is None:
                raise NotFound(f"{where}: namespace {ns} does not exist; create a quota for it (kind: quota)")
            raise ServiceError(
                f"{where}: namespace {ns} has no quota, so Kueue would not queue its work; "
                "create a quota for it first (kind: quota), or, on a cluster the earlier gpuctl ran, "
                "run `gpuctl adopt` to convert its ResourceQuotas"
            )
        allowed = spec.resources.pools_allowed
        if allowed is None or len(allowed) > 1:
            if spec.resources.gpu_share is not None:
                raise ServiceError(
                    f"{where}: resources.gpu-share needs one pool, whose GPUs' slices it names; "
                    "set resources.pool to one pool"
                )
            _check_any_pool(reader, where, spec.resources.gpu_type, allowed, pools)
            planned[i] = build(spec, ns)
            continue
        pool = spec.resources.pool
        if pool not in pools:
            if pool == DEFAULT_POOL:
                raise NotFound(
                    f"{where}: jobs without resources.pool run in pool {DEFAULT_POOL}, which does not exist; "
                    f"set resources.pool, create pool {DEFAULT_POOL} (kind: pool), or run `gpuctl adopt` to "
                    "put the GPU nodes without a pool label into it"
                )
            raise NotFound(
                f"{where}: pool {pool} does not exist; create it (kind: pool) or set resources.pool"
            )
        share = spec.resources.gpu_share
        planned[i] = build(spec, ns, WHOLE_GPUS if share is None else share_facts(reader, where, pool, share))
    _check_names(cluster, reader, docs, planned, action)
    return planned


def _check_multicluster_kind(
    where: str, kind: str, job_pools: list[str], remote: dict[str, list[str]]
) -> None:
    """A job for a pool in worker clusters must be of a kind MultiKueue carries (refused before any write)."""
    why = refused_kind(kind)
    far = [p for p in job_pools if p in remote]
    if why is None or not far:
        return
    p = far[0]
    raise ServiceError(
        f"{where}: kind: {kind} cannot run in pool {p} (resources.pool), whose nodes are in cluster(s) "
        f"{', '.join(remote[p])}: {why}; submit it as kind: training, or to the cluster itself "
        f"(--context {remote[p][0]}) where it runs as usual"
    )


def _check_any_pool(
    reader: Reader, where: str, gpu_type: str | None, allowed: list[str] | None, pools: set[str]
) -> None:
    """A job that may run in several pools: every pool it lists exists; with only a GPU type, some pool's
    node has that type (else it would wait for ever)."""
    if allowed is not None:
        missing = sorted(set(allowed) - pools)
        if missing:
            raise NotFound(
                f"{where}: resources.pool lists pool(s) {', '.join(missing)}, which do not exist; "
                f"remove them or create them (kind: pool); pools: {', '.join(sorted(pools)) or 'none'}"
            )
        return
    nodes = [
        n
        for key in GPU_TYPE_LABEL_KEYS
        for n in reader.list("Node", label_selector=f"{key}={gpu_type},{Labels.POOL}")
    ]
    if not nodes:
        raise NotFound(
            f"{where}: resources.gpu-type {gpu_type} without resources.pool runs in any pool with "
            f"{gpu_type} nodes, and no pool has one; check the GPU type (`gpuctl get nodes` shows them) or "
            "set resources.pool"
        )


def _check_names(
    cluster: Cluster, reader: Reader, docs: list[Document], planned: dict[int, list[dict]], action: str
) -> None:
    """Conflict when a job's name or its Service's is taken (see _precheck_jobs)."""
    by_ns: dict[str, dict[str, list[tuple[int, dict]]]] = {}  # ns -> kind -> (doc, object)
    for i, objs in planned.items():
        for o in objs:
            by_ns.setdefault(o["metadata"]["namespace"], {}).setdefault(o["kind"], []).append((i, o))
    alone = len(planned) == 1
    cached = alone and getattr(reader, "holds", lambda *a: False)(CONTROLLER_KINDS, JOB_SELECTOR)
    for ns, kinds in by_ns.items():
        if action == "create":
            names = {o["metadata"]["name"] for k in CONTROLLER_KINDS for _, o in kinds.get(k, [])}
            for resource in CONTROLLER_KINDS:
                if alone and resource in kinds:
                    continue  # its own kind: the create itself answers 409, before anything is written
                taken = _existing(cluster, reader, resource, ns, names, gpuctl_only=cached)
                for i, objs in planned.items():
                    meta = objs[0]["metadata"]
                    other = taken.get(meta["name"]) if meta["namespace"] == ns else None
                    if other is not None:
                        kind = (other.get("labels") or {}).get(Labels.JOB_TYPE, resource)
                        raise Conflict(f"{docs[i].source}: {_taken(objs[0], kind, docs[i].source)}")
        services = kinds.get("Service", [])
        if services:
            taken = _existing(
                cluster,
                reader,
                "Service",
                ns,
                {o["metadata"]["name"] for _, o in services},
                gpuctl_only=False,
            )
            for i, o in services:
                other = taken.get(o["metadata"]["name"])
                if other is not None and not (other.get("labels") or {}).get(Labels.JOB_TYPE):
                    raise Conflict(
                        f"{docs[i].source}: job {docs[i].spec.job.name}: Service {o['metadata']['name']} "
                        "exists and is not gpuctl's"
                    )


# ----------------------------------------------------------------------------- submit
def submit(
    cluster: Cluster,
    docs: list[Document],
    default_ns: str,
    *,
    action: str,
    dry_run: DryRun = DryRun.NONE,
    force: bool = False,
    keep_running: bool = False,
    delete_namespace: bool = False,
    perms: Permissions | None = None,
    reader: Reader | None = None,
    submitted_by: str | None = None,
) -> list[Result]:
    """create | apply | delete the documents. Stops at the first failure (later documents untouched).
    keep_running: a deleted pool's running jobs are left running (delete_pool). delete_namespace: a
    deleted quota's team namespaces go too, where gpuctl created them (delete_quota). perms: the
    caller's (what a server dry run's "when would it run" may read; default: the cluster's own
    credential). reader: where the pre-checks read (default: the cluster; the REST API inside
    `gpuctl serve` passes its watch cache). submitted_by: who submits (the audit trail's
    runwhere.ai/submitted-by on each job's controller it creates; docs/audit.md)."""
    dry_run = DryRun(dry_run)
    if action == "delete":
        return [
            _delete_doc(cluster, d, default_ns, dry_run, keep_running, delete_namespace)
            for d in _ordered(docs, reverse=True)
        ]
    results: list[Result] = []
    read: dict[str, list[dict]] = {}
    try:
        planned = _precheck_jobs(cluster, docs, default_ns, action, reader, read)
    except ServiceError as e:
        return [Result(kind="job", name="", error=str(e), error_status=e.status)]
    order = sorted(range(len(docs)), key=lambda i: _rank(docs[i]))
    # A dry run writes nothing, so the ClusterQueues the pre-checks read are still the cluster's.
    when = _When(cluster, perms, read.get("ClusterQueue")) if dry_run is DryRun.SERVER else None
    for i in order:
        doc = docs[i]
        spec = doc.spec
        r = Result(kind=str(spec.kind), name=_name(spec), source=doc.source)
        try:
            require_admin(cluster, spec.kind, action, dry_run, perms)
            if isinstance(spec, PoolSpec):
                r.lines = _apply_pool(cluster, spec, doc.source, create=action == "create", dry_run=dry_run)
            elif isinstance(spec, QuotaSpec):
                from gpuctl.service.quotas import apply_quota  # noqa: PLC0415 - lazy: job create

                r.lines = apply_quota(cluster, spec, create=action == "create", dry_run=dry_run)
            else:
                r.namespace = spec_namespace(spec, default_ns)
                r.objects = planned[i]
                r.lines = _write_job(
                    cluster,
                    planned[i],
                    action=action,
                    dry_run=dry_run,
                    force=force,
                    when=when,
                    source=doc.source,
                    submitted_by=submitted_by,
                )
            r.action = "created" if action == "create" else "applied"
        except (ServiceError, ApiError, OSError) as e:
            r.error = (
                f"{doc.source}: {r.kind} {r.name}: {describe_exception(e) if isinstance(e, ApiError) else e}"
            )
            r.error_status = getattr(e, "status", None)
            results.append(r)
            break
        results.append(r)
    return results


def _apply_pool(cluster: Cluster, spec: PoolSpec, source: str, *, create: bool, dry_run: DryRun) -> list[str]:
    from gpuctl.service.multicluster import apply_remote_pool, check_local_pool  # noqa: PLC0415 - lazy: job create
    from gpuctl.service.pools import apply_pool  # noqa: PLC0415 - lazy: job create

    """A pool of this cluster's nodes, or of worker clusters' (pool.clusters, issue 24: kubeconfig files
    are relative to the document's own file)."""
    if not spec.pool.clusters:
        check_local_pool(cluster, spec)
        return apply_pool(cluster, spec, create=create, dry_run=dry_run)
    src = Path(source)
    base = src.parent if src.is_file() else Path.cwd()
    return apply_remote_pool(cluster, spec, create=create, base=base, dry_run=dry_run)


# What changing a pool, a quota or a namespace takes (cluster-scoped objects: gpuctl-admin).
_ADMIN_WRITES = {
    "pool": (("resourceflavors", KUEUE_GROUP), ("nodes", "")),
    "quota": (("clusterqueues", KUEUE_GROUP),),
    "namespace": (("namespaces", ""),),
}


def require_admin(
    cluster: Cluster, kind: str, action: str, dry_run: DryRun, perms: Permissions | None = None
) -> None:
    """Forbidden, naming gpuctl-admin, when the caller may not change a pool, quota or namespace (asked
    before any check of the cluster's state; a client dry run writes nothing and asks nothing)."""
    needs = _ADMIN_WRITES.get(str(kind))
    if not needs or DryRun(dry_run) is DryRun.CLIENT:
        return
    perms = permissions_of(cluster, perms)
    for resource, group in needs:
        verb = "delete" if action == "delete" and resource != "nodes" else "patch"
        require(perms, verb, resource, group)


def _rank(doc: Document) -> int:
    return 0 if isinstance(doc.spec, PoolSpec) else 1 if isinstance(doc.spec, QuotaSpec) else 2


def _ordered(docs: list[Document], reverse: bool = False) -> list[Document]:
    return sorted(docs, key=_rank, reverse=reverse)


def _name(spec) -> str:
    if isinstance(spec, PoolSpec):
        return spec.pool.name
    if isinstance(spec, QuotaSpec):
        return spec.quota.name
    return spec.job.name


_label = object_label


class _When:
    """A server dry run's answers to "when would it run": from the cluster state as it is now, as the
    caller may read it (by count for a team member: gpuctl.service.jobs.snapshot), read once per
    submission (a sweep of 200 jobs is judged against one snapshot, not 200)."""

    def __init__(self, cluster: Cluster, perms: Permissions | None, cluster_queues: list[dict] | None = None):
        self.cluster, self.perms, self.cluster_queues = cluster, perms, cluster_queues
        self._every: Snapshot | None = None  # the caller reads every namespace
        self._by_ns: dict[str, Snapshot] = {}

    def _snapshot(self, namespace: str) -> Snapshot:
        from gpuctl.service.jobs import snapshot, snapshot_inventory  # noqa: PLC0415 - lazy: job create

        if self._every is not None:
            return self._every
        if namespace not in self._by_ns:
            inv = snapshot_inventory(self.cluster, namespace, self.perms, cluster_queues=self.cluster_queues)
            snap = snapshot(inv)
            if inv.namespace is None:
                self._every = snap
                return snap
            self._by_ns[namespace] = snap
        return self._by_ns[namespace]

    def line(self, obj: dict) -> str:
        from gpuctl.domain.estimate import estimate  # noqa: PLC0415 - lazy: job create
        from gpuctl.domain.explain import demand_of_pod_template  # noqa: PLC0415 - lazy: job create
        from gpuctl.domain.workload import labelled_priority_value  # noqa: PLC0415 - lazy: job create

        meta, spec = obj["metadata"], obj.get("spec") or {}
        count = spec.get("parallelism") if obj["kind"] == "Job" else spec.get("replicas")
        value = labelled_priority_value(obj)
        demand = demand_of_pod_template(meta["namespace"], spec["template"], int(count or 1), value)
        snap = self._snapshot(meta["namespace"])
        verdict = snap.verdict(demand)
        line = f"{_label(obj)}: {verdict.summary(demand.pool)}"
        if verdict.starts:
            return line
        # When it would start at the latest, had it been created now (gpuctl.domain.estimate).
        return f"{line}; {estimate(snap, demand, now=time.time(), verdict=verdict).summary()}"


def _write_job(
    cluster: Cluster,
    objs: list[dict],
    *,
    action: str,
    dry_run: DryRun,
    force: bool,
    when: _When | None = None,
    source: str | None = None,
    submitted_by: str | None = None,
) -> list[str]:
    lines = _write_objects(
        cluster, objs, action=action, dry_run=dry_run, force=force, source=source, submitted_by=submitted_by
    )
    if dry_run is DryRun.SERVER and when is not None and objs and objs[0]["kind"] in CONTROLLER_KINDS:
        lines.append(when.line(objs[0]))
    return lines


def _taken(obj: dict, kind: str, source: str | None = None) -> Conflict:
    """A job name already taken in its namespace (by `kind`: a gpuctl job kind or a resource)."""
    meta = obj["metadata"]
    fix = f"gpuctl apply -f {source}" if source else "gpuctl apply -f FILE"
    return Conflict(
        f"job {meta['name']} already exists in namespace {meta['namespace']} (kind: {kind}); "
        f"use `{fix}` to update it, or delete it first"
    )


def _write_objects(
    cluster: Cluster,
    objs: list[dict],
    *,
    action: str,
    dry_run: DryRun,
    force: bool,
    source: str | None = None,
    submitted_by: str | None = None,
) -> list[str]:
    for o in objs:
        o["metadata"].setdefault("annotations", {})[SPEC_HASH] = _spec_hash(o)
        if submitted_by and o["kind"] in CONTROLLER_KINDS:
            o["metadata"]["annotations"][AUDIT_SUBMITTED_BY_ANNOTATION] = submitted_by
    writes, server_dry = dry_run.writes, dry_run is DryRun.SERVER
    if action == "create":
        done: list[dict] = []
        try:
            for o in objs:
                if writes:
                    try:
                        cluster.create(o, dry_run=server_dry)
                    except ApiError as e:
                        if e.status == 409 and o["kind"] in CONTROLLER_KINDS:
                            raise _taken(o, o["kind"], source) from None
                        raise
                done.append(o)
        except Exception:
            if dry_run.persists:
                for o in reversed(done):
                    cluster.delete(path(o["kind"], o["metadata"]["name"], o["metadata"]["namespace"]))
            raise
        return [f"{_label(o)} created" for o in objs]
    lines = []
    for o in objs:
        meta = o["metadata"]
        existing = cluster.get_or_none(path(o["kind"], meta["name"], meta["namespace"]))
        if existing is None:
            if writes:
                cluster.create(o, dry_run=server_dry)
            lines.append(f"{_label(o)} created")
            continue
        if (existing["metadata"].get("annotations") or {}).get(SPEC_HASH) == meta["annotations"][SPEC_HASH]:
            lines.append(f"{_label(o)} unchanged")
            continue
        first = (existing["metadata"].get("annotations") or {}).get(AUDIT_SUBMITTED_BY_ANNOTATION)
        if first and o["kind"] != "Job":  # a changed Deployment or notebook keeps who submitted it
            meta["annotations"][AUDIT_SUBMITTED_BY_ANNOTATION] = first
        if o["kind"] == "Job":  # re-created: a new submission, by this caller
            lines.append(_replace_job(cluster, existing, o, dry_run=dry_run, force=force))
        elif not writes:
            lines.append(f"{_label(o)} configured")
        else:
            try:
                cluster.apply(o, dry_run=server_dry)
                lines.append(f"{_label(o)} configured")
            except ApiError as e:
                if o["kind"] == "StatefulSet" and e.status in (400, 403, 422):
                    raise ServiceError(
                        f"notebook {meta['name']}: Kueue keeps a queued StatefulSet's pod template fixed; "
                        f"delete it (gpuctl delete job {meta['name']} -n {meta['namespace']}) "
                        f"and create it again ({e.message})"
                    ) from None
                raise
    return lines


def _replace_job(cluster: Cluster, existing: dict, desired: dict, *, dry_run: DryRun, force: bool) -> str:
    """A Job's pod template is immutable: re-create it, but not while it runs unless forced."""
    meta = desired["metadata"]
    st = existing.get("status") or {}
    running = not (existing.get("spec") or {}).get("suspend") and int(st.get("active") or 0) > 0
    if running and not force:
        raise ServiceError(
            f"job {meta['name']} is running and its pod template changed; Kubernetes cannot change a running "
            "Job in place: pass --force to re-create it (the run restarts) or wait until it finishes"
        )
    p = path("Job", meta["name"], meta["namespace"])
    if not dry_run.persists:
        # Only the delete can be checked by the API server: the new Job's create would meet the old one.
        if dry_run is DryRun.SERVER:
            cluster.delete(
                p, propagation="Foreground", precondition_uid=existing["metadata"]["uid"], dry_run=True
            )
        return f"{_label(desired)} replaced"
    cluster.delete(p, propagation="Foreground", precondition_uid=existing["metadata"]["uid"])
    deadline = time.monotonic() + 60
    while cluster.get_or_none(p) is not None:
        if time.monotonic() > deadline:
            raise ServiceError(f"job {meta['name']}: the old Job was not gone after 60s; try again")
        time.sleep(0.3)
    cluster.create(desired)
    return f"{_label(desired)} replaced"


# ----------------------------------------------------------------------------- delete
def _delete_doc(
    cluster: Cluster,
    doc: Document,
    default_ns: str,
    dry_run: DryRun,
    keep_running: bool = False,
    delete_namespace: bool = False,
) -> Result:
    from gpuctl.service.jobs import delete_job  # noqa: PLC0415 - lazy: job create
    from gpuctl.service.multicluster import delete_pool_everywhere  # noqa: PLC0415 - lazy: job create
    from gpuctl.service.quotas import delete_quota  # noqa: PLC0415 - lazy: job create

    spec = doc.spec
    r = Result(kind=str(spec.kind), name=_name(spec), source=doc.source, action="deleted")
    try:
        require_admin(cluster, spec.kind, "delete", dry_run)
        if isinstance(spec, PoolSpec):
            r.lines = delete_pool_everywhere(
                cluster, spec.pool.name, dry_run=dry_run, keep_running=keep_running
            )
        elif isinstance(spec, QuotaSpec):
            r.lines = delete_quota(
                cluster,
                spec.quota.name,
                dry_run=dry_run,
                namespaces=list(spec.entries()),
                delete_namespace=delete_namespace,
            )
        else:
            r.namespace = spec_namespace(spec, default_ns)
            r.lines = delete_job(cluster, spec.job.name, r.namespace, dry_run=dry_run)
    except (ServiceError, ApiError) as e:
        r.error = (
            f"{doc.source}: {r.kind} {r.name}: {describe_exception(e) if isinstance(e, ApiError) else e}"
        )
        r.error_status = e.status
    return r


def delete_by_name(
    cluster: Cluster,
    kind: str,
    names: list[str],
    *,
    namespace: str | None,
    force: bool = False,
    delete_namespace: bool = False,
    dry_run: DryRun = DryRun.NONE,
    keep_running: bool = False,
) -> list[Result]:
    """`delete job|pool|quota|namespace NAME...`: each name on its own; CLIENT only reads."""
    from gpuctl.service.jobs import delete_job  # noqa: PLC0415 - lazy: job create
    from gpuctl.service.multicluster import delete_pool_everywhere  # noqa: PLC0415 - lazy: job create
    from gpuctl.service.quotas import delete_quota  # noqa: PLC0415 - lazy: job create

    dry_run = DryRun(dry_run)
    results = []
    for name in names:
        r = Result(kind=kind, name=name, namespace=namespace, action="deleted")
        try:
            require_admin(cluster, kind, "delete", dry_run)
            if kind == "job":
                r.lines = delete_job(cluster, name, namespace, force=force, dry_run=dry_run)
            elif kind == "pool":
                r.lines = delete_pool_everywhere(cluster, name, dry_run=dry_run, keep_running=keep_running)
            elif kind == "quota":
                r.lines = delete_quota(cluster, name, delete_namespace=delete_namespace, dry_run=dry_run)
            elif kind == "namespace":
                r.lines = _delete_namespace(cluster, name, dry_run=dry_run)
            else:
                raise ServiceError(f"cannot delete {kind}")
        except (ServiceError, ApiError) as e:
            r.error = describe_exception(e) if isinstance(e, ApiError) else str(e)
            r.error_status = e.status
        results.append(r)
    return results


def _delete_namespace(cluster: Cluster, name: str, *, dry_run: DryRun) -> list[str]:
    from gpuctl.service.quotas import delete_quota  # noqa: PLC0415 - lazy: job create

    ns = cluster.get_or_none(path("Namespace", name))
    if ns is None:
        raise NotFound(f"namespace {name} not found")
    if (ns["metadata"].get("labels") or {}).get(Labels.MANAGED_BY) != MANAGED_BY_VALUE:
        raise Conflict(f"namespace {name} was not created by gpuctl; gpuctl does not delete it")
    lines = []
    cq = cluster.get_or_none(path("ClusterQueue", name))
    if cq is not None:
        q = (cq["metadata"].get("labels") or {}).get(Labels.QUOTA, "")
        lines += [
            line
            for line in delete_quota(cluster, q, dry_run=dry_run, namespaces=[name])
            if not line.startswith(f"namespace/{name} ")
        ]
    if dry_run.writes:
        cluster.delete(path("Namespace", name), dry_run=dry_run is DryRun.SERVER)
    return [*lines, f"namespace/{name} deleted"]


__all__ = ["KIND_TO_RESOURCE", "SERVICE_PREFIX", "Result", "delete_by_name", "submit"]
