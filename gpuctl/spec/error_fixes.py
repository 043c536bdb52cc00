"""One pydantic validation error as gpuctl reports it: the YAML field path, a message a user reads, and a
concrete fix per error kind (an example value of the field where one helps). gpuctl.spec.loader reports
them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuctl.spec.models import NAME_FIX, PORT_FIX, QUANTITY_FIX

_EXAMPLES: dict[tuple[str, str], str] = {
    ("pool", "name"): "training-pool",
    ("quota", "name"): "team-quota",
    ("job", "name"): "my-job",
}
_LEAF_EXAMPLES: dict[str, str] = {
    "job": "{name: my-job}",
    "environment": "{image: pytorch/pytorch:2.2.0-cuda12.1-cudnn8-runtime}",
    "resources": "{cpu: 4, memory: 16Gi}",
    "pool": "{name: my-pool}",
    "quota": "{name: team-quota}",
    "name": "my-job",
    "image": "pytorch/pytorch:2.2.0-cuda12.1-cudnn8-runtime",
    "cpu": "4",
    "memory": "16Gi",
    "path": "/data/<team>",
    "value": "<value>",
    "service": "{port: 8000}",
    "storage": "{workdirs: [{path: /data/<team>}]}",
    "nodes": "{gpu-node-1: {gpu-type: A100-80G}}",
    "namespace": "{team-a: {cpu: 16, memory: 64Gi, gpu: 8}}",
    "namespaces": "{team-a: {cpu: 16, memory: 64Gi, gpu: 8}}",
    "default": "{cpu: 20, memory: 40Gi, gpu: 2}",
    "pools": "{training-pool: {gpu: 2}}",
    "model": "{name: llama-3-8b}",
}
# Example of one item of a list or free-form mapping, keyed by the list's or mapping's field name.
_ITEM_EXAMPLES: dict[str, str] = {
    "workdirs": "{path: /data/<team>}",
    "nodes": "{gpu-type: A100-80G}",
    "namespace": "{cpu: 16, memory: 64Gi, gpu: 8}",
    "namespaces": "{cpu: 16, memory: 64Gi, gpu: 8}",
    "pools": "{gpu: 2}",
}


def _loc_path(loc: Sequence[str | int], at: str = "") -> str:
    out = ""
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    if at:
        out += at if at.startswith("[") or not out else f".{at}"
    return out


def show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def translate(err: Any, raw: Any) -> tuple[str, str, str]:
    """(field path, message, fix) for one pydantic error dict, with a concrete fix per error kind."""
    etype: str = err["type"]
    loc: tuple[str | int, ...] = tuple(err["loc"])
    ctx: dict[str, Any] = err.get("ctx") or {}
    if etype.startswith("gpuctl_"):
        path = _loc_path(loc, str(ctx.get("at", "")))
        message = str(ctx.get("message", err["msg"]))
        if loc and loc[-1] == "[key]":
            message = f"key {message}"
        return path, message, str(ctx.get("fix", ""))
    path = _loc_path(loc)
    str_parts = [p for p in loc if isinstance(p, str) and p != "[key]"]
    leaf = str_parts[-1] if str_parts else ""
    parent = str_parts[-2] if len(str_parts) > 1 else ""
    got = err.get("input")
    if etype == "missing":
        example = _EXAMPLES.get((parent, leaf)) or _LEAF_EXAMPLES.get(leaf, "<value>")
        under = _loc_path(loc[:-1])
        fix = f"add `{leaf}: {example}`" + (f" under `{under}`" if under else "")
        if not parent and isinstance(raw, dict) and ({"metadata", "spec", "apiVersion"} & set(raw)):
            fix += " (gpuctl files use top-level job:/pool:/quota: blocks, not Kubernetes metadata:/spec:)"
        return path, "required field is missing", fix
    if etype in ("int_parsing", "int_type", "int_from_float"):
        if leaf in ("port", "target_port", "targetPort", "target-port"):
            return path, f"expected a port number, got {show(got)}", PORT_FIX
        return (
            path,
            f"expected a whole number, got {show(got)}",
            f"use a whole number, e.g. {leaf or 'value'}: 1",
        )
    if etype == "string_type":
        if leaf in ("cpu", "memory"):
            return path, f"expected a quantity, got {show(got)}", QUANTITY_FIX
        if leaf in ("name", "namespace", "pool"):
            return path, f"expected a name, got {show(got)}", NAME_FIX.format(example="my-job")
        return path, f"expected text, got {show(got)}", f'quote the value, e.g. {leaf or "value"}: "..."'
    if etype in ("model_type", "model_attributes_type", "dict_type"):
        message = f"expected a mapping, got {show(got)}"
        if isinstance(loc[-1], int) or parent in _ITEM_EXAMPLES:
            container = leaf if isinstance(loc[-1], int) else parent
            example = _ITEM_EXAMPLES.get(container, "{key: value}")
            return path, message, f"write each `{container}` entry as a mapping, e.g. {example}"
        example = _LEAF_EXAMPLES.get(leaf, "{key: value}")
        if not example.startswith("{"):
            example = "{key: value}"
        return path, message, f"write `{leaf}` as a mapping, e.g. {leaf}: {example}"
    if etype in ("list_type", "tuple_type"):
        return path, f"expected a list, got {show(got)}", f"write `{leaf}` as a list, e.g. {leaf}: [a, b]"
    if etype == "literal_error":
        expected = ctx.get("expected", "")
        return path, f"unexpected value {show(got)}", f"use {expected}"
    if etype in ("bool_type", "bool_parsing"):
        return path, f"expected true or false, got {show(got)}", f"use `{leaf}: true` or `{leaf}: false`"
    if etype == "value_error":
        message = str(err["msg"]).removeprefix("Value error, ")
        return path, message, f"check the value of `{leaf or path}`"
    message = str(err["msg"])
    message = message[0].lower() + message[1:] if message else message
    return path, f"invalid value {show(got)}: {message}", f"check the value of `{leaf or path}`"
