"""Job kinds and priorities: what a gpuctl YAML document is and how Kueue orders it."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Kind(StrEnum):
    """The YAML `kind:` values gpuctl accepts (`resource` is the earlier spelling of `pool`)."""

    TRAINING = "training"
    INFERENCE = "inference"
    NOTEBOOK = "notebook"
    COMPUTE = "compute"
    POOL = "pool"
    QUOTA = "quota"


JOB_KINDS: Final = (Kind.TRAINING, Kind.INFERENCE, Kind.NOTEBOOK, Kind.COMPUTE)
KIND_ALIASES: Final = {"resource": Kind.POOL}

# Kubernetes object kind that carries each job kind.
KIND_TO_RESOURCE: Final = {
    Kind.TRAINING: "Job",
    Kind.INFERENCE: "Deployment",
    Kind.COMPUTE: "Deployment",
    Kind.NOTEBOOK: "StatefulSet",
}
# Kinds that also get a NodePort Service named svc-<name>.
SERVICE_KINDS: Final = (Kind.INFERENCE, Kind.COMPUTE, Kind.NOTEBOOK)


class Priority(StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


DEFAULT_PRIORITY: Final = Priority.MEDIUM
# Kueue WorkloadPriorityClass name and value per gpuctl priority. Values match the earlier gpuctl's
# PriorityClasses so that dashboards and habits carry over.
PRIORITY_CLASS: Final = {p: f"gpuctl-{p.value}" for p in Priority}
PRIORITY_VALUE: Final = {Priority.HIGH: 1_000_000, Priority.MEDIUM: 500_000, Priority.LOW: 100}

# Work that borrows from other teams may preempt their borrowed work only up to this priority
# (Kueue's borrowWithinCohort.maxPriorityThreshold): medium and low can be taken back, high never.
BORROW_PREEMPT_THRESHOLD: Final = PRIORITY_VALUE[Priority.MEDIUM]

# The apiVersion of the objects `get` and `history` print with -o json|yaml (gpuctl.cli.objects,
# docs/cli.md): a view gpuctl computes from Kubernetes and Kueue objects, not an API the server stores.
VIEW_API_VERSION: Final = "gpuctl.runwhere.ai/v1alpha1"
