"""Backfill by maxRuntime onto a node held for a start bound (issue 45, gpuctl.domain.backfill; pure)."""

from __future__ import annotations

from gpuctl.domain.backfill import plan_backfill
from gpuctl.domain.gang import set_aside_tolerations
from gpuctl.domain.setaside import squatters
from tests.unit.test_setaside import NOW, _pod, _promised, _ts, _wl

HOLD = {"n1": "ta/held"}  # the node held for ta/held, shown the bound NOW + 100
SLACK = 15.0


def _waiting(job: str, runtime: int | None, ns: str = "tb", **kw) -> dict:
    wl = _wl(job, ns, pods=1, gpus=1, prio=100, **kw)
    if runtime is not None:
        wl["spec"]["maximumExecutionTimeSeconds"] = runtime
    return wl


def _granted(wl: dict, held: str = "ta/held") -> dict:
    spec = wl["spec"]["podSets"][0]["template"]["spec"]
    spec["tolerations"] = [*spec["tolerations"], *set_aside_tolerations(*held.split("/"))]
    return wl


def test_a_waiting_job_that_ends_before_the_bound_is_granted_and_one_that_would_not_is_not() -> None:
    held = _promised("held", NOW + 100, gpus=8)
    wls = [held, _waiting("short", 85), _waiting("long", 86), _waiting("none", None)]
    plan = plan_backfill(wls, HOLD, now=NOW, slack=SLACK)
    assert plan.grant == {"tb/job-short": ("short", "ta/held")}  # NOW + 85 + 15 <= NOW + 100
    assert plan.withdraw == {}
    # another pool's job, an admitted one, a gang, and nothing held: none granted
    other = _waiting("other", 10)
    other["metadata"]["labels"] = {"runwhere.ai/pool": "q"}
    running = _waiting("running", 10, state="admitted")
    gang = _wl("gang", "tb", pods=2, gpus=1)
    gang["spec"]["maximumExecutionTimeSeconds"] = 10
    assert plan_backfill([held, other, running, gang], HOLD, now=NOW, slack=SLACK).grant == {}
    assert plan_backfill(wls, {}, now=NOW, slack=SLACK).grant == {}
    assert plan_backfill(wls, {"n1": "ta/gang"}, now=NOW, slack=SLACK).grant == {}  # a gang's: no bound


def test_a_grant_is_kept_while_in_time_and_withdrawn_from_a_waiting_job_once_it_is_not() -> None:
    held = _promised("held", NOW + 100, gpus=8)
    short = _granted(_waiting("short", 85))
    assert plan_backfill([held, short], HOLD, now=NOW, slack=SLACK) == plan_backfill([], {}, now=NOW, slack=0)
    later = plan_backfill([held, short], HOLD, now=NOW + 1, slack=SLACK)
    assert later.withdraw == {"tb/job-short": ("short", "ta/held")} and later.grant == {}
    gone = plan_backfill([held, short], {}, now=NOW, slack=SLACK)  # the hold ended
    assert gone.withdraw == {"tb/job-short": ("short", "")}
    started = _granted(_waiting("short", 85, state="admitted"))  # too late to change: it runs to its end
    assert plan_backfill([held, started], HOLD, now=NOW + 50, slack=SLACK).withdraw == {}


def test_backfill_that_ends_by_the_bound_is_no_squatter_and_one_admitted_too_late_is() -> None:
    held = _promised("held", NOW + 100, gpus=8)
    pod = _pod("n1", 1)
    pod["metadata"].update(namespace="tb", annotations={"kueue.x-k8s.io/workload": "job-short"})
    pod["spec"]["tolerations"] = [*set_aside_tolerations("tb", "short"), *set_aside_tolerations("ta", "held")]

    def admitted_at(t: float) -> dict:
        wl = _granted(_waiting("short", 85, state="admitted"))
        wl["status"]["conditions"][0]["lastTransitionTime"] = _ts(t)
        return wl

    assert squatters({"n1": [pod]}, [held, admitted_at(NOW + 15)], HOLD) == {}  # ends at NOW + 100
    late = squatters({"n1": [pod]}, [held, admitted_at(NOW + 16)], HOLD)
    assert list(late) == ["tb/job-short"]


def test_a_serve_of_other_pools_leaves_their_grants_alone() -> None:
    held = _promised("held", NOW + 100, gpus=8)
    short = _granted(_waiting("short", 85))  # granted by the serve of pool p, whose hold this one cannot see
    assert plan_backfill([held, short], {}, now=NOW, slack=SLACK, pools=["q"]).withdraw == {}
    assert plan_backfill([held, short], {}, now=NOW, slack=SLACK, pools=["p"]).withdraw != {}
