"""An autoscaled inference or compute service (`service.autoscaling`, docs/serving.md): two Deployments
behind one Service and Kubernetes' own HorizontalPodAutoscaler.

- `<name>`: the floor, `minReplicas` pods at WorkloadPriorityClass gpuctl-serving-floor (Kueue never lets
  the team's own work preempt them, and another team reclaims only from a team over its quota);
- `<name>-burst`: the burst, 0 to `maxReplicas - minReplicas` pods at gpuctl-serving-burst (below every
  job: the first preempted or reclaimed, and a replica that does not fit waits at Kueue's gate);
- HPA `<name>`: scales `<name>-burst` on the external metric of manifests/prometheus/adapter-rules.yaml,
  the service's load above what the floor serves at the target, divided by the target per replica;
- Service `svc-<name>`: every ready replica of both (selector `app: <name>`).

Kueue's pod integration admits each Deployment pod as its own Workload, at the priority its labels carry
when it is created; a Deployment's pods share one template, hence two Deployments for two priorities.
"""

from __future__ import annotations

from gpuctl.builders.common import (
    WHOLE_GPUS,
    TargetPool,
    job_labels,
    metadata,
    node_port_service,
    pod_template,
    service_port,
)
from gpuctl.builders.inference_lws import leader_worker_set, leaders_service
from gpuctl.constants import (
    AUTOSCALING_METRICS,
    BURST_SUFFIX,
    LWS_API_VERSION,
    METRIC_FLOOR_LABEL,
    METRIC_JOB_LABEL,
    SERVING_CLASS,
    Labels,
    Tier,
)
from gpuctl.spec import ComputeSpec, InferenceSpec
from gpuctl.spec.autoscaling import Autoscaling


def burst_name(job_name: str) -> str:
    return job_name + BURST_SUFFIX


def decimal_text(value) -> str:
    """A Decimal as a plain number ("10", "2.5"): what a label value and a quantity both accept."""
    text = format(value.normalize(), "f")
    return text


def tier_labels(labels: dict[str, str], tier: Tier) -> dict[str, str]:
    """A tier's labels: its WorkloadPriorityClass instead of the job's priority (runwhere.ai/priority says
    high|medium|low, which a tier is not) and runwhere.ai/serving-tier."""
    out = {k: v for k, v in labels.items() if k != Labels.PRIORITY}
    if Labels.KUEUE_PRIORITY in labels:
        out[Labels.KUEUE_PRIORITY] = SERVING_CLASS[tier]
    out[Labels.SERVING_TIER] = tier.value
    return out


def _deployment(
    spec: InferenceSpec | ComputeSpec,
    namespace: str,
    extra_labels: dict[str, str],
    pool: TargetPool,
    tier: Tier,
    replicas: int,
) -> dict:
    _, target = service_port(spec)
    name = spec.job.name if tier is Tier.FLOOR else burst_name(spec.job.name)
    labels = tier_labels({**job_labels(spec, namespace), **extra_labels, Labels.APP: spec.job.name}, tier)
    template = pod_template(spec, namespace, app_label=True, container_port=target, pool=pool)
    template["metadata"]["labels"] = tier_labels({**template["metadata"]["labels"], **extra_labels}, tier)
    selector = {Labels.APP: spec.job.name, Labels.SERVING_TIER: tier.value}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(spec, namespace, labels, name=name),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            # As a fixed-size service (gpuctl.builders.deployment): no surge pod that would need quota.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": template,
        },
    }


def autoscaler(
    spec: InferenceSpec | ComputeSpec,
    namespace: str,
    auto: Autoscaling,
    target: tuple[str, str] = ("apps/v1", "Deployment"),
) -> dict:
    """The HPA of the burst: minReplicas 0 (HPAScaleToZero), the external metric of the service's load
    above the floor's, AverageValue target = the target per replica, so burst = ceil(above / target).
    `target`: the burst's (apiVersion, kind): its Deployment, or its LeaderWorkerSet (multi-node replicas,
    whose scale subresource counts groups)."""
    labels = {
        k: v
        for k, v in job_labels(spec, namespace).items()
        if k not in (Labels.PRIORITY, Labels.KUEUE_PRIORITY)
    }
    labels.pop(Labels.KUEUE_QUEUE, None)
    selector = {METRIC_JOB_LABEL: spec.job.name, METRIC_FLOOR_LABEL: decimal_text(auto.floor_load)}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(spec, namespace, labels),
        "spec": {
            "scaleTargetRef": {
                "apiVersion": target[0],
                "kind": target[1],
                "name": burst_name(spec.job.name),
            },
            "minReplicas": 0,
            "maxReplicas": auto.burst_max,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {
                            "name": AUTOSCALING_METRICS[auto.metric],
                            "selector": {"matchLabels": selector},
                        },
                        "target": {"type": "AverageValue", "averageValue": decimal_text(auto.per_replica)},
                    },
                }
            ],
        },
    }


def build_autoscaled(
    spec: InferenceSpec | ComputeSpec,
    namespace: str,
    extra_labels: dict[str, str],
    pool: TargetPool = WHOLE_GPUS,
) -> list[dict]:
    """Floor Deployment, burst Deployment (at 0: the HPA scales it), HPA, Service: in that order (the
    floor first: a create's first object is the job's controller)."""
    auto = spec.service.autoscaling
    assert auto is not None
    if isinstance(spec, InferenceSpec) and spec.resources.nodes > 1:
        return _build_groups(spec, namespace, extra_labels, pool, auto)
    floor = _deployment(spec, namespace, extra_labels, pool, Tier.FLOOR, auto.min_replicas)
    burst = _deployment(spec, namespace, extra_labels, pool, Tier.BURST, 0)
    service = node_port_service(spec, namespace)
    service["metadata"]["labels"].update(extra_labels)
    return [floor, burst, autoscaler(spec, namespace, auto), service]


def _build_groups(
    spec: InferenceSpec, namespace: str, extra_labels: dict[str, str], pool: TargetPool, auto: Autoscaling
) -> list[dict]:
    """Replicas that span nodes (`resources.nodes` > 1): the same floor and burst, each a LeaderWorkerSet
    of N-pod groups (gpuctl.builders.inference_lws; Kueue admits a group whole at its tier's priority), the
    HPA on the burst LeaderWorkerSet's scale subresource (it counts groups), svc-<name> in front of the
    leaders of both."""

    def relabel(tier: Tier):
        return lambda labels: tier_labels({**labels, **extra_labels}, tier)

    floor = leader_worker_set(spec, namespace, pool, replicas=auto.min_replicas, relabel=relabel(Tier.FLOOR))
    burst = leader_worker_set(
        spec, namespace, pool, name=burst_name(spec.job.name), replicas=0, relabel=relabel(Tier.BURST)
    )
    hpa = autoscaler(spec, namespace, auto, (LWS_API_VERSION, "LeaderWorkerSet"))
    service = leaders_service(spec, namespace)
    service["metadata"]["labels"].update(extra_labels)
    return [floor, burst, hpa, service]
