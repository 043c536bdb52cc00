"""Typed reads of untrusted JSON: one copy for every reader of objects a client sent.

The API server sends schema-valid objects, but the admission webhook must answer anything with a 400,
never a 500, and gpuctl.domain.gpus counts GPUs of objects it has not validated: so every read that relies
on a type checks it here and raises ShapeError naming the field (`spec.containers[0].resources must be an
object, not list`). A missing value (None) reads as empty.

Written for CPU per request: the usual case is one `type(v) is T` test, and error texts are only built
on the error path. Exact types (`type(v) is dict`, not isinstance): a subclass is no JSON value either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["EMPTY", "ShapeError", "item", "list_at", "obj_at", "str_at", "strmap_at"]


class ShapeError(ValueError):
    """An object field has the wrong type or an unreadable value; the message names the field."""


EMPTY: Final[Mapping[str, Any]] = {}  # never mutated: the value of a missing object
_STR_ONLY: Final = frozenset({str})


def obj_at(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """parent[key] as an object ({} when missing)."""
    v = parent.get(key)
    if v is None:
        return EMPTY
    if type(v) is not dict:
        raise ShapeError(f"{where}.{key} must be an object, not {type(v).__name__}")
    return v


def list_at(parent: Mapping[str, Any], key: str, where: str) -> list:
    """parent[key] as a list ([] when missing)."""
    v = parent.get(key)
    if v is None:
        return []
    if type(v) is not list:
        raise ShapeError(f"{where}.{key} must be a list, not {type(v).__name__}")
    return v


def str_at(parent: Mapping[str, Any], key: str, where: str) -> str:
    """parent[key] as a string ("" when missing)."""
    v = parent.get(key)
    if v is None:
        return ""
    if type(v) is not str:
        raise ShapeError(f"{where}.{key} must be a string, not {type(v).__name__}")
    return v


def item(v: Any, where: str) -> Mapping[str, Any]:
    """A list item that must be an object (`where` names it, index included)."""
    if type(v) is not dict:
        raise ShapeError(f"{where} must be an object, not {type(v).__name__}")
    return v


def strmap_at(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, str]:
    """parent[key] as a map of strings (labels, annotations, a nodeSelector)."""
    m = parent.get(key)
    if m is None:
        return EMPTY
    # The usual case in one C-level pass.
    if type(m) is dict and (not m or set(map(type, m.values())) <= _STR_ONLY):
        return m
    m = obj_at(parent, key, where)
    for k, v in m.items():
        if type(v) is not str:
            raise ShapeError(f"{where}.{key}[{k!r}] must be a string, not {type(v).__name__}")
    return m
