"""MultiKueue sends the whole gang to one worker (docs/distributed.md, "Across clusters (MultiKueue)"): in
`gpuctl serve` on a MultiKueue manager (with its reconciler, leader only), the headless Service svc-<job>
of every multi-node job MultiKueue placed in a worker is copied into that worker, where Kueue's MultiKueue
made the Job's copy but no Service: without it rank 0's address `<job>-0.svc-<job>` does not resolve there.

Every `interval` seconds, over serve's Workload cache: gpuctl.domain.multicluster.gang_placements says which
(worker, namespace, job) need one; the manager's Service is read, the worker's Job looked up (not there yet:
the next step), and the copy (gpuctl.domain.multicluster.worker_service) created owned by the worker's Job,
so the worker's garbage collector deletes it with the Job. Nothing else is written or deleted in a worker.
The worker is reached as for the API's logs: `--worker-kubeconfig NAME=PATH`, else the context NAME.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpuctl.builders.common import service_name
from gpuctl.cluster import ApiError, Cluster, path
from gpuctl.cluster.config import ConfigError
from gpuctl.domain.multicluster import gang_placements, worker_clusters, worker_service
from gpuctl.domain.objects import meta
from gpuctl.server.periodic import Periodic

log = logging.getLogger(__name__)

# (workloads, resource flavors)
Source = Callable[[], tuple[Iterable[Mapping[str, Any]], Iterable[Mapping[str, Any]]]]
Key = tuple[str, str, str]  # (worker, namespace, job)


class GangServiceMirror(Periodic):
    thread_name = "gang-service-mirror"

    def __init__(
        self,
        cluster: Cluster,
        source: Source,
        *,
        interval: float = 2.0,
        leader: Callable[[], bool] | None = None,
    ):
        self.cluster, self.source, self.interval, self.leader = cluster, source, interval, leader
        self.done: set[Key] = set()  # copied (or nothing to copy) while the job stays placed there
        self._members: dict[str, Cluster] = {}

    def step(self) -> list[Key]:
        """Copy what is missing; returns the (worker, namespace, job) whose Service was created."""
        if self.leader is not None and not self.leader():
            return []
        workloads, flavors = (list(x) for x in self.source())
        if not worker_clusters(flavors):  # not a MultiKueue manager
            return []
        want = set(gang_placements(workloads))
        self.done &= want  # a job gone or moved: its next placement is copied again
        made = []
        for key in sorted(want - self.done):
            try:
                if self._mirror(*key):
                    made.append(key)
            except (ApiError, ConfigError, OSError) as e:
                log.warning("gang service: %s/svc for %s in cluster %s: %s", key[1], key[2], key[0], e)
        return made

    def _member(self, worker: str) -> Cluster:
        if worker not in self._members:
            self._members[worker] = self.cluster.member(worker)
        return self._members[worker]

    def _mirror(self, worker: str, namespace: str, job: str) -> bool:
        name = service_name(job)
        service = self.cluster.get_or_none(path("Service", name, namespace))
        if service is None:  # a raw Indexed Job: gpuctl rendered no Service to copy
            self.done.add((worker, namespace, job))
            return False
        member = self._member(worker)
        copy = member.get_or_none(path("Job", job, namespace))
        if copy is None:  # MultiKueue has not created it there yet
            return False
        created = False
        if member.get_or_none(path("Service", name, namespace)) is None:
            member.create(worker_service(service, copy))
            uid = meta(copy).get("uid")
            log.info(
                "gang service: %s/%s created in cluster %s, owned by its Job %s", namespace, name, worker, uid
            )
            created = True
        self.done.add((worker, namespace, job))
        return created


def cache_source(cache: Any) -> Source:
    """serve's watch cache as the step's input."""

    def read() -> tuple[Iterable[Mapping[str, Any]], Iterable[Mapping[str, Any]]]:
        return cache["Workload"].list(), cache["ResourceFlavor"].list()

    return read
