"""What a create/apply/delete of some documents sends to the cluster, computed without a cluster.

`--dry-run=client` prints these objects. With a cluster, the pool and quota services fill in what only
the cluster knows (node capacity, the list of pools); offline the Cohort's capacity is what the named
nodes would add, which is unknown, and a note says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuctl.builders import build
from gpuctl.constants import JOB_KINDS, Kind
from gpuctl.service.convert import pool_node_patches, team_quotas
from gpuctl.spec import Document, PoolSpec, QuotaSpec, spec_namespace
from queues import PoolCapacity, cluster_queue, cohort, local_queue, resource_flavor, team_namespace


@dataclass
class Plan:
    objects: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def plan_documents(docs: list[Document], default_namespace: str) -> Plan:
    plan = Plan()
    for doc in docs:
        spec = doc.spec
        kind = Kind(spec.kind)
        if kind in JOB_KINDS:
            plan.objects += build(spec, spec_namespace(spec, default_namespace))
        elif isinstance(spec, PoolSpec):
            plan.objects += pool_node_patches(spec)
            plan.objects.append(resource_flavor(spec.pool.name))
            plan.objects.append(cohort([PoolCapacity(name=spec.pool.name, nodes=tuple(sorted(spec.nodes)))]))
            plan.notes.append(
                f"{doc.source}: pool {spec.pool.name}: capacity is read from the nodes when applied; "
                "offline the Cohort shows 0"
            )
        elif isinstance(spec, QuotaSpec):
            for team in team_quotas(spec):
                plan.objects += [team_namespace(team), cluster_queue(team, []), local_queue(team.namespace)]
            plan.notes.append(
                f"{doc.source}: quota {spec.quota.name}: the ClusterQueues list every existing pool when "
                "applied; offline they hold only the team budget"
            )
    return plan
