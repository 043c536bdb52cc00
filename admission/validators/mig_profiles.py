"""`mig-profile`: a pod asks only for MIG profiles that its pool's GPUs have (docs/sharing.md).

The profiles of a GPU are fixed by its model (an A100-80GB has 1g.10gb ... 7g.80gb, an H200 1g.18gb ...
7g.141gb: gpuctl.domain.sharing.MODELS), so a pod asking `nvidia.com/mig-1g.5gb` (an A100-40GB profile) of
an A100-80GB pool, or a time-sliced replica of one (`nvidia.com/mig-1g.5gb.shared`), could never run: Kueue
would queue it for ever (its quota is the GPU budget, not the slice) and nothing would say why. Refused here,
naming the field and the profiles the pool's GPUs have.

Which pools: the one the pod names (label, nodeSelector), or those its required node affinity lists, else
those its team's ClusterQueue has quota in (Kueue may place it on any of them). It is refused only when no
such pool's GPUs have the profile, and only where that is known: pools without nodes are left out (as
gpu-fits-node does), and every node of the others has labels that name a MIG-capable model (GFD's
nvidia.com/gpu.product, runwhere.ai/gpu-type: gpuctl.domain.sharing.labels_model). Whether a node is cut
into that profile *now* is not judged: an admin may re-cut it (mig-manager), and the pod waits for it as
for any busy slice.

A ValidatingAdmissionPolicy cannot express this rule (it reads the object, not the pool's Nodes), so it is
the webhook's alone; `gpuctl create` refuses the same with its file and field (gpuctl.domain.sharing.
choose_slice, one text: lacking_profile_text).
"""

from __future__ import annotations

from admission.rule_names import MIG_PROFILE
from admission.state import ClusterState
from admission.validators.gpu_resources import requested_gpu_resources
from admission.validators.placement import Placement
from admission.verdict import Violation
from admission.work import Work, queue_name
from gpuctl.constants import LOCAL_QUEUE_NAME, Labels
from gpuctl.domain.nodeaffinity import listed_values
from gpuctl.domain.shape import EMPTY
from gpuctl.domain.sharing import Model, labels_model, lacking_profile_text, mig_profile_of, models_lack

__all__ = ["check_mig_profiles"]


def check_mig_profiles(w: Work, ns: str, p: Placement, state: ClusterState) -> list[Violation]:
    """mig-profile: every MIG resource the pod spec asks for is a profile of its pool's GPUs."""
    asked = {
        r: (prof, field)
        for r, field in requested_gpu_resources(w.spec, w.spec_path).items()
        if (prof := mig_profile_of(r)) is not None
    }
    if not asked or p.conflict:
        return []  # a pool named two ways or not existing: pool-exists / pool-placement say so
    pools = _candidate_pools(w, ns, p, state)
    models = {pool: _pool_models(pool, state) for pool in pools if state.pool_nodes.get(pool)}
    if not models or any(m is None for m in models.values()):
        return []  # no pool with nodes, or a node of an unknown model: nothing proves it can never run
    out = []
    for r, (prof, field) in sorted(asked.items()):
        if not all(models_lack(m, prof) for m in models.values() if m is not None):
            continue
        why = "; ".join(lacking_profile_text(pool, m, prof) for pool, m in models.items() if m is not None)
        out.append(
            Violation(
                MIG_PROFILE,
                f"{field} asks for {r}, a MIG profile no GPU it may run on has, so it could never run: {why}",
                "ask for one of those profiles (nvidia.com/mig-<profile>), or with gpuctl write "
                "resources.gpu-share: <memory> and it picks the smallest profile that holds it",
                f"{MIG_PROFILE}={r}@{','.join(sorted(models))}",
            )
        )
    return out


def _candidate_pools(w: Work, ns: str, p: Placement, state: ClusterState) -> list[str]:
    """The pools the pods may land on: named, listed, else the team ClusterQueue's (else every pool)."""
    if p.pool is not None:
        return [p.pool]
    if p.any_pool:
        return sorted(listed_values(p.terms, Labels.POOL))
    cq = state.local_queues.get(ns, EMPTY).get(queue_name(w) or LOCAL_QUEUE_NAME, "")
    pools = state.pools & state.cluster_queues.get(cq, frozenset())
    return sorted(pools or state.pools)


def _pool_models(pool: str, state: ClusterState) -> frozenset[Model] | None:
    """The MIG-capable models of a pool's nodes; None when a node's model is unknown."""
    models = [labels_model(n.labels) for n in state.pool_nodes.get(pool, ())]
    if any(m is None for m in models):
        return None
    return frozenset(m for m in models if m is not None)
