"""Which GPU pods on pool nodes no admitted Kueue Workload covers: the backstop's rule, once.

Since the pool taint (docs/security.md, 2) only Kueue-admitted work may hold a pool's GPUs, so "the GPUs pods
hold in a pool" must equal "the GPUs Kueue counts there". Admission rules keep most outside work off pool
nodes; this rule finds what got through anyway (or ran before the rules), from the objects alone:

- pods orphaned by `kubectl delete job X --cascade=orphan` (Kueue finishes the Workload and stops
  counting; the pod keeps its GPUs and loses its owner);
- pods that claim a controller they do not have (a forged `controller: true` ownerReference or
  `kueue.x-k8s.io/workload` annotation): they get at most the GPUs that Workload reserved, never more;
- any other GPU pod on a pool node (label runwhere.ai/pool) without an admitted Workload: bare pods
  bound by nodeName, pods from namespaces Kueue does not manage, pods of a Workload that was evicted,
  deactivated or finished.

A pod is covered by a Workload of its namespace that holds quota (QuotaReserved or Admitted, not
Finished: gpuctl.domain.workload.HOLDING_QUOTA) and is linked to it the way Kueue links them:

- the Workload is owned by the pod itself (Kueue's pod integration: a Deployment's pods each have
  their own Workload; pod groups list every pod as an owner), or
- the Workload is owned by the pod's controller (a Job's Workload, a StatefulSet's), or
- the pod's `kueue.x-k8s.io/workload` annotation names it (Kueue writes it on the pods it admits with
  Topology Aware Scheduling, as every gpuctl pool is).

and the Workload's reserved GPUs are not already taken by the other pods linked to it: pods are
served oldest first, terminating pods last (a replacement pod must not be reported because the pod it
replaces is still shutting down). The GPUs are compared in total, not per pool: a node moved between
pools while its pods run must not turn admitted work into "uncovered" work.

The rule is instantaneous. Short windows are normal in a healthy cluster (a pod's watch event arrives
before its Workload's admission does; a deleted Job's pods terminate after its Workload is gone; a
preempted pod shuts down after Kueue released its quota), so a consumer reports a pod only after it
stayed uncovered for a grace period, and a pod being deleted only after its termination grace period
(its deletionTimestamp, capped): gpuctl.server.backstop, `gpuctl serve --uncovered-grace`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpuctl.constants import KUEUE_WORKLOAD_ANNOTATION, Labels
from gpuctl.domain.gpus import pod_holds_gpus, pod_spec_gpus
from gpuctl.domain.history import job_name
from gpuctl.domain.objects import controller_ref, meta, owner_refs, parse_time
from gpuctl.domain.workload import HOLDING_QUOTA, reserved_gpus, workload_state


class Reason(StrEnum):
    """Why a pod is not covered (the `reason` label of gpuctl_uncovered_pods)."""

    NO_WORKLOAD = "no_workload"  # nothing links the pod to a Workload: orphaned, bare, forged owner
    NOT_ADMITTED = "not_admitted"  # its Workload holds no quota: finished, evicted, pending, inactive
    BEYOND_ADMISSION = "beyond_admission"  # its Workload's reserved GPUs are held by its other pods


REASONS = tuple(r.value for r in Reason)


@dataclass(frozen=True)
class Uncovered:
    """A GPU pod on a pool node that no admitted Workload covers."""

    namespace: str
    name: str
    uid: str
    node: str
    pool: str
    gpus: int
    reason: Reason
    workload: str  # the Workload it is linked to ("" for no_workload)
    terminating: bool  # deletionTimestamp set: it is already going away
    deleting_at: float | None = None  # its deletionTimestamp (epoch seconds): the end of its termination
    deletion_grace: int | None = None  # the grace it was deleted with (deletionGracePeriodSeconds)
    job: str = ""  # the job it belongs to (its Workload's, else its controller's name, else the pod's)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def describe(self) -> str:
        """One line for a log or an Event: what, where, why."""
        why = {
            Reason.NO_WORKLOAD: "no Kueue Workload covers it (no owner, or an owner Kueue does not manage)",
            Reason.NOT_ADMITTED: f"its Workload {self.workload} holds no quota (finished, evicted, pending)",
            Reason.BEYOND_ADMISSION: f"its Workload {self.workload} reserved fewer GPUs than its pods hold",
        }[self.reason]
        gone = ", terminating" if self.terminating else ""
        return f"pod {self.key} holds {self.gpus} GPU(s) on node {self.node} of pool {self.pool}{gone}: {why}"


def controller_uid(pod: Mapping[str, Any]) -> str | None:
    """The uid the pod names as its controller (gpuctl.domain.objects.controller_ref)."""
    return (controller_ref(pod) or {}).get("uid") or None


def _owner_uids(wl: Mapping[str, Any]) -> list[str]:
    return [o["uid"] for o in owner_refs(wl) if o.get("uid")]


_Index = Mapping[tuple[str, str], Any]  # (namespace, owner uid or Workload name) -> Workload(s)


def _links(pod: Mapping[str, Any], by_owner: _Index, by_name: _Index) -> list[Mapping[str, Any]]:
    """The pod's Workloads, strongest link first: owned by the pod, by its controller, named by its
    annotation."""
    m = meta(pod)
    ns = m.get("namespace") or ""
    out: list[Mapping[str, Any]] = list(by_owner.get((ns, m.get("uid")), ()))
    ctl = controller_uid(pod)
    if ctl:
        out += by_owner.get((ns, ctl), ())
    named = (m.get("annotations") or {}).get(KUEUE_WORKLOAD_ANNOTATION)
    if named and (ns, named) in by_name:
        out.append(by_name[(ns, named)])
    if len(out) > 1:  # the same Workload reached twice (a pod group's owner and its annotation)
        seen: set[int] = set()
        out = [w for w in out if not (id(w) in seen or seen.add(id(w)))]
    return out


def _job(pod: Mapping[str, Any], wl: Mapping[str, Any] | None) -> str:
    if wl is not None:
        return job_name(wl)
    m = meta(pod)
    owner = controller_ref(pod)
    return str(
        (owner or {}).get("name") or (m.get("labels") or {}).get(Labels.JOB_NAME) or m.get("name") or ""
    )


def _entry(pod: Mapping[str, Any], node: str, pool: str, gpus: int, reason: Reason, wl: Any) -> Uncovered:
    m = meta(pod)
    grace = m.get("deletionGracePeriodSeconds")
    return Uncovered(
        namespace=m.get("namespace") or "",
        name=m.get("name") or "",
        uid=m.get("uid") or "",
        node=node,
        pool=pool,
        gpus=gpus,
        reason=reason,
        workload=(meta(wl).get("name") or "") if wl is not None else "",
        terminating=bool(m.get("deletionTimestamp")),
        deleting_at=parse_time(m.get("deletionTimestamp")),
        deletion_grace=grace if type(grace) is int else None,
        job=_job(pod, wl),
    )


def uncovered_pods(
    pods: Iterable[Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
    node_pools: Mapping[str, str],
) -> list[Uncovered]:
    """Every GPU pod bound to a pool node (`node_pools`: node name -> pool) that no admitted Workload
    covers, at this instant (the module docstring has the rule). Pure: plain dicts in, no I/O.

    Cost: one pass over the pods and one over the Workloads; a Workload's state and reserved GPUs are
    read once, and only for Workloads some pod is linked to (gpuctl serve runs this every few seconds
    over a 20,000-pod cache)."""
    by_owner: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    by_name: dict[tuple[str, str], Mapping[str, Any]] = {}
    for wl in workloads:
        m = meta(wl)
        ns = m.get("namespace") or ""
        by_name[(ns, m.get("name") or "")] = wl
        for uid in _owner_uids(wl):
            by_owner.setdefault((ns, uid), []).append(wl)
    holding: dict[int, bool] = {}  # id(Workload) -> holds quota

    def holds(wl: Mapping[str, Any]) -> bool:
        h = holding.get(id(wl))
        if h is None:
            h = holding[id(wl)] = workload_state(wl) in HOLDING_QUOTA
        return h

    out: list[Uncovered] = []
    # id(Workload) -> (the Workload, its claimants: (pod, node, pool, GPUs))
    claims: dict[int, tuple[Mapping[str, Any], list[tuple[Mapping[str, Any], str, str, int]]]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        pool = node_pools.get(node) if node else None
        if pool is None or not pod_holds_gpus(pod):
            continue
        try:
            gpus = pod_spec_gpus(pod.get("spec"))
        except ValueError:
            continue
        if gpus <= 0:
            continue
        links = _links(pod, by_owner, by_name)
        if not links:
            out.append(_entry(pod, node, pool, gpus, Reason.NO_WORKLOAD, None))
            continue
        wl = next((w for w in links if holds(w)), None)
        if wl is None:
            out.append(_entry(pod, node, pool, gpus, Reason.NOT_ADMITTED, links[0]))
        else:  # decided below, against the Workload's reserved GPUs
            claims.setdefault(id(wl), (wl, []))[1].append((pod, node, pool, gpus))

    for wl, claimants in claims.values():
        budget = sum(reserved_gpus(wl).values())
        if len(claimants) > 1:
            # Running pods first (oldest first; RFC 3339 times sort as strings), terminating ones last:
            # they are on their way out.
            claimants.sort(
                key=lambda c: (
                    bool(meta(c[0]).get("deletionTimestamp")),
                    meta(c[0]).get("creationTimestamp") or "",
                    meta(c[0]).get("name") or "",
                )
            )
        for pod, node, pool, gpus in claimants:
            if gpus <= budget:
                budget -= gpus
            else:
                out.append(_entry(pod, node, pool, gpus, Reason.BEYOND_ADMISSION, wl))
    out.sort(key=lambda u: (u.pool, u.namespace, u.name))
    return out


def uncovered_gpus_by_pool(uncovered: Iterable[Uncovered]) -> dict[str, int]:
    """GPUs held by these pods, per pool."""
    out: dict[str, int] = {}
    for u in uncovered:
        out[u.pool] = out.get(u.pool, 0) + u.gpus
    return out
