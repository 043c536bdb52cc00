"""`resources.gpu-share`: what the value may say (docs/sharing.md, "gpu-share"). A MIG profile
(`1g.10gb`, `1g.10gb+me`: 1 to 7 compute slices, the memory NVIDIA names) or a GPU memory size, a Kubernetes
quantity (`10Gi`, `10G`, `10GB`, `10gb`: the earlier gpuctl's users wrote all of them). The grammar only:
which slice a pool gives for it is gpuctl.domain.sharing.choose_slice's, once the pool's nodes are read.
Pure, no pydantic: `gpuctl.spec.resources.Resources` applies it when a file is loaded, so a bad value is
refused offline (`--dry-run=client`), naming the field.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from gpuctl.quantity import QuantityError, parse_quantity

SHARE_FIX = "write a GPU memory size such as 10Gi, or a MIG profile such as 1g.10gb (docs/sharing.md)"
_PROFILE_RE = re.compile(r"^[1-7]g\.\d+gb(\+me)?$")
_MEMORY_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]i?)?[bB]?$", re.IGNORECASE)


class GpuShare(NamedTuple):
    """A `gpu-share` value read: as written, and either the MIG profile named or the memory in bytes."""

    text: str
    profile: str | None
    memory: int | None


def parse_share(value: object) -> GpuShare:
    """The value's meaning; ValueError (its text says why; the fix is SHARE_FIX) when it has none."""
    text = str(value).strip()
    if _PROFILE_RE.match(text.lower()):
        return GpuShare(text, text.lower(), None)
    m = _MEMORY_RE.match(text)
    if m:
        unit = (m.group(2) or "").capitalize()
        try:
            n = parse_quantity(m.group(1) + (unit if unit.endswith("i") else unit.upper()))
        except QuantityError:
            n = None
        if n is not None and n > 0:
            return GpuShare(text, None, int(n))
    raise ValueError(f"{value!r} is neither a GPU memory size (10Gi) nor a MIG profile (1g.10gb)")
