"""`gpu-resource`: in a team namespace a pod asks for GPUs only through resources Kueue charges to the team's
budget.

Every extended resource that hands out a GPU or a slice of one is a GPU resource (`nvidia.com/gpu*`,
`nvidia.com/mig-*`, `amd.com/gpu*`, `gpu.intel.com/*`: constants.GPU_RESOURCE_PREFIXES, the one matcher
gpuctl.domain.gpus.is_gpu_resource). Kueue charges a team's budget only for the resources its configuration
transforms into the budget resource (manifests/kueue/configuration.yaml, gpuctl.domain.sharing.
quota_transformations: whole GPUs, time-slicing replicas, the MIG profiles of the known models), and with
`quotaCheckStrategy: IgnoreUndeclared` it admits anything else charged 0: before this rule a Job asking
`amd.com/gpu: 4` or `nvidia.com/mig-1g.10gb` ran outside the team's quota. So any GPU resource the
configuration does not charge (HAMi's `nvidia.com/gpumem`, a MIG profile of an unknown model, Intel's
`gpu.intel.com/millicores`) is refused here, and in the ValidatingAdmissionPolicy (`cel_variables` below:
the team policy's `gpuResource`), with one fix (FIX).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from admission.policies.cel import TeamCel, cel_list, old_skip, pod_spec, var_name
from admission.rule_names import GPU_RESOURCE_RULE
from admission.verdict import Violation
from admission.work import Work
from gpuctl.constants import GPU_RESOURCE, GPU_RESOURCE_PREFIXES, SHARED_GPU_RESOURCE
from gpuctl.domain.gpus import is_gpu_resource
from gpuctl.domain.shape import item, list_at, obj_at
from gpuctl.domain.sharing import quota_transformations

__all__ = [
    "CEL",
    "COUNTED_GPU_RESOURCES",
    "FIX",
    "check_gpu_resources",
    "requested_gpu_resources",
    "uncounted_gpu_resources",
]

# The GPU resources Kueue charges to a team's budget: the inputs of the configuration's
# resources.transformations (tests/unit/test_sharing.py and test_admission_gpu_resources.py keep the file so).
COUNTED_GPU_RESOURCES: Final = frozenset(t["input"] for t in quota_transformations())
_PARTS: Final = ("containers", "initContainers")
FIX: Final = f"request whole GPUs with {GPU_RESOURCE}, or a slice with gpuctl's gpu-share (docs/sharing.md)"


def requested_gpu_resources(spec: Mapping[str, Any], where: str) -> dict[str, str]:
    """Every GPU resource a pod spec's containers and init containers request or limit -> the first field
    that names it (`spec.containers[0].resources.requests`); {} for a pod without GPUs."""
    found: dict[str, str] = {}
    for part in _PARTS:
        if spec.get(part) is None:
            continue
        for i, c in enumerate(list_at(spec, part, where)):
            cw = f"{where}.{part}[{i}]"
            res = obj_at(item(c, cw), "resources", cw)
            if not res:
                continue
            for kind in ("requests", "limits"):
                m = res.get(kind)
                # A map of the wrong type is the GPU count's Malformed (it reads requests, and limits
                # when requests has no nvidia.com/gpu): one that it does not read stays unjudged here.
                if type(m) is dict:
                    for r in m:
                        if is_gpu_resource(r):
                            found.setdefault(r, f"{cw}.resources.{kind}")
    return found


def uncounted_gpu_resources(spec: Mapping[str, Any], where: str) -> list[str]:
    """The GPU resources a pod spec's containers and init containers request or limit that Kueue does not
    charge (sorted; [] for the usual pod)."""
    return sorted(r for r in requested_gpu_resources(spec, where) if r not in COUNTED_GPU_RESOURCES)


def check_gpu_resources(w: Work) -> list[Violation]:
    found = uncounted_gpu_resources(w.spec, w.spec_path)
    if not found:
        return []
    return [
        Violation(
            GPU_RESOURCE_RULE,
            f"requests {', '.join(found)}: GPU resource(s) Kueue does not charge to the team's budget (it "
            f"charges whole GPUs, {SHARED_GPU_RESOURCE} and the MIG profiles of docs/sharing.md), so the "
            "pods would run outside the team's quota",
            FIX,
            f"{GPU_RESOURCE_RULE}: {','.join(found)}",
        )
    ]


def cel_variables(root: str, pre: str) -> list[tuple[str, str]]:
    """`gpuResource`: per container or init container, the GPU resources (constants.GPU_RESOURCE_PREFIXES) it
    requests or limits that Kueue does not charge (COUNTED_GPU_RESOURCES)."""
    spec = pod_spec(root)
    gpu = (
        f"({cel_list(GPU_RESOURCE_PREFIXES)}.exists(p, k.startsWith(p)) && "
        f"!(k in {cel_list(sorted(COUNTED_GPU_RESOURCES))}))"
    )
    req = "(has(c.resources) && has(c.resources.requests) ? c.resources.requests : {})"
    lim = "(has(c.resources) && has(c.resources.limits) ? c.resources.limits : {})"
    parts = [
        f"(has({spec}.{part}) ? {spec}.{part} : [])"
        f".filter(c, {req}.exists(k, {gpu}) || {lim}.exists(k, {gpu}))"
        f".map(c, 'container ' + c.name + ' requests ' + "
        f"({req}.filter(k, {gpu}) + {lim}.filter(k, {gpu} && !(k in {req}))).join(', '))"
        for part in _PARTS
    ]
    return [(var_name(pre, "gpuResource"), old_skip(root) + " +\n".join(parts))]


CEL: Final = TeamCel("gpuResource", cel_variables)
