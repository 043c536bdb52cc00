"""gang-fits and set-aside-toleration (issue 31): a multi-node job that no pool or required topology level
can ever hold is refused with its numbers and fix; only multi-node jobs may tolerate the set-aside taint.
The fixture's pool a100 has two nodes, of 8 and 4 GPUs, without rack labels."""

from __future__ import annotations

import pytest

from admission.rules import AdmissionConfig, review
from admission.state import ClusterState
from gpuctl.constants import (
    GPU_RESOURCE,
    HOSTNAME_LABEL,
    SERVE_USER,
    SET_ASIDE_TAINT_KEY,
    TAS_PREFERRED,
    TAS_REQUIRED,
    Labels,
)
from gpuctl.domain.gang import gang_never_fits, set_aside_tolerations
from tests.unit import celeval
from tests.unit.test_admission_cel_agreement import _load, _namespaces, _policies
from tests.unit.test_admission_fixtures import TEAM, cluster_objects, state
from tests.unit.test_admission_fixtures import review as admission_review

STATE = state()
ENFORCE = AdmissionConfig()
SET_ASIDE = {"key": SET_ASIDE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}  # every gang's
OWN = set_aside_tolerations(TEAM, "big")  # what gpuctl gives gang TEAM/big


def job(
    pods: int, gpus: int, *, level: str = "", indexed: bool = True, tolerations: list | None = None
) -> dict:
    topology = {TAS_REQUIRED: level} if level else {TAS_PREFERRED: HOSTNAME_LABEL}
    spec: dict = {"parallelism": pods, "completions": pods, "suspend": True}
    if indexed:
        spec["completionMode"] = "Indexed"
    pod_spec = {
        "nodeSelector": {Labels.POOL: "a100"},
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "x", "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}],
        "tolerations": tolerations if tolerations is not None else OWN,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "big", "namespace": TEAM, "labels": {Labels.KUEUE_QUEUE: "default"}},
        "spec": {**spec, "template": {"metadata": {"annotations": topology}, "spec": pod_spec}},
    }


def judge(obj: dict):
    return review(admission_review(obj)["request"], STATE, ENFORCE)


@pytest.mark.parametrize(
    ("pods", "gpus", "level", "refused"),
    [
        (2, 4, "", None),  # a100-1 holds two, a100-2 one
        (4, 4, "", "4 pods x 4 GPUs never fit in pool a100: its 2 node(s) hold 3 such pods at most"),
        (2, 8, "", "2 pods x 8 GPUs never fit in pool a100: its 2 node(s) hold 1 such pods at most"),
        (2, 4, HOSTNAME_LABEL, None),
        (3, 4, HOSTNAME_LABEL, "never fit in one hostname of pool a100: the largest (a100-1) holds 2"),
        (2, 4, "example.com/rack", "must share one rack (example.com/rack), but no node of pool a100 has"),
    ],
)
def test_a_gang_that_can_never_fit_is_refused(pods: int, gpus: int, level: str, refused: str | None) -> None:
    v = judge(job(pods, gpus, level=level))
    if refused is None:
        assert v.allowed and "gang-fits" not in v.rules, v.message()
        return
    assert not v.allowed and v.rules == ("gang-fits",), v.message()
    assert refused in v.message() and "Fix: lower spec.parallelism and spec.completions" in v.message()
    assert ("widen or remove " + TAS_REQUIRED in v.message()) is bool(level)


def test_gang_never_fits_is_not_judged_where_another_rule_speaks() -> None:
    nodes = [("n1", 8, {}, True), ("n2", 8, {}, True)]
    assert gang_never_fits("p", nodes, 1, 8) == ""  # one pod
    assert gang_never_fits("p", nodes, 3, 16) == ""  # bigger than every node: gpu-fits-node
    assert gang_never_fits("p", [], 3, 8) == ""  # a pool without nodes
    assert gang_never_fits("p", nodes, 3, 0) == ""  # no GPUs
    assert "hold 2 such pods" in gang_never_fits("p", nodes, 3, 8)


def _named(obj: dict, name: str | None) -> dict:
    """`obj` under another name (None: generateName, no name yet at admission)."""
    obj["metadata"].pop("name")
    obj["metadata"].update({"name": name} if name else {"generateName": "big-"})
    return obj


@pytest.mark.parametrize(
    ("obj", "refused"),
    [
        (job(2, 4), False),  # a gang with its own set-aside's tolerations, as gpuctl gives them
        (job(2, 4, tolerations=OWN[:1]), False),  # half of its own: it just cannot use its nodes
        # Issue 45: any Job's own set-aside (serve holds a node for a one-pod Job near its shown bound).
        (job(2, 4, indexed=False), False),
        (job(1, 4), False),  # one pod, its own
        (job(1, 4, tolerations=set_aside_tolerations("team-b", "big")), True),  # another team's
        (job(1, 4, tolerations=[{"operator": "Exists"}]), True),  # every taint, so this one too
        (job(1, 4, tolerations=[{"key": "runwhere.ai/pool", "operator": "Exists"}]), False),
        # Issue 43, attack 7: a gang tolerating every set-aside, or another gang's, squats its nodes.
        (job(2, 4, tolerations=[SET_ASIDE]), True),
        (job(2, 4, tolerations=[*OWN, {"operator": "Exists"}]), True),
        (job(2, 4, tolerations=set_aside_tolerations("team-b", "big")), True),  # another team's
        (job(2, 4, tolerations=set_aside_tolerations(TEAM, "other")), True),  # another of this team's
        (_named(job(2, 4), "other"), True),  # named otherwise than its toleration says
        (_named(job(2, 4), None), True),  # generateName: its name is not known, so none is its own
        (_named(job(2, 4, tolerations=[]), None), False),
        (job(2, 4, tolerations=[{**OWN[1], "operator": "Exists", "value": ""}]), True),
    ],
)
def test_only_a_job_may_tolerate_a_set_aside_and_only_its_own(obj: dict, refused: bool) -> None:
    v = judge(obj)
    assert ("set-aside-toleration" in v.rules) is refused, v.message()
    if refused:
        assert not v.allowed
        assert "spec.template.spec.tolerations tolerates a taint of nodes set aside for a job" in (
            v.message()
        )
        assert "Fix: remove that toleration" in v.message()


def test_a_bare_pod_tolerating_the_set_aside_taint_is_refused() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": TEAM},
        "spec": {"containers": [{"name": "c", "image": "x"}], "tolerations": [SET_ASIDE]},
    }
    v = judge(pod)
    assert not v.allowed and v.rules == ("set-aside-toleration",), v.message()
    assert "spec.tolerations tolerates" in v.message()


def _with_a100_2(**status: object) -> ClusterState:
    """The fixture's cluster with node a100-2 changed (its condition Ready, or cordoned)."""
    objs = cluster_objects()
    n = next(o for o in objs if o["kind"] == "Node" and o["metadata"]["name"] == "a100-2")
    if "ready" in status:
        n["status"]["conditions"] = [{"type": "Ready", "status": status["ready"]}]
    if status.get("cordoned"):
        n["spec"] = {"unschedulable": True}
    return ClusterState.from_objects(objs)


@pytest.mark.parametrize("change", [{"ready": "False"}, {"ready": "Unknown"}, {"cordoned": True}])
def test_a_node_that_does_not_count_holds_no_pod_of_a_gang(change: dict) -> None:
    """a100-1 (8 GPUs) holds two 4-GPU pods, a100-2 one more: 3 fit while both count. With a100-2 NotReady
    or cordoned (gpuctl.domain.pools.node_ready), the webhook counts 2, as `gpuctl create`'s precheck does."""
    assert judge(job(3, 4)).allowed
    v = review(admission_review(job(3, 4))["request"], _with_a100_2(**change), ENFORCE)
    assert not v.allowed and v.rules == ("gang-fits",), v.message()
    assert "its 1 node(s) hold 2 such pods at most (1 with 4 GPUs; 1 more NotReady or cordoned" in v.message()


def test_gang_never_fits_counts_only_the_nodes_that_count() -> None:
    nodes = [("n1", 8, {}, True), ("n2", 8, {}, False), ("n3", 8, {}, True)]
    assert gang_never_fits("p", nodes, 2, 8) == ""
    assert gang_never_fits("p", nodes, 3, 8) == (
        "3 pods x 8 GPUs never fit in pool p: its 2 node(s) hold 2 such pods at most "
        "(2 with 8 GPUs; 1 more NotReady or cordoned, not counted)"
    )
    assert gang_never_fits("p", [("n1", 8, {}, False)], 3, 8) == ""  # no node counts: not judged


# Backfill (issue 45, docs/queueing.md "A bound gpuctl keeps"): serve grants a waiting Job a held job's pair.
HELD = set_aside_tolerations(TEAM, "held")  # the pair of the one-pod job TEAM/held, held near its bound


def _update(new: dict, old: dict, user: str):
    return review(admission_review(new, op="UPDATE", old=old, username=user)["request"], STATE, ENFORCE)


def test_serve_may_grant_and_withdraw_another_jobs_pair_and_later_updates_keep_it() -> None:
    plain = job(1, 4)
    granted = job(1, 4, tolerations=[*OWN, *HELD])
    assert _update(granted, plain, SERVE_USER).allowed  # serve's grant
    assert _update(plain, granted, SERVE_USER).allowed  # and its withdrawal
    assert not judge(granted).allowed  # a tenant may not write it
    assert not _update(granted, plain, "alice").allowed
    again = job(1, 4, tolerations=[*OWN, *HELD])
    again["metadata"]["labels"]["note"] = "x"
    assert _update(again, granted, "alice").allowed  # an update keeping exactly the granted pair
    assert _update(plain, granted, "alice").allowed  # giving it up


@pytest.mark.parametrize(
    "widened",
    [
        [*OWN, {"operator": "Exists"}],  # every taint in place of the pair
        [*OWN, {**HELD[1], "operator": "Exists", "value": ""}],  # every job's name
        [*OWN, *set_aside_tolerations(TEAM, "other")],  # another held job's pair
    ],
)
def test_a_tenant_may_not_widen_or_swap_a_granted_pair(widened: list) -> None:
    v = _update(job(1, 4, tolerations=widened), job(1, 4, tolerations=[*OWN, *HELD]), "alice")
    assert not v.allowed and v.rules == ("set-aside-toleration",), v.message()


def test_serve_may_not_write_a_set_aside_toleration_on_a_pod() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": TEAM},
        "spec": {"containers": [{"name": "c", "image": "x"}], "tolerations": HELD},
    }
    v = review(admission_review(pod, username=SERVE_USER)["request"], STATE, ENFORCE)
    assert not v.allowed and "runwhere.ai/set-aside-job=held" in v.message(), v.message()


def test_the_policy_agrees_serve_may_grant_and_a_tenant_may_keep_but_not_widen() -> None:
    """The CEL twin (the gpuctl-admission policy in kube-apiserver's own evaluator, tests/unit/celeval.py)
    on the requests above: the recorded corpus has no request of serve's."""
    plain, granted = job(1, 4), job(1, 4, tolerations=[*OWN, *HELD])
    kept = job(1, 4, tolerations=[*OWN, *HELD])
    kept["metadata"]["labels"]["note"] = "x"
    widened = job(1, 4, tolerations=[*OWN, {"operator": "Exists"}])
    cases = {  # request -> refused by set-aside-toleration
        "serve grants": (admission_review(granted, op="UPDATE", old=plain, username=SERVE_USER), False),
        "serve withdraws": (admission_review(plain, op="UPDATE", old=granted, username=SERVE_USER), False),
        "tenant adds": (admission_review(granted, op="UPDATE", old=plain), True),
        "tenant keeps": (admission_review(kept, op="UPDATE", old=granted), False),
        "tenant widens": (admission_review(widened, op="UPDATE", old=granted), True),
        "tenant creates": (admission_review(granted), True),
    }
    vap, binding = _policies()["team"]
    lines = [{"namespaces": _namespaces(_load()[0])}, {"define": "t", "policy": vap, "binding": binding}]
    lines += [{"review": r["request"], "policies": ["t"]} for r, _ in cases.values()]
    answers = celeval.evaluate(lines)[2:]
    for (what, (_, refused)), answer in zip(cases.items(), answers, strict=True):
        [result] = answer["results"]
        assert result["matched"], (what, result)
        denials = [v["message"] for v in result["validations"] if not v["passed"]]
        assert any("set-aside-toleration" in m for m in denials) is refused, (what, denials)
