"""GPUs and slices of them (docs/sharing.md)."""

from __future__ import annotations

from typing import Final

from gpuctl.constants.labels import GPU_RESOURCE

# ----------------------------------------------------------------------------- GPUs and slices of them
# docs/sharing.md. Every extended resource that hands out a GPU or a slice of one, as prefixes
# of the resource name (`gpuctl.domain.gpus.is_gpu_resource` is the one matcher): NVIDIA's whole GPUs,
# time-slicing/MPS replicas (nvidia.com/gpu.shared) and HAMi's nvidia.com/gpumem|gpucores, MIG instances
# (nvidia.com/mig-1g.10gb), AMD and Intel GPUs. The admission webhook and policies treat a pod asking for
# any of them as GPU work; Kueue charges each its GPU equivalent of the team budget (resources.
# transformations in manifests/kueue/configuration.yaml, from gpuctl.domain.sharing.quota_transformations).
GPU_RESOURCE_PREFIXES: Final = ("nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu", "gpu.intel.com/")
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"
# Time-slicing and MPS replicas as the NVIDIA device plugin advertises them with renameByDefault: true.
SHARED_GPU_RESOURCE: Final = "nvidia.com/gpu.shared"
# The suffix renameByDefault gives a time-sliced resource; on a MIG instance too (MIG + time-slicing:
# nvidia.com/mig-1g.10gb.shared, a replica of one 1g.10gb, charged its share / SHARED_REPLICAS_CHARGED).
SHARED_SUFFIX: Final = ".shared"
# Resources each of which is one whole GPU (charged one GPU of budget).
WHOLE_GPU_RESOURCES: Final = (GPU_RESOURCE, "amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe")
# A team's GPU budget is counted in 1/GPU_UNITS GPU: 840 = lcm(1..8), so a MIG instance's share (1/7,
# 1/4, 2/7, 1/2, 4/7) and a replica of a GPU time-sliced 2..8 (or 10, 12, 14) ways are whole units
# (Kueue rounds every resource but cpu up to a whole unit per pod). gpuctl.domain.sharing has the rule.
GPU_UNITS: Final = 840
# What one time-slicing/MPS replica is charged: 1/SHARED_REPLICAS_CHARGED GPU (Kueue charges a resource
# by its name, whatever a node's replicas; the NVIDIA GPU Operator's example uses 4). An admin who slices
# N ways changes nvidia.com/gpu.shared's output in the Kueue configuration to GPU_UNITS/N.
SHARED_REPLICAS_CHARGED: Final = 4
# Slices of GPUs in use per pool, as `gpuctl serve` counts them from every bound pod and writes them on the
# pool's ResourceFlavor (JSON {resource: count}): a team member, who may not list other teams' pods, reads
# per-profile used and free from it (gpuctl.domain.sharing.slices_used, docs/sharing.md).
SLICES_USED_ANNOTATION: Final = "runwhere.ai/slices-used"
