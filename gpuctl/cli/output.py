"""Printing: -o json|yaml|wide, kubectl-like tables, and the earlier gpuctl's --json."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import IO, Any

import yaml


class _Dumper(yaml.SafeDumper):
    """Block-style YAML that keeps key order, like kubectl's output. A dict or list used twice (the
    liveness and readiness probes share their httpGet) is written out twice, never as `&id001`/`*id001`
    anchors, which kubectl never prints and many readers of the output do not expect."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)


def to_yaml(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


def print_objects(objects: Sequence[dict], fmt: str, out: IO[str] | None = None) -> None:
    """Kubernetes objects as `kubectl ... -o yaml|json` prints them: YAML documents separated by
    `---`; JSON as the object itself, or a v1 List when there are several."""
    out = out or sys.stdout
    if fmt == "json":
        doc: Any = (
            objects[0] if len(objects) == 1 else {"apiVersion": "v1", "kind": "List", "items": list(objects)}
        )
        out.write(json.dumps(doc, indent=2) + "\n")
    else:
        out.write("---\n".join(to_yaml(o) for o in objects))


def print_data(data: Any, fmt: str, out: IO[str] | None = None) -> None:
    """Plain data (the earlier gpuctl's JSON shapes) as json or yaml."""
    out = out or sys.stdout
    if fmt == "yaml":
        out.write(to_yaml(data))
    else:
        out.write(json.dumps(data, indent=2, default=str) + "\n")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out: IO[str] | None = None) -> None:
    """A kubectl-style table: upper-case headers, columns padded to the widest cell plus 3 spaces."""
    out = out or sys.stdout
    cells = [[str(c) for c in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        line = "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        out.write(line + "\n")
