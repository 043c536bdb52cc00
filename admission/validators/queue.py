"""`gpu-queue` and `gpu-topology`: GPU work goes through Kueue, and asks it for a topology where it must.

- `gpu-queue`     GPU work names a LocalQueue of its namespace (`kueue.x-k8s.io/queue-name`): no way around
                  Kueue. Also warned: a LocalQueue whose ClusterQueue does not exist.
- `gpu-topology`  GPU work for a ClusterQueue with pools asks Kueue for a topology (pool flavors are
                  Topology Aware Scheduling flavors: without one Kueue never admits it). Where the topology
                  MutatingAdmissionPolicy is installed it adds the annotation first.
"""

from __future__ import annotations

from typing import Final

from admission.rule_names import GPU_QUEUE, GPU_TOPOLOGY
from admission.state import ClusterState
from admission.validators.hints import closest_memo, names
from admission.verdict import Violation
from admission.work import Work, queue_name
from gpuctl.constants import GPU_RESOURCE, TAS_REQUEST_KEYS, TAS_UNCONSTRAINED, Labels
from gpuctl.domain.shape import EMPTY

__all__ = ["check_queue"]

_NO_QUEUE: Final = (
    "namespace {ns} has no LocalQueue: create the team with gpuctl (it creates LocalQueue default)"
)


def check_queue(w: Work, ns: str, gpus: int, state: ClusterState, warn: list[str]) -> list[Violation]:
    """gpu-queue (and gpu-topology for the queue's ClusterQueue), for work requesting `gpus` > 0."""
    queues = state.local_queues.get(ns, EMPTY)
    name = queue_name(w)
    if not name:
        where = f"{w.tmpl_path}.metadata.labels" if w.kind == "ReplicaSet" else "metadata.labels"
        fix = (
            f"add label {Labels.KUEUE_QUEUE}: {names(queues)} in {where}"
            if queues
            else _NO_QUEUE.format(ns=ns)
        )
        return [
            Violation(
                GPU_QUEUE,
                f"requests {gpus} {GPU_RESOURCE} without a {Labels.KUEUE_QUEUE} label",
                fix,
                GPU_QUEUE,
            )
        ]
    cq = queues.get(name)
    if cq is None:
        fix = (
            f"use {Labels.KUEUE_QUEUE}: {closest_memo(name, frozenset(queues)) or sorted(queues)[0]} "
            f"(LocalQueues here: {names(queues)})"
            if queues
            else _NO_QUEUE.format(ns=ns)
        )
        return [
            Violation(
                GPU_QUEUE,
                f'requests {gpus} {GPU_RESOURCE} but {Labels.KUEUE_QUEUE} "{name}" is not a LocalQueue in '
                f"namespace {ns}",
                fix,
                f"{GPU_QUEUE}={name}",
            )
        ]
    out = check_topology(w, gpus, cq) if not state.pools.isdisjoint(state.cluster_queues.get(cq, ())) else []
    if cq and cq not in state.cluster_queues:
        warn.append(
            f'LocalQueue {ns}/{name} points at ClusterQueue "{cq}", which does not exist: Kueue will not '
            f"admit this work until it does"
        )
    return out


def check_topology(w: Work, gpus: int, cq: str) -> list[Violation]:
    """gpu-topology: pool flavors are TAS flavors, so Kueue admits a pod set there only if it asks for a
    topology."""
    ann = w.tmpl_annotations if w.has_template else w.annotations
    if ann and not ann.keys().isdisjoint(TAS_REQUEST_KEYS):
        return []
    where = f"{w.tmpl_path}.metadata" if w.has_template else "metadata"
    policy = (
        "gpuctl's topology policy writes Jobs, not JobSets: add it to each replicated job"
        if w.kind == "JobSet"
        else "gpuctl's topology policy does not write LeaderWorkerSets: add it, with the same "
        "kueue.x-k8s.io/podset-group-name, to the leader and worker templates (one placement per group)"
        if w.kind == "LeaderWorkerSet"
        else "the topology MutatingAdmissionPolicy (manifests/admission/topology.yaml, Kubernetes >= 1.36) "
        "adds it for you"
    )
    return [
        Violation(
            GPU_TOPOLOGY,
            f"requests {gpus} {GPU_RESOURCE} from ClusterQueue {cq}, whose pools place pods by node "
            f"(Topology Aware Scheduling), without a topology annotation: Kueue would never admit it",
            f'add annotation {TAS_UNCONSTRAINED}: "true" in {where}.annotations (or another '
            f"kueue.x-k8s.io/podset-*-topology); {policy}",
            GPU_TOPOLOGY,
        )
    ]
