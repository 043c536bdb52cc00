"""compute -> apps/v1 Deployment + NodePort Service, labelled with its port (earlier gpuctl did)."""

from __future__ import annotations

from gpuctl.builders.common import WHOLE_GPUS, TargetPool
from gpuctl.builders.deployment import build_deployment
from gpuctl.constants import Labels
from gpuctl.spec import ComputeSpec


def build(spec: ComputeSpec, namespace: str, pool: TargetPool = WHOLE_GPUS) -> list[dict]:
    return build_deployment(spec, namespace, extra_labels={Labels.PORT: str(spec.service.port)}, pool=pool)
