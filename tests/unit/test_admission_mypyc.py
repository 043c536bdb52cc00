"""The webhook's mypyc build (hack/image.sh, hack/image.env MYPYC_MODULES): what tests and developers run is
the pure-Python source, and the recipe's pieces agree with each other.

The compiled modules exist only in the container image; tests/integration/test_image.py proves there that
the image imports them and that they answer the recorded corpus byte-identically.
"""

from __future__ import annotations

import importlib.machinery
import re
import tomllib
from pathlib import Path

import admission.rules

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(
    re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', (ROOT / "hack/image.env").read_text(), flags=re.MULTILINE)
)
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_no_compiled_module_shadows_the_source_tree() -> None:
    # An extension next to a .py wins the import: a stale one would silently run old code in dev and tests.
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for package in ("admission", "gpuctl", "queues"):
        found = [p for p in (ROOT / package).rglob("*") if p.name.endswith(suffixes)]
        assert not found, f"compiled modules in the source tree (delete them): {found}"
    assert Path(admission.rules.__file__).resolve() == ROOT / "admission/rules.py"
    assert type(admission.rules.review).__name__ == "function"  # Python, not a compiled builtin


def test_mypyc_modules_and_mypy_agree_with_the_dev_setup() -> None:
    modules = ENV["MYPYC_MODULES"].split()
    for m in modules:
        assert (ROOT / m).is_file(), m
    # `mypy` in hack/test.sh checks exactly what the image compiles, with the mypy that compiles it.
    assert PYPROJECT["tool"]["mypy"]["files"] == modules
    assert PYPROJECT["tool"]["mypy"]["follow_imports"] == "silent"
    image_mypy = re.search(r"\bmypy==(\S+)", ENV["MYPYC_REQUIREMENTS"])
    dev_mypy = [r for r in PYPROJECT["project"]["optional-dependencies"]["dev"] if r.startswith("mypy")]
    assert image_mypy and dev_mypy == [f"mypy=={image_mypy[1]}"]
