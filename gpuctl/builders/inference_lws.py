"""A service whose replicas span nodes (`kind: inference`, `resources.nodes: N` > 1; docs/serving.md,
docs/serving.md "Replicas bigger than a node"): a LeaderWorkerSet and the Service svc-<name> in front of
its leaders. Pure, like every builder.

- **One replica, one group, one Workload.** Each of `service.replicas` replicas is a group of N pods:
  the leader (rank 0, the pod the Service sends requests to) and N-1 workers (ranks 1..N-1). Kueue's
  LeaderWorkerSet integration makes one Workload per group, of two pod sets (leader 1, workers N-1), and
  admits a group whole or not at all; a group not admitted has its pods gated, holding no GPU. Scaling
  (`replicas`, the LeaderWorkerSet's scale subresource, which an HPA targets) adds or removes groups.
- **The launcher environment of training gangs** (gpuctl.builders.gang.launcher_env): PET_NNODES = N,
  PET_NPROC_PER_NODE, MASTER_ADDR / PET_MASTER_ADDR = the group's leader, whose host name LWS puts first
  in every container's environment (LWS_LEADER_ADDRESS, expanded by the kubelet), the rank from LWS's
  worker index (LWS_WORKER_INDEX), port 29500. A user's own `env` of the same name wins.
- **Placement.** Both templates carry the same Kueue pod-set group name and placement, so Topology Aware
  Scheduling places each group in one domain: the level `resources.topology` names (required), else
  one node preferred, widening level by level (GANG_PLACEMENT).
- **Rollout.** One group at a time, no surge (a surge group would need quota the team may not have).
"""

from __future__ import annotations

from collections.abc import Callable

from gpuctl.builders.common import (
    TargetPool,
    job_labels,
    metadata,
    node_port_service,
    pod_template,
    service_port,
)
from gpuctl.builders.gang import launcher_env, topology_annotation
from gpuctl.constants import (
    GANG_MASTER_PORT,
    GANG_PORT_NAME,
    LWS_API_VERSION,
    LWS_LEADER_ADDRESS_ENV,
    LWS_TAS_GROUP,
    LWS_WORKER_INDEX_ENV,
    LWS_WORKER_INDEX_LABEL,
    TAS_GROUP_NAME,
    TAS_UNCONSTRAINED,
    Labels,
)
from gpuctl.spec import InferenceSpec

_RENDEZVOUS = {"name": GANG_PORT_NAME, "containerPort": GANG_MASTER_PORT, "protocol": "TCP"}


def _group_template(template: dict, spec: InferenceSpec, pool: TargetPool) -> dict:
    """A pod template of the group: its placement (the same on leader and workers), the launcher
    environment and the rendezvous port."""
    annotations = template["metadata"]["annotations"]
    annotations.pop(TAS_UNCONSTRAINED, None)
    annotations.update({**topology_annotation(spec, pool), TAS_GROUP_NAME: LWS_TAS_GROUP})
    container = template["spec"]["containers"][0]
    user = container.get("env") or []
    rank = f"$({LWS_WORKER_INDEX_ENV})"
    env = launcher_env(spec, {e["name"] for e in user}, pool, addr=f"$({LWS_LEADER_ADDRESS_ENV})", rank=rank)
    container["env"] = [*env, *user]
    container["ports"] = [*(container.get("ports") or []), dict(_RENDEZVOUS)]
    return template


def leader_worker_set(
    spec: InferenceSpec,
    namespace: str,
    pool: TargetPool,
    *,
    name: str | None = None,
    replicas: int | None = None,
    relabel: Callable[[dict[str, str]], dict[str, str]] | None = None,
) -> dict:
    """The LeaderWorkerSet of `spec` (named `name`, of `replicas` groups: the spec's own by default);
    `relabel` rewrites its labels and both templates' (an autoscaled service's tier, gpuctl.builders.
    autoscaled)."""
    _, target = service_port(spec)
    leader = _group_template(
        pod_template(spec, namespace, app_label=True, container_port=target, pool=pool), spec, pool
    )
    worker = pod_template(spec, namespace, app_label=True, pool=pool)  # no Service port, no probes
    worker = _group_template(worker, spec, pool)
    labels = job_labels(spec, namespace)
    if relabel is not None:
        labels = relabel({**labels, Labels.APP: spec.job.name})
        for t in (leader, worker):
            t["metadata"]["labels"] = relabel(t["metadata"]["labels"])
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": metadata(spec, namespace, labels, name=name),
        "spec": {
            "replicas": spec.service.replicas if replicas is None else replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "leaderWorkerTemplate": {
                "size": spec.resources.nodes,
                # A pod of the group restarting restarts the whole group (ranks rendezvous again).
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
        },
    }


def leaders_service(spec: InferenceSpec, namespace: str) -> dict:
    """svc-<name> in front of the leaders of every group (worker index 0); the workers serve their leader."""
    service = node_port_service(spec, namespace)
    service["spec"]["selector"] = {Labels.APP: spec.job.name, LWS_WORKER_INDEX_LABEL: "0"}
    return service


def build_leader_worker_set(spec: InferenceSpec, namespace: str, pool: TargetPool) -> list[dict]:
    return [leader_worker_set(spec, namespace, pool), leaders_service(spec, namespace)]
