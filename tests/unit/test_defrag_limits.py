"""Defragmentation cannot be steered by one tenant against another (issue 33): a job moved within the
window is not moved again, and one team's waiters cause at most DEFRAG_MOVES_PER_TEAM_PER_HOUR moves.

The attack of the issue: team a, within its quota, kept submitting high-priority 8-GPU jobs; each one made
defragmentation move team b's job to the other node, 4 times in 3 minutes (4 restarts), which also used
up the one global cap of 4 moves an hour for every team. Replayed here with the serve-side loop
(gpuctl.server.defrag.Defragmenter over plain objects, its writes recorded), minute by minute.
"""

from __future__ import annotations

from gpuctl.constants import (
    DEFRAG_MOVED_AT_ANNOTATION,
    DEFRAG_MOVED_FOR_TEAM_ANNOTATION,
    DEFRAG_MOVES_PER_TEAM_PER_HOUR,
    DEFRAG_WINDOW_SECONDS,
)
from gpuctl.domain.defrag import Inputs, moved_for_team, plan_move
from tests.unit.test_defrag import A100, MED, run, wait

HOUR = DEFRAG_WINDOW_SECONDS


def test_a_job_moved_within_the_hour_is_not_moved_again():
    now = 10_000.0
    running = [run("victim", {"n1": 4}, moved_at=now - 180), run("y", {"n2": 4}, team="c", prio=MED + 1)]
    p, why = plan_move(Inputs(A100, running, [wait()], set()), pools=None, now=now, settle=30,
                       moved_in_window=1, cap=4)  # fmt: skip
    assert p is None and "a job moved within the hour is not moved again" in why
    # An hour later it may be moved once more.
    later = now - 180 + HOUR + 1
    p, why = plan_move(Inputs(A100, running, [wait()], set()), pools=None, now=later, settle=30,
                       moved_in_window=0, cap=4)  # fmt: skip
    assert p is not None and [v.key for v in p.victims] == ["b/victim"]


def test_one_teams_waiters_cause_at_most_the_team_cap_and_leave_the_rest_of_the_cap_to_others():
    running = [run("x", {"n1": 4}), run("y", {"n2": 4}, team="c")]
    waiting = [wait(team="a", prio=MED + 10), wait(team="d", prio=MED)]
    spent = {"a": DEFRAG_MOVES_PER_TEAM_PER_HOUR}
    p, why = plan_move(Inputs(A100, running, waiting[:1], set()), pools=None, now=1e5, settle=30,
                       moved_in_window=2, cap=4, moved_for_team=spent)  # fmt: skip
    assert p is None and f"team a's jobs had 2 of their {DEFRAG_MOVES_PER_TEAM_PER_HOUR} moves" in why
    # Team d, next in the queue, still gets its move: the global cap (4) is not used up by team a.
    p, why = plan_move(Inputs(A100, running, waiting, set()), pools=None, now=1e5, settle=30,
                       moved_in_window=2, cap=4, moved_for_team=spent)  # fmt: skip
    assert p is not None and p.waiter.team == "d", why


def test_moves_per_team_are_read_back_from_the_moved_workloads():
    def moved(team: str, at: str) -> dict:
        notes = {DEFRAG_MOVED_FOR_TEAM_ANNOTATION: team, DEFRAG_MOVED_AT_ANNOTATION: at}
        return {"metadata": {"name": "w", "namespace": "b", "annotations": notes}}

    ten = 1_795_773_600.0  # 2026-11-27T10:00:00Z
    wls = [
        moved("a", "2026-11-27T10:00:00Z"),
        moved("a", "2026-11-27T10:30:00Z"),
        moved("d", "2026-11-27T08:00:00Z"),
    ]
    assert moved_for_team(wls, since=ten - 3 * HOUR) == {"a": 2, "d": 1}
    assert moved_for_team(wls, since=ten - HOUR) == {"a": 2}  # the 08:00 move is out of the window
