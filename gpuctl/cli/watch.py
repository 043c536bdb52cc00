"""`get TYPE -w`: after the listing, each object again whenever it changes, as kubectl's watch prints it
(docs/cli.md), on every `get` type: a table row (the header once), or with `-o json|yaml|name|jsonpath=|
custom-columns=` the object itself, one document per change (kubectl's watch stream: no List around
them, YAML documents separated by `---`).

An Informer per Kubernetes kind the listing is read from (gpuctl.cluster.informer: list, watch, 410 ->
list again, back-off) only wakes the loop; the listing is then read again through the same service call
as `get`, so -w shows exactly what `get` would. A row is printed again when a cell other than AGE
changed (compared by column name), an object when any of its fields did. Ctrl-C ends it.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from gpuctl.cli.printers import (
    custom_columns,
    custom_columns_file,
    fmt_of,
    print_custom_columns,
    run_jsonpath,
    template_of,
)

# What the loop compares and prints: a key, the object, its table cells by column name.
Entry = tuple[Hashable, dict, dict[str, Any]]


def changed_cells(old: dict[str, object] | None, new: dict[str, object]) -> bool:
    """A watched row is printed again when a cell other than AGE changed (compared by column name,
    so that an added column such as CLUSTER shifts nothing)."""
    return old is None or {k: v for k, v in old.items() if k != "AGE"} != {
        k: v for k, v in new.items() if k != "AGE"
    }


class Printer:
    """One object (or row) at a time, in the format -o asks."""

    def __init__(self, args: Any, name: Callable[[dict], str]):
        self.fmt, arg = fmt_of(getattr(args, "output", None))
        self.name = name
        self.documents = 0
        self.template = template_of(self.fmt, arg) if self.fmt in ("jsonpath", "jsonpath-file") else None
        self.columns = None
        if self.fmt == "custom-columns":
            self.columns = custom_columns(arg)
        elif self.fmt == "custom-columns-file":
            self.columns = custom_columns_file(arg)

    @property
    def objects(self) -> bool:
        """Whether objects are printed (and compared), not table rows."""
        return self.fmt not in (None, "wide")

    def __call__(self, obj: dict, cells: dict[str, Any]) -> None:
        if self.fmt == "json":
            print(json.dumps(obj, indent=2, default=str), flush=True)
        elif self.fmt == "yaml":
            from gpuctl.cli.output import to_yaml  # noqa: PLC0415 - lazy: CLI start-up

            sys.stdout.write(("---\n" if self.documents else "") + to_yaml(obj))
            sys.stdout.flush()
        elif self.fmt == "name":
            print(self.name(obj), flush=True)
        elif self.template is not None:
            sys.stdout.write(run_jsonpath(self.template, obj))
            sys.stdout.flush()
        elif self.columns is not None:
            print_custom_columns(self.columns, [obj], headers=False)
            sys.stdout.flush()
        else:
            print("   ".join(str(c) for c in cells.values()), flush=True)
        self.documents += 1


def entries(args: Any, listing: Any, *, objects: bool) -> list[Entry]:
    """A listing (gpuctl.cli.printers.Listing of objects) as what the watch compares: its objects keyed by
    namespace and name, or (objects False) its table rows keyed by their object and POD; --field-selector
    applies as to the list."""
    from gpuctl.cli.printers import field_filter  # noqa: PLC0415 - lazy: CLI start-up

    docs = [listing.doc(i) for i in listing.items]
    selector = getattr(args, "field_selector", None)
    keep = field_filter(selector, docs) if selector else (lambda _doc: True)
    out: list[Entry] = []
    for doc, rows in zip(docs, listing.rows, strict=True):
        if not keep(doc):
            continue
        meta = doc.get("metadata") or {}
        key = (meta.get("namespace"), meta.get("name"))
        group = rows if listing.grouped else [rows]
        named = [dict(zip(listing.headers, row, strict=True)) for row in group]
        if objects:
            out.append((key, doc, named[0] if named else {}))
        else:
            out += [((*key, cells.get("POD", i)), doc, cells) for i, cells in enumerate(named)]
    return out


def first(printer: Printer, entries: Iterable[Entry], headers: bool) -> None:
    """The listing a watch starts with, when objects are printed: each on its own (kubectl's -w -o json
    prints no List); custom columns with their header once."""
    if printer.columns is not None and headers:
        print_custom_columns(printer.columns, [], headers=True)
    for _, obj, cells in entries:
        printer(obj, cells)


def watch(
    cluster: Any,
    sources: list[tuple[str, str, str | None]],
    read: Callable[[], list[Entry]],
    shown: list[Entry],
    printer: Printer,
) -> None:
    """Print what changes until interrupted. sources: (kind, API path, label selector) of the objects
    whose changes wake it; read: the listing again (its notes on stderr are said once, with the list);
    shown: what the list printed."""
    from gpuctl.cli.cmdutil import interruptible  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.cluster.informer import Informer  # noqa: PLC0415 - lazy: CLI start-up

    def state(obj: dict, cells: dict[str, Any]) -> Any:
        return json.dumps(obj, sort_keys=True, default=str) if printer.objects else cells

    def differs(old: Any, new: Any) -> bool:
        return old != new if printer.objects else changed_cells(old, new)

    seen = {key: state(obj, cells) for key, obj, cells in shown}
    wake = threading.Event()
    informers: list[Informer] = []
    interruptible()
    try:
        for kind, api_path, selector in sources:
            inf = Informer(
                cluster,
                kind,
                api_path,
                label_selector=selector,
                transform=lambda o: o["metadata"].get("resourceVersion"),  # a wake-up: keep nothing else
            )
            inf.add_listener(lambda _informer: wake.set())
            informers.append(inf)
            inf.start()
        while True:
            wake.wait()
            wake.clear()
            with contextlib.redirect_stderr(io.StringIO()):  # the list's notes, once
                entries = read()
            for key, obj, cells in entries:
                now = state(obj, cells)
                if differs(seen.get(key), now):
                    printer(obj, cells)
                seen[key] = now
    except KeyboardInterrupt:
        return
    finally:
        for inf in informers:
            inf.stop()  # and abort its watch
