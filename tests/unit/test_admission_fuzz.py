"""Property-based fuzzing: no input makes the webhook answer 5xx or raise anything but Malformed.

A webhook with failurePolicy Fail that crashes on some input refuses that input's pods forever, and one
that answers 500 shows users a stack trace instead of a rule. So: arbitrary bytes, arbitrary JSON,
AdmissionReviews with arbitrary objects, and valid reviews with one subtree replaced by garbage must all
get a 200 (a verdict) or a 400 (with a message). Plus invariants of the verdicts themselves.
"""

from __future__ import annotations

import asyncio
import copy
import os
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.rules import AdmissionConfig, Malformed, Mode, Verdict
from admission.rules import review as judge
from admission.server import AdmissionApp
from admission.state import StaticState
from gpuctl.constants import GPU_RESOURCE, Labels
from tests.unit.test_admission_fixtures import (
    TEAM,
    gpuctl_workload,
    node,
    queued_pod,
    raw_pod,
    review,
    state,
)

STATE = state()
ENFORCE = AdmissionConfig()
WARN = AdmissionConfig(mode=Mode.WARN)
APP = AdmissionApp(StaticState(STATE), ENFORCE, stale_wait=0.0)
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The workload generator's run: 400 examples in CI (~40 s); GPUCTL_FUZZ_EXAMPLES=5000 for a long run.
WORKLOAD_EXAMPLES = int(os.environ.get("GPUCTL_FUZZ_EXAMPLES", "400"))

# Keys the rules actually look at, so generated garbage lands where it matters.
KEYS = st.sampled_from(
    [
        "metadata",
        "labels",
        "annotations",
        "spec",
        "template",
        "containers",
        "initContainers",
        "resources",
        "requests",
        "limits",
        GPU_RESOURCE,
        "nodeSelector",
        "affinity",
        "nodeAffinity",
        "nodeName",
        "volumes",
        "hostPath",
        "path",
        "ownerReferences",
        "controller",
        "kind",
        "apiVersion",
        "name",
        "namespace",
        "matchExpressions",
        "key",
        "operator",
        "values",
        "restartPolicy",
        Labels.POOL,
        Labels.PRIORITY,
        Labels.JOB_TYPE,
        Labels.KUEUE_QUEUE,
        Labels.KUEUE_PRIORITY,
        "runwhere.ai/x",
        "status",
        "allocatable",
    ]
) | st.text(max_size=12)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(
        [
            "1",
            "0",
            "8",
            "1e3",
            "500m",
            "-1",
            "1Gi",
            "/etc",
            "/data",
            "In",
            "NotIn",
            "Exists",
            "Gt",
            "a100",
            "high",
        ]
    )
)
JSON = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=25,
)


def mostly(s: st.SearchStrategy, n: int = 12) -> st.SearchStrategy:
    """`s`, and about once in n draws arbitrary JSON instead."""
    # (one_of() would not do: Hypothesis favours its later branches far more than uniformly.)
    return st.sampled_from([False] * (n - 1) + [True]).flatmap(lambda garbage: JSON if garbage else s)


# Plausible-but-random pieces of a pod, each sometimes replaced by garbage, so that deep branches
# (affinity terms against cached nodes, owner references, sidecars) are reached, not just the type checks.
POOLS = st.sampled_from(["a100", "a10", "empty", "nope", "gpuctl-budget", ""])
LABEL_KEYS = st.sampled_from(
    [
        Labels.POOL,
        Labels.PRIORITY,
        Labels.JOB_TYPE,
        Labels.KUEUE_QUEUE,
        Labels.KUEUE_PRIORITY,
        Labels.GPU_TYPE,
        Labels.DESCRIPTION,
        "runwhere.ai/poool",
        "runwhere.ai/",
        "kubernetes.io/hostname",
        "app",
    ]
)
LABEL_VALUES = POOLS | st.sampled_from(
    [
        "high",
        "low",
        "urgent",
        "training",
        "trainig",
        "default",
        "gpuctl-high",
        "gpuctl-hgh",
        "a100-80g",
        "a100-1",
        "a10-1",
        "cpu-1",
    ]
)
LABELS = mostly(st.dictionaries(LABEL_KEYS, LABEL_VALUES, max_size=5))
QUANTITY = st.sampled_from(["0", "1", "4", "8", "9", "64", "1e1", "500m", "1k", "-2", "x"]) | st.integers(
    -3, 100
)
RESOURCES = mostly(
    st.fixed_dictionaries(
        {},
        optional={
            "requests": st.dictionaries(
                st.just(GPU_RESOURCE) | st.sampled_from(["cpu", "memory"]), QUANTITY, max_size=2
            ),
            "limits": st.dictionaries(st.just(GPU_RESOURCE), QUANTITY),
        },
    )
)
CONTAINER = mostly(
    st.fixed_dictionaries(
        {"name": st.just("c")},
        optional={"resources": RESOURCES, "restartPolicy": st.sampled_from(["Always", "Never"])},
    )
)
OPERATOR = st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"])
EXPR = mostly(
    st.fixed_dictionaries(
        {"key": LABEL_KEYS | st.just("metadata.name"), "operator": OPERATOR},
        optional={"values": st.lists(LABEL_VALUES | st.sampled_from(["3", "10", "x"]), max_size=3)},
    )
)
TERM = mostly(
    st.fixed_dictionaries(
        {},
        optional={"matchExpressions": st.lists(EXPR, max_size=3), "matchFields": st.lists(EXPR, max_size=2)},
    )
)
AFFINITY = mostly(
    st.builds(
        lambda terms: {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        },
        st.lists(TERM, max_size=3),
    )
)
VOLUME = mostly(
    st.builds(
        lambda p: {"name": "v", "hostPath": {"path": p}},
        st.sampled_from(["/", "/etc", "/data", "data", "//etc", "/var/run/x", "/data/../proc"]),
    )
)
OWNER = mostly(
    st.fixed_dictionaries(
        {
            "apiVersion": st.sampled_from(["batch/v1", "apps/v1", "v1", "x"]),
            "kind": st.sampled_from(["Job", "ReplicaSet", "StatefulSet", "Deployment", "DaemonSet"]),
        },
        optional={"controller": mostly(st.booleans())},
    )
)
POD_SPEC = st.fixed_dictionaries(
    {"containers": st.lists(CONTAINER, min_size=1, max_size=3)},
    optional={
        "initContainers": st.lists(CONTAINER, max_size=2),
        "nodeSelector": LABELS,
        "affinity": AFFINITY,
        "nodeName": mostly(st.sampled_from(["a100-1", "a10-1", "cpu-1", "ghost"])),
        "volumes": st.lists(VOLUME, max_size=3),
    },
)


@st.composite
def workloads(draw) -> dict:
    """A random Pod, Job, Deployment, StatefulSet or ReplicaSet in the team namespace. Half the time it
    names one pool consistently (label and nodeSelector), so the placement checks behind that are reached."""
    kind = draw(st.sampled_from(["Pod", "Job", "Deployment", "StatefulSet", "ReplicaSet"]))
    meta: dict[str, Any] = {"name": "w", "namespace": TEAM, "labels": draw(LABELS)}
    if draw(st.booleans()):
        meta["annotations"] = draw(LABELS)
    if draw(st.integers(0, 3)) == 0:
        meta["ownerReferences"] = draw(st.lists(OWNER, max_size=2))
    spec = draw(POD_SPEC)
    tmpl_labels = draw(LABELS)
    if draw(st.booleans()):
        pool = draw(POOLS)
        for m in (meta["labels"], tmpl_labels, spec.get("nodeSelector")):
            if isinstance(m, dict):
                m[Labels.POOL] = pool
        if "nodeSelector" not in spec and draw(st.booleans()):
            spec["nodeSelector"] = {Labels.POOL: pool}
    api = {"Pod": "v1", "Job": "batch/v1"}.get(kind, "apps/v1")
    if kind == "Pod":
        return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}
    template = {"metadata": {"labels": tmpl_labels}, "spec": spec}
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": {"template": template}}


GOOD_OBJECTS = [
    queued_pod(),
    raw_pod(gpus=2),
    gpuctl_workload("training"),
    gpuctl_workload("inference"),
    gpuctl_workload("notebook"),
    node("n", "a100", 8),
]


def call(body: bytes) -> tuple[int, bytes]:
    """POST /validate through the ASGI app, as uvicorn would."""
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(APP({"type": "http", "method": "POST", "path": "/validate", "headers": []}, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def assert_answer(body: bytes) -> None:
    status, out = call(body)
    assert status in (200, 400), (status, out)
    if status == 400:
        assert out.strip(), "a 400 must say why"
        return
    doc = orjson.loads(out)
    resp = doc["response"]
    assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview"
    assert resp["uid"] == orjson.loads(body)["request"]["uid"]
    assert isinstance(resp["allowed"], bool)
    if not resp["allowed"]:
        assert resp["status"]["message"]


def verdict_or_malformed(request: Any) -> Verdict | None:
    try:
        return judge(request, STATE, ENFORCE)
    except Malformed:
        return None


def paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += paths(v, (*prefix, i))
    return out


def replaced(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    obj = copy.deepcopy(obj)
    target = obj
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    return obj


# ---------------------------------------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_5xx(body):
    assert_answer(body)


@FUZZ
@given(JSON)
def test_arbitrary_json_never_5xx(doc):
    assert_answer(orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS) if _encodable(doc) else b"null")


@FUZZ
@given(
    obj=JSON,
    kind=st.sampled_from(["Pod", "Job", "Deployment", "StatefulSet", "ReplicaSet", "Node", "X"]),
    op=st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", "", "PATCH"]),
    old=JSON,
)
def test_reviews_of_arbitrary_objects_never_5xx(obj, kind, op, old):
    group = {"Job": "batch", "Deployment": "apps", "StatefulSet": "apps", "ReplicaSet": "apps"}.get(kind, "")
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": {"group": group, "version": "v1", "kind": kind},
            "operation": op,
            "namespace": TEAM,
            "object": obj,
            "oldObject": old,
        },
    }
    if _encodable(body):
        assert_answer(orjson.dumps(body))
        verdict_or_malformed(body["request"])  # raises anything else -> test fails


@FUZZ
@given(data=st.data())
def test_valid_reviews_with_one_subtree_replaced_never_5xx(data):
    obj = data.draw(st.sampled_from(GOOD_OBJECTS))
    body = review(obj)
    where = data.draw(st.sampled_from(paths(body["request"]["object"])))
    body["request"]["object"] = replaced(body["request"]["object"], where, data.draw(JSON))
    if _encodable(body):
        assert_answer(orjson.dumps(body))
        verdict_or_malformed(body["request"])


@settings(max_examples=WORKLOAD_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from(["CREATE", "UPDATE"]), st.none() | workloads())
def test_random_workloads_get_a_verdict_or_a_400(obj, op, old):
    request = review(obj, op=op, old=old)
    verdict_or_malformed(request["request"])  # anything but Malformed fails the test
    if _encodable(request):
        assert_answer(orjson.dumps(request, option=orjson.OPT_NON_STR_KEYS))


@st.composite
def mutated(draw, objects: list[dict] = GOOD_OBJECTS) -> dict:
    """The AdmissionReview request of a valid object with one subtree replaced by arbitrary JSON."""
    request = review(draw(st.sampled_from(objects)))["request"]
    obj = request["object"]
    request["object"] = replaced(obj, draw(st.sampled_from(paths(obj))), draw(JSON))
    return request


REQUESTS = st.one_of(workloads().map(lambda o: review(o)["request"]), mutated())


@FUZZ
@given(REQUESTS)
def test_warn_mode_never_denies_and_reports_every_violation(request):
    try:
        enforced = judge(request, STATE, ENFORCE)
    except Malformed:
        return
    warned = judge(request, STATE, WARN)
    assert warned.allowed
    assert warned.violations == enforced.violations
    assert len(warned.warnings) >= min(len(enforced.violations), 1)
    assert enforced.allowed == (not enforced.violations)


@FUZZ
@given(REQUESTS)
def test_an_update_that_changes_nothing_is_never_denied(request):
    # Whatever is wrong with an object, re-applying it unchanged must not be refused: controllers do it.
    request.update(operation="UPDATE", oldObject=copy.deepcopy(request["object"]))
    v = verdict_or_malformed(request)
    assert v is None or v.allowed


# The node rule has a documented dry-run exception (gpuctl's own dry run of a new pool).
@FUZZ
@given(st.one_of(workloads().map(lambda o: review(o)["request"]), mutated(GOOD_OBJECTS[:-1])))
def test_dry_run_never_changes_the_verdict(request):
    real = verdict_or_malformed(request)
    request["dryRun"] = True
    assert verdict_or_malformed(request) == real


def _encodable(doc: Any) -> bool:
    try:
        orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)
        return True
    except (TypeError, orjson.JSONEncodeError):
        return False
