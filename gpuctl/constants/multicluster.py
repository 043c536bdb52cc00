"""Pools in several clusters through MultiKueue, and metrics across clusters (docs/multicluster.md)."""

from __future__ import annotations

from typing import Final

from gpuctl.constants.kinds import Kind

# ----------------------------------------------------------------------------- multicluster
# Pools in several clusters through Kueue's MultiKueue (docs/multicluster.md; gpuctl.domain.multicluster,
# queues.multicluster, gpuctl.service.multicluster). The manager cluster holds the team queues and the
# MultiKueue objects below; each worker cluster holds its pools' nodes and a copy of the team queues.
KUEUE_NAMESPACE: Final = "kueue-system"
# Kueue's MultiKueue admission check controller (kueue.MultiKueueControllerName, v0.19.2).
MULTIKUEUE_CONTROLLER: Final = "kueue.x-k8s.io/multikueue"
# The one AdmissionCheck every team ClusterQueue of a manager carries: Kueue v0.19.2 accepts one MultiKueue
# check per ClusterQueue and none per flavor (pkg/cache/scheduler/clusterqueue.go: the queue goes inactive,
# MultiKueueAdmissionCheckAppliedPerFlavor), so a team's jobs either all go through MultiKueue or none do.
MULTIKUEUE_CHECK: Final = "gpuctl-multikueue"
# The MultiKueueConfig of that check: every worker cluster some pool is in.
MULTIKUEUE_CONFIG: Final = "gpuctl"
# The Secret (in KUEUE_NAMESPACE) holding a worker's kubeconfig for Kueue, named CLUSTER_SECRET_PREFIX +
# the cluster, under Kueue's key (kueue.MultiKueueConfigSecretKey).
CLUSTER_SECRET_PREFIX: Final = "gpuctl-cluster-"
MULTIKUEUE_SECRET_KEY: Final = "kubeconfig"
# On a pool's ResourceFlavor in the manager: the clusters its nodes are in (comma-separated, sorted).
POOL_CLUSTERS_ANNOTATION: Final = "runwhere.ai/clusters"
# Job kinds a pool in another cluster takes. MultiKueue v0.19.2 has adapters for batch Jobs, pods and
# StatefulSets among gpuctl's kinds, none for Deployments (pkg/controller/jobs/*/*_multikueue_adapter.go):
MULTICLUSTER_KINDS: Final = (Kind.TRAINING,)
MULTICLUSTER_REFUSED_WHY: Final = {
    Kind.INFERENCE: "MultiKueue (Kueue v0.19.2) has no Deployment adapter: each pod would be copied to the "
    "worker as a bare pod, outside its Deployment's rollouts, restarts and Service",
    Kind.COMPUTE: "MultiKueue (Kueue v0.19.2) has no Deployment adapter: each pod would be copied to the "
    "worker as a bare pod, outside its Deployment's rollouts, restarts and Service",
    Kind.NOTEBOOK: "MultiKueue (Kueue v0.19.2) copies a StatefulSet but never its status back (the manager's "
    "StatefulSet controller would overwrite it), nor its Service: the notebook could not be reached",
}
# The Workload's admission check states (kueue.CheckState*), as `describe job` shows them.
CHECK_READY: Final = "Ready"
CHECK_PENDING: Final = "Pending"

# ----------------------------------------------------------------------------- metrics across clusters
# `gpuctl serve --cluster NAME` adds this label, =NAME, to every series it exports (docs/metrics.md,
# "Several clusters"); without the flag none (one cluster, or Prometheus adds it: external_labels /
# relabeling). The Grafana dashboards filter every query on it (`cluster=~"$cluster"`, All = `.*`, which an
# absent label matches too). docs/metrics.md, "Several clusters".
METRICS_CLUSTER_LABEL: Final = "cluster"
