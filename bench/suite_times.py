"""Where the suite's minutes go: the time of every test in a pytest JUnit XML report (hack/test.sh writes
build/junit.xml), summed per test file, slowest first.

    python bench/suite_times.py [build/junit.xml] [--top N]

A test's time is pytest's "total" (setup, call and teardown), so a module fixture's cluster work counts in
its file. Under pytest-xdist --dist loadfile a file runs whole on one worker: the suite's wall time is at
least its slowest file, and about the sum over the workers.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def per_file(report: Path) -> dict[str, tuple[float, int]]:
    """Test file (from the testcase's classname) -> (seconds, tests)."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        # classname is tests.integration.test_x[.Class]: the file is the part up to the test_ module.
        upto = next((i for i, part in enumerate(module) if part.startswith("test_")), len(module) - 1)
        name = "/".join(module[: upto + 1]) + ".py"
        out[name][0] += float(case.get("time") or 0)
        out[name][1] += 1
    return {k: (v[0], int(v[1])) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", nargs="?", default="build/junit.xml", type=Path)
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    files = sorted(per_file(a.report).items(), key=lambda kv: -kv[1][0])
    total = sum(s for s, _ in dict(files).values())
    print(f"{'seconds':>8} {'share':>6} {'tests':>5}  file")
    for name, (secs, n) in files[: a.top]:
        print(f"{secs:8.1f} {secs / total:6.1%} {n:5d}  {name}")
    print(f"{total:8.1f} {'':6} {sum(n for _, n in dict(files).values()):5d}  all {len(files)} files")


if __name__ == "__main__":
    main()
