"""The short variant of bench/webhook.py (part 1): it still runs end to end and its figures add up.

Speed is not asserted here (that is the benchmark's job, with load averages beside the figures); this keeps
the benchmark from rotting: the server variants start, the client's keep-alive pool answers every request,
the floors and the webhook report CPU per request, and the summary compares them with issue 12's targets.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_bench_webhook_short_run_reports_every_variant_against_the_targets():
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench/webhook.py"),
            "--rates",
            "500",
            "--duration",
            "1",
            "--warmup",
            "0.5",
            "--repeat",
            "1",
            "--connections",
            "4",
            "--http",
            "floor-tls,floor-json,builtin",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = re.findall(
        r"^\s+1 (floor-tls|floor-json|builtin)\s+500\s.*?(\d+)\s+(\d+)\s+(\d+)\s+(\d+) us", out.stdout, re.M
    )
    assert [r[0] for r in rows] == ["floor-tls", "floor-json", "builtin"], out.stdout
    for name, errors, _conns, _new, cpu in rows:
        assert errors == "0", (name, out.stdout)
        assert int(cpu) > 0, (name, out.stdout)
    summary = out.stdout.split("against issue 12's targets", 1)[1]
    for name in ("floor-tls", "floor-json", "builtin"):
        assert re.search(
            rf"^\s+{name}\s+500/s\s+CPU/req median\s+\d+ us .*\| CPU target (MET|NOT MET)", summary, re.M
        )
