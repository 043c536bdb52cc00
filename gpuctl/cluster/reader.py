"""Reading objects by kind, from wherever they are: the `Reader` protocol and its cluster side.

The service layer's reads (gpuctl.service.inventory.Inventory) go through a Reader, so the same code
answers from the API server (the CLI: `ClusterReader`) or from a process's watch cache (the REST API
inside `gpuctl serve`: gpuctl.server.cache.CacheReader). Kinds are gpuctl.cluster.paths names.

The selector matchers here are what a cache needs to answer a list the way the API server would:
label selectors (`k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`) and field selectors
(`path=v`, `path==v`, `path!=v` on dotted paths such as metadata.name or status.phase).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

from gpuctl.cluster.client import Cluster
from gpuctl.cluster.paths import path


@runtime_checkable
class Reader(Protocol):
    """Objects of one kind, as plain dicts (read-only: they may be shared with a cache)."""

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict]:
        """Every object of `kind` (in `namespace`; None = all) matching both selectors."""
        ...

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """One object, or None if there is none."""
        ...


class ClusterReader:
    """A Reader that asks the API server every time (paged lists)."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict]:
        return self.cluster.list(
            path(kind, namespace=namespace), label_selector=label_selector, field_selector=field_selector
        )

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        return self.cluster.get_or_none(path(kind, name, namespace))

    def pending_workloads(self, cluster_queue: str) -> list[dict] | None:
        """Kueue's visibility API: the ClusterQueue's pending Workloads in Kueue's order (positions,
        owners); None when the cluster does not serve the API (Kueue without VisibilityOnDemand, or no
        APIService registered)."""
        return self.cluster.pending_workloads(cluster_queue)

    def pending_in_local_queue(self, namespace: str, local_queue: str) -> list[dict] | None:
        """The same for one LocalQueue (a team member's view of its own queue)."""
        return self.cluster.pending_in_local_queue(namespace, local_queue)

    def list_table(
        self, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict]:
        """The objects as the API server's Table rows (metadata plus printed cells; Cluster.list_table)."""
        return self.cluster.list_table(path(kind, namespace=namespace), label_selector=label_selector)


def as_reader(source: Any) -> Reader:
    """A Reader for `source`: itself if it is one, else a ClusterReader over it (a Cluster, or anything
    that speaks the Cluster's HTTP methods, such as a test double)."""
    if isinstance(source, Reader) and not hasattr(source, "request"):
        return source
    return ClusterReader(source)


# ----------------------------------------------------------------------------- selectors
class Requirement(NamedTuple):
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str]


_SET = re.compile(r"^\s*(!?)\s*([^\s=!(),]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ = re.compile(r"^\s*([^\s=!(),]+)\s*(==|=|!=)\s*([^\s=!(),]*)\s*$")


def _split_terms(selector: str) -> list[str]:
    """Split on the commas outside parentheses."""
    terms, depth, cur = [], 0, []
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return [t for t in terms if t.strip()]


def parse_label_selector(selector: str | None) -> tuple[Requirement, ...]:
    """The requirements of a label selector; ValueError when it is not one."""
    out = []
    for term in _split_terms(selector or ""):
        m = _EQ.match(term)
        if m:
            key, op, value = m.groups()
            out.append(Requirement(key, "!=" if op == "!=" else "=", frozenset((value,))))
            continue
        m = _SET.match(term)
        if not m:
            raise ValueError(f"invalid label selector {selector!r} at {term.strip()!r}")
        neg, key, op, values = m.groups()
        if op:
            if neg:
                raise ValueError(f"invalid label selector {selector!r} at {term.strip()!r}")
            out.append(Requirement(key, op, frozenset(v.strip() for v in values.split(",") if v.strip())))
        else:
            out.append(Requirement(key, "!" if neg else "exists", frozenset()))
    return tuple(out)


def parse_field_selector(selector: str | None) -> tuple[Requirement, ...]:
    """The requirements of a field selector (`path=v`, `path!=v`); ValueError otherwise."""
    out = []
    for term in _split_terms(selector or ""):
        m = _EQ.match(term)
        if not m:
            raise ValueError(f"invalid field selector {selector!r} at {term.strip()!r}")
        key, op, value = m.groups()
        out.append(Requirement(key, "!=" if op == "!=" else "=", frozenset((value,))))
    return tuple(out)


def _matches(reqs: tuple[Requirement, ...], lookup: Callable[[str], str | None]) -> bool:
    for key, op, values in reqs:
        v = lookup(key)
        if op == "=":
            if v is None or v not in values:
                return False
        elif op == "!=":
            if v is not None and v in values:
                return False
        elif op == "in":
            if v is None or v not in values:
                return False
        elif op == "notin":
            if v is not None and v in values:
                return False
        elif op == "exists":
            if v is None:
                return False
        elif v is not None:  # "!"
            return False
    return True


def labels_match(reqs: tuple[Requirement, ...], labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    return _matches(reqs, labels.get)


def field_value(obj: Mapping[str, Any], dotted: str) -> str | None:
    """The value at a field selector's path (`status.phase`); "" for a missing scalar, as the API
    server compares it (a pod with no nodeName matches spec.nodeName=)."""
    cur: Any = obj
    for part in dotted.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    return cur if isinstance(cur, str) else str(cur)


def fields_match(reqs: tuple[Requirement, ...], obj: Mapping[str, Any]) -> bool:
    return _matches(reqs, lambda k: field_value(obj, k))


def implies(wanted: tuple[Requirement, ...], held: tuple[Requirement, ...]) -> bool:
    """Whether every object matching `wanted` also matches `held` (true when each requirement a
    cache was filled with is also asked for): a cache filled through `held` can answer `wanted`."""
    return set(held) <= set(wanted)


__all__ = [
    "ClusterReader",
    "Reader",
    "Requirement",
    "as_reader",
    "field_value",
    "fields_match",
    "implies",
    "labels_match",
    "parse_field_selector",
    "parse_label_selector",
]
