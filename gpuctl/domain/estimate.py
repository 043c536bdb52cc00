"""When will it run, at the latest: a bound on a waiting job's start, with its basis (pure).

Kueue stops a job once it has been admitted for its maxRuntime (`job.maxRuntime`, Kueue's
`kueue.x-k8s.io/max-exec-time-seconds`: the Workload is deactivated, its pods go, its quota is
released), so the GPUs a waiting job needs are free by known times when the work holding them declared
one. `estimate` plays the job's pool forward from the Snapshot "why is it waiting" was judged against
(gpuctl.domain.explain): every holder ends at its deadline; at each step Kueue admits, in its order
(higher priority first, then older), every waiting job that fits (BestEffortFIFO: one that does not fit
lets the next try), each of which then runs for its whole maxRuntime; the first time the job itself
fits is the bound. The basis names what it waits for: "finetune-a ends by 14:05, then position 1".

What the bound assumes (docs/queueing.md, "When will it run: the estimate"):
- nothing arrives later that Kueue admits first: higher-priority work, or new work that fits room
  this job cannot use yet (BestEffortFIFO admits it), and nothing is preempted for such work;
- Kueue's order among the waiting work the caller can see is priority, then age (across teams Kueue
  also takes work within its team's quota before borrowed work);
- each step (a holder ends, the next job is admitted) takes at most `slack` seconds;
- budget that lets the job borrow now stays idle; a job waiting for its own team's quota borrows
  nothing, and its team's jobs ahead of it in other pools find room there;
- by count (a team member, who may not read other teams' pods or Workloads): the pool is one bin of free
  GPUs (whether one node holds each pod is Kueue's business), and other teams' work in it has no end
  the caller can see.
A job ending before its maxRuntime frees its GPUs sooner, which can also let a job queued behind this
one take the room first (BestEffortFIFO); the bound does not cover that.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuctl.constants import ESTIMATE_STEP_SLACK_SECONDS
from gpuctl.domain.explain import (
    NO_NODES,
    QUOTA,
    Demand,
    Snapshot,
    Verdict,
    _fits,
    _larger_than_every_node,
    _place,
)
from gpuctl.domain.gang import set_aside_start

Clock = Callable[[float], str]  # epoch seconds -> what users read ("14:20")


def clock_text(now: float) -> Clock:
    """Local wall-clock time rounded up to the minute ("14:20"), with the date when not within a day."""

    def text(ts: float) -> str:
        up = math.ceil(ts / 60) * 60
        fmt = "%H:%M" if up - now < 20 * 3600 else "%b %d %H:%M"
        return time.strftime(fmt, time.localtime(up))

    return text


@dataclass(frozen=True)
class Estimate:
    """The latest start of a waiting job under the assumptions of the module docstring, or why there is
    no bound. `starts_by` is epoch seconds; `basis` is what it waits for, in users' words."""

    starts_by: float | None
    basis: str
    now: bool = False  # fits now: Kueue is admitting it
    position: int | None = None
    waits_for: tuple[str, ...] = ()  # the ends it waits for, in order
    text: str = field(default="", compare=False)  # summary(), rendered once with the caller's clock

    @property
    def bounded(self) -> bool:
        return self.starts_by is not None

    def summary(self) -> str:
        return self.text

    def as_dict(self) -> dict[str, Any]:
        iso = (
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.starts_by))
            if self.starts_by is not None
            else None
        )
        return {
            "startsBy": iso,
            "bounded": self.bounded,
            "now": self.now,
            "basis": self.basis,
            "waitsFor": list(self.waits_for),
            "summary": self.text,
        }


def _make(starts_by: float | None, basis: str, clock: Clock, **kw: Any) -> Estimate:
    if kw.get("now"):
        text = "starts now (Kueue is admitting it)"
    elif starts_by is None:
        text = f"no bound: {basis}"
    else:
        text = f"starts by {clock(starts_by)} at the latest ({basis})"
    return Estimate(starts_by, basis, text=text, **kw)


@dataclass
class _Entry:
    demand: Demand
    target: bool = False
    budget_only: bool = False  # the team's job in another pool: takes quota, not this pool's room


def _short(label: str, namespace: str) -> str:
    """A job as the basis names it: `name` in the caller's own namespace, else `namespace/name`."""
    ns, _, name = label.partition("/")
    return name if ns == namespace and name else label


def estimate(
    snap: Snapshot,
    demand: Demand,
    *,
    now: float,
    verdict: Verdict | None = None,
    slack: float = ESTIMATE_STEP_SLACK_SECONDS,
    clock: Clock | None = None,
) -> Estimate:
    """The latest start of `demand` (a waiting job, or a new one in a dry run) in `snap`, from `now`."""
    clock = clock or clock_text(now)
    verdict = verdict or snap.verdict(demand)
    ns, pool = demand.namespace, demand.pool

    def short(label: str) -> str:
        return _short(label, ns)

    if verdict.starts:
        return _make(now, "it fits now", clock, now=True, position=verdict.position)
    if not pool:
        # An any-pool job (resources.pool a list, or only a GPU type): Kueue takes the first of its pools
        # with room, and the play below follows one pool's releases; no bound rather than a wrong one.
        pools = ", ".join(demand.any_of) or "every pool of GPU type " + ", ".join(
            demand.gpu_types or ("any",)
        )
        return _make(
            None,
            f"it may run in any of {pools}: gpuctl bounds the start of jobs of one pool only",
            clock,
            position=verdict.position,
        )
    nodes = snap.pool_nodes(pool)
    if verdict.cause == NO_NODES or not nodes:
        return _make(None, f"pool {pool} has no Ready nodes", clock, position=verdict.position)
    if demand.gpus > max(nodes.values()):
        return _make(
            None, f"no node of {pool} has {demand.gpus} GPUs: it never fits", clock, position=verdict.position
        )
    too_big = _larger_than_every_node(snap, demand)
    if too_big:
        return _make(None, too_big, clock, position=verdict.position)
    team = snap.teams.get(ns)
    if team is None:
        return _make(None, f"namespace {ns} has no quota", clock)
    # Waiting for its own team's quota: the team's releases count too, and it borrows nothing.
    budget = verdict.cause == QUOTA and team.quota is not None
    quota = team.quota or 0
    if budget and demand.total > quota:
        return _make(
            None,
            f"it needs {demand.total} GPUs, more than {ns}'s quota of {quota}: it runs only on GPUs "
            "borrowed from other teams, whose work it cannot wait out",
            clock,
            position=verdict.position,
        )

    by_count = snap.pool_reserved is not None
    # Issue 31: a gang whose nodes `gpuctl serve --defrag` set aside waits only for the jobs on them.
    held = set_aside_start(
        demand.label,
        snap.nodes,
        ((short(h.label), h.nodes, h.ends_by) for h in snap.holders),
        now=now,
        slack=slack,
        clock=clock,
        visible=not by_count,
    )
    if held is not None:
        return _make(held[0], held[1], clock, position=verdict.position)
    if by_count:
        assert snap.pool_reserved is not None
        free = {pool: max(sum(nodes.values()) - snap.pool_reserved.get(pool, 0), 0)}
    else:
        free = dict(snap.free(pool))
    used = team.used if budget else 0

    # Releases: (effective time, seq, label, room per node, quota GPUs, deadline).
    events: list[tuple[float, int, str, dict[str, int], int, float]] = []
    never: list[str] = []  # what holds room it may need, with no end known

    def release(label: str, end: float | None, room: dict[str, int], quota_gpus: int, what: str) -> None:
        if not room and not quota_gpus:
            return
        if end is None or math.isinf(end):
            never.append(what)
            return
        heapq.heappush(events, (end + slack, len(events), label, room, quota_gpus, end))

    seen_in_pool = 0
    for h in snap.holders:
        in_pool = h.pool == pool
        quota_gpus = h.gpus if budget and h.namespace == ns else 0
        if not in_pool and not quota_gpus:
            continue
        room: dict[str, int] = {}
        if in_pool:
            seen_in_pool += h.gpus
            room = {pool: h.gpus} if by_count else {n: g for n, g in h.nodes.items() if n in free}
        release(h.label, h.ends_by, room, quota_gpus, f"{short(h.label)} (running) has no maxRuntime")
    if by_count:
        assert snap.pool_reserved is not None
        hidden = snap.pool_reserved.get(pool, 0) - seen_in_pool
        if hidden > 0:
            never.append(
                f"other teams hold {hidden} GPUs of {pool} and their ends are not visible to you "
                "(an admin's estimate sees them)"
            )

    # The waiting work it may meet, in Kueue's order; work that can never fit the pool takes nothing.
    biggest = max(nodes.values())
    entries: list[_Entry] = [_Entry(demand, target=True)]
    for queued in snap.waiting.values():
        for d in queued:
            if d.label == demand.label or (demand.uid and d.uid == demand.uid) or d.gpus <= 0:
                continue
            if d.pool == pool and d.gpus <= biggest:
                entries.append(_Entry(d))
            elif budget and d.namespace == ns:
                entries.append(_Entry(d, budget_only=True))
    entries.sort(key=lambda e: (-e.demand.priority, e.demand.created or "~", e.target))
    # Jobs of one size (pods x GPUs, whether they take the team's quota or room) fit alike: each step
    # admits, in Kueue's order, the first waiting job of each size while jobs of that size fit. A step
    # costs the sizes, not the queue (2,000 waiting jobs: milliseconds).
    sizes: dict[tuple[int, int, bool, bool], list[int]] = {}
    for i, e in enumerate(entries):
        d = e.demand
        sizes.setdefault((d.gpus, d.pods, e.budget_only, budget and d.namespace == ns), []).append(i)
    head = dict.fromkeys(sizes, 0)

    t = now
    admitted: list[str] = []  # jobs of the queue the play admits before it
    waited: list[tuple[str, float]] = []  # the ends it waited for: (label, deadline)
    while True:
        turns = [(ix[0], key) for key, ix in sizes.items() if ix]
        heapq.heapify(turns)
        while turns:
            i, key = heapq.heappop(turns)
            e = entries[i]
            d = e.demand
            if e.budget_only:
                room_ok = True
            elif d.pods == 1:
                room_ok = max(free.values(), default=0) >= d.gpus
            else:
                room_ok = _fits(free, d.pods, d.gpus)
            quota_ok = not key[3] or used + d.total <= quota
            if not (room_ok and quota_ok):
                continue  # nor does any later job of its size, until something ends
            if e.target:
                return _bounded(t, now, waited, admitted, verdict, clock, short)
            took: dict[str, int] = {}
            if not e.budget_only:
                before = dict(free)
                _place(free, d.pods, d.gpus)
                took = {n: before[n] - free[n] for n in free if before[n] != free[n]}
            quota_gpus = d.total if key[3] else 0
            used += quota_gpus
            admitted.append(d.label)
            end = t + d.max_runtime if d.max_runtime else None
            release(d.label, end, took, quota_gpus, f"{short(d.label)}, ahead of it, has no maxRuntime")
            head[key] += 1
            ix = sizes[key]
            if head[key] < len(ix):
                heapq.heappush(turns, (ix[head[key]], key))
        for key, taken in head.items():
            if taken:
                sizes[key] = sizes[key][taken:]
                head[key] = 0
        if not events:
            return _unbounded(never, verdict, clock)
        at = events[0][0]
        while events and events[0][0] == at:
            _, _, label, room, quota_gpus, end = heapq.heappop(events)
            for n, g in room.items():
                free[n] = free.get(n, 0) + g
            used -= quota_gpus
            waited.append((label, end))
        t = at


def _bounded(
    t: float,
    now: float,
    waited: list[tuple[str, float]],
    admitted: list[str],
    verdict: Verdict,
    clock: Clock,
    short: Callable[[str], str],
) -> Estimate:
    pos = f"position {verdict.position}" if verdict.position else "its turn"
    if not waited:
        basis = f"{pos}: Kueue admits it at its next pass"
        return _make(max(t, now), basis, clock, position=verdict.position)
    label, end = waited[-1]
    who = short(label)
    if label in admitted:
        who += ", admitted before it,"
    basis = f"{who} ends by {clock(end)}, then {pos}"
    return _make(t, basis, clock, position=verdict.position, waits_for=tuple(short(w) for w, _ in waited))


def _unbounded(never: list[str], verdict: Verdict, clock: Clock) -> Estimate:
    if never:
        basis = "; ".join(never[:3]) + (f" (and {len(never) - 3} more)" if len(never) > 3 else "")
    else:
        basis = verdict.message or "nothing it waits for has an end"
    return _make(None, basis, clock, position=verdict.position)
