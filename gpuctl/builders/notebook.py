"""notebook -> apps/v1 StatefulSet (1 replica) + NodePort Service on the notebook's own port.

Kueue admits the StatefulSet as one gang Workload; scaling it to 0 releases the team's quota.
"""

from __future__ import annotations

from gpuctl.builders.common import (
    WHOLE_GPUS,
    TargetPool,
    job_labels,
    metadata,
    node_port_service,
    pod_template,
    service_name,
    service_port,
)
from gpuctl.constants import Labels
from gpuctl.spec import NotebookSpec


def build(spec: NotebookSpec, namespace: str, pool: TargetPool = WHOLE_GPUS) -> list[dict]:
    _, target = service_port(spec)
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(spec, namespace, job_labels(spec, namespace)),
        "spec": {
            "replicas": 1,
            "serviceName": service_name(spec.job.name),
            "selector": {"matchLabels": {Labels.APP: spec.job.name}},
            "template": pod_template(spec, namespace, app_label=True, container_port=target, pool=pool),
        },
    }
    return [statefulset, node_port_service(spec, namespace)]
