"""gpuctl's Kubernetes PriorityClasses (gpuctl.service.priority_classes): what `gpuctl adopt` plans for the
earlier gpuctl's classes. The cluster side (delete and create, the policy that holds them at Never) is in
tests/integration/test_earlier_client.py."""

from __future__ import annotations

import pytest

from gpuctl.constants import PRIORITY_CLASS, PRIORITY_CLASS_PREEMPTION, PRIORITY_VALUE, Priority
from gpuctl.service import priority_classes as pc
from gpuctl.service.adopt_plan import AdoptPlan


def _earlier(name: str, value: int, policy: str | None) -> dict:
    """A PriorityClass as the earlier gpuctl's client creates it (policy None: the API server's default)."""
    obj = {"apiVersion": pc.API_VERSION, "kind": pc.KIND, "metadata": {"name": name}, "value": value}
    if policy:
        obj["preemptionPolicy"] = policy
    return obj


EARLIER = [
    _earlier("gpuctl-high", 1_000_000, "PreemptLowerPriority"),
    _earlier("gpuctl-medium", 500_000, "PreemptLowerPriority"),
    _earlier("gpuctl-low", 100, "Never"),
]


def test_gpuctl_keeps_the_earlier_names_and_values_and_never_preempts():
    objs = {o["metadata"]["name"]: o for o in pc.desired()}
    assert set(objs) == set(PRIORITY_CLASS.values())
    for p in Priority:
        o = objs[PRIORITY_CLASS[p]]
        assert o["value"] == PRIORITY_VALUE[p]
        assert o["preemptionPolicy"] == PRIORITY_CLASS_PREEMPTION == "Never"
        assert o["globalDefault"] is False


def test_the_earlier_clients_preempting_classes_are_recreated_the_never_one_kept():
    changes = {c.name: c for c in pc.decide(EARLIER)}
    assert set(changes) == {"gpuctl-high", "gpuctl-medium"}
    assert all(c.recreate for c in changes.values())
    assert changes["gpuctl-high"].reason == "preemptionPolicy PreemptLowerPriority"
    (line,) = pc.lines([changes["gpuctl-high"]])
    assert line.startswith("priorityclass/gpuctl-high re-created with preemptionPolicy Never")
    assert "could preempt Kueue-admitted pods" in line


@pytest.mark.parametrize(
    ("have", "reason"),
    [
        (_earlier("gpuctl-low", 100, None), "preemptionPolicy PreemptLowerPriority"),  # defaulted
        (_earlier("gpuctl-low", 7, "Never"), "value 7"),
        ({**_earlier("gpuctl-low", 100, "Never"), "globalDefault": True}, "globalDefault"),
    ],
)
def test_any_other_value_or_policy_is_recreated(have, reason):
    changes = [c for c in pc.decide([*pc.desired()[:2], have]) if c.name == "gpuctl-low"]
    assert [(c.recreate, c.reason) for c in changes] == [(True, reason)]


def test_missing_classes_are_created_and_a_second_run_plans_nothing():
    assert [(c.name, c.recreate) for c in pc.decide([])] == [(n, False) for n in PRIORITY_CLASS.values()]
    assert pc.decide(pc.desired()) == []
    assert pc.decide([*pc.desired(), _earlier("other", 5, None)]) == []  # not ours


def test_a_priority_class_change_makes_the_adoption_plan_non_empty():
    assert AdoptPlan().empty
    assert not AdoptPlan(priority_classes=pc.decide(EARLIER)).empty
