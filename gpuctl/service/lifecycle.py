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

from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.cluster.reader import Reader
from gpuctl.constants import (
    AUDIT_SUBMITTED_BY_ANNOTATION,
    KIND_TO_RESOURCE,
    KUEUE_GROUP,
    MANAGED_BY_VALUE,
    SERVICE_PREFIX,
    SPEC_HASH_ANNOTATION,
    Labels,
)
from gpuctl.domain.dryrun import DryRun
from gpuctl.domain.gang import gang_note, group_size
from gpuctl.domain.objects import pod_template
from gpuctl.service.access import Permissions, permissions_of
from gpuctl.service.errors import Conflict, NotFound, ServiceError, describe_exception, require
from gpuctl.service.inventory import CONTROLLER_KINDS, Inventory
from gpuctl.service.plan import object_label
from gpuctl.service.prechecks import precheck_jobs, taken_name
from gpuctl.service.serving import HPA, hpa_refused, start_burst_at_zero
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
    # The plural of the named object that does not exist (a NotFound's resource): the CLI prints kubectl's
    # NotFound text for it (gpuctl.cli.errors.not_found).
    missing: str | None = None
    # What was written, as the API server answered (a server dry run: its answer, defaults and mutating
    # policies applied); a pool's or a quota's: the objects gpuctl sent. What `create|apply -o json|yaml`
    # prints (kubectl's create -o yaml).
    written: list[dict] = field(default_factory=list)
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
        planned = precheck_jobs(cluster, docs, default_ns, action, reader, read)
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
                r.written = _sent(doc, default_ns)
            elif isinstance(spec, QuotaSpec):
                from gpuctl.service.quotas import apply_quota  # noqa: PLC0415 - lazy: job create

                r.lines = apply_quota(cluster, spec, create=action == "create", dry_run=dry_run)
                r.written = _sent(doc, default_ns)
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
                    answers=r.written,
                )
            r.action = "created" if action == "create" else "applied"
        except (ServiceError, ApiError, OSError) as e:
            text = describe_exception(e) if isinstance(e, ApiError) else str(e)
            said = f"{r.kind} {r.name}: "  # once: the quota and pool services name their document too
            r.error = f"{doc.source}: {text if text.startswith(said) else said + text}"
            r.error_status = getattr(e, "status", None)
            results.append(r)
            break
        results.append(r)
    return results


def _sent(doc: Document, default_ns: str) -> list[dict]:
    """The objects a pool's or a quota's document writes, as gpuctl sends them (gpuctl.service.plan)."""
    from gpuctl.service.plan import plan_documents  # noqa: PLC0415 - lazy: -o json|yaml only

    return plan_documents([doc], default_ns).objects


def _apply_pool(cluster: Cluster, spec: PoolSpec, source: str, *, create: bool, dry_run: DryRun) -> list[str]:
    """A pool of this cluster's nodes, or of worker clusters' (pool.clusters, docs/multicluster.md: kubeconfig
    files are relative to the document's own file). One Inventory for every check before the first write."""
    from gpuctl.service.multicluster import apply_remote_pool, check_local_pool  # noqa: PLC0415 - lazy: job create
    from gpuctl.service.pools import apply_pool  # noqa: PLC0415 - lazy: job create

    inv = Inventory(cluster, None)
    if not spec.pool.clusters:
        check_local_pool(inv, spec)
        return apply_pool(cluster, spec, create=create, dry_run=dry_run, inv=inv)
    src = Path(source)
    base = src.parent if src.is_file() else Path.cwd()
    return apply_remote_pool(cluster, spec, create=create, base=base, dry_run=dry_run, inv=inv)


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
    caller may read it (by count for a team member: gpuctl.service.waiting.snapshot), read once per
    submission (a sweep of 200 jobs is judged against one snapshot, not 200)."""

    def __init__(self, cluster: Cluster, perms: Permissions | None, cluster_queues: list[dict] | None = None):
        self.cluster, self.perms, self.cluster_queues = cluster, perms, cluster_queues
        self._every: Snapshot | None = None  # the caller reads every namespace
        self._by_ns: dict[str, Snapshot] = {}

    def _snapshot(self, namespace: str) -> Snapshot:
        from gpuctl.service.waiting import snapshot, snapshot_inventory  # noqa: PLC0415 - lazy: job create

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
        if obj["kind"] == "LeaderWorkerSet":  # Kueue admits a group at a time: the first group's pods
            count = group_size(obj)
        value = labelled_priority_value(obj)
        demand = demand_of_pod_template(meta["namespace"], pod_template(obj), int(count or 1), value)
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
    answers: list[dict] | None = None,
) -> list[str]:
    lines = _write_objects(
        cluster,
        objs,
        action=action,
        dry_run=dry_run,
        force=force,
        source=source,
        submitted_by=submitted_by,
        answers=answers,
    )
    if dry_run is DryRun.SERVER and when is not None and objs and objs[0]["kind"] in CONTROLLER_KINDS:
        lines.append(when.line(objs[0]))
    return lines


def _write_objects(
    cluster: Cluster,
    objs: list[dict],
    *,
    action: str,
    dry_run: DryRun,
    force: bool,
    source: str | None = None,
    submitted_by: str | None = None,
    answers: list[dict] | None = None,
) -> list[str]:
    """Create or apply a job's objects; `answers` gets each object as the API server answered (the
    object itself when nothing was sent: a client dry run; the stored one when unchanged)."""
    answers = [] if answers is None else answers
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
                        answers.append(cluster.create(o, dry_run=server_dry))
                    except ApiError as e:
                        if e.status == 409 and o["kind"] in CONTROLLER_KINDS:
                            raise taken_name(o, o["kind"], source) from None
                        if o["kind"] == HPA:
                            raise hpa_refused(o, e) from None
                        raise
                else:
                    answers.append(o)
                done.append(o)
                if dry_run.persists and o["kind"] == HPA:
                    start_burst_at_zero(cluster, o)
        except Exception:
            if dry_run.persists:
                for o in reversed(done):
                    cluster.delete(path(o["kind"], o["metadata"]["name"], o["metadata"]["namespace"]))
            raise
        return [f"{_label(o)} created{gang_note(o)}" for o in objs]
    lines = []
    for o in objs:
        meta = o["metadata"]
        existing = cluster.get_or_none(path(o["kind"], meta["name"], meta["namespace"]))
        if existing is None:
            if writes:
                answers.append(cluster.create(o, dry_run=server_dry))
                if dry_run.persists and o["kind"] == HPA:
                    start_burst_at_zero(cluster, o)
            else:
                answers.append(o)
            lines.append(f"{_label(o)} created{gang_note(o)}")
            continue
        if (existing["metadata"].get("annotations") or {}).get(SPEC_HASH) == meta["annotations"][SPEC_HASH]:
            answers.append(existing)
            lines.append(f"{_label(o)} unchanged")
            continue
        first = (existing["metadata"].get("annotations") or {}).get(AUDIT_SUBMITTED_BY_ANNOTATION)
        if first and o["kind"] != "Job":  # a changed Deployment or notebook keeps who submitted it
            meta["annotations"][AUDIT_SUBMITTED_BY_ANNOTATION] = first
        if o["kind"] == "Job":  # re-created: a new submission, by this caller
            lines.append(_replace_job(cluster, existing, o, dry_run=dry_run, force=force, answers=answers))
        elif not writes:
            answers.append(o)
            lines.append(f"{_label(o)} configured")
        else:
            try:
                answers.append(cluster.apply(o, dry_run=server_dry))
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


def _replace_job(
    cluster: Cluster, existing: dict, desired: dict, *, dry_run: DryRun, force: bool, answers: list[dict]
) -> str:
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
        answers.append(desired)  # the create cannot be asked while the old Job exists
        return f"{_label(desired)} replaced"
    cluster.delete(p, propagation="Foreground", precondition_uid=existing["metadata"]["uid"])
    deadline = time.monotonic() + 60
    while cluster.get_or_none(p) is not None:
        if time.monotonic() > deadline:
            raise ServiceError(f"job {meta['name']}: the old Job was not gone after 60s; try again")
        time.sleep(0.3)
    answers.append(cluster.create(desired))
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
    from gpuctl.service.jobs_delete import delete_job  # noqa: PLC0415 - lazy: job create
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
    from gpuctl.service.jobs_delete import delete_job  # noqa: PLC0415 - lazy: job create
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
            r.missing = getattr(e, "resource", None)
        results.append(r)
    return results


def _delete_namespace(cluster: Cluster, name: str, *, dry_run: DryRun) -> list[str]:
    from gpuctl.service.quotas import delete_quota  # noqa: PLC0415 - lazy: job create

    ns = cluster.get_or_none(path("Namespace", name))
    if ns is None:
        raise NotFound(f"namespace {name} not found", resource="namespaces", name=name)
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
