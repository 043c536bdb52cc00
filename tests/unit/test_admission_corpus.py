"""The webhook's answers over a recorded corpus of AdmissionReviews stay exactly what they were.

The request path (admission.server + admission.rules) is tuned for CPU per request (issue 12): one lean
pass, precomputed lookups, fewer allocations. Such rewrites must not change a single decision, message,
warning or 400 text. The corpus (tests/unit/golden/admission/corpus.json.gz) holds ~2,000 reviews — the
bench's request mix, random workloads and nodes from the fuzz tests' strategies (pools, priorities, queues,
affinity terms, owners, sidecars, host paths), valid objects with one subtree replaced by garbage, UPDATEs,
dry runs, controller and Kueue users, warn mode, an allowed host path, an unsynced cache, and last the
hand-written requests of admission_corpus_cases.py (rules no drawn request reaches) — with the cluster
objects they are judged against and, for each, the HTTP status and body the server answered and the
verdict's `skipped` and `cache_dependent` (what metrics, logs and the re-check read) when the corpus was
recorded (before the lean pass). `GPUCTL_UPDATE_GOLDEN=answers` answers the same recorded requests again
with the current code (when a rule's behaviour is meant to change: the changed answers are printed, review
them); `GPUCTL_UPDATE_GOLDEN=1` draws and records a new corpus.
"""

from __future__ import annotations

import copy
import gzip
import os
import random
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from admission.identities import KUEUE_USER
from admission.rules import AdmissionConfig, Malformed, Mode, review
from admission.server import AdmissionApp, BadRequest, parse_review
from admission.state import ClusterState, StaticState
from bench.webhook import POOL as BENCH_POOL
from bench.webhook import TEAM as BENCH_TEAM
from bench.webhook import request_mix, snapshot_objects
from gpuctl.constants import TAS_UNCONSTRAINED
from tests.unit import test_admission_fuzz as fz
from tests.unit.admission_corpus_cases import requests as written_requests
from tests.unit.test_admission_fixtures import cluster_objects

CORPUS = Path(__file__).parent / "golden" / "admission" / "corpus.json.gz"
ALLOWED = ("/data/../proc", "/var/run")


def _config(case: dict) -> AdmissionConfig:
    return AdmissionConfig(mode=Mode(case["mode"]), allowed_host_paths=ALLOWED if case["paths"] else ())


def answer(case: dict, state: ClusterState) -> dict:
    """What the webhook answers for one case: HTTP status and body, and the verdict's bookkeeping."""
    config = _config(case)
    if not case["synced"]:
        state = ClusterState.build(synced=False)
    app = AdmissionApp(StaticState(state), config, stale_wait=0.0)
    body = case["body"].encode()
    status, out, _ = app.handle(body)
    skipped: str | None = None
    cache: bool | None = None
    try:
        _, request = parse_review(body)
        verdict = review(request, state, config)
        skipped, cache = verdict.skipped, verdict.cache_dependent
    except (BadRequest, Malformed):  # the 400 text above says what
        pass
    return {"status": status, "out": out.decode(), "skipped": skipped, "cache": cache}


def _load() -> tuple[ClusterState, list[dict]]:
    doc = orjson.loads(gzip.decompress(CORPUS.read_bytes()))
    return ClusterState.from_objects(doc["state"]), doc["cases"]


def test_corpus_answers_are_unchanged() -> None:
    if os.environ.get("GPUCTL_UPDATE_GOLDEN") == "answers":
        reanswer()
    elif os.environ.get("GPUCTL_UPDATE_GOLDEN"):
        record()
    state, cases = _load()
    assert len(cases) >= 1500
    kinds = {(c["expect"]["status"], _operation(c["body"])) for c in cases}
    # The corpus exercises allowed, denied, warned and malformed answers, on every operation.
    assert {(200, "CREATE"), (200, "UPDATE"), (400, "CREATE")} <= kinds
    outs = "".join(c["expect"]["out"] for c in cases)
    for needle in ('"allowed":false', '"warnings":', "[gpu-queue]", "[pool-placement]", "[host-path]"):
        assert needle in outs
    changed = []
    for i, case in enumerate(cases):
        got = answer(case, state)
        if got != case["expect"]:
            changed.append((i, case, got))
    assert not changed, _describe(changed)


def reanswer() -> None:
    """The recorded cases (same requests, same cluster) with the current code's answers, printing which
    changed; then the hand-written requests the corpus does not hold yet, appended."""
    doc = orjson.loads(gzip.decompress(CORPUS.read_bytes()))
    state = ClusterState.from_objects(doc["state"])
    for i, case in enumerate(doc["cases"]):
        got = answer(case, state)
        if got != case["expect"]:
            print(f"case {i}: {case['expect']['out'][:300]}\n   now {got['out'][:300]}")
            case["expect"] = got
    held = {c["body"] for c in doc["cases"]}
    for body in _written():
        if body.decode() not in held:
            doc["cases"].append(_case(len(doc["cases"]), body, state))
    CORPUS.write_bytes(gzip.compress(orjson.dumps(doc), mtime=0))


def _case(i: int, body: bytes, state: ClusterState) -> dict:
    """The `i`th case of the corpus: its config (by position) and its answer now."""
    case = {
        "mode": "warn" if i % 7 == 3 else "enforce",
        "paths": i % 5 == 2,
        "synced": i % 97 != 50,
        "body": body.decode(),
    }
    case["expect"] = answer(case, state)
    return case


def _operation(body: str) -> Any:
    try:
        return orjson.loads(body)["request"]["operation"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None


def _describe(changed: list) -> str:
    lines = [f"{len(changed)} answer(s) changed; the first ones:"]
    for i, case, got in changed[:5]:
        lines += [f"case {i}: {case['body'][:600]}", f"  expected {case['expect']}", f"  got      {got}"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# Recording (GPUCTL_UPDATE_GOLDEN=1): draws from the fuzz tests' strategies, seeded.


def _node(obj: dict, labels: Any) -> dict:
    if type(labels) is dict:
        obj["metadata"]["labels"].update(labels)
    elif labels is not None:
        obj["metadata"]["labels"] = labels
    return obj


def _garbage(obj: dict, data: Any) -> dict:
    request = fz.review(obj)["request"]
    path = data.draw(st.sampled_from(fz.paths(obj)))
    request["object"] = fz.replaced(obj, path, data.draw(fz.JSON))
    return request


def _draw(strategy: st.SearchStrategy, n: int, out: list) -> None:
    """n draws of `strategy`, the same ones on every run (derandomized)."""

    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
    )
    @given(strategy)
    def collect(x: Any) -> None:
        out.append(x)

    collect()


def _written() -> list[bytes]:
    """The hand-written requests (tests/unit/admission_corpus_cases.py), last: rules no drawn request
    reaches, each denied and allowed (the agreement test, test_admission_cel_agreement.py, needs both)."""
    return [
        orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": r})
        for r in written_requests()
    ]


def record() -> None:
    rng = random.Random(12)
    users = [
        "alice",
        KUEUE_USER,
        "system:serviceaccount:kube-system:job-controller",
        "system:serviceaccount:kube-system:replicaset-controller",
        "system:serviceaccount:kube-system:statefulset-controller",
        "system:serviceaccount:kube-system:deployment-controller",
        "system:kube-controller-manager",
    ]
    bodies: list[bytes] = [b for _, b, _ in request_mix()]
    requests: list[dict] = []
    for obj in fz.GOOD_OBJECTS:  # gpuctl's own objects and queued pods, with and without a topology request
        for drop in (False, True):
            o = copy.deepcopy(obj)
            for m in (o["metadata"], o.get("spec", {}).get("template", {}).get("metadata", {})):
                if drop:
                    m.get("annotations", {}).pop(TAS_UNCONSTRAINED, None)
            requests += [fz.review(o)["request"]] * 10
    workload_requests = fz.workloads().map(lambda o: fz.review(o)["request"])
    nodes = st.builds(
        lambda pool, gpus, labels: fz.review(_node(fz.node("n", pool, gpus), labels))["request"],
        st.sampled_from(["a100", "a10", "nope", None]),
        st.sampled_from([0, 4, 8]),
        fz.LABELS,
    )
    garbage = st.builds(
        lambda o, data: _garbage(o, data),
        fz.workloads(),
        st.data(),
    )
    for strategy, n in ((workload_requests, 900), (fz.mutated(), 500), (nodes, 200), (garbage, 300)):
        _draw(strategy, n, requests)
    out_requests = []
    for req in requests:
        r = copy.deepcopy(req)
        roll = rng.random()
        if roll < 0.25 and type(r.get("object")) is dict:
            r["operation"] = "UPDATE"
            r["oldObject"] = (
                copy.deepcopy(rng.choice(requests)["object"]) if rng.random() < 0.6 else r["object"]
            )
        elif roll < 0.3:
            r["operation"] = rng.choice(["DELETE", "CONNECT", "PATCH"])
        if rng.random() < 0.2:
            r["userInfo"] = {"username": rng.choice(users)}
        meta = r["object"].get("metadata") if type(r.get("object")) is dict else None
        if rng.random() < 0.15 and type(meta) is dict:
            # A controller's own request for the object it made (or someone forging the reference).
            owner = rng.choice(
                [
                    ("batch/v1", "Job"),
                    ("apps/v1", "ReplicaSet"),
                    ("apps/v1", "StatefulSet"),
                    ("apps/v1", "Deployment"),
                ]
            )
            meta["ownerReferences"] = [
                {
                    "apiVersion": owner[0],
                    "kind": owner[1],
                    "name": "o",
                    "uid": "u",
                    "controller": rng.random() < 0.9,
                }
            ]
            r["userInfo"] = {"username": rng.choice(users)}
        if rng.random() < 0.1 and type(meta) is dict and type(meta.get("annotations")) is dict:
            meta["annotations"].pop(TAS_UNCONSTRAINED, None)
        if rng.random() < 0.1:
            r["dryRun"] = True
            r["options"] = {"fieldManager": rng.choice(["gpuctl", "kubectl"])}
        if rng.random() < 0.05:
            r["namespace"] = rng.choice(["plain", "team-b", "unseen", ""])
        if fz._encodable(r):
            out_requests.append(r)
    for r in out_requests:
        bodies.append(
            orjson.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": r},
                option=orjson.OPT_NON_STR_KEYS,
            )
        )
    bodies += [b"", b"[]", b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}']
    bodies += _written()
    objects = cluster_objects() + snapshot_objects(BENCH_TEAM, BENCH_POOL)  # the bench mix's cluster too
    state = ClusterState.from_objects(objects)
    cases = [_case(i, body, state) for i, body in enumerate(bodies)]
    data = orjson.dumps({"state": objects, "cases": cases})
    CORPUS.parent.mkdir(parents=True, exist_ok=True)
    CORPUS.write_bytes(gzip.compress(data, mtime=0))
