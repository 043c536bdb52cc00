"""YAML loading speed: documents per second through gpuctl.spec, against plain yaml.safe_load_all.

    python bench/spec.py [--docs 100] [--runs 20]

Prints the median time to load and validate N training documents, and the ratio to parsing the same
text with PyYAML alone (the floor any loader pays), measured in the same process.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuctl.spec import load_text  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    base = (ROOT / "examples" / "training.yaml").read_text()
    text = "\n---\n".join(base.replace("llama-finetune", f"job-{i}") for i in range(args.docs))
    load_text(text)  # warm caches

    def median(fn) -> float:
        samples = []
        for _ in range(args.runs):
            t = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t)
        return statistics.median(samples)

    ours = median(lambda: load_text(text))
    floor = median(lambda: list(yaml.load_all(text, Loader=yaml.CSafeLoader)))
    print(
        f"gpuctl.spec.load_text, {args.docs} documents: {ours * 1000:.1f} ms ({args.docs / ours:,.0f} docs/s)"
    )
    print(f"PyYAML (libyaml) parsing alone:           {floor * 1000:.1f} ms")
    print(f"ratio:                                    {ours / floor:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
