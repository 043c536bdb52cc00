"""kubectl's JSONPath dialect (k8s.io/client-go/util/jsonpath), for `-o jsonpath=`, `custom-columns=`
and `--sort-by`.

Why written here: no package on PyPI implements kubectl's templates (`{range .items[*]}...{end}`,
`{"\\n"}`, unions `['a', 'b']`, filters `[?(@.x=="y")]`, missing keys printed as nothing). The
JSONPath libraries there (jsonpath-ng, python-jsonpath, ...) implement Goessner's or RFC 9535's
expression language, not kubectl's text templates. This module (jsonpath.go: the walk, Go's printing)
and gpuctl.cli.jsonpath_parser (parser.go, node.go) follow client-go construct by construct (same node
types, same walk, same errors where a user sees them); tests/unit/test_jsonpath.py carries client-go's
own test table (jsonpath_test.go).

The input is JSON data (dicts, lists, str, int, float, bool, None), as kubectl's printers see an
unstructured object: a map prints as JSON with sorted keys (Go's json.Marshal of a map), a number
or a string as Go's fmt.Print writes it.

Imported only when one of those flags is used (CLI start-up: tests/unit/test_cli_startup.py).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from gpuctl.cli.jsonpath_parser import (
    Array,
    Field,
    Filter,
    Identifier,
    JSONPathError,
    ListNode,
    Literal,
    Param,
    Recursive,
    Text,
    Union,
    Wildcard,
    parse,
)

__all__ = ["JSONPath", "JSONPathError", "format_results", "go_json", "go_sprint", "parse", "relaxed"]


# ----------------------------------------------------------------------------- evaluation
_MISSING = object()


class JSONPath:
    """A parsed template. allow_missing_keys: a field that is not there gives nothing (kubectl's
    --allow-missing-template-keys, true by default) instead of an error."""

    def __init__(self, template: str, *, allow_missing_keys: bool = True):
        self.template = template
        self.root = parse(template)
        self.allow_missing_keys = allow_missing_keys

    # -- FindResults, with range/end handled as client-go does (a flat node list, ranges nested)
    def find_results(self, data: Any) -> list[list[Any]]:
        results, _ = self._find(self.root.nodes, 0, data, 0)
        return results

    def _find(self, nodes: list[Any], i: int, data: Any, depth: int) -> tuple[list[list[Any]], int]:
        """Results of nodes[i:] on data, up to the `{end}` that closes the range `depth` deep;
        (results, the index after that end)."""
        out: list[list[Any]] = []
        while i < len(nodes):
            node = nodes[i]
            if isinstance(node, ListNode) and _is_ident(node, "end"):
                if depth == 0:
                    raise JSONPathError("not in range, nothing to end")
                return out, i + 1
            ranged = isinstance(node, ListNode) and any(_is_ident(n, "range") for n in node.nodes)
            if ranged:
                values = self._walk([data], ListNode([n for n in node.nodes if not _is_ident(n, "range")]))
                body_end = len(nodes)
                for v in values:
                    inner, body_end = self._find(nodes, i + 1, v, depth + 1)
                    out.extend(inner)
                if not values:  # the body is still checked (client-go's FindResults(nil))
                    _, body_end = self._find(nodes, i + 1, None, depth + 1)
                i = body_end
                continue
            out.append(self._walk([data], node))
            i += 1
        return out, i

    def execute(self, data: Any) -> str:
        return "".join(format_results(r) for r in self.find_results(data))

    def _walk(self, values: list[Any], node: Any) -> list[Any]:
        if isinstance(node, ListNode):
            for n in node.nodes:
                values = self._walk(values, n)
            return values
        if isinstance(node, Text):
            return [node.text]
        if isinstance(node, Field):
            return self._field(values, node.name)
        if isinstance(node, Array):
            return self._array(values, node.params)
        if isinstance(node, Filter):
            return self._filter(values, node)
        if isinstance(node, Literal):
            return [node.value for _ in values]
        if isinstance(node, Wildcard):
            return [c for v in values if v is not None for c in _children(v)]
        if isinstance(node, Recursive):
            return self._recursive(values)
        if isinstance(node, Union):
            return [r for lst in node.lists for r in self._walk(values, lst)]
        if isinstance(node, Identifier):
            if node.name == "range":
                return values
            if node.name == "end":
                raise JSONPathError("not in range, nothing to end")
            raise JSONPathError(f"unrecognized identifier {node.name}")
        raise JSONPathError(f"unexpected Node {node!r}")

    def _field(self, values: list[Any], name: str) -> list[Any]:
        if not values:
            return []
        out = []
        for v in values:
            if isinstance(v, dict) and name in v:
                out.append(v[name])
        if not out and not self.allow_missing_keys:
            raise JSONPathError(f"{name} is not found")
        return out

    def _array(self, values: list[Any], params: tuple[Param, Param, Param]) -> list[Any]:
        out: list[Any] = []
        for v in values:
            if v is None:
                continue
            if not isinstance(v, list):
                raise JSONPathError(f"{_go_type(v)} is not array or slice")
            n = len(v)
            start = params[0].value if params[0].known else 0
            if start < 0:
                start += n
            end = params[1].value if params[1].known else n
            if end < 0 or (end == 0 and params[1].derived):
                end += n
            if end == start:
                return out
            if start >= n or start < 0:
                raise JSONPathError(f"array index out of bounds: index {start}, length {n}")
            if end > n or end < 0:
                raise JSONPathError(f"array index out of bounds: index {end - 1}, length {n}")
            if start > end:
                raise JSONPathError(f"starting index {start} is greater than ending index {end}")
            step = 1
            if params[2].known:
                if params[2].value <= 0:
                    raise JSONPathError("step must be > 0")
                step = params[2].value
            out.extend(v[start:end:step])
        return out

    def _recursive(self, values: list[Any]) -> list[Any]:
        out: list[Any] = []
        for v in values:
            if isinstance(v, str):
                if v:
                    out.append(v)  # Go walks its bytes, which hold nothing further
                continue
            children = _children(v)
            if children:
                out.append(v)
                out.extend(self._recursive(children))
        return out

    def _filter(self, values: list[Any], node: Filter) -> list[Any]:
        out: list[Any] = []
        for v in values:
            if not isinstance(v, list):
                raise JSONPathError(f"{_go_sprint(v)} is not array or slice and cannot be filtered")
            for item in v:
                try:
                    lefts = self._walk([item], node.left)
                except JSONPathError:
                    if node.op != "exists":
                        raise
                    lefts = []
                if node.op == "exists":
                    if lefts:
                        out.append(item)
                    continue
                if not lefts:
                    continue
                if len(lefts) > 1:
                    raise JSONPathError("can only compare one element at a time")
                rights = self._walk([item], node.right)
                if not rights:
                    continue
                if len(rights) > 1:
                    raise JSONPathError("can only compare one element at a time")
                if _compare(lefts[0], rights[0], node.op):
                    out.append(item)
        return out


def _is_ident(node: Any, name: str) -> bool:
    if isinstance(node, Identifier):
        return node.name == name
    return isinstance(node, ListNode) and len(node.nodes) == 1 and _is_ident(node.nodes[0], name)


def _children(v: Any) -> list[Any]:
    if isinstance(v, dict):
        return list(v.values())
    if isinstance(v, (list, str)):
        return list(v)
    return []


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    return "other"


def _compare(left: Any, right: Any, op: str) -> bool:
    """Go text/template's eq/ne/lt/le/gt/ge (the fork client-go uses): both sides of one basic kind;
    bools only for == and !=."""
    if op not in ("<", ">", "==", "!=", "<=", ">="):
        raise JSONPathError(f"unrecognized filter operator {op}")
    kl, kr = _kind(left), _kind(right)
    if kl != kr:
        raise JSONPathError("incompatible types for comparison")
    if kl == "other":
        raise JSONPathError("invalid type for comparison")
    if kl == "bool" and op not in ("==", "!="):
        raise JSONPathError("invalid type for comparison")
    return {
        "<": lambda: left < right,
        ">": lambda: left > right,
        "==": lambda: left == right,
        "!=": lambda: left != right,
        "<=": lambda: left <= right,
        ">=": lambda: left >= right,
    }[op]()


# ----------------------------------------------------------------------------- printing like Go
def go_json(v: Any) -> str:
    """Go's json.Marshal of decoded JSON: compact, map keys sorted, <, > and & escaped, a float in
    its shortest form (2 not 2.0; an exponent below 1e-6 and from 1e21)."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{go_json(str(k))}:{go_json(v[k])}" for k in sorted(v, key=str)) + "}"
    if isinstance(v, list):
        return "[" + ",".join(go_json(x) for x in v) + "]"
    if isinstance(v, float) and math.isfinite(v):
        if v != 0 and (abs(v) < 1e-6 or abs(v) >= 1e21):
            m, e = repr(v).split("e") if "e" in repr(v) else (f"{v:e}".split("e"))
            return f"{m.removesuffix('.0')}e{int(e):+03d}".replace("e+0", "e+").replace("e-0", "e-")
        return repr(v).removesuffix(".0")
    text = json.dumps(v, ensure_ascii=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def go_float(f: float) -> str:
    """fmt.Print of a float64: strconv's shortest 'g' form (an exponent below 1e-4 and from 1e+06 on
    of the shortest digits: 1e+06, 1.5e-05; else 2.2, 100000)."""
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if math.isnan(f):
        return "NaN"
    if f == 0:
        return "-0" if math.copysign(1, f) < 0 else "0"
    sign, digits, exponent = Decimal(repr(f)).normalize().as_tuple()
    assert isinstance(exponent, int)
    ds = "".join(map(str, digits))
    exp = len(ds) + exponent - 1  # the decimal exponent of the first digit
    neg = "-" if sign else ""
    if exp < -4 or exp >= 6:
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{neg}{mant}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    if exponent >= 0:
        return neg + ds + "0" * exponent
    point = len(ds) + exponent
    return (
        neg
        + (ds[:point] if point > 0 else "0")
        + "."
        + ("0" * -point if point < 0 else "")
        + ds[max(point, 0) :]
    )


def go_sprint(v: Any) -> str:
    """fmt.Sprint of a decoded JSON value (custom-columns' cells): map[k:v] with sorted keys, [a b]."""
    return _go_sprint(v)


def _go_sprint(v: Any) -> str:
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return go_float(v)
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{_go_sprint(v[k])}" for k in sorted(v)) + "]"
    if isinstance(v, list):
        return "[" + " ".join(_go_sprint(x) for x in v) + "]"
    return str(v)


def _go_type(v: Any) -> str:
    if isinstance(v, dict):
        return "map[string]interface {}"
    return {"bool": "bool", "int": "int64", "float": "float64", "string": "string"}.get(_kind(v), "<nil>")


def format_results(results: Iterable[Any]) -> str:
    """PrintResults: maps and lists as JSON, the rest as text, joined by single spaces."""
    out = []
    for r in results:
        if isinstance(r, (dict, list)):
            out.append(go_json(r))
        elif r is None:
            out.append("null")
        else:
            out.append(_go_sprint(r))
    return " ".join(out)


# ----------------------------------------------------------------------------- kubectl's helpers
_RELAXED = re.compile(r"^\{\.?([^{}]+)\}$|^\.?([^{}]+)$")


def relaxed(expr: str) -> str:
    """RelaxedJSONPathExpression (custom-columns, --sort-by): `a.b`, `.a.b`, `{a.b}` -> `{.a.b}`."""
    if not expr:
        return expr
    m = _RELAXED.match(expr)
    if m is None:
        raise JSONPathError(
            "unexpected path string, expected a 'name1.name2' or '.name1.name2' or '{name1.name2}' "
            "or '{.name1.name2}'"
        )
    return "{." + (m.group(1) or m.group(2)) + "}"
