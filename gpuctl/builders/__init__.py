"""Builders: a validated spec in, plain Kubernetes manifest dicts out. No API calls.

One module per job kind, all of the same shape (`build(spec, namespace) -> list[dict]`), the way Kueue
keeps one folder per integration. `build()` here dispatches on the spec's kind.
"""

from __future__ import annotations

from gpuctl.builders import compute, inference, notebook, training
from gpuctl.constants import Kind
from gpuctl.spec import JobSpec

_BUILDERS = {
    Kind.TRAINING: training.build,
    Kind.INFERENCE: inference.build,
    Kind.COMPUTE: compute.build,
    Kind.NOTEBOOK: notebook.build,
}


def build(spec: JobSpec, namespace: str) -> list[dict]:
    """Every object a job needs, in creation order (workload first, then its Service)."""
    return _BUILDERS[Kind(spec.kind)](spec, namespace)


__all__ = ["build"]
