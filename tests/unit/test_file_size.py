"""No product file over 600 lines (docs/architecture.md): a module that long holds more than one concern."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 600


def long_files(root: Path, limit: int = MAX_LINES) -> list[str]:
    return [
        f"{p.relative_to(root)}: {n} lines"
        for d in ("gpuctl", "admission", "queues")
        for p in sorted((root / d).rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > limit
    ]


def test_no_product_file_over_600_lines() -> None:
    found = long_files(ROOT)
    assert not found, f"split these along a seam with its own name (docs/architecture.md): {found}"


def test_a_long_file_is_found(tmp_path: Path) -> None:
    (tmp_path / "gpuctl").mkdir()
    (tmp_path / "gpuctl" / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "gpuctl" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert long_files(tmp_path) == ["gpuctl/long.py: 601 lines"]
