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

from gpuctl.constants import ESTIMATE_STEP_SLACK_SECONDS, GPU_UNITS
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
from gpuctl.domain.objects import rfc3339
from gpuctl.domain.sharing import profile_of_resource, units_to_gpus

Clock = Callable[[float], str]  # epoch seconds -> what users read ("2026-11-29 14:20 UTC")


def clock_text(now: float) -> Clock:
    """Local wall-clock time rounded up to the minute, always with its date and zone
    ("2026-11-29 14:20 UTC"): a bare "14:20" read on another day or from another zone is wrong (docs/cli.md).
    `now` is kept for callers that render relative to the present."""

    def text(ts: float) -> str:
        up = math.ceil(ts / 60) * 60
        return time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(up))

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
        iso = rfc3339(self.starts_by) if self.starts_by is not None else None
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
    team: bool = False  # takes the team's budget (the job waits for its team's quota)

    @property
    def size(self) -> tuple[int, int, str, bool, bool]:
        """Jobs of one size fit alike: pods x GPUs (or the slice they ask), room or budget only, team."""
        d = self.demand
        return (d.gpus, d.pods, d.slice, self.budget_only, self.team)


def _short(label: str, namespace: str) -> str:
    """A job as the basis names it: `name` in the caller's own namespace, else `namespace/name`."""
    ns, _, name = label.partition("/")
    return name if ns == namespace and name else label


# A release: (effective time, seq, label, GPUs per node, slices, budget units, deadline).
_Release = tuple[float, int, str, dict[str, int], dict[str, int], int, float]


@dataclass
class _Play:
    """The job's pool played forward: free GPUs per node (by count: one bin for the pool), free slices
    of GPUs per slice resource, the team's budget used (in 1/GPU_UNITS GPU), and the releases to come.
    Whole GPUs and each slice resource are separate room: a MIG node advertises them apart."""

    pool: str
    slack: float
    free: dict[str, int]
    slices: dict[str, int]
    used: int = 0
    quota: int = 0
    events: list[_Release] = field(default_factory=list)
    never: list[str] = field(default_factory=list)  # what holds room it may need, with no end known

    def release(
        self,
        label: str,
        end: float | None,
        room: dict[str, int],
        slices: dict[str, int],
        units: int,
        what: str,
    ) -> None:
        if not room and not slices and not units:
            return
        if end is None or math.isinf(end):
            self.never.append(what)
            return
        heapq.heappush(self.events, (end + self.slack, len(self.events), label, room, slices, units, end))

    def fits(self, e: _Entry) -> bool:
        d = e.demand
        if e.budget_only:
            room_ok = True
        elif d.slice:
            room_ok = self.slices.get(d.slice, 0) >= d.pods
        elif d.pods == 1:
            room_ok = max(self.free.values(), default=0) >= d.gpus
        else:
            room_ok = _fits(self.free, d.pods, d.gpus)
        return room_ok and (not e.team or self.used + d.total_units <= self.quota)

    def take(self, e: _Entry) -> tuple[dict[str, int], dict[str, int], int]:
        """Admit an entry: the room, slices and budget it takes (what its end gives back)."""
        d = e.demand
        took: dict[str, int] = {}
        slices: dict[str, int] = {}
        if e.budget_only:
            pass
        elif d.slice:
            self.slices[d.slice] = self.slices.get(d.slice, 0) - d.pods
            slices = {d.slice: d.pods}
        else:
            before = dict(self.free)
            _place(self.free, d.pods, d.gpus)
            took = {n: before[n] - self.free[n] for n in self.free if before[n] != self.free[n]}
        units = d.total_units if e.team else 0
        self.used += units
        return took, slices, units

    def advance(self) -> tuple[float, list[tuple[str, float]]]:
        """The next releases (all at one time): what they give back, and (label, deadline) of each."""
        at = self.events[0][0]
        out = []
        while self.events and self.events[0][0] == at:
            _, _, label, room, slices, units, end = heapq.heappop(self.events)
            for n, g in room.items():
                self.free[n] = self.free.get(n, 0) + g
            for r, c in slices.items():
                self.slices[r] = self.slices.get(r, 0) + c
            self.used -= units
            out.append((label, end))
        return at, out


def estimate(
    snap: Snapshot,
    demand: Demand,
    *,
    now: float,
    verdict: Verdict | None = None,
    slack: float = ESTIMATE_STEP_SLACK_SECONDS,
    clock: Clock | None = None,
) -> Estimate:
    """The latest start of `demand` (a waiting job, or a new one in a dry run) in `snap`, from `now`:
    why there is no bound (_no_bound), else the pool played forward (_start, _queue, _run)."""
    clock = clock or clock_text(now)
    verdict = verdict or snap.verdict(demand)
    if verdict.starts:
        return _make(now, "it fits now", clock, now=True, position=verdict.position)
    why = _no_bound(snap, demand, verdict)
    if why:
        return _make(None, why, clock, position=verdict.position)
    team = snap.teams[demand.namespace]
    # Waiting for its own team's quota: the team's releases count too, and it borrows nothing.
    budget = verdict.cause == QUOTA and team.quota is not None
    if budget and demand.total_units > (team.quota or 0) * GPU_UNITS:
        return _make(
            None,
            f"it needs {units_to_gpus(demand.total_units)} GPUs, more than {demand.namespace}'s quota of "
            f"{team.quota}: it runs only on GPUs borrowed from other teams, whose work it cannot wait out",
            clock,
            position=verdict.position,
        )
    # docs/distributed.md, "No starvation": a gang whose nodes `gpuctl serve --defrag` set aside waits only
    # for the jobs on them.
    held = set_aside_start(
        demand.label,
        snap.nodes,
        ((_short(h.label, demand.namespace), h.nodes, h.ends_by) for h in snap.holders),
        now=now,
        slack=slack,
        clock=clock,
        visible=snap.pool_reserved is None,
    )
    if held is not None:
        return _make(held[0], held[1], clock, position=verdict.position)
    play = _start(snap, demand, budget, slack)
    return _run(play, _queue(snap, demand, budget), now, verdict, clock)


def _no_bound(snap: Snapshot, demand: Demand, verdict: Verdict) -> str:
    """Why the job's start has no bound before any play ("" when it may have one)."""
    pool = demand.pool
    if not pool:
        # An any-pool job (resources.pool a list, or only a GPU type): Kueue takes the first of its pools
        # with room, and the play follows one pool's releases; no bound rather than a wrong one.
        pools = ", ".join(demand.any_of) or "every pool of GPU type " + ", ".join(
            demand.gpu_types or ("any",)
        )
        return f"it may run in any of {pools}: gpuctl bounds the start of jobs of one pool only"
    nodes = snap.pool_nodes(pool)
    if verdict.cause == NO_NODES or not nodes:
        return f"pool {pool} has no Ready nodes"
    if demand.gpus > max(nodes.values()):
        return f"no node of {pool} has {demand.gpus} GPUs: it never fits"
    if demand.slice:
        total, _ = snap.slices_held(pool, demand.slice)
        if total < demand.pods:
            kind = profile_of_resource(demand.slice) or "shared GPU replica"
            return f"{pool} offers {total} {kind} ({demand.slice}) and it needs {demand.pods}: it never fits"
    too_big = _larger_than_every_node(snap, demand)
    if too_big:
        return too_big
    if demand.namespace not in snap.teams:
        return f"namespace {demand.namespace} has no quota"
    return ""


def _start(snap: Snapshot, demand: Demand, budget: bool, slack: float) -> _Play:
    """The play's state now: free room and slices in the pool, the team's budget, and what ends when."""
    ns, pool = demand.namespace, demand.pool
    nodes = snap.pool_nodes(pool)
    by_count = snap.pool_reserved is not None
    if snap.pool_reserved is not None:
        free = {pool: max(sum(nodes.values()) - snap.pool_reserved.get(pool, 0), 0)}
    else:
        free = dict(snap.free(pool))
    wanted = {demand.slice} | {d.slice for q in snap.waiting.values() for d in q if d.pool == pool}
    slices = {}
    for r in sorted(wanted - {""}):
        total, held = snap.slices_held(pool, r)
        slices[r] = total - sum(held.values())
    team = snap.teams[ns]
    play = _Play(pool, slack, free, slices, team.used_units if budget else 0, (team.quota or 0) * GPU_UNITS)
    seen_in_pool = 0
    for h in snap.holders:
        in_pool = h.pool == pool
        units = (h.units or h.gpus * GPU_UNITS) if budget and h.namespace == ns else 0
        if not in_pool and not units:
            continue
        room: dict[str, int] = {}
        if in_pool:
            seen_in_pool += h.gpus
            room = {pool: h.gpus} if by_count else {n: g for n, g in h.nodes.items() if n in free}
        held = {r: c for r, c in h.slices.items() if r in slices} if in_pool else {}
        what = f"{_short(h.label, ns)} (running) has no maxRuntime"
        play.release(h.label, h.ends_by, {n: g for n, g in room.items() if g}, held, units, what)
    if snap.pool_reserved is not None:
        hidden = snap.pool_reserved.get(pool, 0) - seen_in_pool
        if hidden > 0:
            play.never.append(
                f"other teams hold {hidden} GPUs of {pool} and their ends are not visible to you "
                "(an admin's estimate sees them)"
            )
    return play


def _queue(snap: Snapshot, demand: Demand, budget: bool) -> list[_Entry]:
    """The waiting work it may meet, in Kueue's order (higher priority, then older); work that can
    never fit the pool takes nothing."""
    pool, ns = demand.pool, demand.namespace
    biggest = max(snap.pool_nodes(pool).values())
    entries = [_Entry(demand, target=True, team=budget)]
    for queued in snap.waiting.values():
        for d in queued:
            if (
                d.label == demand.label
                or (demand.uid and d.uid == demand.uid)
                or (d.gpus <= 0 and not d.slice)
            ):
                continue
            team = budget and d.namespace == ns
            if d.pool == pool and d.gpus <= biggest:
                entries.append(_Entry(d, team=team))
            elif team:
                entries.append(_Entry(d, budget_only=True, team=True))
    entries.sort(key=lambda e: (-e.demand.priority, e.demand.created or "~", e.target))
    return entries


def _run(play: _Play, entries: list[_Entry], now: float, verdict: Verdict, clock: Clock) -> Estimate:
    """Each step admits, in Kueue's order, the first waiting job of each size while jobs of that size
    fit (BestEffortFIFO: one that does not fit lets the next try), then the next releases come; the
    first step the job itself fits is the bound. A step costs the sizes, not the queue (2,000 waiting
    jobs: milliseconds)."""
    ns = next(e.demand.namespace for e in entries if e.target)
    sizes: dict[tuple, list[int]] = {}
    for i, e in enumerate(entries):
        sizes.setdefault(e.size, []).append(i)
    t = now
    admitted: list[str] = []  # jobs of the queue the play admits before it
    waited: list[tuple[str, float]] = []  # the ends it waited for: (label, deadline)
    while True:
        if _admit(play, entries, sizes, t, admitted, ns):
            return _bounded(t, now, waited, admitted, verdict, clock, lambda label: _short(label, ns))
        if not play.events:
            return _unbounded(play.never, verdict, clock)
        t, ended = play.advance()
        waited += ended


def _admit(
    play: _Play, entries: list[_Entry], sizes: dict[tuple, list[int]], t: float, admitted: list[str], ns: str
) -> bool:
    """One step at time t: admit what fits in Kueue's order; True when the job itself fits."""
    head = dict.fromkeys(sizes, 0)
    turns = [(ix[0], key) for key, ix in sizes.items() if ix]
    heapq.heapify(turns)
    while turns:
        i, key = heapq.heappop(turns)
        e = entries[i]
        if not play.fits(e):
            continue  # nor does any later job of its size, until something ends
        if e.target:
            return True
        d = e.demand
        took, slices, units = play.take(e)
        admitted.append(d.label)
        end = t + d.max_runtime if d.max_runtime else None
        play.release(
            d.label, end, took, slices, units, f"{_short(d.label, ns)}, ahead of it, has no maxRuntime"
        )
        head[key] += 1
        ix = sizes[key]
        if head[key] < len(ix):
            heapq.heappush(turns, (ix[head[key]], key))
    for key, taken in head.items():
        if taken:
            sizes[key] = sizes[key][taken:]
    return False


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
