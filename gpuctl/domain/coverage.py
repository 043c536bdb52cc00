"""Which GPU pods on pool nodes no admitted Kueue Workload covers: the backstop's rule, once.

After issue 26 only Kueue-admitted work may hold a pool's GPUs, so "the GPUs pods hold in a pool" must
equal "the GPUs Kueue counts there". Admission rules keep most outside work off pool nodes; this rule
finds what got through anyway (or ran before the rules), from the objects alone:

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

from gpuctl.constants import KUEUE_WORKLOAD_ANNOTATION
from gpuctl.domain.gpus import pod_holds_gpus, pod_spec_gpus
from gpuctl.domain.objects import annotations, meta, parse_time
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
    """The uid the pod names as its controller (ownerReferences with controller: true)."""
    for o in meta(pod).get("ownerReferences") or ():
        if o.get("controller"):
            return o.get("uid") or None
    return None


def _owner_uids(wl: Mapping[str, Any]) -> list[str]:
    return [o["uid"] for o in meta(wl).get("ownerReferences") or () if o.get("uid")]


_Index = Mapping[tuple[str, str], Any]  # (namespace, owner uid or Workload name) -> Workload(s)


def _links(pod: Mapping[str, Any], by_owner: _Index, by_name: _Index) -> list[Mapping[str, Any]]:
    """The pod's Workloads, strongest link first: owned by the pod, by its controller, named by its
    annotation."""
    m = meta(pod)
    ns = m.get("namespace") or ""
    out: list[Mapping[str, Any]] = []
    seen: set[int] = set()

    def add(wls: Iterable[Mapping[str, Any]]) -> None:
        for wl in wls:
            if id(wl) not in seen:
                seen.add(id(wl))
                out.append(wl)

    if m.get("uid"):
        add(by_owner.get((ns, m["uid"]), ()))
    ctl = controller_uid(pod)
    if ctl:
        add(by_owner.get((ns, ctl), ()))
    named = annotations(pod).get(KUEUE_WORKLOAD_ANNOTATION)
    if named and (ns, named) in by_name:
        add((by_name[(ns, named)],))
    return out


def uncovered_pods(
    pods: Iterable[Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
    node_pools: Mapping[str, str],
) -> list[Uncovered]:
    """Every GPU pod bound to a pool node (`node_pools`: node name -> pool) that no admitted Workload
    covers, at this instant (the module docstring has the rule). Pure: plain dicts in, no I/O."""
    by_owner: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    by_name: dict[tuple[str, str], Mapping[str, Any]] = {}
    for wl in workloads:
        m = meta(wl)
        ns = m.get("namespace") or ""
        by_name[(ns, m.get("name") or "")] = wl
        for uid in _owner_uids(wl):
            by_owner.setdefault((ns, uid), []).append(wl)

    out: list[Uncovered] = []
    # Workload id -> (its reserved GPUs, the pods that claim it)
    claims: dict[int, tuple[Mapping[str, Any], list[tuple[Mapping[str, Any], Uncovered]]]] = {}
    for pod in pods:
        if not pod_holds_gpus(pod):
            continue
        node = pod["spec"]["nodeName"]
        pool = node_pools.get(node)
        if pool is None:
            continue
        try:
            gpus = pod_spec_gpus(pod.get("spec"))
        except ValueError:
            continue
        if gpus <= 0:
            continue
        m = meta(pod)
        links = _links(pod, by_owner, by_name)
        admitted = [wl for wl in links if workload_state(wl) in HOLDING_QUOTA]
        if not links:
            reason, wl = Reason.NO_WORKLOAD, None
        elif not admitted:
            reason, wl = Reason.NOT_ADMITTED, links[0]
        else:
            reason, wl = Reason.BEYOND_ADMISSION, admitted[0]
        u = Uncovered(
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
        )
        if wl is not None and reason == Reason.BEYOND_ADMISSION:
            claims.setdefault(id(wl), (wl, []))[1].append((pod, u))  # decided below, against its budget
        else:
            out.append(u)

    for wl, claimants in claims.values():
        budget = sum(reserved_gpus(wl).values())
        # Running pods first (oldest first), terminating ones last: they are on their way out.
        claimants.sort(
            key=lambda pe: (
                pe[1].terminating,
                parse_time(meta(pe[0]).get("creationTimestamp")) or 0.0,
                pe[1].name,
            )
        )
        for _, e in claimants:
            if e.gpus <= budget:
                budget -= e.gpus
            else:
                out.append(e)
    out.sort(key=lambda u: (u.pool, u.namespace, u.name))
    return out


def uncovered_gpus_by_pool(uncovered: Iterable[Uncovered]) -> dict[str, int]:
    """GPUs held by these pods, per pool."""
    out: dict[str, int] = {}
    for u in uncovered:
        out[u.pool] = out.get(u.pool, 0) + u.gpus
    return out
