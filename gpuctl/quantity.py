"""Kubernetes resource quantities (`500m`, `16Gi`, `1e3`), parsed exactly as the API server does.

Parsing here rather than letting the API server reject a bad value means the user sees the file, document
and field of the mistake instead of a 422 from some later object. Other modules (quota maths, the admission
webhook) reuse `parse_quantity`, so it is exact (Decimal, no floats) and cached.
"""

from __future__ import annotations

import re
from decimal import Context, Decimal, InvalidOperation
from functools import lru_cache

__all__ = [
    "QuantityError",
    "format_bytes",
    "format_quantity",
    "is_quantity",
    "parse_duration",
    "parse_quantity",
]

# <signedNumber><suffix> where suffix is a binary SI suffix, a decimal SI suffix or a decimal exponent
# (k8s.io/apimachinery/pkg/api/resource/quantity.go). The exponent is tried first so that `1E3` is 1000 while
# a bare `1E` is one exa. Lowercase `k` only: `1K` is rejected by Kubernetes and here.
_QUANTITY_RE = re.compile(
    r"(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>[eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?"
)

_BINARY: dict[str, int] = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_EXP: dict[str, int] = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Enough digits that no legal quantity is rounded (1Ei has 19 digits, users rarely write more than a few).
_CTX = Context(prec=80, Emax=10_000, Emin=-10_000)
# Kubernetes caps exponents far lower; this only keeps `1e99999999` from building an absurd number.
_MAX_EXP = 1000


class QuantityError(ValueError):
    """Raised for a string that is not a Kubernetes quantity; the message quotes the input."""


@lru_cache(maxsize=4096)
def parse_quantity(s: str) -> Decimal:
    """Return the exact value of Kubernetes quantity `s` (`"500m"` → 0.5, `"1Gi"` → 1073741824).

    Negative values parse (Kubernetes accepts them syntactically); callers that need a positive amount check
    the sign themselves. Raises QuantityError for anything the API server would reject, including
    surrounding whitespace, `1GiB`, `1K` and the empty string.
    """
    if not isinstance(s, str):
        raise QuantityError(f"quantity must be a string, got {type(s).__name__}")
    m = _QUANTITY_RE.fullmatch(s)
    if m is None:
        raise QuantityError(f"{s!r} is not a Kubernetes quantity")
    number = Decimal(m.group("num"))
    suffix = m.group("suffix")
    if not suffix:
        return number
    if suffix in _BINARY:
        return _CTX.multiply(number, Decimal(_BINARY[suffix]))
    exp = int(suffix[1:]) if suffix[0] in "eE" and len(suffix) > 1 else _DECIMAL_EXP[suffix]
    if abs(exp) > _MAX_EXP:
        raise QuantityError(f"{s!r}: exponent {exp} is out of range")
    try:
        return number.scaleb(exp, _CTX)
    except InvalidOperation as exc:  # pragma: no cover - guarded by _MAX_EXP
        raise QuantityError(f"{s!r} is out of range") from exc


def is_quantity(s: object) -> bool:
    """True if `s` is a string Kubernetes would accept as a quantity."""
    if not isinstance(s, str):
        return False
    try:
        parse_quantity(s)
    except QuantityError:
        return False
    return True


def format_quantity(d: Decimal) -> str:
    """A Decimal as the shortest quantity Kueue accepts: whole units, else milli-units rounded down
    (so a sum of capacities never claims more than the nodes have)."""
    d = d.normalize()
    if d == d.to_integral_value():
        return str(int(d))
    milli = (d * 1000).to_integral_value(rounding="ROUND_FLOOR")
    return f"{int(milli)}m"


def format_bytes(value: object) -> str:
    """Kueue reports memory in bytes; print it in the largest binary unit that keeps it readable."""
    if value in (None, ""):
        return "0"
    try:
        b = parse_quantity(str(value))
    except Exception:
        return str(value)
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if b >= size:
            q = (b / Decimal(size)).quantize(Decimal("0.1"))
            return f"{q.normalize():f}{unit}"
    return f"{b.normalize():f}"


# A duration as gpuctl's YAML and flags write it: 2h, 90m, 1h30m, 45s, 1d, or whole seconds.
_DURATION_RE = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_duration(value: object) -> int | None:
    """`2h`, `90m`, `1h30m`, `45s`, `1d` or whole seconds (3600, "3600") -> seconds; None for anything
    else (callers say what is wrong, naming their field or flag). Zero is a duration ("0s")."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, float):
        return int(value) if value.is_integer() and value >= 0 else None
    if isinstance(value, int):
        return value if value >= 0 else None
    text = value.strip().lower().replace(" ", "")
    if text.isdigit():
        return int(text)
    m = _DURATION_RE.fullmatch(text)
    if not text or m is None:
        return None
    d, h, mi, sec = (int(g or 0) for g in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + sec
