"""Product code points at the docs, not at a tracker its readers do not have (docs/architecture.md)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_product_code_has_no_issue_numbers() -> None:
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for d in ("gpuctl", "admission", "queues")
        for p in sorted((ROOT / d).rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\bissues? \d+\b", line)
    ]
    assert not found, f"'issue N' in product code (name the doc section instead): {found}"
