"""The YAML spec layer: models of every gpuctl kind, the multi-document loader and its helpers.

Everything other packages need is re-exported here so they import from `gpuctl.spec` only.
"""

from __future__ import annotations

from gpuctl.quantity import QuantityError, is_quantity, parse_quantity
from gpuctl.spec.loader import (
    Document,
    SpecConfig,
    SpecError,
    SpecIssue,
    load_file,
    load_files,
    load_text,
)
from gpuctl.spec.models import (
    KIND_MODELS,
    AnySpec,
    ComputeSpec,
    Environment,
    EnvVar,
    InferenceSpec,
    JobMeta,
    JobSpec,
    NotebookService,
    NotebookSpec,
    PoolCluster,
    PoolGuarantee,
    PoolMeta,
    PoolNode,
    PoolSpec,
    QuotaEntry,
    QuotaMeta,
    QuotaSpec,
    Resources,
    Service,
    Storage,
    TrainingSpec,
    Workdir,
    path_denied,
    spec_namespace,
)
from gpuctl.spec.names import is_dns_label, is_dns_subdomain, is_env_name, is_label_value
from gpuctl.spec.suggest import closest

__all__ = [
    "KIND_MODELS",
    "AnySpec",
    "ComputeSpec",
    "Document",
    "EnvVar",
    "Environment",
    "InferenceSpec",
    "JobMeta",
    "JobSpec",
    "NotebookService",
    "NotebookSpec",
    "PoolCluster",
    "PoolGuarantee",
    "PoolMeta",
    "PoolNode",
    "PoolSpec",
    "QuantityError",
    "QuotaEntry",
    "QuotaMeta",
    "QuotaSpec",
    "Resources",
    "Service",
    "SpecConfig",
    "SpecError",
    "SpecIssue",
    "Storage",
    "TrainingSpec",
    "Workdir",
    "closest",
    "is_dns_label",
    "is_dns_subdomain",
    "is_env_name",
    "is_label_value",
    "is_quantity",
    "load_file",
    "load_files",
    "load_text",
    "parse_quantity",
    "path_denied",
    "spec_namespace",
]
