"""kubectl's output and selection flags of the read verbs, in one place: `-o json|yaml|wide|name|
jsonpath=|jsonpath-file=|custom-columns=|custom-columns-file=`, `--no-headers`, `--sort-by`,
`--field-selector`, `--show-labels` (docs/cli.md).

A read verb builds a `Listing` (its items, what `-o json` prints, and its table) and hands it to
`emit`, which filters, sorts and prints it the way kubectl's printers do:
- `-o json|yaml` of a list is a v1 `List` (apiVersion, kind, metadata, items); of one named object,
  the item itself (kubectl's `get pod x -o json`). The earlier gpuctl's `--json` keeps its bare array.
- `-o name`: TYPE/NAME per item, each once.
- `-o jsonpath=T`: kubectl's template (gpuctl.cli.jsonpath) on that List or object, no newline added;
  missing keys print nothing (kubectl's --allow-missing-template-keys=true).
- `-o custom-columns=H:PATH,...`: a column per spec, a row per item, `<none>` for a missing field,
  padded as kubectl's tabwriter pads (3 spaces, at least 6 wide).
- `--sort-by=PATH`: items (and their table rows) ordered by that field, kubectl's comparison
  (numbers, strings, quantities as quantities; items without the field first).
- `--field-selector k=v,k!=v`: on the items' own fields, evaluated by gpuctl (the rows of `get jobs`
  are computed from several objects, not one API object); an unknown field is refused.

The module is light (json and the table writer); jsonpath and yaml are imported only when a flag
needs them (CLI start-up).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpuctl.cli.errors import CommandError
from gpuctl.cli.output import print_data, table
from gpuctl.cli.terminal import escape_terminal

LIST_HEADER = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}}


def _itself(item: Any) -> Any:
    return item


class Listing:
    """What a read verb lists. items: the documents -o json|yaml|jsonpath|custom-columns see; rows:
    their table cells (same order); name: an item's TYPE/NAME (-o name). (A plain class: a dataclass
    compiles its methods when the module loads, and every read loads this one.)"""

    def __init__(
        self,
        *,
        items: list[Any],
        headers: list[str],
        rows: list[list[Any]],
        name: Callable[[Any], str],
        labels: Callable[[Any], dict] | None = None,
        doc: Callable[[Any], dict] = _itself,
        single: bool = False,
        empty: str = "No resources found.",
        grouped: bool = False,
        legacy: list[Any] | None = None,
    ):
        self.items, self.headers, self.rows, self.name = items, headers, rows, name
        self.labels = labels  # None: the items carry no labels
        # An item's document, made only when an output or a flag reads documents (a plain table of
        # 2,000 job rows does not pay for 2,000 as_dict calls): items are their own documents by default.
        self.doc = doc
        self.single = single  # one named object: -o json prints the item, not a List
        self.empty = empty
        # grouped: rows[i] is the list of table rows of items[i] (a job and its pods), not one row.
        self.grouped = grouped
        # What the earlier gpuctl's --json prints (its flat rows, its bare array); None: the documents.
        self.legacy = legacy


def fmt_of(output: str | None) -> tuple[str | None, str]:
    """(format, its argument): `jsonpath={.a}` -> ("jsonpath", "{.a}")."""
    if not output:
        return None, ""
    name, _, arg = output.partition("=")
    return name, arg


def structured(output: str | None) -> bool:
    """The output prints the items' documents (so the service computes every field)."""
    return fmt_of(output)[0] not in (None, "wide", "name")


def emit(args: Any, listing: Listing) -> int:
    """Filter (--field-selector), sort (--sort-by) and print a listing as -o asks."""
    fmt, arg = fmt_of(getattr(args, "output", None))
    selector = getattr(args, "field_selector", None)
    sort_by = getattr(args, "sort_by", None)
    raw = listing.items
    if selector or sort_by or fmt not in (None, "wide", "name"):
        docs = [listing.doc(i) for i in raw]
        keys = {id(d): i for d, i in zip(docs, raw, strict=True)}
    else:
        docs, keys = raw, {}
    pairs = list(zip(docs, listing.rows, strict=True))
    if selector:
        keep = field_filter(selector, docs)
        pairs = [(i, r) for i, r in pairs if keep(i)]
    if sort_by:
        pairs = sort_pairs(pairs, sort_by)
    items = [i for i, _ in pairs]
    originals = [keys.get(id(i), i) for i in items]  # what name and labels read
    if fmt == "json" and getattr(args, "json", False):
        if listing.legacy is not None and (selector or sort_by):
            raise CommandError(
                "--json prints the earlier gpuctl's rows: use -o json with --sort-by or --field-selector"
            )
        # the earlier gpuctl's --json: the bare array of its rows, which its scripts read
        print_data(listing.legacy if listing.legacy is not None else items, "json")
    elif fmt in ("json", "yaml"):
        print_data(items[0] if listing.single and len(items) == 1 else {**LIST_HEADER, "items": items}, fmt)
    elif fmt == "name":
        for name in dict.fromkeys(listing.name(i) for i in originals):
            print(name)
    elif fmt in ("jsonpath", "jsonpath-file"):
        doc = items[0] if listing.single and len(items) == 1 else {**LIST_HEADER, "items": items}
        sys.stdout.write(run_jsonpath(template_of(fmt, arg), doc))
    elif fmt in ("custom-columns", "custom-columns-file"):
        columns = custom_columns(arg) if fmt == "custom-columns" else custom_columns_file(arg)
        print_custom_columns(columns, items, headers=not getattr(args, "no_headers", False))
    elif not pairs:
        print(listing.empty, file=sys.stderr)
    else:
        headers = listing.headers
        groups = [g if listing.grouped else [g] for _, g in pairs]
        if getattr(args, "show_labels", False) and listing.labels is not None:
            headers = [*headers, "LABELS"]
            groups = [
                [[*r, labels_cell(listing.labels(i))] for r in g]
                for i, g in zip(originals, groups, strict=True)
            ]
        rows = [r for g in groups for r in g]
        table([] if getattr(args, "no_headers", False) else headers, rows)
    return 0


def print_one(args: Any, doc: Any, name: str) -> bool:
    """-o of one described object (`describe`): json|yaml the document, name its TYPE/NAME,
    jsonpath on the document. False: no such output asked (print the description)."""
    fmt, arg = fmt_of(getattr(args, "output", None))
    if fmt in ("json", "yaml"):
        print_data(doc, fmt)
    elif fmt == "name":
        print(name)
    elif fmt in ("jsonpath", "jsonpath-file"):
        sys.stdout.write(run_jsonpath(template_of(fmt, arg), doc))
    else:
        return False
    return True


def labels_cell(labels: dict) -> str:
    """kubectl's LABELS column: k=v,... sorted by key, <none> when there is none."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"


def template_of(fmt: str, arg: str) -> str:
    if fmt == "jsonpath":
        if not arg:
            raise CommandError("template format specified but no template given")
        return arg
    try:
        return Path(arg).read_text()
    except OSError as e:
        raise CommandError(f"error reading --template {arg}, {e.strerror}") from None


def run_jsonpath(template: str, data: Any) -> str:
    from gpuctl.cli.jsonpath import JSONPath, JSONPathError  # noqa: PLC0415 - lazy: CLI start-up

    try:
        path = JSONPath(template)
    except JSONPathError as e:
        raise CommandError(f"error parsing jsonpath {template}, {e}") from None
    try:
        return path.execute(data)
    except JSONPathError as e:
        raise CommandError(f'error executing jsonpath "{template}": {e}') from None


# ----------------------------------------------------------------------------- custom columns
def custom_columns(spec: str) -> list[tuple[str, str]]:
    """(header, template) of `-o custom-columns=NAME:.metadata.name,...` (NewCustomColumnsPrinterFromSpec)."""
    from gpuctl.cli.jsonpath import JSONPathError, relaxed  # noqa: PLC0415 - lazy: CLI start-up

    if not spec:
        raise CommandError("custom-columns format specified but no custom columns given")
    columns = []
    for part in spec.split(","):
        header, sep, path = part.partition(":")
        if not sep:
            raise CommandError(f"unexpected custom-columns spec: {part}, expected <header>:<json-path-expr>")
        try:
            columns.append((header, relaxed(path)))
        except JSONPathError as e:
            raise CommandError(str(e)) from None
    return columns


def custom_columns_file(path: str) -> list[tuple[str, str]]:
    """A file of two lines, the headers and the paths, each whitespace-separated."""
    from gpuctl.cli.jsonpath import JSONPathError, relaxed  # noqa: PLC0415 - lazy: CLI start-up

    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise CommandError(f"error reading template {path}, {e.strerror}") from None
    if len(lines) < 2:
        raise CommandError(
            "invalid template, missing header or spec line. Expected format is one line of space "
            "separated headers, one line of space separated column specs."
        )
    headers, specs = lines[0].split(), lines[1].split()
    if len(headers) != len(specs):
        raise CommandError(
            f"number of headers ({len(headers)}) and field specifications ({len(specs)}) don't match"
        )
    try:
        return [(h, relaxed(s)) for h, s in zip(headers, specs, strict=True)]
    except JSONPathError as e:
        raise CommandError(str(e)) from None


def print_custom_columns(columns: list[tuple[str, str]], items: Sequence[dict], *, headers: bool) -> None:
    from gpuctl.cli.jsonpath import JSONPath, JSONPathError, go_sprint  # noqa: PLC0415 - lazy: CLI start-up

    try:
        paths = [JSONPath(t) for _, t in columns]
    except JSONPathError as e:
        raise CommandError(f"error parsing custom-columns: {e}") from None
    lines = [[h for h, _ in columns]] if headers else []
    for item in items:
        row = []
        for p in paths:
            try:
                found = [v for r in p.find_results(item) for v in r]
            except JSONPathError as e:
                raise CommandError(str(e)) from None
            row.append(",".join(go_sprint(v) for v in found) if found else "<none>")
        lines.append(row)
    tabwrite(lines)


def tabwrite(lines: list[list[str]], out: Any = None) -> None:
    """kubectl's tabwriter (minwidth 6, padding 3, the last cell unpadded); cells escaped as kubectl's."""
    out = out or sys.stdout
    if not lines:
        return
    lines = [[escape_terminal(c) for c in r] for r in lines]
    n = max(len(r) for r in lines)
    widths = [max(6, max((len(r[i]) for r in lines if i < len(r) - 1), default=0) + 3) for i in range(n)]
    for r in lines:
        out.write("".join(c.ljust(widths[i]) if i < len(r) - 1 else c for i, c in enumerate(r)) + "\n")


# ----------------------------------------------------------------------------- sorting
def sort_pairs(pairs: list[tuple[dict, Any]], sort_by: str) -> list[tuple[dict, Any]]:
    """kubectl's --sort-by: the first value the path finds in each item; items without it first."""
    import functools  # noqa: PLC0415 - lazy: CLI start-up

    from gpuctl.cli.jsonpath import JSONPath, JSONPathError, relaxed  # noqa: PLC0415 - lazy: CLI start-up

    try:
        expr = relaxed(sort_by)
        path = JSONPath(expr)
        keys = []
        for item, _ in pairs:
            found = [v for r in path.find_results(item) for v in r]
            keys.append(found[0] if found else _ABSENT)
    except JSONPathError as e:
        raise CommandError(f"sorting error: {e}") from None
    if pairs and all(k is _ABSENT for k in keys):
        raise CommandError(f'couldn\'t find any field with path "{expr}" in the list of objects')

    def cmp(a: tuple[Any, int], b: tuple[Any, int]) -> int:
        if _less(a[0], b[0]):
            return -1
        if _less(b[0], a[0]):
            return 1
        return 0

    order = sorted(zip(keys, range(len(pairs)), strict=True), key=functools.cmp_to_key(cmp))
    return [pairs[i] for _, i in order]


_ABSENT = object()


def _less(a: Any, b: Any) -> bool:
    """isLess of kubectl's sorter.go for decoded JSON: absent < anything; numbers and strings by
    value, strings that both parse as quantities (`2Gi`, `500m`) as quantities; lists element-wise."""
    from gpuctl.quantity import is_quantity, parse_quantity  # noqa: PLC0415 - lazy: CLI start-up

    if a is _ABSENT:
        return b is not _ABSENT
    if b is _ABSENT:
        return False
    if a is None or b is None:
        return a is None and b is not None
    if isinstance(a, bool) or isinstance(b, bool):
        raise CommandError(f"field is an unsortable type: {type(a).__name__}")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if type(a) is not type(b):
            raise CommandError("unsortable interface: mixed int and float")
        return a < b
    if isinstance(a, str) and isinstance(b, str):
        if is_quantity(a) and is_quantity(b):
            return parse_quantity(a) < parse_quantity(b)
        return a < b
    if isinstance(a, list) and isinstance(b, list):
        return all(_less(x, y) for x, y in zip(a, b, strict=False))
    raise CommandError(f"unsortable type: {type(a).__name__}")


# ----------------------------------------------------------------------------- field selectors
def field_filter(selector: str, items: Sequence[dict]) -> Callable[[dict], bool]:
    """`k=v`, `k==v`, `k!=v` joined by commas, on the items' fields (a dotted path for nested ones)."""
    terms = []
    known = {k for i in items for k in _scalar_paths(i)} if items else set()
    for part in selector.split(","):
        part = part.strip()
        if "!=" in part:
            key, value, want = *part.split("!=", 1), False
        elif "==" in part:
            key, value, want = *part.split("==", 1), True
        elif "=" in part:
            key, value, want = *part.split("=", 1), True
        else:
            raise CommandError(f"invalid field selector {part!r}: use field=value[,field!=value]")
        key = key.strip()
        if items and not any(_has_path(i, key) for i in items):
            raise CommandError(
                f"field label not supported: {key} (the fields of these items: {', '.join(sorted(known))})"
            )
        terms.append((key, value.strip(), want))

    def value_of(item: dict, key: str) -> str:
        v: Any = item
        for k in key.split("."):
            v = v.get(k) if isinstance(v, dict) else None
        if isinstance(v, bool):
            return "true" if v else "false"
        return "" if v is None else str(v)

    return lambda item: all((value_of(item, k) == v) == want for k, v, want in terms)


def _scalar_paths(item: dict, prefix: str = "") -> list[str]:
    """The dotted paths of an item's scalar fields (`metadata.name`, `status.phase`): what a field
    selector can name."""
    out = []
    for k, v in item.items():
        if isinstance(v, dict):
            out += _scalar_paths(v, f"{prefix}{k}.") if k != "labels" else []
        elif not isinstance(v, list):
            out.append(prefix + k)
    return out


def _has_path(item: dict, key: str) -> bool:
    """Whether a dotted field path names a field of the item (`status.phase` does not where `status` is a
    word: docs/cli.md, it matched nothing in silence)."""
    v: Any = item
    for k in key.split("."):
        if not isinstance(v, dict) or k not in v:
            return False
        v = v[k]
    return not isinstance(v, (dict, list))  # `status` of an object is no value to compare
