"""bench/trace_idle.py (issue 40's idle day, a model): the same day is played alike twice, the policy is
gpuctl's own verdict (gpuctl.domain.idle.judge) and stops only idle notebooks, and what it hands back is
counted."""

from __future__ import annotations

from bench.trace_idle import AFTER_MINUTES, _idle, day, make_day, play


def test_the_day_is_the_same_for_both_designs_and_the_policy_hands_gpus_back() -> None:
    d = day(7)
    assert d == day(7)  # deterministic per seed
    without, with_ = d["without"], d["with"]
    assert without["handed_back_gpu_hours"] == 0 and without["notebook_stops"] == 0
    assert with_["notebook_stops"] > 0 and with_["handed_back_gpu_hours"] > 0
    assert with_["training_wait_p50_min"] <= without["training_wait_p50_min"]


def test_the_verdict_is_gpuctls_idle_rule_over_the_last_window() -> None:
    nb = next(j for j in make_day(7) if j.kind == "notebook")
    nb.history = [0.002] * (AFTER_MINUTES + 1)
    assert _idle(nb, 600)
    nb.history[-30] = 0.5  # one busy minute inside the window
    assert not _idle(nb, 600)
    nb.history = [0.5] + [0.002] * AFTER_MINUTES  # busy just before the window: idle
    assert _idle(nb, 600)
    nb.history = [0.002] * AFTER_MINUTES  # running for less than the window: not yet
    assert not _idle(nb, 600)


def test_training_is_never_stopped() -> None:
    jobs = make_day(3)
    play(jobs, policy=True)
    assert all(j.stopped_at is None for j in jobs if j.kind == "training")
