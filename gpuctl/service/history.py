"""The audit trail's store (docs/audit.md, "The store, and why"): one ConfigMap `gpuctl-history` per team
namespace, a bounded ring of records (gpuctl.domain.history_ring.merge: the newest HISTORY_MAX_RECORDS,
at most HISTORY_MAX_BYTES), written by the leader of `gpuctl serve` (gpuctl.server.history) and read by
`gpuctl history` and `GET /api/v1/history/{namespace}`.

Why a ConfigMap in the team's namespace: the team reads it with its namespace-scoped role (gpuctl-user:
`get configmaps` by this one name), so RBAC, not gpuctl, keeps another team out; it lives and dies with
the namespace; it needs no volume, database or second service; and optimistic concurrency (the
resourceVersion) makes a leader change safe. The cost is the bound: a ConfigMap holds 1 MiB, so a busy
team keeps its last 2,000 happenings (docs/audit.md has the arithmetic), not forever.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuctl.cluster import ApiError, path
from gpuctl.constants import (
    HISTORY_CONFIGMAP,
    HISTORY_DATA_KEY,
    HISTORY_MAX_BYTES,
    HISTORY_MAX_RECORDS,
    MANAGED_BY_VALUE,
    ROLE_USER,
    Labels,
)
from gpuctl.domain.history import Record
from gpuctl.domain.history_ring import dump, for_job, load, merge, order
from gpuctl.service.errors import Forbidden, ServiceError

WRITE_ATTEMPTS = 5
SELF_REVIEW_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def caller_name(cluster: Any) -> str | None:
    """Who the cluster's credential is (a SelfSubjectReview: every authenticated user may ask), for
    runwhere.ai/submitted-by and the stop/resume field manager; None when the API server cannot say."""
    try:
        status = cluster.request(
            "POST",
            SELF_REVIEW_PATH,
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        ).get("status")
    except ApiError:
        return None
    return ((status or {}).get("userInfo") or {}).get("username") or None


def _records(cm: dict[str, Any] | None) -> list[Record]:
    return load(((cm or {}).get("data") or {}).get(HISTORY_DATA_KEY))


def _body(namespace: str, records: list[Record], resource_version: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": HISTORY_CONFIGMAP,
        "namespace": namespace,
        "labels": {Labels.MANAGED_BY: MANAGED_BY_VALUE},
        "annotations": {
            Labels.DESCRIPTION: (
                f"gpuctl's audit trail of this namespace's jobs (docs/audit.md): the newest "
                f"{HISTORY_MAX_RECORDS} records, written by gpuctl serve; read it with `gpuctl history`"
            )
        },
    }
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {HISTORY_DATA_KEY: dump(records)},
    }


def append(
    cluster: Any,
    namespace: str,
    records: Iterable[Record],
    *,
    max_records: int = HISTORY_MAX_RECORDS,
    max_bytes: int = HISTORY_MAX_BYTES,
    rebuild: Iterable[Record] = (),
) -> int:
    """Add `records` to the namespace's ring (records already there are skipped: a restarted or new
    leader re-derives what the last one wrote). Read, merge, then create or update with the
    resourceVersion read; a conflict (another writer) reads again. Returns the records added.
    rebuild: records the writer wrote before; those missing from the store (erased, or the ConfigMap
    deleted, where the chart's gpuctl-history-writer policy is not installed) are written again with
    these (the ring's bound still drops the oldest)."""
    new = list(records)
    if not new:
        return 0
    again = list(rebuild)
    cm_path = path("ConfigMap", HISTORY_CONFIGMAP, namespace)
    for _ in range(WRITE_ATTEMPTS):
        cm = cluster.get_or_none(cm_path)
        kept = _records(cm)
        ring, added = merge(kept, [*again, *new], max_records=max_records, max_bytes=max_bytes)
        if added == 0 and cm is not None:
            return 0
        try:
            if cm is None:
                cluster.create(_body(namespace, ring, None))
            else:
                rv = (cm.get("metadata") or {}).get("resourceVersion")
                cluster.request("PUT", cm_path, body=_body(namespace, ring, rv))
            return added
        except ApiError as e:
            if e.status not in (409,):
                raise
    raise ServiceError(
        f"configmap {namespace}/{HISTORY_CONFIGMAP}: changed by another writer {WRITE_ATTEMPTS} times in a "
        "row; is more than one gpuctl serve leading? (docs/metrics.md, Replicas)"
    )


def read(cluster: Any, namespace: str, job: str | None = None) -> list[Record]:
    """The namespace's records (oldest first), of one job when `job` is given. A namespace gpuctl serve
    has not written to yet has none."""
    try:
        cm = cluster.get_or_none(path("ConfigMap", HISTORY_CONFIGMAP, namespace))
    except ApiError as e:
        if e.status == 403:
            raise Forbidden(
                f"reading the history of namespace {namespace} (configmap {HISTORY_CONFIGMAP}) needs "
                f"{ROLE_USER} in {namespace} (bind it with a RoleBinding): the history is the team's own"
            ) from None
        raise
    return for_job(_records(cm), job)


def read_all(cluster: Any, job: str | None = None) -> list[Record]:
    """Every namespace's records (an admin's `gpuctl history -A`): one list of the ConfigMaps by name."""
    try:
        items = cluster.list(path("ConfigMap"), field_selector=f"metadata.name={HISTORY_CONFIGMAP}")
    except ApiError as e:
        if e.status == 403:
            raise Forbidden(
                f"reading the history of every namespace (configmaps {HISTORY_CONFIGMAP}) needs "
                "gpuctl-admin (bind it with a ClusterRoleBinding); a team member reads its own: "
                "`gpuctl history -n NAMESPACE`"
            ) from None
        raise
    out = [r for cm in items for r in for_job(_records(cm), job)]
    return sorted(out, key=order)
