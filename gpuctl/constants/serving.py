"""Serving: an autoscaled service's tiers and multi-node replicas (docs/serving.md)."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Tier(StrEnum):
    """The two halves of an autoscaled service (docs/serving.md): the floor (minReplicas, a Deployment of
    its own) and the burst above it (the Deployment the HorizontalPodAutoscaler scales)."""

    FLOOR = "floor"
    BURST = "burst"


# The WorkloadPriorityClasses of an autoscaled service's pods. Kueue's withinClusterQueue: LowerPriority
# never lets a team's own work preempt the floor (above high), and its candidate order (lower priority
# first, queues/objects.cluster_queue) makes the burst the first replica preempted or reclaimed (below low).
# Another team's reclaim takes from a team only while it is over its quota, so a floor inside the quota
# stays.
SERVING_CLASS: Final = {Tier.FLOOR: "gpuctl-serving-floor", Tier.BURST: "gpuctl-serving-burst"}
SERVING_VALUE: Final = {Tier.FLOOR: 2_000_000, Tier.BURST: 10}
# The burst Deployment of service <name> is <name>-burst; the HPA that scales it is <name>.
BURST_SUFFIX: Final = "-burst"
# The external metrics (manifests/prometheus/adapter-rules.yaml) per `service.autoscaling.metric`, and the
# label keys of the HPA's metric selector that name the service and the floor's load.
AUTOSCALING_METRICS: Final = {"concurrency": "gpuctl_burst_concurrency", "rps": "gpuctl_burst_rps"}
METRIC_JOB_LABEL: Final = "gpuctl_job"
METRIC_FLOOR_LABEL: Final = "floor"

# A service whose replicas span nodes (`kind: inference` with resources.nodes: N > 1) is a
# LeaderWorkerSet (sigs.k8s.io/lws): each replica a group of N pods, leader (rank 0) and workers, which
# Kueue admits whole (one Workload per group) and places in one topology domain (both templates carry
# the same pod-set group name and placement). LWS labels every pod with its worker index (the rank) and
# injects LWS_LEADER_ADDRESS (the group leader's host name) first in every container's environment.
LWS_GROUP: Final = "leaderworkerset.x-k8s.io"
LWS_API_VERSION: Final = f"{LWS_GROUP}/v1"
LWS_NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
LWS_LEADER_ADDRESS_ENV: Final = "LWS_LEADER_ADDRESS"
LWS_WORKER_INDEX_ENV: Final = "LWS_WORKER_INDEX"
TAS_GROUP_NAME: Final = "kueue.x-k8s.io/podset-group-name"
# Kueue's annotation (a label without its WorkloadIdentifierAnnotations gate, on in v0.19) on a pod of a pod
# group (a LeaderWorkerSet group's pods): the name of the group's Workload.
KUEUE_POD_GROUP_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
# The pod-set group name both templates of a group carry (any name; the same on both).
LWS_TAS_GROUP: Final = "replica"
