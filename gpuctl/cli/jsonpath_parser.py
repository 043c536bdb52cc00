"""kubectl's JSONPath templates parsed (k8s.io/client-go/util/jsonpath's parser.go and node.go): the
node types and the parser, construct by construct, with client-go's errors where a user sees them.
gpuctl.cli.jsonpath evaluates the tree (jsonpath.go) and prints the results as Go does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


class JSONPathError(ValueError):
    """A template that does not parse, or does not apply to the data."""


# ----------------------------------------------------------------------------- nodes (node.go)
@dataclass
class ListNode:
    nodes: list[Any] = field(default_factory=list)


@dataclass
class Text:
    text: str


@dataclass
class Field:
    name: str


@dataclass
class Identifier:
    name: str  # range | end


@dataclass
class Literal:
    value: Any  # int, float or bool of a filter's operand


@dataclass
class Param:
    value: int = 0
    known: bool = False
    derived: bool = False


@dataclass
class Array:
    params: tuple[Param, Param, Param]


@dataclass
class Filter:
    left: ListNode
    right: ListNode
    op: str


@dataclass
class Union:
    lists: list[ListNode]


class Wildcard:
    pass


class Recursive:
    pass


_SLICE = re.compile(r"^(-?\d*)(:-?\d*)?(:-?\d*)?$")
_DICT_KEY = re.compile(r"^'([^']*)'$")
_FILTER = re.compile(r"^([^!<>=]+)([!<>=]+)(.+?)$")
_TERMINATORS = set(" \t\r\n.,[]$@{}")
_NUMBER = re.compile(r"[+-]?[\d.]*")


# ----------------------------------------------------------------------------- parser (parser.go)
class _Parser:
    def __init__(self, text: str):
        self.input = text
        self.pos = 0
        self.start = 0
        self.root = ListNode()

    def consume(self) -> str:
        value = self.input[self.start : self.pos]
        self.start = self.pos
        return value

    def next(self) -> str:
        if self.pos >= len(self.input):
            self.pos += 1  # eof; backup() undoes it
            return ""
        self.pos += 1
        return self.input[self.pos - 1]

    def backup(self) -> None:
        self.pos -= 1

    def peek(self) -> str:
        return self.input[self.pos] if self.pos < len(self.input) else ""

    def parse(self) -> ListNode:
        self.parse_text()
        return self.root

    def parse_text(self) -> None:
        while True:
            i = self.input.find("{", self.pos)
            if i < 0:
                self.pos = len(self.input)
                if self.pos > self.start:
                    self.root.nodes.append(Text(self.consume()))
                return
            self.pos = i
            if self.pos > self.start:
                self.root.nodes.append(Text(self.consume()))
            self.pos += 1
            self.consume()
            cur = ListNode()
            self.root.nodes.append(cur)
            if self.parse_inside(cur):
                continue
            return

    def parse_inside(self, cur: ListNode) -> bool:
        """Parse one action up to its `}`; True when the text after it remains to be parsed."""
        while True:
            rest = self.input[self.pos :]
            if rest.startswith("}"):
                self.pos += 1
                self.consume()
                return True
            if rest.startswith("[?("):
                self.parse_filter(cur)
                continue
            if rest.startswith(".."):
                if cur.nodes and isinstance(cur.nodes[-1], Recursive):
                    raise JSONPathError("invalid multiple recursive descent")
                self.pos += 2
                self.consume()
                cur.nodes.append(Recursive())
                if _alnum(self.peek()):
                    self.parse_field(cur)
                continue
            r = self.next()
            if r == "" or r in "\r\n":
                raise JSONPathError("unclosed action")
            if r == " " or r in "@$":
                self.consume()
            elif r == "[":
                self.parse_array(cur)
            elif r in "\"'":
                self.parse_quote(cur, r)
            elif r == ".":
                self.parse_field(cur)
            elif r in "+-" or r.isdigit():
                self.backup()
                self.parse_number(cur)
            elif _alnum(r):
                self.backup()
                self.parse_identifier(cur)
            else:
                raise JSONPathError(f"unrecognized character in action: U+{ord(r):04X} {r!r}")

    def parse_identifier(self, cur: ListNode) -> None:
        while not _terminator(self.next()):
            pass
        self.backup()
        value = self.consume()
        cur.nodes.append(Literal(value == "true") if value in ("true", "false") else Identifier(value))

    def parse_number(self, cur: ListNode) -> None:
        m = _NUMBER.match(self.input, self.pos)
        assert m is not None
        self.pos = m.end()
        value = self.consume()
        try:
            cur.nodes.append(Literal(int(value)))
            return
        except ValueError:
            pass
        try:
            cur.nodes.append(Literal(float(value)))
        except ValueError:
            raise JSONPathError(f"cannot parse number {value}") from None

    def parse_array(self, cur: ListNode) -> None:
        while True:
            r = self.next()
            if r in ("", "\n"):
                raise JSONPathError("unterminated array")
            if r == "]":
                break
        text = self.consume()[1:-1]
        if text == "*":
            text = ":"
        parts = text.split(",")
        if len(parts) > 1:
            cur.nodes.append(Union([_parse_action(f"[{p.strip(' ')}]") for p in parts]))
            return
        m = _DICT_KEY.match(text)
        if m:
            cur.nodes.extend(_parse_action(f".{m.group(1)}").nodes)
            return
        m = _SLICE.match(text)
        if m is None:
            raise JSONPathError(f"invalid array index {text}")
        params = [Param(), Param(), Param()]
        for i, raw in enumerate(m.groups()):
            raw = raw or ""
            if raw:
                if i > 0:
                    raw = raw[1:]
                if i > 0 and raw == "":
                    params[i].known = False
                else:
                    try:
                        params[i] = Param(int(raw), True)
                    except ValueError:
                        raise JSONPathError(f"array index {raw} is not a number") from None
            elif i == 1:
                params[i] = Param(params[0].value + 1, True, True)
        cur.nodes.append(Array((params[0], params[1], params[2])))

    def parse_filter(self, cur: ListNode) -> None:
        self.pos += 3
        self.consume()
        begin = end = False
        pair = ""
        while True:
            r = self.next()
            if r in ("", "\n"):
                raise JSONPathError("unterminated filter")
            if r in "\"'":
                if not begin:
                    begin, pair = True, r
                    continue
                if self.input[self.pos - 2] != "\\" and r == pair:
                    end = True
            elif r == ")" and begin == end:
                break
        if self.next() != "]":
            raise JSONPathError("unclosed array expect ]")
        text = self.consume()[:-2]
        m = _FILTER.match(text)
        if m is None:
            cur.nodes.append(Filter(_parse_action(text), ListNode(), "exists"))
        else:
            cur.nodes.append(Filter(_parse_action(m.group(1)), _parse_action(m.group(3)), m.group(2)))

    def parse_quote(self, cur: ListNode, end: str) -> None:
        while True:
            r = self.next()
            if r in ("", "\n"):
                raise JSONPathError("unterminated quoted string")
            if r == end and self.input[self.pos - 2] != "\\":
                break
        value = self.consume()
        cur.nodes.append(Text(_unquote(value)))

    def parse_field(self, cur: ListNode) -> None:
        self.consume()
        while True:
            r = self.next()
            if r == "\\":
                self.next()
            elif _terminator(r):
                self.backup()
                break
        value = self.consume()
        cur.nodes.append(Wildcard() if value == "*" else Field(value.replace("\\", "")))


def _alnum(r: str) -> bool:
    return r == "_" or r.isalnum()


def _terminator(r: str) -> bool:
    return r == "" or r in _TERMINATORS


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


def _unquote(s: str) -> str:
    """Go's strconv.UnquoteChar loop (UnquoteExtend): a quoted string of either quote."""
    quote, body = s[0], s[1:-1]
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(body):
            raise JSONPathError(f"unquote string {s} error invalid syntax")
        e = body[i + 1]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e == quote or e in "\"'":
            if e != quote:
                raise JSONPathError(f"unquote string {s} error invalid syntax")
            out.append(e)
            i += 2
        elif e in "xuU":
            n = {"x": 2, "u": 4, "U": 8}[e]
            try:
                out.append(chr(int(body[i + 2 : i + 2 + n], 16)))
            except ValueError:
                raise JSONPathError(f"unquote string {s} error invalid syntax") from None
            i += 2 + n
        elif e in "01234567":
            out.append(chr(int(body[i + 1 : i + 4], 8)))
            i += 4
        else:
            raise JSONPathError(f"unquote string {s} error invalid syntax")
    return "".join(out)


def _parse_action(text: str) -> ListNode:
    p = _Parser("{" + text + "}")
    root = p.parse()
    return root.nodes[0]


def parse(template: str) -> ListNode:
    """The template's tree; JSONPathError when it does not parse."""
    return _Parser(template).parse()
