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
from admission.rule_names import EXTENDED_RESOURCE, GPU_RESOURCE_RULE
from admission.verdict import Violation
from admission.work import Work
from gpuctl.constants import GPU_RESOURCE, GPU_RESOURCE_PREFIXES, PLAIN_RESOURCES, SHARED_GPU_RESOURCE
from gpuctl.domain.gpus import is_gpu_resource
from gpuctl.domain.shape import item, list_at, obj_at
from gpuctl.domain.sharing import quota_transformations

__all__ = [
    "CEL",
    "COUNTED_GPU_RESOURCES",
    "EXTENDED_CEL",
    "EXTENDED_FIX",
    "FIX",
    "allowed_resource",
    "check_extended_resources",
    "check_gpu_resources",
    "check_resources",
    "requested_gpu_resources",
    "requested_resources",
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
    return {r: f for r, f in requested_resources(spec, where).items() if is_gpu_resource(r)}


def requested_resources(spec: Mapping[str, Any], where: str) -> dict[str, str]:
    """Every resource but constants.PLAIN_RESOURCES (cpu, memory, ephemeral-storage) a pod spec's containers
    and init containers request or limit -> the first field that names it; {} for the usual CPU pod."""
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
                        if r not in PLAIN_RESOURCES and r not in found:
                            found[r] = f"{cw}.resources.{kind}"
    return found


def uncounted_gpu_resources(spec: Mapping[str, Any], where: str) -> list[str]:
    """The GPU resources a pod spec's containers and init containers request or limit that Kueue does not
    charge (sorted; [] for the usual pod)."""
    return sorted(r for r in requested_gpu_resources(spec, where) if r not in COUNTED_GPU_RESOURCES)


def check_resources(w: Work, allowed: tuple[str, ...]) -> list[Violation]:
    """gpu-resource, then extended-resource, from one pass over the pod spec's resources."""
    found = requested_resources(w.spec, w.spec_path)
    if not found:
        return []
    return [*_gpu_findings(found), *_extended_findings(found, allowed)]


def check_gpu_resources(w: Work) -> list[Violation]:
    return _gpu_findings(requested_resources(w.spec, w.spec_path))


def _gpu_findings(requested: Mapping[str, str]) -> list[Violation]:
    found = sorted(r for r in requested if is_gpu_resource(r) and r not in COUNTED_GPU_RESOURCES)
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
    return [(var_name(pre, "gpuResource"), old_skip(root) + _per_container(spec, gpu))]


def _per_container(spec: str, picks: str) -> str:
    """CEL: per container and init container of `spec`, 'container <name> requests <names>' for the resource
    names `k` of its requests and limits for which `picks` holds."""
    req = "(has(c.resources) && has(c.resources.requests) ? c.resources.requests : {})"
    lim = "(has(c.resources) && has(c.resources.limits) ? c.resources.limits : {})"
    return " +\n".join(
        f"(has({spec}.{part}) ? {spec}.{part} : [])"
        f".filter(c, {req}.exists(k, {picks}) || {lim}.exists(k, {picks}))"
        f".map(c, 'container ' + c.name + ' requests ' + "
        f"({req}.filter(k, {picks}) + {lim}.filter(k, {picks} && !(k in {req}))).join(', '))"
        for part in _PARTS
    )


CEL: Final = TeamCel("gpuResource", cel_variables)


# ---------------------------------------------------------------------------------------------------------
# `extended-resource`: every other extended resource (not cpu, memory, ephemeral-storage, not a GPU resource:
# gpu-resource judges those) only where the admin's list allows it. Kueue does not charge them, so an
# accelerator under another name (`habana.ai/gaudi`, the GPU Operator's passthrough
# `nvidia.com/GA100_A100_SXM4_80GB`) would run outside the team's quota (docs/security.md, "Nothing holds an
# accelerator Kueue does not charge").

EXTENDED_FIX: Final = (
    f"request GPUs with {GPU_RESOURCE} (or gpuctl's gpu-share), which Kueue charges to the team's budget; a "
    "device that is no accelerator: ask an admin to allow it (--allowed-extended-resource on the webhook, "
    "allowedExtendedResources in the chart)"
)


def allowed_resource(name: str, allowed: tuple[str, ...]) -> bool:
    """`name` is on the admin's list: an entry equal to it, or `prefix*` with that prefix."""
    return any(name.startswith(a[:-1]) if a.endswith("*") else name == a for a in allowed)


def check_extended_resources(w: Work, allowed: tuple[str, ...]) -> list[Violation]:
    return _extended_findings(requested_resources(w.spec, w.spec_path), allowed)


def _extended_findings(found: Mapping[str, str], allowed: tuple[str, ...]) -> list[Violation]:
    refused = sorted(r for r in found if not is_gpu_resource(r) and not allowed_resource(r, allowed))
    if not refused:
        return []
    listed = ", ".join(allowed) or "none"
    return [
        Violation(
            EXTENDED_RESOURCE,
            f"{found[refused[0]]} requests {', '.join(refused)}: extended resource(s) Kueue does not charge "
            f"to the team's budget and the admin does not allow (allowed: {listed}), so the pods could hold "
            "accelerators outside the team's quota",
            EXTENDED_FIX,
            f"{EXTENDED_RESOURCE}: {','.join(refused)}",
        )
    ]


def _extended_cel(root: str, pre: str) -> list[tuple[str, str]]:
    """`extendedResource`: per container or init container, the resources it requests or limits that are
    neither plain, nor GPU resources, nor on `variables.allowedExtendedResources`."""
    spec = pod_spec(root)
    other = (
        f"(!(k in {cel_list(sorted(PLAIN_RESOURCES))}) && !{cel_list(GPU_RESOURCE_PREFIXES)}.exists(p, "
        "k.startsWith(p)) &&\n!variables.allowedExtendedResources.exists(a, a.endsWith('*') ? "
        "k.startsWith(a.substring(0, size(a) - 1)) : k == a))"
    )
    return [(var_name(pre, "extendedResource"), old_skip(root) + _per_container(spec, other))]


EXTENDED_CEL: Final = TeamCel("extendedResource", _extended_cel)
