"""`hpa-queued`: a HorizontalPodAutoscaler in a team namespace may scale only GPU work that Kueue queues, so
that the replicas it adds past what the team may hold wait at Kueue's gate, holding no GPU, instead of
running outside the team's quota (docs/serving.md).

- Refused: an HPA of a Deployment whose pods request GPUs and carry no `kueue.x-k8s.io/queue-name` (one
  made before gpuctl's webhook was installed, say: `gpu-queue` refuses new ones); the same of a
  LeaderWorkerSet (multi-node replicas: the HPA counts groups, each of the group's GPUs).
- Warned, not refused: an HPA whose maxReplicas (a service's burst HPA: with its floor) are more than the
  team may ever hold (quota + borrowingLimit, gpuctl.domain.serving.replicas_beyond_team): those replicas
  wait for ever, and `get jobs` says so per replica.

The Deployment or LeaderWorkerSet comes from the webhook's cache (admission.state: those that request GPUs
or are an autoscaled service's; LeaderWorkerSets where the cluster served their API when the webhook
started); a target the cache has not seen (created a moment later, or another kind) is not judged.
Webhook only, no CEL: a ValidatingAdmissionPolicy cannot read the target or the team's ClusterQueue.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.rule_names import HPA_QUEUED
from admission.state import ClusterState
from admission.verdict import Violation
from gpuctl.constants import BURST_SUFFIX, LOCAL_QUEUE_NAME, LWS_GROUP, Labels, Tier
from gpuctl.domain.serving import replicas_beyond_team
from gpuctl.domain.shape import obj_at, str_at

__all__ = ["FIX", "check_hpa_queued"]

FIX = (
    f"scale a Deployment or LeaderWorkerSet Kueue queues: add the label {Labels.KUEUE_QUEUE}: "
    f"{LOCAL_QUEUE_NAME} to it (`gpuctl create` does, with service.autoscaling: docs/serving.md)"
)


# What an HPA may scale that the webhook judges: (API group, kind) -> the ClusterState map of them. A
# LeaderWorkerSet's replica is a group of pods (docs/serving.md "Replicas bigger than a node"): its GPUs are
# the group's, and the HPA counts groups.
_TARGETS = {("apps", "Deployment"): "deployments", (LWS_GROUP, "LeaderWorkerSet"): "leader_worker_sets"}
_EACH = {"Deployment": "pods", "LeaderWorkerSet": "replicas (groups of pods)"}


def check_hpa_queued(
    hpa: Mapping[str, Any], ns: str, state: ClusterState, warn: list[str]
) -> list[Violation]:
    spec = obj_at(hpa, "spec", "request.object")
    ref = obj_at(spec, "scaleTargetRef", "request.object.spec")
    kind, group = ref.get("kind"), str(ref.get("apiVersion", "")).split("/")[0]
    targets = _TARGETS.get((group, kind))
    if targets is None:
        return []
    name = str_at(ref, "name", "request.object.spec.scaleTargetRef")
    cached = getattr(state, targets)
    target = cached.get((ns, name))
    if target is None or not target.gpus:
        return []
    what = f"HorizontalPodAutoscaler {(hpa.get('metadata') or {}).get('name', '')}"
    if not target.queue:
        return [
            Violation(
                HPA_QUEUED,
                f"{what} scales {kind} {name}, whose {_EACH[kind]} request {target.gpus} GPU(s) each and "
                f"which Kueue does not queue (no {Labels.KUEUE_QUEUE}): every replica it adds would run "
                f"outside team {ns}'s quota",
                FIX,
                HPA_QUEUED,
            )
        ]
    high = spec.get("maxReplicas")
    cap = state.team_caps.get(state.local_queues.get(ns, {}).get(target.queue, ""))
    if type(high) is int and cap is not None:
        if target.tier == Tier.BURST.value and name.endswith(BURST_SUFFIX):
            floor = cached.get((ns, name.removesuffix(BURST_SUFFIX)))
            if floor is not None and floor.tier == Tier.FLOOR.value:
                high += floor.replicas  # the service: its floor and its burst
                what += f" (with its service's floor of {floor.replicas})"
        found = replicas_beyond_team(what, high, target.gpus, ns, cap.quota, cap.borrowing_limit)
        if found is not None:
            warn.append(f"{found[0]}; {found[1]}")
    return []
