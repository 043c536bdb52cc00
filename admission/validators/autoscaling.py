"""`hpa-fits`: a HorizontalPodAutoscaler in a team namespace may not scale a Deployment past what its team
may ever hold (its quota plus its borrowingLimit): the replicas past it would wait for ever at Kueue's gate.

The Deployment's GPUs per pod come from the webhook's cache (admission.state: Deployments that request GPUs
or are an autoscaled service's); an autoscaled service's burst HPA counts the service's floor too
(docs/serving.md: floor + burst replicas of one team budget). A target the cache has not seen (created a
moment later, or not a Deployment) is not judged. The rule is gpuctl.domain.serving.replicas_beyond_team, as
`gpuctl create`'s precheck of an autoscaled service. Webhook only: the policy cannot read the Deployment or
the team's ClusterQueue.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from admission.rule_names import HPA_FITS
from admission.state import ClusterState
from admission.verdict import Violation
from gpuctl.constants import BURST_SUFFIX, LOCAL_QUEUE_NAME, Tier
from gpuctl.domain.serving import replicas_beyond_team
from gpuctl.domain.shape import obj_at, str_at

__all__ = ["FIX", "check_hpa_fits"]

FIX = "lower spec.maxReplicas to what the team's quota plus borrowingLimit hold, or raise them"


def check_hpa_fits(hpa: Mapping[str, Any], ns: str, state: ClusterState) -> list[Violation]:
    spec = obj_at(hpa, "spec", "request.object")
    ref = obj_at(spec, "scaleTargetRef", "request.object.spec")
    if ref.get("kind") != "Deployment" or str(ref.get("apiVersion", "")).split("/")[0] != "apps":
        return []
    name = str_at(ref, "name", "request.object.spec.scaleTargetRef")
    target = state.deployments.get((ns, name))
    high = spec.get("maxReplicas")
    if target is None or type(high) is not int:
        return []
    replicas, what = high, f"HorizontalPodAutoscaler {(hpa.get('metadata') or {}).get('name', '')}"
    if target.tier == Tier.BURST.value and name.endswith(BURST_SUFFIX):
        floor = state.deployments.get((ns, name.removesuffix(BURST_SUFFIX)))
        if floor is not None and floor.tier == Tier.FLOOR.value:
            replicas += floor.replicas  # the service: its floor and its burst
            what += f" (with its service's floor of {floor.replicas})"
    cq = state.local_queues.get(ns, {}).get(LOCAL_QUEUE_NAME)
    cap = state.team_caps.get(cq or "")
    if cap is None:
        return []
    found = replicas_beyond_team(what, replicas, target.gpus, ns, cap.quota, cap.borrowing_limit)
    if found is None:
        return []
    message, fix = found
    return [Violation(HPA_FITS, message, fix, HPA_FITS)]  # on UPDATE, one already past the cap may change
