"""inference -> apps/v1 Deployment (replicas from service.replicas) + NodePort Service svc-<name>; with
resources.nodes: N > 1, a LeaderWorkerSet of N-pod groups instead (gpuctl.builders.inference_lws), two
with service.autoscaling (floor and burst, gpuctl.builders.autoscaled)."""

from __future__ import annotations

from gpuctl.builders.autoscaled import build_autoscaled
from gpuctl.builders.common import WHOLE_GPUS, TargetPool
from gpuctl.builders.deployment import build_deployment
from gpuctl.builders.inference_lws import build_leader_worker_set
from gpuctl.spec import InferenceSpec


def build(spec: InferenceSpec, namespace: str, pool: TargetPool = WHOLE_GPUS) -> list[dict]:
    if spec.resources.nodes > 1 and spec.service.autoscaling is not None:
        return build_autoscaled(spec, namespace, {}, pool)  # floor and burst LeaderWorkerSets, the HPA
    if spec.resources.nodes > 1:
        return build_leader_worker_set(spec, namespace, pool)
    return build_deployment(spec, namespace, extra_labels={}, pool=pool)
