"""Builders: a validated spec in, plain Kubernetes manifest dicts out. No API calls.

One module per job kind, all of the same shape (`build(spec, namespace) -> list[dict]`), the way Kueue
keeps one folder per integration. `build()` here dispatches on the spec's kind.
"""

from __future__ import annotations

from gpuctl.builders import compute, inference, notebook, training
from gpuctl.builders.common import WHOLE_GPUS, TargetPool, gpu_resources
from gpuctl.constants import Kind
from gpuctl.spec import JobSpec

_BUILDERS = {
    Kind.TRAINING: training.build,
    Kind.INFERENCE: inference.build,
    Kind.COMPUTE: compute.build,
    Kind.NOTEBOOK: notebook.build,
}


def build(spec: JobSpec, namespace: str, pool: TargetPool = WHOLE_GPUS) -> list[dict]:
    """Every object a job needs, in creation order (workload first, then its Service). `pool`: what the
    caller knows of the job's pool (the GPU resource its nodes advertise; `gpu_resources`)."""
    return _BUILDERS[Kind(spec.kind)](spec, namespace, pool)


__all__ = ["WHOLE_GPUS", "TargetPool", "build", "gpu_resources"]
