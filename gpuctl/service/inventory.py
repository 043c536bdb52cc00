"""Reading what the cluster holds, with as few list calls as a command needs.

Each `Inventory` field is fetched lazily once per command; `get jobs -A` costs one list per kind
(pods, Jobs, Deployments, StatefulSets, Workloads) whatever the number of namespaces.

Every read goes through a gpuctl.cluster.reader.Reader: the CLI passes its Cluster (wrapped in a
ClusterReader, so each field is a list call), the REST API inside `gpuctl serve` passes a
gpuctl.server.cache.CacheReader (each field is a filter over the watch cache).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from gpuctl.cluster import ApiError
from gpuctl.cluster.reader import Reader, as_reader
from gpuctl.constants import (
    BURST_SUFFIX,
    COHORT_NAME,
    KUEUE_GROUP,
    KUEUE_POD_GROUP_LABEL,
    LOCAL_QUEUE_NAME,
    MANAGED_BY_VALUE,
    MULTIKUEUE_CONTROLLER,
    Labels,
)
from gpuctl.domain.objects import is_true, owner_refs
from gpuctl.domain.pools import pool_names
from gpuctl.domain.serving import is_burst, service_of, tier
from gpuctl.domain.teams import team_queues
from gpuctl.domain.workload import IN_QUEUE, queue_positions, workload_state
from gpuctl.service.access import Permissions, permissions_of, readable_namespaces

JOB_SELECTOR = Labels.JOB_TYPE  # every gpuctl workload and pod, including the earlier gpuctl's
MANAGED_SELECTOR = f"{Labels.MANAGED_BY}={MANAGED_BY_VALUE}"
UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"
CONTROLLER_KINDS = ("Job", "Deployment", "StatefulSet", "LeaderWorkerSet")
# Kinds whose API a cluster may not serve (a CRD not installed, or roles from before gpuctl made them):
# listed as none rather than failing every `get jobs` (docs/serving.md: LeaderWorkerSets).
OPTIONAL_KINDS = ("LeaderWorkerSet",)
# Controllers whose replicas Kueue admits one at a time, each with a Workload of its own (a Deployment's
# pods, a LeaderWorkerSet's groups): the job's Workload is the least advanced of them.
PER_REPLICA_KINDS = ("Deployment", "LeaderWorkerSet")
# What every Inventory of a command reads the same way, whatever its namespace (Inventory.reuse).
CLUSTER_SCOPED = (
    "nodes",
    "flavors",
    "pools",
    "cluster_queues",
    "all_cluster_queues",
    "team_queues",
    "cohort",
)
WAITING_GET_MAX = 200  # waiting Workloads fetched one by one at most; more: one list of every Workload


SHARDS = 4  # parallel pod lists at most
SHARD_MIN_CONTROLLERS = 8  # fewer: one list
SHARD_MIN_PODS = 200  # fewer pods expected (expected_pods): one list, no threads
SHARD_MAX_SELECTOR = 6000  # characters; longer selectors (thousands of jobs): one list


def expected_pods(controllers: list[tuple[str, dict]]) -> int:
    """How many pods `controllers` have, from what their listing says already (no request): a Job's
    active, succeeded and failed pods (before any: its parallelism, none while suspended); a
    Deployment's or StatefulSet's replicas; a LeaderWorkerSet's replicas times its group size."""
    n = 0
    for kind, obj in controllers:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if kind == "Job":
            seen = sum(int(status.get(k) or 0) for k in ("active", "succeeded", "failed"))
            n += seen or (0 if spec.get("suspend") else int(spec.get("parallelism", 1) or 0))
        else:
            size = int((spec.get("leaderWorkerTemplate") or {}).get("size") or 1)
            n += int(status.get("replicas", spec.get("replicas", 1)) or 0) * size
    return n


def owner_shards(controllers: list[tuple[str, dict]]) -> list[str]:
    """Label selectors that together select the pods of `controllers` (Jobs' pods by job-name, the
    others' by app, as Inventory.pods_of finds them), in up to SHARDS groups; [] when one list is
    better (few controllers, fewer than SHARD_MIN_PODS pods expected: the threads and extra requests
    cost more than they save, or selectors too long for a URL)."""
    if len(controllers) < SHARD_MIN_CONTROLLERS or expected_pods(controllers) < SHARD_MIN_PODS:
        return []
    names: dict[str, set[str]] = {Labels.JOB_NAME: set(), Labels.APP: set()}
    for kind, obj in controllers:
        names[Labels.JOB_NAME if kind == "Job" else Labels.APP].add(obj["metadata"]["name"])
    keyed = [(key, n) for key, values in names.items() for n in sorted(values)]
    groups: list[dict[str, list[str]]] = [{} for _ in range(SHARDS)]
    for i, (key, n) in enumerate(keyed):
        groups[i % SHARDS].setdefault(key, []).append(n)
    out = []
    for g in groups:
        # Each key needs its own selector (terms are ANDed): one selector per (shard, key).
        out += [f"{JOB_SELECTOR},{key} in ({','.join(values)})" for key, values in g.items()]
    if any(len(sel) > SHARD_MAX_SELECTOR for sel in out):
        return []
    return out


def _may_wait(kind: str, obj: dict) -> bool:
    """A controller whose Workload may be waiting: a suspended Job, a StatefulSet (one gang Workload,
    labelled with its uid) or a Deployment (one Workload per pod) with fewer ready replicas than asked
    for."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if kind == "Job":
        # MultiKueue's Job on a manager (docs/multicluster.md) has no pod here: its Workload says where and
        # how it is.
        return bool(spec.get("suspend")) or spec.get("managedBy") == MULTIKUEUE_CONTROLLER
    if kind in ("StatefulSet", "Deployment", "LeaderWorkerSet"):
        wanted = 1 if spec.get("replicas") is None else int(spec["replicas"])
        return int(status.get("readyReplicas") or 0) < wanted
    return False


class Inventory:
    def __init__(
        self,
        source: Reader | Any,
        namespace: str | None = None,
        *,
        pod_rows: bool = False,
        perms: Permissions | None = None,
    ):
        """source: a Reader, or a Cluster (read through a ClusterReader); namespace None = every
        namespace. pod_rows: read gpuctl's pods as the API server's Table rows (metadata and kubectl's
        printed cells, gpuctl.domain.status reads both forms) when the reader can: a fifth of the bytes
        of full pods, for views that need no pod spec (the `get jobs` table). perms: what the caller
        may read (gpuctl.service.access; default: the credential of `source` asked about itself), for
        the views that read every pod or every Workload only when the caller may."""
        self.reader: Reader = as_reader(source)
        self.namespace = namespace
        self.pod_rows = pod_rows
        self.perms: Permissions = permissions_of(self.reader, perms)
        self._workload_subset = False  # use_workloads_of_suspended_jobs() narrowed `workloads`
        self._one_job = False  # use_job_named() narrowed `controllers`, `pods` and `workloads`

    def reuse(self, other: Inventory) -> Inventory:
        """Take the cluster-scoped lists `other` (an Inventory of the same command: `describe job`'s
        reading of its job, then of the cluster for its reason) has read already, instead of listing
        them again."""
        for name in CLUSTER_SCOPED:
            if name in other.__dict__:
                self.__dict__.setdefault(name, other.__dict__[name])
        return self

    # -------------------------------------------------------------- what the caller may read
    @cached_property
    def sees_every_pod(self) -> bool:
        """Whether the caller may list the pods of every namespace: what per-node GPU use needs (a
        team member may not: other teams' pod specs are not theirs to read)."""
        return self.perms.allows("list", "pods", "", None)

    def readable_namespaces(self, resource: str, group: str = "") -> list[str] | None:
        """None when the caller may list `resource` in every namespace; else the team namespaces where
        it may (one access review each, cached)."""
        if self.perms.allows("list", resource, group, None):
            return None
        return readable_namespaces(self.perms, "list", resource, group, self.team_queues)

    # -------------------------------------------------------------- cluster-scoped
    @cached_property
    def nodes(self) -> list[dict]:
        return self.reader.list("Node")

    @cached_property
    def flavors(self) -> list[dict]:
        return self.reader.list("ResourceFlavor")

    @cached_property
    def pools(self) -> list[str]:
        return pool_names(self.flavors)

    def flavor(self, name: str) -> dict | None:
        """The ResourceFlavor `name` (gpuctl's or not), from the one list of every flavor."""
        return next((f for f in self.flavors if f["metadata"]["name"] == name), None)

    @cached_property
    def cluster_queues(self) -> list[dict]:
        """gpuctl's ClusterQueues (the teams'); from every ClusterQueue when those were read already."""
        if "all_cluster_queues" in self.__dict__:
            return [
                cq
                for cq in self.all_cluster_queues
                if (cq["metadata"].get("labels") or {}).get(Labels.MANAGED_BY) == MANAGED_BY_VALUE
            ]
        return self.reader.list("ClusterQueue", label_selector=MANAGED_SELECTOR)

    @cached_property
    def all_cluster_queues(self) -> list[dict]:
        """Every ClusterQueue, gpuctl's and others' (Kueue's accounting of every flavor)."""
        return self.reader.list("ClusterQueue")

    @cached_property
    def team_queues(self) -> dict[str, dict]:
        """Team namespace -> its ClusterQueue."""
        return dict(team_queues(self.cluster_queues))

    @cached_property
    def cohort(self) -> dict | None:
        return self.reader.get("Cohort", COHORT_NAME)

    @cached_property
    def bound_pods(self) -> list[dict]:
        """Every unfinished pod of the cluster (what holds GPUs on nodes), gpuctl's or not."""
        return self.reader.list("Pod", field_selector=UNFINISHED)

    @cached_property
    def snapshot_pods(self) -> list[dict]:
        """What "when will it run" reads (gpuctl.domain.explain.Snapshot): every unfinished pod, in full.
        When gpuctl's pods of every namespace are at hand in full already, only the others are listed
        (`!runwhere.ai/job-type`, usually few) rather than every pod again; when they are not (a server
        dry run's "when would it run"), every unfinished pod is one list."""
        if self.namespace is None and not self.pod_rows and not self._one_job and "pods" in self.__dict__:
            foreign = self.reader.list("Pod", label_selector=f"!{JOB_SELECTOR}", field_selector=UNFINISHED)
            return self.pods + foreign
        return self.bound_pods

    # -------------------------------------------------------------- namespaced
    def _list(self, kind: str, selector: str | None = None) -> list[dict]:
        return self.reader.list(kind, self.namespace, label_selector=selector)

    @cached_property
    def pods(self) -> list[dict]:
        table = getattr(self.reader, "list_table", None) if self.pod_rows else None
        if table is None:
            return self._list("Pod", JOB_SELECTOR)
        shards = owner_shards(self.controllers)
        if len(shards) < 2:
            return table("Pod", self.namespace, JOB_SELECTOR)
        # The pods of the listed controllers, in parallel requests that split them by owner label: the
        # API server encodes the shards on several cores, where one paged list (kubectl's) uses one.
        from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 - lazy: CLI start-up

        with ThreadPoolExecutor(len(shards)) as pool:
            parts = pool.map(lambda sel: table("Pod", self.namespace, sel), shards)
            seen: dict[str, dict] = {}
            for part in parts:
                for p in part:
                    seen.setdefault(p["metadata"]["uid"], p)
        return list(seen.values())

    @cached_property
    def controllers(self) -> list[tuple[str, dict]]:
        out = []
        for kind in CONTROLLER_KINDS:
            out += [
                (kind, o) for o in self._list_controllers(kind, self.namespace, label_selector=JOB_SELECTOR)
            ]
        return out

    def _list_controllers(self, kind: str, namespace: str | None, **selectors: str) -> list[dict]:
        """A list of one controller kind; none of an OPTIONAL_KINDS kind the cluster does not serve (404)
        or the caller may not list (403)."""
        try:
            return self.reader.list(kind, namespace, **selectors)
        except ApiError as e:
            if kind in OPTIONAL_KINDS and e.status in (403, 404):
                return []
            raise

    @cached_property
    def workloads(self) -> list[dict]:
        if self._workload_subset:  # use_workloads_of_suspended_jobs()
            return self._workloads_of(self._owners_needing_workloads(), self.namespace)
        return self._list("Workload")

    def use_workloads_of_suspended_jobs(self) -> None:
        """Fetch only the Workloads that a plain `get jobs` table needs: those of suspended Jobs and of
        StatefulSets short of ready replicas (to tell Queued from Preempted and Inactive: a stopped
        notebook's pod waits at Kueue's gate like a queued one), and those of jobs of several pools
        (their pool is where Kueue admitted them: gpuctl.domain.workload.job_pool). Listing every
        Workload costs more than listing every pod (each carries a pod template and is served as JSON),
        and running pods need none. Read when first used (after the caller chose how to read pods).
        `positions` still covers every waiting Workload (from Kueue's visibility API, or a full list)."""
        self._workload_subset = True
        self.__dict__.pop("workloads", None)

    def _owners_needing_workloads(self) -> list[str]:
        """The owner uids of use_workloads_of_suspended_jobs: a job that may wait, and a job that names no
        single pool (for a Deployment, its pods: Kueue gives each pod its own Workload)."""
        uids = []
        for kind, o in self.controllers:
            if Labels.POOL in (o["metadata"].get("labels") or {}) and not _may_wait(kind, o):
                continue
            if kind == "Deployment":
                uids += [p["metadata"]["uid"] for p in self.pods_of(kind, o)]
            else:  # a Job, a StatefulSet, a LeaderWorkerSet (its groups' Workloads name it)
                uids.append(o["metadata"]["uid"])
        return uids

    def _workloads_of(self, uids: list[str], namespace: str | None) -> list[dict]:
        """The Workloads of these owners (Kueue labels each with its job's uid), 100 uids a request."""
        found: list[dict] = []
        for i in range(0, len(uids), 100):
            chunk = ",".join(uids[i : i + 100])
            found += self.reader.list(
                "Workload", namespace, label_selector=f"{Labels.KUEUE_JOB_UID} in ({chunk})"
            )
        return found

    def use_job_named(self, name: str) -> None:
        """Read only the job named `name` (or, when no job has that name, the job owning the pod `name`:
        `get jobs` prints pod names) with its own pods and Workloads, instead of every job of the
        namespace (or cluster) and then filtering: `describe job`, `logs`, `stop`, the API's one job.
        A list per controller kind by `metadata.name` (a field selector every resource serves; in every
        namespace when `namespace` is None), then one list of its pods by owner label and one of its
        Workloads by Kueue's job-uid label (a Deployment's pods each own one): 5 requests."""
        controllers = self._controllers_named(name)
        if not controllers:
            owners = {
                (labels.get(Labels.JOB_NAME) or labels.get(Labels.APP) or "")
                for p in self.reader.list(
                    "Pod", self.namespace, label_selector=JOB_SELECTOR, field_selector=f"metadata.name={name}"
                )
                for labels in [p["metadata"].get("labels") or {}]
            } - {""}
            controllers = [c for owner in sorted(owners) for c in self._controllers_named(owner)]
        controllers = self._with_tiers(controllers)
        self.__dict__["controllers"] = controllers
        spaces = {o["metadata"]["namespace"] for _, o in controllers}
        namespace = next(iter(spaces)) if len(spaces) == 1 else self.namespace
        keys = sorted(
            {
                (Labels.JOB_NAME if kind == "Job" else Labels.APP, o["metadata"]["name"])
                for kind, o in controllers
                if not is_burst(o)  # a burst's pods carry its service's app label, the floor's
            }
        )
        pods: list[dict] = []
        for key, value in keys:
            pods += self.reader.list("Pod", namespace, label_selector=f"{JOB_SELECTOR},{key}={value}")
        self.__dict__["pods"] = pods
        uids = [o["metadata"]["uid"] for _, o in controllers]
        if any(kind == "Deployment" for kind, _ in controllers):
            uids += [p["metadata"]["uid"] for p in pods]  # a Deployment's pods each own their Workload
        self._workload_subset = self._one_job = True
        self.__dict__["workloads"] = self._workloads_of(uids, namespace)

    def _with_tiers(self, controllers: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
        """An autoscaled service is both its Deployments, or LeaderWorkerSets (docs/serving.md): named by
        its burst (`<name>-burst`), the floor too; named by its floor, the burst too (one GET each)."""
        out = list(controllers)
        for kind, o in controllers:
            if kind not in PER_REPLICA_KINDS or tier(o) is None:
                continue
            ns = o["metadata"]["namespace"]
            other = service_of(o) if is_burst(o) else o["metadata"]["name"] + BURST_SUFFIX
            if any(
                k == kind and x["metadata"]["name"] == other and x["metadata"]["namespace"] == ns
                for k, x in out
            ):
                continue
            found = self.reader.get(kind, other, ns)
            if found is not None and tier(found) is not None:
                out.append((kind, found))
        return out

    def _controllers_named(self, name: str) -> list[tuple[str, dict]]:
        out = []
        for kind in CONTROLLER_KINDS:
            items = self._list_controllers(
                kind, self.namespace, label_selector=JOB_SELECTOR, field_selector=f"metadata.name={name}"
            )
            out += [(kind, o) for o in items]
        return out

    @cached_property
    def workloads_all(self) -> list[dict]:
        """Every Workload of the cluster (queue positions are per ClusterQueue, across namespaces)."""
        if self.namespace is None and not self._workload_subset:
            return self.workloads
        return self.reader.list("Workload")

    @cached_property
    def waiting_namespaces(self) -> list[str] | None:
        """Where `waiting_workloads` looked: None for every namespace, else the team namespaces whose
        Workloads the caller may list (another team's waiting Workloads, pod templates and all, are
        not a team member's to read)."""
        return self.readable_namespaces("workloads", KUEUE_GROUP)

    @cached_property
    def waiting_workloads(self) -> list[dict]:
        """The Workloads waiting for quota (queued or preempted; IN_QUEUE) of `waiting_namespaces`.

        Listing every Workload is the slow read (CRDs are served as JSON through unstructured objects:
        8-11 s for 2,000 on the bench cluster), and most of them hold quota. Kueue's visibility API
        names the waiting ones per ClusterQueue (its queue, admissible or not, in memory: no lag), so
        those are fetched by name: one small request per ClusterQueue. More than WAITING_GET_MAX
        waiting, or no visibility API (or a watch cache as the reader): every Workload is listed and
        filtered. A Workload whose LocalQueue or ClusterQueue does not exist is in no queue, so the
        visibility API does not name it: it waits for no pool. A caller who may not list every
        Workload gets its readable namespaces', the same way through each one's LocalQueue."""
        spaces = self.waiting_namespaces
        if spaces is not None:
            local = getattr(self.reader, "pending_in_local_queue", None)
            out: list[dict] = []
            for ns in spaces:
                items = local(ns, LOCAL_QUEUE_NAME) if local is not None else None
                if items is None or len(items) > WAITING_GET_MAX:
                    out += [w for w in self.reader.list("Workload", ns) if workload_state(w) in IN_QUEUE]
                else:
                    out += self._waiting_by_name(items)
            return out
        items = self._pending_items([cq["metadata"]["name"] for cq in self.all_cluster_queues])
        if items is None or len(items) > WAITING_GET_MAX:
            return [w for w in self.workloads_all if workload_state(w) in IN_QUEUE]
        return self._waiting_by_name(items)

    def _waiting_by_name(self, items: list[dict]) -> list[dict]:
        """The waiting Workloads the visibility API named, fetched one by one (in parallel)."""
        keys = [(i["metadata"].get("namespace", ""), i["metadata"]["name"]) for i in items]
        if not keys:
            return []
        from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 - lazy: CLI start-up

        with ThreadPoolExecutor(min(len(keys), SHARDS)) as pool:
            found = pool.map(lambda k: self.reader.get("Workload", k[1], k[0]), keys)
            return [w for w in found if w is not None and workload_state(w) in IN_QUEUE]

    # -------------------------------------------------------------- joins
    @cached_property
    def workloads_by_owner_uid(self) -> dict[str, list[dict]]:
        """Owner UID -> Workloads (a Deployment's pods each have one, owned by the pod)."""
        out: dict[str, list[dict]] = {}
        for wl in self.workloads:
            for ref in owner_refs(wl):
                out.setdefault(ref["uid"], []).append(wl)
        return out

    @cached_property
    def workloads_by_name(self) -> dict[tuple[str, str], dict]:
        return {(w["metadata"].get("namespace", ""), w["metadata"]["name"]): w for w in self.workloads}

    def pod_workload(self, pod: dict, job_workload: dict | None) -> dict | None:
        """The Workload a pod is judged by: a Deployment's pod has a Workload of its own; a
        LeaderWorkerSet's pod its group's (named by Kueue's pod-group annotation, a label before Kueue's
        WorkloadIdentifierAnnotations); a Job's or StatefulSet's
        pods share their job's (`job_workload`)."""
        m = pod["metadata"]
        group = (m.get("annotations") or {}).get(KUEUE_POD_GROUP_LABEL) or (m.get("labels") or {}).get(
            KUEUE_POD_GROUP_LABEL
        )
        if group:
            found = self.workloads_by_name.get((m.get("namespace", ""), group))
            if found is not None:
                return found
        return (self.workloads_by_owner_uid.get(m["uid"]) or [job_workload])[0]

    @cached_property
    def positions(self) -> dict[str, int]:
        """Owner UID (a Job's, a StatefulSet's, a Deployment pod's) -> 1-based position of its waiting
        Workload in its ClusterQueue, once per command. From Kueue's visibility API when the cluster
        serves it (Kueue's own order, a few small requests instead of every Workload), else computed
        from the Workloads (gpuctl.domain.workload.queue_positions)."""
        visible = self._visible_positions()
        if visible is not None:
            return visible
        workloads = self._list("Workload") if self._workload_subset else self.workloads
        by_uid = queue_positions(workloads)
        out: dict[str, int] = {}
        for wl in workloads:
            pos = by_uid.get(wl["metadata"].get("uid", ""))
            if pos is not None:
                for ref in owner_refs(wl):
                    out[ref["uid"]] = pos
        return out

    def _pending_items(self, cluster_queues: list[str]) -> list[dict] | None:
        """Kueue's visibility API: the pending Workloads of these ClusterQueues, in Kueue's order per
        queue; None when the reader has no such API or it answers none for one of them (not served,
        or not to us): the caller computes from the Workloads instead."""
        pending = getattr(self.reader, "pending_workloads", None)
        if pending is None:
            return None
        out: list[dict] = []
        for name in cluster_queues:
            items = pending(name)
            if items is None:
                return None
            out += items
        return out

    def _visible_positions(self) -> dict[str, int] | None:
        """In one namespace, from its LocalQueue (what a team member may read: the team's ClusterQueue
        serves that LocalQueue alone, so the positions are the same); else per team ClusterQueue."""
        if self.namespace:
            local = getattr(self.reader, "pending_in_local_queue", None)
            if self.namespace not in self.team_queues:
                return {}
            items = local(self.namespace, LOCAL_QUEUE_NAME) if local is not None else None
        else:
            items = self._pending_items([cq["metadata"]["name"] for cq in self.team_queues.values()])
        if items is None:
            return None
        out: dict[str, int] = {}
        for item in items:
            for ref in owner_refs(item):
                out[ref["uid"]] = int(item.get("positionInClusterQueue", 0)) + 1
        return out

    @cached_property
    def _pods_by_owner_key(self) -> dict[tuple[str, str, str], list[dict]]:
        """(namespace, label key, value) -> pods; Job pods by job-name, the others by app."""
        index: dict[tuple[str, str, str], list[dict]] = {}
        for p in self.pods:
            labels = p["metadata"].get("labels") or {}
            ns = p["metadata"]["namespace"]
            for key in (Labels.JOB_NAME, Labels.APP):
                if key in labels:
                    index.setdefault((ns, key, labels[key]), []).append(p)
        return index

    def pods_of(self, kind: str, obj: dict) -> list[dict]:
        key = Labels.JOB_NAME if kind == "Job" else Labels.APP
        return self._pods_by_owner_key.get((obj["metadata"]["namespace"], key, obj["metadata"]["name"]), [])

    def workload_of(self, kind: str, obj: dict, pods: list[dict] | None = None) -> dict | None:
        """The Kueue Workload of a job. Deployments have one per pod; the least advanced one counts."""
        uid = obj["metadata"]["uid"]
        direct = self.workloads_by_owner_uid.get(uid)
        if direct and kind in PER_REPLICA_KINDS:  # a LeaderWorkerSet's groups
            return least_advanced(direct)
        if direct:
            return direct[0]
        if kind == "Deployment":
            wls = [
                w
                for p in (pods if pods is not None else self.pods_of(kind, obj))
                for w in self.workloads_by_owner_uid.get(p["metadata"]["uid"], [])
            ]
            if wls:
                return least_advanced(wls)
        return None

    def workloads_of(self, kind: str, obj: dict, pods: list[dict] | None = None) -> list[dict]:
        """Every Workload of a job: a Deployment's pods' and a LeaderWorkerSet's groups' (one each), else
        its one Workload (or none)."""
        own = list(self.workloads_by_owner_uid.get(obj["metadata"]["uid"]) or [])
        if kind == "Deployment":
            own += [
                w
                for p in (pods if pods is not None else self.pods_of(kind, obj))
                for w in self.workloads_by_owner_uid.get(p["metadata"]["uid"], [])
            ]
        return own if kind in PER_REPLICA_KINDS else own[:1]


def least_advanced(wls: list[dict]) -> dict:
    """Of a job's per-replica Workloads, the one its status speaks for: a waiting one, else the first."""
    pending = [w for w in wls if not is_true(w, "Admitted")]
    return pending[0] if pending else wls[0]
