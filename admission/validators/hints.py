"""The "did you mean" and "use one of" parts of denial texts."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from gpuctl.spec.suggest import closest

__all__ = ["closest_memo", "did_you_mean", "names"]


@lru_cache(maxsize=4096)
def closest_memo(word: str, candidates: frozenset[str] | tuple[str, ...]) -> str | None:
    """closest(), memoised: difflib costs tens of microseconds and the same typo tends to come back."""
    return closest(word, candidates if isinstance(candidates, tuple) else sorted(candidates))


def did_you_mean(word: str, candidates: frozenset[str] | tuple[str, ...]) -> str:
    hit = closest_memo(word, candidates)
    return f' (did you mean "{hit}"?)' if hit else ""


def names(items: Iterable[str], limit: int = 8) -> str:
    """Sorted, comma-separated, at most `limit` of them ("none" for none)."""
    items = sorted(items)
    if not items:
        return "none"
    more = f", … {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
