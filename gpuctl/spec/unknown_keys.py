"""Keys the spec models would drop in silence: which spellings each model accepts and what lies beneath
each key (a key schema per model, from its pydantic fields and aliases), walked over a document to name
every unknown key with a "did you mean" suggestion (gpuctl.spec.loader reports them)."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel

from gpuctl.spec.models import EnvVar
from gpuctl.spec.suggest import closest


@dataclass(frozen=True)
class _KeyInfo:
    shape: str  # "leaf", "model", "list" (of model) or "dict" (free keys, model values)
    model: type[BaseModel] | None


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated[...] and `X | None` down to the interesting type."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel) and tp is not EnvVar


@cache
def _key_schema(model: type[BaseModel]) -> dict[str, _KeyInfo]:
    """Accepted spelling → what is below it. EnvVar is treated as free-form: in the `- NAME: value` form
    the keys are variable names."""
    schema: dict[str, _KeyInfo] = {}
    for name, info in model.model_fields.items():
        tp = _unwrap(info.annotation)
        origin = typing.get_origin(tp)
        if _is_model(tp):
            key = _KeyInfo("model", tp)
        elif origin is list and _is_model(_unwrap(typing.get_args(tp)[0])):
            key = _KeyInfo("list", _unwrap(typing.get_args(tp)[0]))
        elif origin is dict and _is_model(_unwrap(typing.get_args(tp)[1])):
            key = _KeyInfo("dict", _unwrap(typing.get_args(tp)[1]))
        else:
            key = _KeyInfo("leaf", None)
        spellings = {name}
        if info.alias:
            spellings.add(info.alias)
        choices = getattr(info.validation_alias, "choices", None)
        if choices:
            spellings.update(c for c in choices if isinstance(c, str))
        elif isinstance(info.validation_alias, str):
            spellings.add(info.validation_alias)
        for spelling in spellings:
            schema[spelling] = key
    return schema


# Keys the earlier gpuctl's docs used that were always ignored; say why instead of guessing a spelling.
_IGNORED_WHY: dict[tuple[str, str], str] = {
    ("Workdir", "mountPath"): "workdirs are mounted at the same path inside the container",
    ("Workdir", "size"): "workdirs are host directories and have no size",
    ("Workdir", "storageClass"): "workdirs are host directories, not volumes",
}


def unknown_keys(data: Any, model: type[BaseModel], path: str) -> Iterator[tuple[str, str, str | None]]:
    """Yield (path, key, hint) for every key the models would silently ignore; the hint is a "did you
    mean" question or an explanation, None when there is nothing useful to say."""
    if not isinstance(data, dict):
        return
    schema = _key_schema(model)
    for key, value in data.items():
        key_path = f"{path}.{key}" if path else str(key)
        info = schema.get(key) if isinstance(key, str) else None
        if info is None:
            why = _IGNORED_WHY.get((model.__name__, str(key)))
            hint = closest(str(key), schema)
            yield key_path, str(key), (why if why else f"did you mean '{hint}'?" if hint else None)
        elif info.shape == "model":
            yield from unknown_keys(value, info.model, key_path)  # type: ignore[arg-type]
        elif info.shape == "list" and isinstance(value, list):
            for i, item in enumerate(value):
                yield from unknown_keys(item, info.model, f"{key_path}[{i}]")  # type: ignore[arg-type]
        elif info.shape == "dict" and isinstance(value, dict):
            for sub_key, item in value.items():
                yield from unknown_keys(item, info.model, f"{key_path}.{sub_key}")  # type: ignore[arg-type]
