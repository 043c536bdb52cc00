"""`gang-fits`: a multi-node job (a gang: an Indexed Job running N >= 2 pods at once, which Kueue admits
whole; docs/distributed.md) that can never run is refused instead of waiting for ever.

- More pods than the pool's nodes hold with every node empty (Kueue's Topology Aware Scheduling puts
  several pods on one node where they fit, so the count is per node: its GPUs // the pod's GPUs).
- A required topology level (`kueue.x-k8s.io/podset-required-topology` on the pod template) whose largest
  domain holds fewer, or that no node of the pool carries.

A pod bigger than every node of its pool is `gpu-fits-node`'s (admission/validators/placement.py). The
rule reads the cached nodes (CACHE_RULES) and is the webhook's only: the ValidatingAdmissionPolicy cannot
see nodes. The words come from gpuctl.domain.gang.gang_never_fits, as `gpuctl create`'s precheck.
"""

from __future__ import annotations

from admission.rule_names import GANG_FITS
from admission.state import ClusterState
from admission.validators.placement import Placement
from admission.verdict import Violation
from admission.work import Work
from gpuctl.constants import TAS_REQUIRED
from gpuctl.domain.gang import gang_never_fits, gang_nodes

__all__ = ["check_gang_fits"]


def check_gang_fits(w: Work, p: Placement, gpus: int, state: ClusterState) -> list[Violation]:
    if w.kind != "Job" or not gpus or p.pool is None:
        return []
    pods = gang_nodes({"spec": w.obj_spec})
    level = w.tmpl_annotations.get(TAS_REQUIRED, "")
    nodes = [(n.name, n.gpu, n.labels, n.ready) for n in state.pool_nodes.get(p.pool, ())]
    why = gang_never_fits(p.pool, nodes, pods, gpus, level)
    if not why:
        return []
    fix = (
        f"lower spec.parallelism and spec.completions (gpuctl: resources.nodes) or the GPUs per pod, "
        f"{'widen or remove ' + TAS_REQUIRED + ' in spec.template.metadata.annotations, ' if level else ''}"
        "or use a pool with more nodes"
    )
    return [Violation(GANG_FITS, f"a multi-node job of {why}", fix, f"{GANG_FITS}={pods}x{gpus}@{p.pool}")]
