"""A multi-node training job (`resources.nodes: N` > 1): the gang's Job fields, its headless Service and
the launcher environment (docs/distributed.md). Pure, like every builder.

- **One Workload, N pods.** parallelism = completions = N, completionMode Indexed: Kueue makes one
  Workload whose pod set counts N (job_controller.go PodSets, v0.19.2) and reserves quota for all N or
  none; the Job stays suspended, without a pod, until then. No `kueue.x-k8s.io/job-min-parallelism`:
  no partial admission.
- **Rank 0's address.** An Indexed Job's pod `i` has host name `<job>-<i>`; with `subdomain: svc-<job>`
  and the headless Service svc-<job> (selecting the Job's pods, publishing them before they are Ready),
  rank 0 is `<job>-0.svc-<job>` in the namespace.
- **One failure policy.** A rank that exits non-zero fails the whole Job (podFailurePolicy FailJob, the
  JobSet default): the Job controller stops every other rank and Kueue releases the quota of all N at
  once. A disrupted rank (preempted, evicted, its node lost: condition DisruptionTarget) is replaced
  without counting as a failure, with the same rank and host name. Restarts of the training processes
  themselves are torchrun's (`--max-restarts`).
- **Placement.** With the pool's topology known (TargetPool.topology: the node-label levels above the
  node), the pods go into one domain of the level `resources.topology` names (required); else Kueue
  prefers one node and widens level by level as needed (preferred kubernetes.io/hostname, GANG_PLACEMENT).
"""

from __future__ import annotations

import copy

from gpuctl.builders.common import TargetPool, job_service, pod_gpus, service_name
from gpuctl.constants import (
    CONTAINER_NAME,
    GANG_ENV,
    GANG_MASTER_PORT,
    GANG_PLACEMENT,
    GANG_PORT_NAME,
    GANG_RANK_ENV,
    JOB_COMPLETION_INDEX_ANNOTATION,
    SET_ASIDE_TAINT_KEYS,
    TAS_REQUIRED,
    TAS_UNCONSTRAINED,
    Labels,
)
from gpuctl.spec import InferenceSpec, TrainingSpec

# The Job's failure policy for a gang (see the module docstring): disruptions are not failures, any
# other non-zero exit of the training container fails the Job, hence the gang, at once.
POD_FAILURE_POLICY = {
    "rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "NotIn", "values": [0]},
        },
    ]
}


def master_addr(job_name: str) -> str:
    """Rank 0's host name through the headless Service (resolvable in the job's namespace)."""
    return f"{job_name}-0.{service_name(job_name)}"


def launcher_env(
    spec: TrainingSpec | InferenceSpec,
    user_names: set[str],
    pool: TargetPool,
    *,
    addr: str | None = None,
    rank: str | None = None,
) -> list[dict]:
    """The launcher variables of GANG_ENV, minus those the user's own `env` sets (theirs win). `addr`:
    rank 0's host name (default: the Indexed Job's, master_addr); `rank`: the rank's value (default: a
    fieldRef on the completion index), e.g. a `$(VAR)` the kubelet expands (a LeaderWorkerSet group's)."""
    nodes = spec.resources.nodes
    addr, port = addr or master_addr(spec.job.name), str(GANG_MASTER_PORT)
    values = {
        "PET_NNODES": str(nodes),
        "PET_NPROC_PER_NODE": str(pod_gpus(spec.resources, pool) or 1),
        "PET_MASTER_ADDR": addr,
        "PET_MASTER_PORT": port,
        "MASTER_ADDR": addr,
        "MASTER_PORT": port,
        "WORLD_SIZE": str(nodes),
    }
    rank_path = f"metadata.annotations['{JOB_COMPLETION_INDEX_ANNOTATION}']"
    out = []
    for name in GANG_ENV:
        if name in user_names:
            continue
        if name in GANG_RANK_ENV and rank is not None:
            out.append({"name": name, "value": rank})
        elif name in GANG_RANK_ENV:
            out.append({"name": name, "valueFrom": {"fieldRef": {"fieldPath": rank_path}}})
        else:
            out.append({"name": name, "value": values[name]})
    return out


def topology_level(wanted: str, levels: tuple[str, ...]) -> str | None:
    """The pool's level (a node-label key) a `resources.topology` name means: the key itself, its name
    after the last '/', or that name's last '-' part (`rack` for example.com/topology-rack). None when
    no level matches."""
    for level in levels:
        short = level.rsplit("/", 1)[-1]
        if wanted in (level, short, short.rsplit("-", 1)[-1]):
            return level
    return None


def topology_annotation(spec: TrainingSpec | InferenceSpec, pool: TargetPool) -> dict[str, str]:
    """The pod-template annotation asking Kueue's Topology Aware Scheduling for the gang's placement."""
    wanted = spec.resources.topology
    levels = pool.topology
    if wanted is not None:
        if levels is None:  # the pool is not known here (a client dry run): as written
            return {TAS_REQUIRED: wanted}
        level = topology_level(wanted, levels)
        if level is None:
            raise ValueError(f"resources.topology {wanted!r} is no level of {levels}")
        return {TAS_REQUIRED: level}
    return dict(GANG_PLACEMENT)


def gang_job_spec(spec: TrainingSpec, namespace: str, pool: TargetPool, template: dict) -> dict:
    """The Job spec of the gang of spec.resources.nodes pods, from the one-pod template the training builder
    made (gpuctl.builders.common.pod_template), which is read, not changed: a new spec and template."""
    nodes = spec.resources.nodes
    return {
        "suspend": True,
        "parallelism": nodes,
        "completions": nodes,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "podFailurePolicy": copy.deepcopy(POD_FAILURE_POLICY),
        "podReplacementPolicy": "Failed",
        "template": gang_template(spec, namespace, pool, template),
    }


def set_aside_tolerations(namespace: str, job: str) -> list[dict]:
    """The tolerations of job `namespace`/`job`'s own set-aside and no other's (gpuctl.domain.gang.
    set_aside_taints; a unit test keeps them equal): a gang's nodes (docs/distributed.md, "No starvation"),
    a one-pod Job's node near its start bound (docs/queueing.md, "A bound gpuctl keeps")."""
    return [
        {"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}
        for key, value in zip(SET_ASIDE_TAINT_KEYS, (namespace, job), strict=True)
    ]


def gang_template(spec: TrainingSpec, namespace: str, pool: TargetPool, template: dict) -> dict:
    """A rank's pod template: `template` plus the placement annotation (instead of "no topology"), the
    Service's subdomain, the tolerations of the gang's own set-aside, the launcher environment and the
    rendezvous port."""
    meta, pod = template["metadata"], template["spec"]
    annotations = {k: v for k, v in meta["annotations"].items() if k != TAS_UNCONSTRAINED}
    container, *others = pod["containers"]
    user = container.get("env") or []
    return {
        **template,
        "metadata": {**meta, "annotations": {**annotations, **topology_annotation(spec, pool)}},
        "spec": {
            **pod,
            "subdomain": service_name(spec.job.name),
            # Nodes `gpuctl serve --defrag` sets aside for this gang, and no other's (docs/distributed.md,
            # "No starvation"): the tolerations of gpuctl.domain.gang.set_aside_taints (a unit test keeps
            # them equal).
            "tolerations": [
                *(pod.get("tolerations") or []),
                *set_aside_tolerations(namespace, spec.job.name),
            ],
            "containers": [
                {
                    **container,
                    "env": [*launcher_env(spec, {e["name"] for e in user}, pool), *user],
                    "ports": [{"name": GANG_PORT_NAME, "containerPort": GANG_MASTER_PORT, "protocol": "TCP"}],
                },
                *others,
            ],
        },
    }


def headless_service(spec: TrainingSpec, namespace: str) -> dict:
    """svc-<job>: no cluster IP, one DNS record per pod of the Job (`<job>-<rank>.svc-<job>`), published
    before the pods are Ready so that every rank can resolve rank 0 while the rendezvous forms."""
    port = {
        "name": GANG_PORT_NAME,
        "port": GANG_MASTER_PORT,
        "targetPort": GANG_MASTER_PORT,
        "protocol": "TCP",
    }
    return job_service(
        spec,
        namespace,
        {
            "clusterIP": "None",
            "selector": {Labels.BATCH_JOB_NAME: spec.job.name},
            "publishNotReadyAddresses": True,
            "ports": [port],
        },
    )
