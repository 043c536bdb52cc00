"""A strict reader of the YAML subset kubeconfigs are written in, so a command need not import PyYAML.

kubectl and client-go write kubeconfigs through sigs.k8s.io/yaml (go-yaml): block mappings and block
sequences (a sequence at the same indent as its key, `- key: v` items), plain and quoted scalars,
`{}`/`[]`, `null`, true/false and ints. Reading one with PyYAML cost every command ~25 ms of CPU
(`import yaml`, its reader's unicode regex, its resolver's regexes, then a pure-Python parse).

`loads(text)` gives what `yaml.safe_load(text)` gives (YAML 1.1 as PyYAML's SafeLoader resolves it:
`yes`/`off` are booleans, `010` is octal) or None when the text uses anything outside the subset or
anything whose meaning it does not settle here: anchors, aliases, tags, non-empty flow collections,
several documents, tabs, control characters, duplicate keys, complex or non-string keys, multi-line
plain or quoted scalars, block scalars other than the simple `|`, `|-`, `>`, `>-`, and plain scalars
PyYAML would read as floats, timestamps or non-decimal ints. None means "ask PyYAML"
(`gpuctl.cluster.config.parse_kubeconfig`), which also reports any error; it never means "null".
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any


class _Unsupported(Exception):
    """Outside the subset: the caller falls back to PyYAML."""


_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
# PyYAML's bool resolver matches these spellings only; SafeConstructor maps value.lower().
_BOOLS = {
    **dict.fromkeys(("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
}
# A plain scalar may not start with these (PyYAML's check_plain); `-`, `?`, `:` may when a non-space
# follows, `-` is accepted here (`-x`), `?` and `:` are left to PyYAML.
_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")
_NUMERIC_START = frozenset("-+0123456789.")
_DQ_ESCAPES = {
    "0": "\0",
    "a": "\x07",
    "b": "\x08",
    "t": "\x09",
    "n": "\x0a",
    "v": "\x0b",
    "f": "\x0c",
    "r": "\x0d",
    "e": "\x1b",
    " ": " ",
    '"': '"',
    "\\": "\\",
    "/": "/",
    "N": "\x85",
    "_": "\xa0",
    "L": "\u2028",
    "P": "\u2029",
}
_DQ_CODES = {"x": 2, "u": 4, "U": 8}
_HEX = frozenset("0123456789abcdefABCDEF")
_MAX_KEY = 1024  # PyYAML's longest simple key


@cache
def _non_str_patterns() -> tuple[re.Pattern[str], ...]:
    """PyYAML's float, int and timestamp resolvers (yaml/resolver.py), compiled only when a plain
    scalar starts like a number and is not a decimal int."""
    return (
        re.compile(
            r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
            |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
            |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
            |[-+]?\.(?:inf|Inf|INF)
            |\.(?:nan|NaN|NAN))$""",
            re.X,
        ),
        re.compile(
            r"""^(?:[-+]?0b[0-1_]+
            |[-+]?0[0-7_]+
            |[-+]?(?:0|[1-9][0-9_]*)
            |[-+]?0x[0-9a-fA-F_]+
            |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$""",
            re.X,
        ),
        re.compile(
            r"""^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]
            |[0-9][0-9][0-9][0-9] -[0-9][0-9]? -[0-9][0-9]?
             (?:[Tt]|[ \t]+)[0-9][0-9]?
             :[0-9][0-9] :[0-9][0-9] (?:\.[0-9]*)?
             (?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$""",
            re.X,
        ),
    )


def _plain(value: str) -> Any:
    """A plain scalar as SafeLoader resolves it: null, bool, decimal int or str; else unsupported."""
    if value in _NULLS:
        return None
    if value in _BOOLS:
        return _BOOLS[value]
    first = value[0]
    if first in _NUMERIC_START:
        digits = value[1:] if first in "+-" else value
        if digits.isascii() and digits.isdigit() and (digits == "0" or digits[0] != "0"):
            return int(value)
        if any(p.match(value) for p in _non_str_patterns()):
            raise _Unsupported(value)  # a float, a non-decimal int or a timestamp: PyYAML's to construct
    elif value in ("<<", "="):  # the merge key and the value key have tags of their own
        raise _Unsupported(value)
    return value


def _comment_at(s: str) -> int:
    """Where a ` #` comment starts in `s`, or -1."""
    return s.find(" #")


def _quoted(s: str) -> tuple[str, str]:
    """The quoted scalar `s` starts with, and what follows it on the line; one line only."""
    if s[0] == "'":
        out: list[str] = []
        i = 1
        while True:
            j = s.find("'", i)
            if j < 0:
                raise _Unsupported("multi-line single-quoted scalar")
            out.append(s[i:j])
            if s.startswith("''", j):
                out.append("'")
                i = j + 2
                continue
            return "".join(out), s[j + 1 :]
    out = []
    i, n = 1, len(s)
    while i < n:
        ch = s[i]
        if ch == '"':
            return "".join(out), s[i + 1 :]
        if ch != "\\":
            j = i
            while j < n and s[j] not in '"\\':
                j += 1
            out.append(s[i:j])
            i = j
            continue
        if i + 1 >= n:
            raise _Unsupported("escaped line break")
        esc = s[i + 1]
        if esc in _DQ_ESCAPES:
            out.append(_DQ_ESCAPES[esc])
            i += 2
        elif esc in _DQ_CODES:
            width = _DQ_CODES[esc]
            code = s[i + 2 : i + 2 + width]
            if len(code) != width or not set(code) <= _HEX:
                raise _Unsupported("bad escape")
            out.append(chr(int(code, 16)))
            i += 2 + width
        else:
            raise _Unsupported("bad escape")
    raise _Unsupported("multi-line double-quoted scalar")


def _rest_is_empty(rest: str) -> bool:
    """Only spaces, or spaces then a comment, follow a value."""
    r = rest.lstrip(" ")
    return not r or (r[0] == "#" and len(r) < len(rest))


class _Parser:
    def __init__(self, text: str):
        self.lines = text.split("\n")
        self.pos = -1
        self.indent = -1  # indent and content of the current significant line; indent -1 at the end
        self.content = ""

    def advance(self) -> None:
        """To the next line that is neither blank nor a comment."""
        lines = self.lines
        while True:
            self.pos += 1
            if self.pos >= len(lines):
                self.indent, self.content = -1, ""
                return
            line = lines[self.pos]
            content = line.lstrip(" ")
            if not content or content[0] == "#":
                continue
            indent = len(line) - len(content)
            if indent == 0 and (content.startswith(("---", "...")) or content[0] == "%"):
                raise _Unsupported("document marker or directive")
            self.indent, self.content = indent, content.rstrip(" ")
            return

    # ------------------------------------------------------------------ nodes
    def block(self, indent: int) -> Any:
        """The block collection on the current line, which starts at column `indent`."""
        if self.content == "-" or self.content.startswith("- "):
            return self.sequence(indent)
        return self.mapping(indent)

    def sequence(self, indent: int) -> list[Any]:
        items: list[Any] = []
        while self.indent == indent and (self.content == "-" or self.content.startswith("- ")):
            rest = self.content[1:]
            stripped = rest.lstrip(" ")
            if not stripped or stripped[0] == "#":
                self.advance()
                items.append(self.block(self.indent) if self.indent > indent else None)
            elif stripped == "-" or stripped.startswith("- "):
                self.indent, self.content = indent + 1 + len(rest) - len(stripped), stripped
                items.append(self.sequence(self.indent))
            elif self._starts_mapping(stripped):  # `- key: v`: a mapping at the column of `key`
                self.indent, self.content = indent + 1 + len(rest) - len(stripped), stripped
                items.append(self.mapping(self.indent))
            else:
                items.append(self.value(stripped, indent))
            if self.indent > indent:
                raise _Unsupported("bad indentation")
        return items

    def _starts_mapping(self, s: str) -> bool:
        if s[0] in "'\"":
            return self._quoted_key(s) is not None
        return s[0] not in "|>{[" and self._key_end(s) is not None

    @staticmethod
    def _key_end(s: str) -> int | None:
        """Where the `:` of a plain key `s` starts with is, if `s` is `key: ...` or `key:`."""
        j = s.find(": ")
        if j < 0:
            j = len(s) - 1 if s.endswith(":") else -1
        if j < 0:
            return None
        c = _comment_at(s)
        return None if 0 <= c < j else j

    @staticmethod
    def _quoted_key(s: str) -> tuple[str, str] | None:
        """(key, rest after the `:`) when `s` is `"key": ...`."""
        key, after = _quoted(s)
        after = after.lstrip(" ")
        if after == ":" or after.startswith(": "):
            return key, after[1:]
        return None

    def mapping(self, indent: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while self.indent == indent:
            s = self.content
            if s == "-" or s.startswith("- "):
                raise _Unsupported("sequence entry in a mapping")
            if s[0] in "'\"":
                kv = self._quoted_key(s)
                if kv is None:
                    raise _Unsupported("not a key")
                key, rest = kv
            else:
                j = self._key_end(s)
                if j is None or s[0] in _INDICATORS:
                    raise _Unsupported("not a key")
                raw = s[:j]
                if raw != raw.rstrip(" ") or len(raw) > _MAX_KEY:
                    raise _Unsupported("key")
                key = _plain(raw)
                if not isinstance(key, str):
                    raise _Unsupported("non-string key")
                rest = s[j + 1 :]
            if key in out:
                raise _Unsupported("duplicate key")
            if _rest_is_empty(rest):
                self.advance()
                if self.indent > indent or (
                    self.indent == indent and (self.content == "-" or self.content.startswith("- "))
                ):
                    out[key] = self.block(self.indent)
                else:
                    out[key] = None
            else:
                out[key] = self.value(rest.lstrip(" "), indent)
            if self.indent > indent:
                raise _Unsupported("bad indentation")
        return out

    def value(self, s: str, indent: int) -> Any:
        """The scalar or empty flow collection `s` that ends the current line (a mapping value or a
        sequence item in the collection at `indent`); advances past it."""
        first = s[0]
        if first in "'\"":
            v, after = _quoted(s)
            if not _rest_is_empty(after):
                raise _Unsupported("text after a quoted scalar")
            self.advance()
            return v
        if first in "|>":
            return self.block_scalar(s, indent)
        if first in "[{":
            body = s[:2]
            if body not in ("[]", "{}") or not _rest_is_empty(s[2:]):
                raise _Unsupported("flow collection")
            self.advance()
            return [] if body == "[]" else {}
        if first in _INDICATORS and not (first == "-" and len(s) > 1 and s[1] != " "):
            raise _Unsupported("indicator")
        c = _comment_at(s)
        plain = (s if c < 0 else s[:c]).rstrip(" ")
        if ": " in plain or plain.endswith(":"):
            raise _Unsupported("mapping value in a plain scalar")
        self.advance()
        if self.indent > indent:
            raise _Unsupported("multi-line plain scalar")
        return _plain(plain)

    def block_scalar(self, header: str, indent: int) -> str:
        """A `|`, `|-`, `>` or `>-` scalar without blank lines inside, its lines more indented than
        `indent`; `>` only when every line has the same indent."""
        if header not in ("|", "|-", ">", ">-"):
            raise _Unsupported("block scalar header")
        body: list[str] = []
        at = -1
        blank_seen = False
        i = self.pos + 1
        lines = self.lines
        while i < len(lines):
            line = lines[i]
            if not line.strip(" "):  # blank, or spaces only (however few: still inside the scalar)
                blank_seen = True
                i += 1
                continue
            content = line.lstrip(" ")
            n = len(line) - len(content)
            if at < 0:
                at = n
            if n < at:
                break
            if blank_seen or not content or (header[0] == ">" and content != content.rstrip(" ")):
                raise _Unsupported("blank or space-only lines in a block scalar")
            if header[0] == ">" and n != at:
                raise _Unsupported("more-indented lines in a folded scalar")
            body.append(line[at:])
            i += 1
        if not body or at <= indent or (i == len(lines) and not blank_seen):
            raise _Unsupported("empty or under-indented block scalar, or one without a final line break")
        self.pos = i - 1
        self.advance()
        text = ("\n" if header[0] == "|" else " ").join(body)
        return text if header.endswith("-") else text + "\n"

    def document(self) -> Any:
        self.advance()
        if self.indent < 0:
            raise _Unsupported("empty document")
        doc = self.block(self.indent)
        if self.indent >= 0:
            raise _Unsupported("text after the document")
        return doc


def loads(text: str) -> Any | None:
    """`yaml.safe_load(text)` for the kubeconfig subset, or None: outside it (ask PyYAML)."""
    parser = _Parser(text)
    for line in parser.lines:
        if not line.isprintable():  # tabs, CR, control characters, BOM, unicode line breaks
            return None
    for i, line in enumerate(parser.lines):  # a leading `---`: skip it
        stripped = line.lstrip(" ")
        if stripped and stripped[0] != "#":
            if line == "---" or line.startswith("--- #"):
                parser.pos = i
            break
    try:
        return parser.document()
    except _Unsupported:
        return None
