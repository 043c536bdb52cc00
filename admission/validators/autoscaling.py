"""`hpa-queued`: a HorizontalPodAutoscaler in a team namespace may scale only GPU work that Kueue queues, so
that the replicas it adds past what the team may hold wait at Kueue's gate, holding no GPU, instead of
running outside the team's quota (docs/serving.md).

- Refused: an HPA of a Deployment whose pods request GPUs and carry no `kueue.x-k8s.io/queue-name` (one
  made before gpuctl's webhook was installed, say: `gpu-queue` refuses new ones).
- Warned, not refused: an HPA whose maxReplicas (a service's burst HPA: with its floor) are more than the
  team may ever hold (quota + borrowingLimit, gpuctl.domain.serving.replicas_beyond_team): those replicas
  wait for ever, and `get jobs` says so per replica.

The Deployment comes from the webhook's cache (admission.state: Deployments that request GPUs or are an
autoscaled service's); a target the cache has not seen (created a moment later, or another kind) is not
judged. Webhook only: the policy cannot read the Deployment or the team's ClusterQueue.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.rule_names import HPA_QUEUED
from admission.state import ClusterState
from admission.verdict import Violation
from gpuctl.constants import BURST_SUFFIX, LOCAL_QUEUE_NAME, Labels, Tier
from gpuctl.domain.serving import replicas_beyond_team
from gpuctl.domain.shape import obj_at, str_at

__all__ = ["FIX", "check_hpa_queued"]

FIX = (
    f"scale a Deployment Kueue queues: add the label {Labels.KUEUE_QUEUE}: {LOCAL_QUEUE_NAME} to it (`gpuctl "
    "create` does, with service.autoscaling: docs/serving.md)"
)


def check_hpa_queued(
    hpa: Mapping[str, Any], ns: str, state: ClusterState, warn: list[str]
) -> list[Violation]:
    spec = obj_at(hpa, "spec", "request.object")
    ref = obj_at(spec, "scaleTargetRef", "request.object.spec")
    if ref.get("kind") != "Deployment" or str(ref.get("apiVersion", "")).split("/")[0] != "apps":
        return []
    name = str_at(ref, "name", "request.object.spec.scaleTargetRef")
    target = state.deployments.get((ns, name))
    if target is None or not target.gpus:
        return []
    what = f"HorizontalPodAutoscaler {(hpa.get('metadata') or {}).get('name', '')}"
    if not target.queue:
        return [
            Violation(
                HPA_QUEUED,
                f"{what} scales Deployment {name}, whose pods request {target.gpus} GPU(s) each and which "
                f"Kueue does not queue (no {Labels.KUEUE_QUEUE}): every replica it adds would run outside "
                f"team {ns}'s quota",
                FIX,
                HPA_QUEUED,
            )
        ]
    high = spec.get("maxReplicas")
    cap = state.team_caps.get(state.local_queues.get(ns, {}).get(target.queue, ""))
    if type(high) is int and cap is not None:
        if target.tier == Tier.BURST.value and name.endswith(BURST_SUFFIX):
            floor = state.deployments.get((ns, name.removesuffix(BURST_SUFFIX)))
            if floor is not None and floor.tier == Tier.FLOOR.value:
                high += floor.replicas  # the service: its floor and its burst
                what += f" (with its service's floor of {floor.replicas})"
        found = replicas_beyond_team(what, high, target.gpus, ns, cap.quota, cap.borrowing_limit)
        if found is not None:
            warn.append(f"{found[0]}; {found[1]}")
    return []
