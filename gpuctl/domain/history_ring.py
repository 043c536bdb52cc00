"""The audit trail's ring (docs/audit.md): a namespace's records in order, one happening kept once, bounded
to the newest HISTORY_MAX_RECORDS and HISTORY_MAX_BYTES, stored as JSON lines. Pure; gpuctl.service.history
reads and writes the ConfigMap that holds it, gpuctl.domain.history decodes the records.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from gpuctl.constants import HISTORY_MAX_BYTES, HISTORY_MAX_RECORDS, HISTORY_SAME_SECONDS
from gpuctl.domain.history import Action, Record

_ACTION_ORDER = {a.value: i for i, a in enumerate(Action)}


def order(r: Record) -> tuple[float, int, str]:
    """Records in time order; within one second, in the order a job's life has them (submitted before
    admitted)."""
    return (r.epoch, _ACTION_ORDER.get(r.action, len(_ACTION_ORDER)), r.key)


def same(a: Record, b: Record) -> bool:
    """One happening seen twice (an Event and a condition, a restart's second look)."""
    return (
        a.uid == b.uid
        and a.action == b.action
        and a.namespace == b.namespace
        and abs(a.epoch - b.epoch) <= HISTORY_SAME_SECONDS
    )


def merge(
    kept: list[Record],
    new: Iterable[Record],
    *,
    max_records: int = HISTORY_MAX_RECORDS,
    max_bytes: int = HISTORY_MAX_BYTES,
) -> tuple[list[Record], int]:
    """The ring after adding `new` to `kept` (oldest first): records already kept (by `same`) are
    skipped; once the ring is full, nothing older than its oldest record comes back in (a restart
    re-reading an old condition must not resurrect what the bound dropped); then the oldest records go
    until at most `max_records` and `max_bytes` of stored lines remain. Returns (ring, records added)."""
    full = len(kept) >= max_records or sum(len(r.line()) + 1 for r in kept) >= max_bytes
    floor = kept[0].epoch if kept and full else float("-inf")
    by_uid: dict[tuple[str, str], list[Record]] = {}
    for r in kept:
        by_uid.setdefault((r.uid, r.action), []).append(r)
    added = []
    for r in new:
        if r.epoch < floor:
            continue
        if any(same(r, k) for k in by_uid.get((r.uid, r.action), [])):
            continue
        by_uid.setdefault((r.uid, r.action), []).append(r)
        added.append(r)
    if not added:
        return kept, 0
    ring = sorted([*kept, *added], key=order)
    ring = ring[-max_records:]
    size = sum(len(r.line()) + 1 for r in ring)
    drop = 0
    while size > max_bytes and drop < len(ring):
        size -= len(ring[drop].line()) + 1
        drop += 1
    ring = ring[drop:]
    kept_keys = {r.key for r in ring}
    return ring, sum(1 for r in added if r.key in kept_keys)


def dump(records: Iterable[Record]) -> str:
    return "".join(r.line() + "\n" for r in records)


def load(text: str | None) -> list[Record]:
    """The stored lines -> records; a line that is not a record (hand-edited) is skipped."""
    out = []
    for line in (text or "").splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and d.get("action"):
            out.append(Record.from_dict(d))
    return out


def for_job(records: Iterable[Record], job: str | None) -> list[Record]:
    return [r for r in records if not job or r.job == job]
