"""Events `gpuctl serve` posts on the objects it acts on (the backstop's on pods, defragmentation's on
Workloads): one shape, as kubectl describe reads them (core/v1, source and reporting component)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuctl.cluster import path
from gpuctl.constants import SERVE_COMPONENT
from gpuctl.domain.objects import rfc3339  # one rule: the API server's time format


def post_event(
    cluster: Any,
    obj: Mapping[str, Any],
    *,
    type_: str,
    reason: str,
    message: str,
    identity: str,
    now: float,
) -> None:
    """POST an Event on `obj` (apiVersion, kind and metadata name/namespace/uid); raises what the
    request raises (callers post best effort)."""
    md = obj.get("metadata") or {}
    ns = md.get("namespace")
    ts = rfc3339(now)
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{md.get('name')}.", "namespace": ns},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": md.get("name"),
            "namespace": ns,
            "uid": md.get("uid"),
        },
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": SERVE_COMPONENT},
        "reportingComponent": SERVE_COMPONENT,
        "reportingInstance": identity[:128],
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
    }
    cluster.request("POST", path("Event", None, ns), body=body)
