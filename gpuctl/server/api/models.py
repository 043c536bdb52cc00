"""Request bodies and parameter types of the REST API (they make the OpenAPI document).

Names and values are checked here, before anything reaches the cluster: a namespace or object name
that is not a valid Kubernetes name would otherwise be pasted into an API server URL path. Key names
follow the earlier gpuctl's API (camelCase: yamlContent, dryRun, nodeNames).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Path, Query
from pydantic import BaseModel, ConfigDict, Field

from gpuctl.constants import YAML_MAX_BYTES
from gpuctl.domain.dryrun import DryRun

# Kubernetes name rules (apimachinery validation): DNS-1123 label (namespaces), subdomain (most objects).
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Label keys: optional DNS-subdomain prefix and a name; gpuctl's short forms (pool, gpuType) are names.
LABEL_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
MAX_YAML = YAML_MAX_BYTES  # characters here; the loader counts its UTF-8 bytes (gpuctl.spec.limits)

NamespaceQ = Annotated[
    str | None, Query(max_length=63, pattern=DNS_LABEL, description="a namespace (DNS-1123 label)")
]
NamespaceP = Annotated[str, Path(max_length=63, pattern=DNS_LABEL, description="a namespace")]
JobName = Annotated[str, Path(max_length=63, pattern=DNS_LABEL, description="the job.name of the YAML")]
PoolName = Annotated[str, Path(max_length=63, pattern=DNS_LABEL, description="a pool name")]
NodeName = Annotated[str, Path(max_length=253, pattern=DNS_SUBDOMAIN, description="a node name")]
LabelKeyP = Annotated[
    str,
    Path(
        max_length=317,
        pattern=LABEL_KEY,
        description="a label key; unprefixed keys are gpuctl's (pool = runwhere.ai/pool, gpuType = "
        "runwhere.ai/gpu-type)",
    ),
]
Page = Annotated[int, Query(ge=1, le=1_000_000, description="1-based page number")]
PageSize = Annotated[int, Query(alias="pageSize", ge=1, le=100, description="items per page (at most 100)")]
DryRunValue = bool | Literal["none", "client", "server"]
DRY_RUN_HELP = (
    "none/false: write; client/true: check and answer what would be done, write nothing; "
    "server: every write with dryRun=All (the API server validates, stores nothing)"
)
DryRunQ = Annotated[DryRunValue, Query(description=DRY_RUN_HELP)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


def dry_run_mode(value: DryRunValue) -> DryRun:
    """The request's `dryRun` as the one dry-run type (`true` is client, as `--dry-run` alone)."""
    return DryRun.parse(value)


class Submit(_Body):
    """YAML documents (one or more, `---` separated) to create or apply."""

    yamlContent: str = Field(min_length=1, max_length=MAX_YAML, description="gpuctl YAML")
    namespace: str | None = Field(
        None, max_length=63, pattern=DNS_LABEL, description="for documents without job.namespace"
    )
    dryRun: DryRunValue = Field(False, description=DRY_RUN_HELP + "; client answers with the objects")
    force: bool = Field(False, description="apply: re-create a running Job whose pod template changed")
    strict: bool = Field(False, description="unknown YAML keys are errors, not warnings")


class BatchSubmit(_Body):
    yamlContents: list[Annotated[str, Field(min_length=1, max_length=MAX_YAML)]] = Field(
        min_length=1, max_length=100
    )
    namespace: str | None = Field(None, max_length=63, pattern=DNS_LABEL)
    dryRun: DryRunValue = False
    strict: bool = False


class PoolBody(_Body):
    """A pool as JSON (the earlier API's shape) or as gpuctl YAML (`yamlContent`, kind: pool)."""

    name: str | None = Field(None, max_length=63, pattern=DNS_LABEL)
    description: str | None = Field(None, max_length=1024)
    nodes: list[Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN)]] = Field(
        default_factory=list, max_length=10_000
    )
    gpuType: str | list[str] | None = Field(
        None, description="one GPU type for every node, or one per node (same order as nodes)"
    )
    yamlContent: str | None = Field(None, min_length=1, max_length=MAX_YAML)
    dryRun: DryRunValue = False


class QuotaBody(_Body):
    yamlContent: str = Field(min_length=1, max_length=MAX_YAML, description="gpuctl YAML, kind: quota")
    dryRun: DryRunValue = False
    strict: bool = False


class NodePool(_Body):
    pool: str = Field(max_length=63, pattern=DNS_LABEL)
    overwrite: bool = Field(False, description="move the node from the pool it is in")
    dryRun: DryRunValue = False


class LabelBody(_Body):
    key: str = Field(max_length=317, pattern=LABEL_KEY)
    value: str = Field(max_length=63, pattern=LABEL_VALUE)
    overwrite: bool = False
    dryRun: DryRunValue = False


class LabelValueBody(_Body):
    value: str = Field(max_length=63, pattern=LABEL_VALUE)
    dryRun: DryRunValue = False


class BatchLabel(_Body):
    nodeNames: list[Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN)]] = Field(
        min_length=1, max_length=1000
    )
    key: str = Field(max_length=317, pattern=LABEL_KEY)
    value: str | None = Field(None, max_length=63, pattern=LABEL_VALUE, description="null removes the label")
    overwrite: bool = False
    dryRun: DryRunValue = False


def paged(items: list, page: int, page_size: int) -> dict:
    """The earlier API's list envelope: {total, items} (plus page and pageSize)."""
    start = (page - 1) * page_size
    return {
        "total": len(items),
        "page": page,
        "pageSize": page_size,
        "items": items[start : start + page_size],
    }
