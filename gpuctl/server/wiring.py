"""Which informers `gpuctl serve` runs, and what each keeps: the one place that wires the cache.

Kept apart from gpuctl.server.cache (the mechanism, which imports nothing of gpuctl.server) because the
wiring names what the metrics and the REST API read: the metrics' per-object summaries, the API's job
kinds. Arrows: main -> wiring -> cache | metrics.
"""

from __future__ import annotations

from gpuctl.cluster.informer import Transport
from gpuctl.constants import COHORT_NAME, MANAGED_BY_VALUE, Labels
from gpuctl.domain.pools import node_facts
from gpuctl.server.cache import Cache, trim_controller, trim_hpa, trim_node, trim_pod, trim_workload
from gpuctl.server.history import EVENT_FIELD_SELECTOR, trim_event
from gpuctl.server.metrics import workload_summary

MANAGED_SELECTOR = f"{Labels.MANAGED_BY}={MANAGED_BY_VALUE}"
JOB_SELECTOR = Labels.JOB_TYPE  # every gpuctl job's controller and pods (gpuctl.service.inventory)
JOB_CONTROLLERS = ("Job", "Deployment", "StatefulSet")
# Controllers of gpuctl jobs whose API a cluster may not serve (a CRD: LeaderWorkerSet, docs/serving.md),
# cached
# only where it does; elsewhere the Inventory lists them from the API server (gpuctl.service.inventory).
OPTIONAL_CONTROLLERS = ("LeaderWorkerSet",)


def default_cache(
    cluster: Transport,
    *,
    metrics: bool = True,
    api: bool = False,
    backstop: bool = False,
    history: bool = False,
    idle: bool = False,
    optional: tuple[str, ...] = OPTIONAL_CONTROLLERS,
) -> Cache:
    """The informers `gpuctl serve` runs.

    Always: Nodes, gpuctl's ResourceFlavors and ClusterQueues (through the managed-by selector: gpuctl
    reads only its own), the Cohort by name (so a foreign Cohort named `gpuctl` is seen and left alone).
    With metrics, the API or the backstop: every Pod and Workload (GPU sums, queue state, which pods an
    admitted Workload covers: gpuctl.server.backstop) and LocalQueues. With the
    API: the controllers of gpuctl jobs, so `GET /api/v1/jobs` is answered from memory
    (gpuctl.server.cache.CacheReader). With the history (gpuctl.server.history): Workloads, the
    Events on Workloads (Kueue's Preempted/Admitted, gpuctl's GpuctlDefragMove) and gpuctl's HPAs (a
    service's scales). With metrics or the
    API: autoscaled services' Deployments and gpuctl's HorizontalPodAutoscalers. `optional`: the
    OPTIONAL_CONTROLLERS the cluster serves (an informer of an API not served would never sync).
    """
    cache = Cache(cluster)
    cache.add("Node", transform=trim_node, summarize=node_facts)
    cache.add("ResourceFlavor", label_selector=MANAGED_SELECTOR)
    cache.add("ClusterQueue", label_selector=MANAGED_SELECTOR)
    cache.add("Cohort", field_selector=f"metadata.name={COHORT_NAME}")
    if metrics or api or backstop or idle:
        cache.add("Pod", transform=trim_pod)  # GPU sums: metrics.PodGpus, from the events
    if metrics or api or backstop or history or idle:
        cache.add("Workload", transform=trim_workload, summarize=workload_summary)
    if metrics or api or backstop or idle:
        cache.add("LocalQueue")
    if history:
        cache.add("Event", field_selector=EVENT_FIELD_SELECTOR, transform=trim_event)
    # the idle reclaimer (docs/utilisation.md) reads jobs as the API does, keeps from their controllers
    if api or idle:
        for kind in (*JOB_CONTROLLERS, *(k for k in OPTIONAL_CONTROLLERS if k in optional)):
            cache.add(kind, label_selector=JOB_SELECTOR, transform=trim_controller)
    if metrics or api:
        # Autoscaled services (docs/serving.md): their Deployments (the API's informer has them all) and
        # gpuctl's HPAs, for gpuctl_service_*_replicas.
        if "Deployment" not in cache.informers:
            cache.add("Deployment", label_selector=Labels.SERVING_TIER, transform=trim_controller)
        # ... and LeaderWorkerSets (multi-node replicas) where the cluster serves them.
        if "LeaderWorkerSet" in optional and "LeaderWorkerSet" not in cache.informers:
            cache.add("LeaderWorkerSet", label_selector=Labels.SERVING_TIER, transform=trim_controller)
        cache.add("HorizontalPodAutoscaler", label_selector=JOB_SELECTOR, transform=trim_hpa)
    if history and "HorizontalPodAutoscaler" not in cache.informers:  # a service's scales
        cache.add("HorizontalPodAutoscaler", label_selector=JOB_SELECTOR, transform=trim_hpa)
    return cache
