"""inference -> apps/v1 Deployment (replicas from service.replicas) + NodePort Service svc-<name>."""

from __future__ import annotations

from gpuctl.builders.common import WHOLE_GPUS, TargetPool
from gpuctl.builders.deployment import build_deployment
from gpuctl.spec import InferenceSpec


def build(spec: InferenceSpec, namespace: str, pool: TargetPool = WHOLE_GPUS) -> list[dict]:
    return build_deployment(spec, namespace, extra_labels={}, pool=pool)
