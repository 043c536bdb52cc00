"""CLI start-up stays cheap, and the entry point keeps cli, server and admission apart.

What `gpuctl version --client` and `gpuctl --help` import is read from `python -X importtime` of a
real process (every module the interpreter loads, nested or lazy), not timed: the timing against
kubectl is bench/cli.py's job.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpuctl.main
from gpuctl.cli import describe, get
from gpuctl.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]

# Heavy third-party packages and the gpuctl layers below the CLI: none is needed to print a version
# or a help text.
HEAVY = (
    "pydantic",
    "pydantic_core",
    "yaml",
    "kubernetes",
    "urllib3",
    "orjson",
    "fastapi",
    "starlette",
    "uvicorn",
    "httpx",
    "prometheus_client",
    "admission",
    "queues",
    "gpuctl.spec",
    "gpuctl.service",
    "gpuctl.cluster",
    "gpuctl.domain",
    "gpuctl.builders",
    "gpuctl.server",
    "gpuctl.cli.output",
)


def imported_modules(*argv: str, tmp_path: Path) -> set[str]:
    """Every module a `gpuctl ARGV` process imports (the console script's own module, gpuctl.main)."""
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    p = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gpuctl.main", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    modules = {
        line.split("|")[2].strip()
        for line in p.stderr.splitlines()
        if line.startswith("import time:") and "cumulative" not in line
    }
    assert "gpuctl.cli.main" in modules  # the profile really covers the CLI
    return modules


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize(
    "argv",
    [
        ("version", "--client"),
        ("--help",),
        ("get", "--help"),
        ("describe", "--help"),
        ("create", "--help"),
        ("admission", "--help"),
    ],
    ids=" ".join,
)
def test_cheap_commands_import_nothing_heavy(argv, tmp_path) -> None:
    assert heavy_in(imported_modules(*argv, tmp_path=tmp_path)) == []


def test_cli_never_imports_server_or_admission() -> None:
    """Not even inside a function: cli, server and admission are siblings; gpuctl.main joins them."""
    offenders = []
    for path in sorted((ROOT / "gpuctl" / "cli").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            names += [
                n.args[0].value
                for n in [node]
                if isinstance(n, ast.Call)
                and getattr(n.func, "attr", getattr(n.func, "id", "")) in ("import_module", "__import__")
                and n.args
                and isinstance(n.args[0], ast.Constant)
            ]
            offenders += [
                f"{path.name}:{node.lineno} {name}"
                for name in names
                if name.split(".")[0] == "admission" or name.startswith(("gpuctl.server", "gpuctl.main"))
            ]
    assert offenders == []


def test_console_script_is_the_entry_module() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'gpuctl = "gpuctl.main:entrypoint"' in text


def test_services_get_their_flags_untouched(monkeypatch) -> None:
    seen = {}
    # By name: the server and the webhook are imported only here, as gpuctl.main does.
    monkeypatch.setattr("gpuctl.server.main.main", lambda argv: seen.setdefault("serve", argv) and 0)
    monkeypatch.setattr("admission.server.main", lambda argv: seen.setdefault("admission", argv) and 0)
    assert gpuctl.main.main(["serve", "--metrics-port", "9090", "--no-reconcile"]) == 0
    assert gpuctl.main.main(["admission", "serve", "--port", "8443", "--mode", "warn"]) == 0
    assert seen == {
        "serve": ["--metrics-port", "9090", "--no-reconcile"],
        "admission": ["--port", "8443", "--mode", "warn"],
    }
    # Global flags before the verb go through the CLI's parser, which hands over the rest.
    seen.clear()
    assert gpuctl.main.main(["-v", "serve", "--", "--no-api"]) == 0
    assert gpuctl.main.main(["-v", "admission", "serve", "--", "--mode", "warn"]) == 0
    assert seen == {"serve": ["--no-api"], "admission": ["--mode", "warn"]}


@pytest.mark.parametrize(
    "argv", [["serve", "--help"], ["admission", "serve", "--help"], ["api", "serve", "--help"]]
)
def test_service_help_is_the_services_own(argv, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        gpuctl.main.main(argv)
    assert e.value.code == 0
    assert f"usage: gpuctl {' '.join(argv[:-1])} " in capsys.readouterr().out


def test_top_help_lists_the_services(capsys) -> None:
    with pytest.raises(SystemExit):
        gpuctl.main.main(["--help"])
    out = capsys.readouterr().out
    assert "\n    serve " in out and "\n    admission " in out and "\n    version " in out


def test_cli_alone_cannot_start_a_service(capsys) -> None:
    assert cli.main(["serve", "x"]) == 1
    assert "gpuctl.main" in capsys.readouterr().err


def test_version_without_client_reports_an_unreachable_server(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert gpuctl.main.main(["version"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("gpuctl version: ") and out[1].startswith("server version: unreachable (")


@pytest.mark.parametrize(
    ("module", "prefix"),
    [(get, "get_"), (describe, "describe_")],
    ids=["get", "describe"],
)
def test_every_type_dispatches_to_its_view(module, prefix, monkeypatch) -> None:
    for kind in set(module.TYPES.values()):
        monkeypatch.setattr(module, f"{prefix}{kind}", lambda args, kind=kind: kind)
    for alias, kind in module.TYPES.items():
        assert module.run(argparse.Namespace(type=alias)) == kind, alias


def test_a_table_or_json_never_imports_yaml() -> None:
    """gpuctl.cli.output builds its YAML Dumper on first use: `get jobs` (a table) and -o json do not
    pay for PyYAML; -o yaml does."""
    code = (
        "import sys\n"
        "from gpuctl.cli.output import print_data, table, to_yaml\n"
        "table(['NAME'], [['a']]); print_data({'a': 1}, 'json')\n"
        "assert 'yaml' not in sys.modules, 'yaml imported'\n"
        "assert to_yaml({'a': 1}) == 'a: 1\\n' and 'yaml' in sys.modules\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
