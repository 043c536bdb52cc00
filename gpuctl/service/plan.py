"""What a create/apply/delete of some documents sends to the cluster, computed without a cluster.

`--dry-run=client -o yaml|json` prints these objects; `create --dry-run=client` of job documents prints
these lines (`job.batch/x created`), as `kubectl create --dry-run=client` does without asking the API
server. With a cluster, the pool and quota services fill in what only the cluster knows (node
capacity, the list of pools); offline the Cohort's capacity is what the named nodes would add, which
is unknown, and a note says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuctl.builders import build
from gpuctl.constants import JOB_KINDS, Kind, Labels
from gpuctl.domain.gang import gang_note
from gpuctl.service.convert import pool_node_patches, team_limit_range, team_quotas
from gpuctl.spec import Document, PoolSpec, QuotaSpec, spec_namespace
from queues import PoolCapacity, cluster_queue, cohort, local_queue, resource_flavor, team_namespace, topology


@dataclass
class Plan:
    objects: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # kubectl-style lines of a create: `job.batch/x created`, `pool/p created`, ...
    lines: list[str] = field(default_factory=list)


def object_label(obj: dict) -> str:
    """kubectl's `resource.group/name` for a line of output."""
    group = {
        "Job": "job.batch",
        "Deployment": "deployment.apps",
        "StatefulSet": "statefulset.apps",
        "LeaderWorkerSet": "leaderworkerset.leaderworkerset.x-k8s.io",
    }
    return f"{group.get(obj['kind'], obj['kind'].lower())}/{obj['metadata']['name']}"


def needs_cluster(docs: list[Document], action: str) -> bool:
    """Whether a client dry run of these documents must read the cluster to say what would happen.

    A create of jobs needs nothing (as `kubectl create --dry-run=client`); apply and delete need the
    live objects (created, configured, unchanged; what a delete would hit), pools their nodes and
    quotas the pools and capacity they name.
    """
    return action != "create" or any(Kind(d.spec.kind) not in JOB_KINDS for d in docs)


def plan_documents(docs: list[Document], default_namespace: str) -> Plan:
    plan = Plan()
    for doc in docs:
        spec = doc.spec
        kind = Kind(spec.kind)
        if kind in JOB_KINDS:
            objs = build(spec, spec_namespace(spec, default_namespace))
            plan.objects += objs
            plan.lines += [f"{object_label(o)} created{gang_note(o)}" for o in objs]
            if spec.resources.gpu_share is not None:
                plan.notes.append(
                    f"{doc.source}: job {spec.job.name}: gpu-share {spec.resources.gpu_share} becomes a "
                    f"slice of pool {spec.resources.pool}'s GPUs (a MIG profile or a shared replica) when "
                    "applied; offline the container requests no GPU (--dry-run=server shows the slice)"
                )
            res, job = spec.resources, f"{doc.source}: job {spec.job.name}"
            if res.gpu_memory is not None:
                asked = f"gpu: {res.gpu}" if res.gpu else "no GPU"
                plan.notes.append(
                    f"{job}: gpuMemory {res.gpu_memory} becomes the GPUs (or the MIG slice) of its pool that "
                    f"hold it when applied; offline the container requests {asked} (--dry-run=server shows "
                    "the count)"
                )
            if res.node_types:
                plan.notes.append(
                    f"{job}: nodeTypes {', '.join(res.node_types)} become the pools of those GPU models when "
                    "applied; offline the pods name no pool (--dry-run=server shows them)"
                )
        elif isinstance(spec, PoolSpec):
            plan.lines.append(f"pool/{spec.pool.name} created")
            plan.lines += [f"node/{n} labeled {Labels.POOL}={spec.pool.name}" for n in sorted(spec.nodes)]
            plan.objects += pool_node_patches(spec)
            levels = tuple(spec.topology or ())
            if levels:
                plan.objects.append(topology(levels))
            plan.objects.append(resource_flavor(spec.pool.name, levels=levels))
            plan.objects.append(cohort([PoolCapacity(name=spec.pool.name, nodes=tuple(sorted(spec.nodes)))]))
            plan.notes.append(
                f"{doc.source}: pool {spec.pool.name}: capacity is read from the nodes when applied; "
                "offline the Cohort shows 0"
            )
        elif isinstance(spec, QuotaSpec):
            for team in team_quotas(spec):
                plan.objects += [team_namespace(team), cluster_queue(team, []), local_queue(team.namespace)]
                if lr := team_limit_range(team.namespace, spec.entries()[team.namespace]):
                    plan.objects.append(lr)
                plan.lines.append(f"quota/{spec.quota.name} created for namespace {team.namespace}")
            plan.notes.append(
                f"{doc.source}: quota {spec.quota.name}: the ClusterQueues list every existing pool when "
                "applied; offline they hold only the team budget"
            )
    return plan
