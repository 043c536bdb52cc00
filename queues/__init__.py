"""Pool, quota and priority -> Kueue (kueue.x-k8s.io/v1beta2) objects. Pure functions, no API calls.

docs/queueing.md explains the mapping; in short:
- a pool is a ResourceFlavor (nodeLabels runwhere.ai/pool=<pool>, tolerating the taint
  runwhere.ai/pool=<pool>:NoSchedule of its nodes) and its capacity (the GPUs, CPU and
  memory of its nodes) is quota of the root Cohort `gpuctl`, less what teams are guaranteed there;
- a team quota is a ClusterQueue per team namespace in that cohort, holding the team's budget of
  virtual resources runwhere.ai/quota-{gpu,cpu,memory} (Kueue derives them from pod requests) and
  optional per-pool guarantees, plus a LocalQueue `default` in the namespace;
- priorities high/medium/low are WorkloadPriorityClasses gpuctl-{high,medium,low}.
"""

from queues.model import PoolCapacity, PoolGuarantee, TeamQuota
from queues.objects import (
    budget_flavor,
    cluster_queue,
    cohort,
    desired_objects,
    local_queue,
    pool_toleration,
    resource_flavor,
    team_namespace,
    topology,
    topology_name,
    workload_priority_classes,
)

__all__ = [
    "PoolCapacity",
    "PoolGuarantee",
    "TeamQuota",
    "budget_flavor",
    "cluster_queue",
    "cohort",
    "desired_objects",
    "local_queue",
    "pool_toleration",
    "resource_flavor",
    "team_namespace",
    "topology",
    "topology_name",
    "workload_priority_classes",
]
