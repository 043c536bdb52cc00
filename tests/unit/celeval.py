"""The CEL side of the agreement test: hack/celeval, kube-apiserver's own ValidatingAdmissionPolicy
machinery (k8s.io/apiserver of the test cluster's Kubernetes version) run outside an API server.

hack/cluster/build.sh builds it into $GPUCTL_TESTBED_CACHE/bin/celeval-<key>/celeval, the key a hash of
its source, go.mod and go.sum (a changed harness is a new binary, never a stale one). `evaluate` runs one
process over all the lines of a test: JSON lines in, one JSON answer per line out (hack/celeval/main.go
says what each line holds).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]
SOURCE: Final = ROOT / "hack" / "celeval"
# What the build key hashes, in this order (build.sh: `cat main.go go.mod go.sum | sha256sum`).
KEYED: Final = ("main.go", "go.mod", "go.sum")


def cache() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpuctl-testbed"
    return Path(os.environ.get("GPUCTL_TESTBED_CACHE", default))


def key() -> str:
    return hashlib.sha256(b"".join((SOURCE / f).read_bytes() for f in KEYED)).hexdigest()[:16]


def binary() -> Path:
    """The harness binary of this checkout's source; fails the test (never skips) when it is not built."""
    path = cache() / "bin" / f"celeval-{key()}" / "celeval"
    if not (path.parent / ".complete").is_file():
        pytest.fail(
            f"no CEL harness at {path}: run hack/cluster/build.sh (hack/test.sh and CI do; it builds "
            "hack/celeval, the API server's ValidatingAdmissionPolicy evaluator, in seconds once the "
            "cluster binaries are built)"
        )
    return path


def evaluate(lines: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run the harness once over `lines`; its answers, one per line, in order."""
    text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    run = subprocess.run([str(binary())], input=text, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        pytest.fail(f"hack/celeval exited {run.returncode}: {run.stderr[-2000:]}")
    answers = [json.loads(x) for x in run.stdout.splitlines()]
    assert len(answers) == text.count("\n"), "hack/celeval answered fewer lines than it was given"
    return answers
