"""The webhook's answer to each case of the recorded admission corpus (tests/unit/golden/admission/).

Used by tests/unit/test_admission_corpus.py (the pure-Python webhook of the source tree) and by
tests/integration/test_image.py, which copies this file and the corpus into the container image and runs
`python3.X corpus_answers.py CORPUS` there with the image's interpreter, against the image's mypyc-compiled
admission.rules: it prints a JSON summary (which module answered, how many cases changed). So it imports only
what the image has: the standard library, orjson and gpuctl's own packages.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import orjson

import admission.rules
from admission.rules import AdmissionConfig, Malformed, Mode, review
from admission.server import AdmissionApp, BadRequest, parse_review
from admission.state import ClusterState, StaticState

CORPUS = Path(__file__).parent / "golden" / "admission" / "corpus.json.gz"
ALLOWED = ("/data/../proc", "/var/run")


def config(case: dict) -> AdmissionConfig:
    return AdmissionConfig(mode=Mode(case["mode"]), allowed_host_paths=ALLOWED if case["paths"] else ())


def answer(case: dict, state: ClusterState) -> dict:
    """What the webhook answers for one case: HTTP status and body, and the verdict's bookkeeping."""
    cfg = config(case)
    if not case["synced"]:
        state = ClusterState.build(synced=False)
    app = AdmissionApp(StaticState(state), cfg, stale_wait=0.0)
    body = case["body"].encode()
    status, out, _ = app.handle(body)
    skipped: str | None = None
    cache: bool | None = None
    try:
        _, request = parse_review(body)
        verdict = review(request, state, cfg)
        skipped, cache = verdict.skipped, verdict.cache_dependent
    except (BadRequest, Malformed):  # the 400 text above says what
        pass
    return {"status": status, "out": out.decode(), "skipped": skipped, "cache": cache}


def load(path: Path = CORPUS) -> tuple[ClusterState, list[dict]]:
    doc = orjson.loads(gzip.decompress(path.read_bytes()))
    return ClusterState.from_objects(doc["state"]), doc["cases"]


def changed(state: ClusterState, cases: list[dict]) -> list[tuple[int, dict, dict]]:
    """(index, case, answer) of every case whose answer is not the recorded one."""
    out = []
    for i, case in enumerate(cases):
        got = answer(case, state)
        if got != case["expect"]:
            out.append((i, case, got))
    return out


def summary(path: Path) -> dict[str, Any]:
    """Which admission.rules answered (file, compiled or not) and the cases whose answers differ."""
    state, cases = load(path)
    diff = changed(state, cases)
    return {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "rules_file": admission.rules.__file__,
        # A mypyc-compiled function is a builtin (C) function; a Python one is a `function`.
        "review_type": type(admission.rules.review).__name__,
        "cases": len(cases),
        "changed": [{"case": i, "expected": c["expect"], "got": g} for i, c, g in diff[:5]],
        "changed_count": len(diff),
    }


if __name__ == "__main__":
    print(json.dumps(summary(Path(sys.argv[1]))))
