"""What a create / apply checks before its first write (gpuctl.service.lifecycle.submit): every job of a
submission against the cluster (its namespace has a quota, its pools exist, a job of several pools can
land somewhere, a pool in worker clusters takes its kind, its name and its Service's are free), read with
as few requests as the submission needs. Nothing here writes."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpuctl.builders import TargetPool, build
from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.cluster.reader import Reader, as_reader
from gpuctl.constants import DEFAULT_POOL, GPU_TYPE_LABEL_KEYS, JOB_KINDS, Kind, Labels
from gpuctl.domain.multicluster import refused_kind, remote_pools
from gpuctl.domain.pools import pool_names
from gpuctl.domain.teams import team_queues
from gpuctl.service.errors import Conflict, NotFound, ServiceError
from gpuctl.service.gang import gang_pool_facts
from gpuctl.service.inventory import CONTROLLER_KINDS, JOB_SELECTOR, MANAGED_SELECTOR, OPTIONAL_KINDS
from gpuctl.service.serving import check_autoscaled
from gpuctl.service.sharing import share_facts
from gpuctl.service.sizing import resolve_node_types, size_any_pool, size_pinned
from gpuctl.spec import Document, PoolSpec, QuotaSpec, spec_namespace

# At most this many names of one kind in one namespace are looked up one GET each; more (a sweep of
# many jobs in one file) are found in one list of the namespace's object metadata instead.
NAME_GETS_MAX = 2


def _existing(
    cluster: Cluster, reader: Reader, kind: str, namespace: str, names: set[str], *, gpuctl_only: bool
) -> dict[str, dict]:
    """name -> metadata of the objects of `kind` named `names` in `namespace`. gpuctl_only: gpuctl's
    objects suffice (read from the reader's list, a watch cache's memory inside `gpuctl serve`). None of a
    kind the cluster does not serve (OPTIONAL_KINDS: no LeaderWorkerSet controller installed)."""
    try:
        return _existing_named(cluster, reader, kind, namespace, names, gpuctl_only=gpuctl_only)
    except ApiError as e:
        if kind in OPTIONAL_KINDS and e.status in (403, 404):
            return {}
        raise


def _existing_named(
    cluster: Cluster, reader: Reader, kind: str, namespace: str, names: set[str], *, gpuctl_only: bool
) -> dict[str, dict]:
    if gpuctl_only:
        objs = reader.list(kind, namespace, label_selector=JOB_SELECTOR)
        return {o["metadata"]["name"]: o["metadata"] for o in objs if o["metadata"]["name"] in names}
    if len(names) <= NAME_GETS_MAX:
        found = {n: reader.get(kind, n, namespace) for n in sorted(names)}
        return {n: o["metadata"] for n, o in found.items() if o is not None}
    return {
        m["name"]: m for m in cluster.list_metadata(path(kind, namespace=namespace)) if m["name"] in names
    }


def precheck_jobs(
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
    known = _Known.read(reader, docs, [d for _, d in jobs], default_ns, read)
    planned = {i: _plan_job(cluster, reader, doc, docs, default_ns, known) for i, doc in jobs}
    for i, doc in jobs:
        if getattr(getattr(doc.spec, "service", None), "autoscaling", None) is not None:
            check_autoscaled(
                reader, f"{doc.source}: job {doc.spec.job.name}", planned[i], known.cluster_queues
            )
    _check_names(cluster, reader, docs, planned, action)
    return planned


@dataclass
class _Known:
    """What the jobs of a submission are checked against: the teams (namespaces with a quota) and pools,
    the cluster's and the submission's own; gpuctl's pool flavors; pools in worker clusters."""

    teams: set[str]
    pools: set[str]
    flavors: list[dict]
    remote: dict[str, list[str]]  # pool -> its worker clusters (docs/multicluster.md)
    cluster_queues: list[dict] = field(default_factory=list)  # gpuctl's, when read

    @classmethod
    def read(
        cls,
        reader: Reader,
        docs: list[Document],
        jobs: list[Document],
        default_ns: str,
        read: dict[str, list[dict]] | None,
    ) -> _Known:
        """Reads gpuctl's ClusterQueues only when a job's namespace is no team of the submission, its
        ResourceFlavors only when a job's pool is none of the submission's or its pools are those of
        GPU models (placementConstraints.nodeTypes)."""
        teams = {ns for d in docs if isinstance(d.spec, QuotaSpec) for ns in d.spec.entries()}
        cluster_queues: list[dict] = []
        if {spec_namespace(d.spec, default_ns) for d in jobs} - teams:
            cluster_queues = reader.list("ClusterQueue", label_selector=MANAGED_SELECTOR)
            teams |= set(team_queues(cluster_queues))
            if read is not None:
                read["ClusterQueue"] = cluster_queues
        pools = {d.spec.pool.name for d in docs if isinstance(d.spec, PoolSpec)}
        flavors: list[dict] = []
        named = {p for d in jobs for p in d.spec.resources.pools_allowed or ()}
        if named - pools or any(d.spec.resources.node_types for d in jobs):
            flavors = reader.list("ResourceFlavor", label_selector=MANAGED_SELECTOR)
            pools |= set(pool_names(flavors))
        # Pools in worker clusters (docs/multicluster.md) take only the kinds MultiKueue carries.
        remote = remote_pools(flavors)
        remote.update(
            {d.spec.pool.name: sorted(d.spec.pool.clusters) for d in docs if isinstance(d.spec, PoolSpec)}
        )
        return cls(teams, pools, flavors, {p: cs for p, cs in remote.items() if cs}, cluster_queues)


def _plan_job(
    cluster: Cluster, reader: Reader, doc: Document, docs: list[Document], default_ns: str, known: _Known
) -> list[dict]:
    """A job's objects, once its namespace has a quota and its pools exist (NotFound, ServiceError)."""
    spec = doc.spec
    ns = spec_namespace(spec, default_ns)
    where = f"{doc.source}: job {spec.job.name}"
    _check_multicluster_kind(where, spec.kind, spec.resources.pools_allowed or [], known.remote)
    if ns not in known.teams:
        if cluster.get_or_none(path("Namespace", ns)) is None:
            raise NotFound(f"{where}: namespace {ns} does not exist; create a quota for it (kind: quota)")
        raise ServiceError(
            f"{where}: namespace {ns} has no quota, so Kueue would not queue its work; "
            "create a quota for it first (kind: quota), or, on a cluster the earlier gpuctl ran, "
            "run `gpuctl adopt` to convert its ResourceQuotas"
        )
    if spec.resources.node_types:  # the pools of those GPU models, as if the YAML listed them
        if spec.resources.pools_allowed is not None:
            _check_any_pool(reader, where, None, spec.resources.pools_allowed, known.pools)
        spec = resolve_node_types(reader, where, spec, docs)
    allowed = spec.resources.pools_allowed
    if allowed is None or len(allowed) > 1:
        if spec.resources.gpu_share is not None:
            raise ServiceError(
                f"{where}: resources.gpu-share needs one pool, whose GPUs' slices it names; "
                "set resources.pool to one pool"
            )
        if not spec.resources.node_types:
            _check_any_pool(reader, where, spec.resources.gpu_type, allowed, known.pools)
        if spec.resources.gpu_memory is None:
            return _served(reader, where, ns, build(spec, ns))
        spec, sized = size_any_pool(reader, where, spec, docs)
        if spec.resources.pools_allowed is None or len(spec.resources.pools_allowed) > 1:
            return _served(reader, where, ns, build(spec, ns, sized))
    pool = spec.resources.pool
    if pool not in known.pools:
        if pool == DEFAULT_POOL:
            raise NotFound(
                f"{where}: jobs without resources.pool run in pool {DEFAULT_POOL}, which does not exist; "
                f"set resources.pool, create pool {DEFAULT_POOL} (kind: pool), or run `gpuctl adopt` to "
                "put the GPU nodes without a pool label into it"
            )
        raise NotFound(f"{where}: pool {pool} does not exist; create it (kind: pool) or set resources.pool")
    share = spec.resources.share
    facts = TargetPool(name=pool)
    if spec.resources.gpu_memory is not None:  # whole GPUs or a slice that hold it, on the same pool
        facts = size_pinned(reader, where, spec, docs, facts)
    facts = replace(gang_pool_facts(where, spec, known.flavors, docs, reader, facts.gpus), **_sized(facts))
    if share is not None:  # the slice of gpu-share, on the same pool (its topology kept)
        facts = replace(share_facts(reader, where, pool, share), topology=facts.topology)
    return _served(reader, where, ns, build(spec, ns, facts))


def _served(reader: Reader, where: str, ns: str, objs: list[dict]) -> list[dict]:
    """The objects, once the cluster serves their kinds: a service of multi-node replicas needs the
    LeaderWorkerSet controller (its CRD), which a cluster may not have (refused before any write)."""
    if any(o["kind"] == "LeaderWorkerSet" for o in objs):
        try:
            reader.list("LeaderWorkerSet", ns, label_selector=JOB_SELECTOR)
        except ApiError as e:
            if e.status != 404:
                raise
            raise ServiceError(
                f"{where}: resources.nodes > 1 makes each replica a LeaderWorkerSet group, and this "
                "cluster serves no LeaderWorkerSet API: have an admin install the LeaderWorkerSet "
                'controller (docs/serving.md, "Replicas bigger than a node"), or set resources.nodes: 1'
            ) from None
    return objs


def _sized(facts: TargetPool) -> dict:
    """What sizing put in a TargetPool, to carry over to another (the gang facts')."""
    keys = ("gpu_resource", "slice_resource", "gpus", "sized")
    return {k: getattr(facts, k) for k in keys}


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
    """Conflict when a job's name or its Service's is taken (see precheck_jobs)."""
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
                        raise Conflict(f"{docs[i].source}: {taken_name(objs[0], kind, docs[i].source)}")
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


def taken_name(obj: dict, kind: str, source: str | None = None) -> Conflict:
    """A job name already taken in its namespace (by `kind`: a gpuctl job kind or a resource)."""
    meta = obj["metadata"]
    fix = f"gpuctl apply -f {source}" if source else "gpuctl apply -f FILE"
    return Conflict(
        f"job {meta['name']} already exists in namespace {meta['namespace']} (kind: {kind}); "
        f"use `{fix}` to update it, or delete it first"
    )
