"""Pools in several clusters (docs/multicluster.md): pure rules over plain dicts, no I/O.

- Which worker clusters is a pool in? (the POOL_CLUSTERS_ANNOTATION of its flavor in the manager)
- Is this cluster a MultiKueue manager? (some pool is in a worker cluster)
- May this job kind go to a worker? (MULTICLUSTER_KINDS; why not: MULTICLUSTER_REFUSED_WHY)
- Would Kueue accept this kubeconfig for a worker? (Kueue v0.19.2's validateKubeconfig, so gpuctl refuses
  before writing what Kueue would only report later on the MultiKueueCluster's status)
- Where does a job run, and what is MultiKueue doing with it? (the manager's Workload)
- Which multi-node jobs need their headless Service in the worker that runs them, and what is that copy?
  (MultiKueue copies the Job, not the Service: gpuctl.server.multicluster makes it there)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from gpuctl.constants import (
    MULTICLUSTER_KINDS,
    MULTICLUSTER_REFUSED_WHY,
    MULTIKUEUE_CHECK,
    POOL_CLUSTERS_ANNOTATION,
    Kind,
)
from gpuctl.domain.gang import workload_gang
from gpuctl.domain.objects import meta, owner_ref
from queues.multicluster import admission_checks_strategy


def pool_clusters(flavor: Mapping[str, Any] | None) -> list[str]:
    """The worker clusters a pool's nodes are in (empty: in this cluster)."""
    text = (((flavor or {}).get("metadata") or {}).get("annotations") or {}).get(POOL_CLUSTERS_ANNOTATION, "")
    return sorted({c.strip() for c in text.split(",") if c.strip()})


def clusters_annotation(clusters: Iterable[str]) -> str:
    return ",".join(sorted(set(clusters)))


def remote_pools(flavors: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """pool -> its worker clusters, for every pool in another cluster."""
    out = {}
    for f in flavors:
        clusters = pool_clusters(f)
        if clusters:
            out[f["metadata"]["name"]] = clusters
    return out


def worker_clusters(flavors: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every worker cluster some pool is in: the manager's MultiKueueConfig."""
    return sorted({c for cs in remote_pools(flavors).values() for c in cs})


def pools_in(flavors: Iterable[Mapping[str, Any]], cluster: str) -> list[str]:
    """The pools whose nodes are (also) in worker `cluster`."""
    return sorted(p for p, cs in remote_pools(flavors).items() if cluster in cs)


def refused_kind(kind: str) -> str | None:
    """Why a job of this kind cannot run in a pool of another cluster (None: it can)."""
    k = Kind(kind)
    if k in MULTICLUSTER_KINDS:
        return None
    return MULTICLUSTER_REFUSED_WHY.get(k, f"MultiKueue does not carry kind {k.value}")


def kubeconfig_problem(doc: Any) -> str | None:
    """What Kueue v0.19.2 would refuse in a worker's kubeconfig (multikueuecluster.go, validateKubeconfig
    and validateRestConfig: status InsecureKubeConfig), or None. `doc` is the parsed kubeconfig."""
    if not isinstance(doc, Mapping):
        return "it is not a kubeconfig (a YAML mapping with clusters, users and contexts)"
    clusters = {
        c.get("name"): c.get("cluster") or {} for c in doc.get("clusters") or [] if isinstance(c, Mapping)
    }
    users = {u.get("name"): u.get("user") or {} for u in doc.get("users") or [] if isinstance(u, Mapping)}
    contexts = {
        c.get("name"): c.get("context") or {} for c in doc.get("contexts") or [] if isinstance(c, Mapping)
    }
    current = doc.get("current-context")
    if not current or current not in contexts:
        return "it has no current-context naming one of its contexts"
    for name, user in users.items():
        if user.get("tokenFile"):
            return f"user {name} reads its token from a file (tokenFile); embed the token instead (token:)"
        if user.get("exec"):
            return (
                f"user {name} runs an exec plugin, which Kueue refuses; use a ServiceAccount token (token:)"
            )
        if user.get("auth-provider"):
            return (
                f"user {name} uses an auth provider, which Kueue refuses; use a ServiceAccount token (token:)"
            )
        if user.get("username") or user.get("password"):
            return f"user {name} uses basic auth, which Kueue refuses; use a ServiceAccount token (token:)"
        for key in ("client-certificate", "client-key"):
            if user.get(key):
                return f"user {name} names the file {key}; embed it ({key}-data) or use a token"
    for name, cluster in clusters.items():
        if cluster.get("insecure-skip-tls-verify"):
            return (
                f"cluster {name} skips TLS verification, which Kueue refuses; "
                "give its certificate-authority-data instead"
            )
        if cluster.get("certificate-authority"):
            return f"cluster {name} names a certificate-authority file; embed it (certificate-authority-data)"
        if not cluster.get("server"):
            return f"cluster {name} has no server URL"
    return None


class Placement(NamedTuple):
    """Where MultiKueue put a job: `cluster` (status.clusterName) once a worker admitted it, else the
    clusters it was offered to; the state and message of the manager's MultiKueue check."""

    cluster: str | None
    nominated: tuple[str, ...]
    state: str | None
    message: str

    @property
    def text(self) -> str:
        if self.cluster:
            return self.cluster
        if self.nominated:
            return "offered to " + ", ".join(self.nominated)
        return "-"


def placement(workload: Mapping[str, Any] | None) -> Placement | None:
    """The placement of a manager's Workload, None when it is not MultiKueue's (no gpuctl check on it)."""
    if not workload:
        return None
    status = workload.get("status") or {}
    check = next((c for c in status.get("admissionChecks") or [] if c.get("name") == MULTIKUEUE_CHECK), None)
    cluster = status.get("clusterName")
    if check is None and not cluster:
        return None
    return Placement(
        cluster=cluster or None,
        nominated=tuple(status.get("nominatedClusterNames") or ()),
        state=(check or {}).get("state"),
        message=(check or {}).get("message", ""),
    )


def team_checks(flavors: Iterable[Mapping[str, Any]]) -> dict | None:
    """A team ClusterQueue's spec.admissionChecksStrategy here: MultiKueue's on a manager, else none."""
    return admission_checks_strategy() if worker_clusters(flavors) else None


def gang_placements(workloads: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(worker, namespace, job) of every multi-node Job (gpuctl.domain.gang.workload_gang) that MultiKueue
    has placed in a worker (the manager's Workload names the cluster): each needs its headless Service
    svc-<job> there for rank 0's address (`<job>-0.svc-<job>`) to resolve. MultiKueue sends the whole gang
    to that one worker (one Workload, one cluster); it copies the Job only."""
    out = []
    for wl in workloads:
        where = placement(wl)
        if workload_gang(wl) is None or where is None or not where.cluster:
            continue
        job = (owner_ref(wl) or {}).get("name")  # a Job: workload_gang's
        if job:
            out.append((where.cluster, meta(wl).get("namespace", ""), job))
    return sorted(out)


def worker_service(service: Mapping[str, Any], worker_job: Mapping[str, Any]) -> dict:
    """The copy of a gang's headless Service for the worker its Job runs in: the manager's name, labels and
    spec (no cluster IP, the Job's pods, published before Ready, the rendezvous port), owned by the worker's
    copy of the Job, so that the worker's garbage collector deletes it with that Job (when the job ends,
    is deleted, or MultiKueue moves it)."""
    spec = service.get("spec") or {}
    job_meta = meta(worker_job)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": meta(service)["name"],
            "namespace": job_meta["namespace"],
            "labels": dict(meta(service).get("labels") or {}),
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job_meta["name"],
                    "uid": job_meta["uid"],
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": {
            k: spec[k] for k in ("clusterIP", "selector", "publishNotReadyAddresses", "ports") if k in spec
        },
    }
