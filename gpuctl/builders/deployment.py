"""Shared by inference and compute: an apps/v1 Deployment plus its NodePort Service (an autoscaled one:
gpuctl.builders.autoscaled)."""

from __future__ import annotations

from gpuctl.builders.autoscaled import build_autoscaled
from gpuctl.builders.common import (
    WHOLE_GPUS,
    TargetPool,
    job_labels,
    metadata,
    node_port_service,
    pod_template,
    service_port,
    with_labels,
)
from gpuctl.constants import Labels
from gpuctl.spec import ComputeSpec, InferenceSpec


def build_deployment(
    spec: InferenceSpec | ComputeSpec,
    namespace: str,
    extra_labels: dict[str, str],
    pool: TargetPool = WHOLE_GPUS,
) -> list[dict]:
    if spec.service.autoscaling is not None:
        return build_autoscaled(spec, namespace, extra_labels, pool)
    _, target = service_port(spec)
    labels = {**job_labels(spec, namespace), **extra_labels}
    template = pod_template(spec, namespace, app_label=True, container_port=target, pool=pool)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(spec, namespace, labels),
        "spec": {
            "replicas": spec.service.replicas,
            "selector": {"matchLabels": {Labels.APP: spec.job.name}},
            # Kueue admits each pod on its own; a surge pod would need quota the team may not
            # have, stalling the rollout. Replace one pod at a time instead.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": with_labels(template, extra_labels),
        },
    }
    return [deployment, with_labels(node_port_service(spec, namespace), extra_labels)]
