"""Idle reclamation's rules (issue 40): gpuctl.domain.idle's policy, verdict, keep and decision."""

from __future__ import annotations

import json

import pytest

from gpuctl.constants import DCGM_ENGINE_ACTIVE, IDLE_POLICY_ANNOTATION, Kind
from gpuctl.domain.idle import (
    IdleAction,
    KindRule,
    PolicyError,
    decide,
    effective,
    judge,
    keep_clamped,
    policy,
    read_policy,
    target_replicas,
)
from gpuctl.domain.utilisation import Device, DeviceUse

NOW = 1_000_000.0
RULE = KindRule(action="stop", after=600, floor=0.01)


def device(values: list[float], step: int = 60, mean: float | None = 0.0, gpu: str = "0") -> DeviceUse:
    """A device whose per-step peaks end at NOW, one per `step`."""
    n = len(values)
    peaks = [(NOW - step * (n - 1 - i), v) for i, v in enumerate(values)]
    return DeviceUse(
        "team-a", "nb-0", "main", Device("n0", gpu, f"GPU-{gpu}"), DCGM_ENGINE_ACTIVE, mean, 10.0, peaks
    )


def test_defaults_per_kind_and_a_kind_override() -> None:
    p = policy({"training": {"action": "stop", "after": 7200}}, after=1800)
    assert p.rule(Kind.NOTEBOOK) == KindRule("stop", 1800, 0.01)
    assert p.rule(Kind.INFERENCE) == KindRule("floor", 1800, 0.01)
    assert p.rule(Kind.COMPUTE) == KindRule("floor", 1800, 0.01)
    assert p.rule(Kind.TRAINING) == KindRule("stop", 7200, 0.01)
    assert policy().rule(Kind.TRAINING).action == IdleAction.REPORT  # gangs and training: reported only
    assert policy({"notebook": {"action": "none"}}).rule(Kind.NOTEBOOK) is None


def test_an_action_a_kind_cannot_take_is_refused() -> None:
    with pytest.raises(PolicyError, match="notebook: action 'floor'"):
        policy({"notebook": {"action": "floor"}})
    with pytest.raises(PolicyError, match="inference: action 'stop'"):
        policy({"inference": {"action": "stop"}})


def test_the_stored_policy_round_trips_and_a_hand_edit_is_an_error() -> None:
    p = policy({"notebook": {"after": 900}}, dry_run=True, keep_max=3600, source="pool a")
    flavor = {"metadata": {"annotations": {IDLE_POLICY_ANNOTATION: p.annotation()}}}
    assert read_policy(flavor, "pool a") == p
    assert json.loads(p.annotation())["kinds"]["notebook"] == {"action": "stop", "after": 900, "floor": 0.01}
    assert read_policy({"metadata": {}}, "pool a") is None
    with pytest.raises(PolicyError, match="pool a"):
        read_policy({"metadata": {"annotations": {IDLE_POLICY_ANNOTATION: "{not json"}}}, "pool a")


def test_the_quotas_policy_wins_whole_over_the_pools() -> None:
    pool, quota = policy(source="pool a"), policy(dry_run=True, source="quota team-a")
    assert effective(quota, pool) is quota
    assert effective(None, pool) is pool
    assert effective(None, None) is None


def test_idle_when_every_step_of_the_window_is_measured_and_under_the_floor() -> None:
    v = judge([device([0.0] * 11), device([0.005] * 11, gpu="1")], RULE, now=NOW, step=60, gpus=2)
    assert v.idle and v.peak == 0.005 and v.coverage == 1.0 and v.devices == 2
    assert v.evidence() == (
        "GPU activity peak 0.5%, mean 0% over 10m on 2 device(s), 2 GPU(s) "
        "(floor 1%; 100% of the window measured)"
    )


def test_one_busy_step_of_one_device_is_not_idle() -> None:
    v = judge([device([0.0] * 11), device([0.0] * 5 + [0.02] + [0.0] * 5, gpu="1")], RULE, now=NOW, step=60)
    assert not v.idle and v.why == "active: peak 2% in the last 10m"


def test_activity_before_the_window_does_not_count() -> None:
    assert judge([device([0.9] * 5 + [0.0] * 10)], RULE, now=NOW, step=60).idle


def test_no_series_or_a_gap_is_no_evidence() -> None:
    v = judge([], RULE, now=NOW, step=60)
    assert not v.idle and "no GPU series" in v.why
    half = judge([device([0.0] * 5)], RULE, now=NOW, step=60)  # an exporter down for half the window
    assert not half.idle and half.why == "only 50% of the last 10m measured"


def test_a_keep_holds_until_it_ends_and_a_dry_run_only_reports() -> None:
    idle = judge([device([0.0] * 11)], RULE, now=NOW, step=60)
    assert decide(RULE, idle, dry_run=False, kept_until=None, now=NOW).acts
    kept = decide(RULE, idle, dry_run=False, kept_until=NOW + 60, now=NOW)
    assert not kept.acts and not kept.due and kept.kept_until == NOW + 60
    assert decide(RULE, idle, dry_run=False, kept_until=NOW - 1, now=NOW).acts  # the keep has ended
    dry = decide(RULE, idle, dry_run=True, kept_until=None, now=NOW)
    assert dry.due and not dry.acts
    report = decide(KindRule("report", 600), idle, dry_run=False, kept_until=None, now=NOW)
    assert report.due and not report.acts


def test_a_keep_past_the_cap_is_cut_to_it_from_when_it_is_seen() -> None:
    assert keep_clamped(NOW + 3600, NOW, 4 * 3600) is None
    assert keep_clamped(NOW + 10 * 86400, NOW, 4 * 3600) == NOW + 4 * 3600
    assert keep_clamped(None, NOW, 3600) is None


def test_a_service_goes_to_its_floor_or_to_zero() -> None:
    assert target_replicas("floor", 4, 1) == 1
    assert target_replicas("zero", 4, 1) == 0
    assert target_replicas("floor", 1, 1) is None
    assert target_replicas("report", 4, 1) is None
