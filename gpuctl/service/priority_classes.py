"""gpuctl's Kubernetes PriorityClasses: the earlier gpuctl's names, never preempting through kube-scheduler.

The earlier gpuctl's client creates (or replaces) the PriorityClasses gpuctl-high (1,000,000,
PreemptLowerPriority), gpuctl-medium (500,000, PreemptLowerPriority) and gpuctl-low (100, Never) on every
`create`, and its pods name them. With PreemptLowerPriority, a pod of such a class that does not fit makes
kube-scheduler evict lower-priority pods, Kueue-admitted ones included: it jumps Kueue. gpuctl keeps the
same names and values (dashboards and habits carry over) with `preemptionPolicy: Never`, so a pod naming
one waits for room like any other and only Kueue decides who runs on pool GPUs (the earlier client's own
pods in team namespaces do not even name them any more: admission/policies/earlier_client.py).

`value` and `preemptionPolicy` are immutable (k8s.io/kubernetes pkg/apis/scheduling/validation,
ValidatePriorityClassUpdate), so a class with the wrong policy or value is deleted and created again. Pods
that already run keep what they were admitted with (the Priority admission plugin copies the value and the
policy into each pod at creation); a pod created in the moment between the delete and the create is
refused by the API server ("no PriorityClass with name ... was found") and its controller retries. The
ValidatingAdmissionPolicy gpuctl-priority-classes (manifests/admission/policy.yaml) then refuses any other
policy for these names, the earlier client's replace included (which it ignores).

`gpuctl adopt` plans and applies this (`decide` is pure; `read` and `execute` talk to the cluster).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.cluster import Cluster, path
from gpuctl.constants import (
    MANAGED_BY_VALUE,
    PRIORITY_CLASS,
    PRIORITY_CLASS_PREEMPTION,
    PRIORITY_VALUE,
    Labels,
)
from gpuctl.domain.dryrun import DryRun

KIND = "PriorityClass"
API_VERSION = "scheduling.k8s.io/v1"
DESCRIPTION = (
    "gpuctl priority {priority}: Kueue orders and preempts work by the WorkloadPriorityClass of the same "
    "name; this class never preempts through kube-scheduler (gpuctl adopt)"
)


def desired() -> list[dict]:
    """The three PriorityClasses as gpuctl keeps them."""
    return [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": name, "labels": {Labels.MANAGED_BY: MANAGED_BY_VALUE}},
            "value": PRIORITY_VALUE[p],
            "preemptionPolicy": PRIORITY_CLASS_PREEMPTION,
            "globalDefault": False,
            "description": DESCRIPTION.format(priority=p.value),
        }
        for p, name in PRIORITY_CLASS.items()
    ]


@dataclass(frozen=True)
class Change:
    name: str
    recreate: bool  # False: create (missing); True: delete and create (wrong policy or value)
    reason: str
    obj: dict


def decide(existing: Iterable[Mapping[str, Any]]) -> list[Change]:
    """What to do so that gpuctl-high|medium|low exist with gpuctl's value and preemptionPolicy Never."""
    by_name = {o["metadata"]["name"]: o for o in existing}
    changes = []
    for want in desired():
        name = want["metadata"]["name"]
        have = by_name.get(name)
        if have is None:
            changes.append(Change(name, False, "missing", want))
            continue
        wrong = []
        policy = have.get("preemptionPolicy") or "PreemptLowerPriority"  # the API server's default
        if policy != want["preemptionPolicy"]:
            wrong.append(f"preemptionPolicy {policy}")
        if have.get("value") != want["value"]:
            wrong.append(f"value {have.get('value')}")
        if have.get("globalDefault"):
            wrong.append("globalDefault")
        if wrong:
            changes.append(Change(name, True, ", ".join(wrong), want))
    return changes


def lines(changes: Iterable[Change]) -> list[str]:
    out = []
    for c in changes:
        verb = "re-created" if c.recreate else "created"
        why = f"was {c.reason}: its pods could preempt Kueue-admitted pods" if c.recreate else "missing"
        out.append(
            f"priorityclass/{c.name} {verb} with preemptionPolicy {PRIORITY_CLASS_PREEMPTION} "
            f"(value {c.obj['value']}; {why})"
        )
    return out


def read(cluster: Cluster) -> list[dict]:
    return [o for o in cluster.list(path(KIND)) if o["metadata"]["name"] in PRIORITY_CLASS.values()]


def execute(cluster: Cluster, changes: Iterable[Change], *, dry_run: DryRun = DryRun.NONE) -> list[str]:
    """Create the missing classes, delete and create the wrong ones."""
    dry_run = DryRun(dry_run)
    server_dry = dry_run is DryRun.SERVER
    out = []
    for c in changes:
        if dry_run.writes:
            if c.recreate:
                cluster.delete(path(KIND, c.name), dry_run=server_dry)
            if not (c.recreate and server_dry):  # a server dry run of the create would meet the old class
                cluster.create(c.obj, dry_run=server_dry)
        out += lines([c])
    return out
