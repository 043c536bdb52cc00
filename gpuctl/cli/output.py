"""Printing: -o json|yaml|wide, kubectl-like tables, and the earlier gpuctl's --json."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from enum import Enum
from functools import cache
from typing import IO, Any

from gpuctl.cli.terminal import escape_terminal


@cache
def _dumper() -> type:
    """The YAML Dumper, built on first use so that a table never imports PyYAML (CLI start-up).

    Block-style YAML that keeps key order, like kubectl's output. A dict or list used twice (the
    liveness and readiness probes share their httpGet) is written out twice, never as `&id001`/`*id001`
    anchors, which kubectl never prints and many readers of the output do not expect. An Enum (a row's
    status is a gpuctl.domain.status.State) is written as its value, as json.dumps writes a StrEnum;
    SafeDumper knows only exact built-in types and refuses it."""
    import yaml  # noqa: PLC0415 - lazy: CLI start-up (tables print no YAML)

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    def represent_enum(dumper: yaml.SafeDumper, data: Enum) -> yaml.Node:
        return dumper.represent_data(data.value)

    Dumper.add_representer(str, represent_str)
    Dumper.add_multi_representer(Enum, represent_enum)
    return Dumper


def to_yaml(obj: Any) -> str:
    import yaml  # noqa: PLC0415 - lazy: CLI start-up (tables print no YAML)

    return yaml.dump(obj, Dumper=_dumper(), sort_keys=False, default_flow_style=False, allow_unicode=True)


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


def table(headers: Sequence[str] | None, rows: Iterable[Sequence[Any]], out: IO[str] | None = None) -> None:
    """A kubectl-style table: upper-case headers, columns padded to the widest cell plus 3 spaces.
    headers None or empty: the rows alone (--no-headers), padded to their own widths. Cells escaped
    (escape_terminal)."""
    out = out or sys.stdout
    cells = [[str(c) for c in headers]] if headers else []
    cells += [["" if c is None else escape_terminal(str(c)) for c in r] for r in rows]
    if not cells:
        return
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    for r in cells:
        line = "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        out.write(line + "\n")
