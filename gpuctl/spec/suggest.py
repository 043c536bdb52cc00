"""Closest-match suggestions ("did you mean …?"), shared by the spec loader and the admission webhook."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest"]


def closest(word: str, candidates: Iterable[str], cutoff: float = 0.6) -> str | None:
    """Return the candidate most similar to `word` (difflib ratio ≥ `cutoff`), or None if none is close.

    Matching ignores case first so `Training` finds `training`, then falls back to the exact spelling so
    that among `gpuType`/`gpu_type`/`gpu-type` the one the user's style matches wins.
    """
    pool = list(dict.fromkeys(candidates))
    if not pool:
        return None
    lowered = {c.lower(): c for c in reversed(pool)}
    if word.lower() in lowered and word not in pool:
        return lowered[word.lower()]
    hits = difflib.get_close_matches(word, pool, n=1, cutoff=cutoff)
    if hits:
        return hits[0]
    hits = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=cutoff)
    return lowered[hits[0]] if hits else None
