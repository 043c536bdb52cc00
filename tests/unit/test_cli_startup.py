"""CLI start-up stays cheap, and the entry point keeps cli, server and admission apart.

What `gpuctl version --client` and `gpuctl --help` import is read from `python -X importtime` of a
real process (every module the interpreter loads, nested or lazy), not timed: the timing against
kubectl is bench/cli.py's job.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
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


def python_ok(code: str) -> None:
    """`code` runs in a fresh interpreter (nothing imported yet) and its asserts hold."""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]


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
    monkeypatch.setattr("admission.command.main", lambda argv: seen.setdefault("admission", argv) and 0)
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
        assert module.run(argparse.Namespace(type=alias, name="x", names=["x"])) == kind, alias


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
    python_ok(code)


# ----------------------------------------------------------------------------- one verb per command
PARSED = [
    ["get", "jobs"],
    ["get", "jobs", "-A"],
    ["get", "jobs", "-n", "team-a", "-o", "wide"],
    ["get", "jobs", "-A", "-o", "yaml", "--pool", "training-pool", "-l", "a=b"],
    ["get", "pools", "--json"],
    ["-n", "team-a", "get", "jobs"],
    ["-nteam-a", "get", "jobs"],
    ["-vn", "team-a", "get", "jobs"],
    ["--namespace", "get", "get", "jobs"],  # a namespace called "get" is a value, not the verb
    ["--namespace=logs", "describe", "job", "x"],
    ["--kubeconfig", "/k", "--context", "c", "get", "pools"],
    ["--kubeconfig=/k", "get", "nodes", "--gpu-type", "a100"],
    ["--kube", "/k", "--cont", "describe", "get", "node", "x"],  # argparse's prefixes of valued options
    ["-v", "get", "jobs", "-A", "-o", "yaml"],
    ["-vv", "describe", "job", "x", "-o", "json"],
    ["describe", "pool", "training-pool"],
    ["logs", "x"],
    ["logs", "x", "-f", "-n", "team-a"],
    ["create", "-f", "x.yaml", "--dry-run=client", "-o", "yaml"],
    ["create", "--dry-run", "-f", "x.yaml"],
    ["apply", "-f", "x.yaml", "-f", "y.yaml"],
    ["delete", "-f", "x.yaml"],
    ["stop", "x"],
    ["resume", "x", "--dry-run=server"],
    ["history"],
    ["adopt", "-n", "team-a"],
    ["version", "--client"],
    ["version", "-o", "json"],
    ["label", "node-1", "runwhere.ai/pool=p"],
    ["admission", "serve"],
    ["api", "serve"],
    ["-v", "serve", "--", "--no-api"],
]

REFUSED = [
    [],
    ["-v"],
    ["bogus"],
    ["get"],
    ["get", "bogus"],
    ["get", "jobs", "--bogus"],
    ["describe", "job"],
    ["--bogus", "get", "jobs"],
    ["-n"],
    ["--kubeconfig", "/k"],
    ["get", "jobs", "-o", "table"],
]


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[str, object]:
    """("ok", the Namespace's values) or ("exit CODE", stderr) of parsing `argv`. A function (`run`: some
    verbs register a closure) by its module and name."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
        return "ok", {
            k: (v.__module__, v.__qualname__) if callable(v) and hasattr(v, "__qualname__") else v
            for k, v in vars(ns).items()
        }
    except SystemExit as e:
        return f"exit {e.code}", err.getvalue()


@pytest.mark.parametrize("argv", PARSED + REFUSED, ids=" ".join)
def test_the_one_verb_parser_parses_like_the_whole_tree(argv) -> None:
    only = cli.verb_of(argv)
    assert only in cli.VERBS or argv in REFUSED, only
    assert _parse(cli.build_parser(only=only), argv) == _parse(cli.build_parser(), argv)


@pytest.mark.parametrize(
    ("argv", "verb"),
    [
        (["get", "jobs"], "get"),
        (["-v", "-n", "x", "get"], "get"),
        (["-vvn", "x", "logs", "j"], "logs"),
        (["-nx", "logs"], "logs"),
        (["--context=c", "--kubeconfig", "k", "describe"], "describe"),
        (["--help", "get"], None),  # the whole tree's help
        (["-vh", "get"], None),
        (["--he", "get"], None),
        (["--", "get"], None),
        (["-v"], None),
    ],
)
def test_verb_of(argv, verb) -> None:
    assert cli.verb_of(argv) == verb


def test_verbs_name_every_registered_verb_and_its_module() -> None:
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(sub.choices) == list(cli.VERBS)
    for verb, module in cli.VERBS.items():
        assert module.startswith("gpuctl.cli.")  # never the server or the webhook (see above)
        one = cli.build_parser(only=verb)
        (s,) = [a for a in one._actions if isinstance(a, argparse._SubParsersAction)]
        assert list(s.choices) == [verb]


def test_help_lists_every_verb_whatever_follows(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help", "get"])
    out = capsys.readouterr().out
    assert all(f"\n    {verb} " in out for verb in cli.VERBS), out


# What a read command imports on its way to the cluster: the verb's module and its service module,
# never the spec models (pydantic), the other verbs, or a write path.
READS = {
    "get jobs": ("gpuctl.cli.get", "gpuctl.service.jobs"),
    "get pools": ("gpuctl.cli.get", "gpuctl.service.usage"),
    "get quotas": ("gpuctl.cli.get", "gpuctl.service.quotas"),
    "describe job x": ("gpuctl.cli.describe", "gpuctl.service.views"),
    "logs x": ("gpuctl.cli.logs", "gpuctl.service.logs"),
}


@pytest.mark.parametrize("command", list(READS))
def test_a_read_imports_no_pydantic_and_no_other_verb(command, tmp_path) -> None:
    """The CLI's real path up to the cluster connection (none is configured: exit 1 with "no cluster"),
    after which only the request is left."""
    code = (
        "import json, sys\n"
        "from gpuctl.main import main\n"
        "rc = main(sys.argv[1:])\n"
        "print(json.dumps([rc, sorted(sys.modules)]))\n"
    )
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    p = subprocess.run(
        [sys.executable, "-c", code, *command.split()],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    rc, modules = json.loads(p.stdout)
    assert rc == 1 and "no cluster configured" in p.stderr, p.stderr[-2000:]
    assert set(READS[command]) <= set(modules)  # the handler ran its imports
    assert [m for m in modules if m.split(".")[0] in ("pydantic", "pydantic_core")] == []
    assert [m for m in modules if m.startswith("gpuctl.spec")] == []
    # threads (pod list shards), logging (-v only) and orjson (big answers only) come when needed
    assert sorted({"concurrent.futures", "logging", "orjson"} & set(modules)) == []
    # gpuctl.cluster.transport speaks HTTP/1.1 itself: no http.client, so no email package
    assert sorted(m for m in modules if m.split(".")[0] in ("http", "email")) == []
    if command in ("get jobs", "get pools"):  # a table without PyYAML, and no write path of pools
        writes = {"yaml", "gpuctl.service.multicluster", "gpuctl.service.pool_sync"}
        assert sorted(writes & set(modules)) == []
        # the read path's records are NamedTuples: `import dataclasses` (inspect, ast, dis) costs ~12 ms;
        # hashlib only names a Topology (queues.objects.topology_name), which no read does
        assert sorted({"dataclasses", "inspect", "hashlib"} & set(modules)) == []
    others = {m for v, m in cli.VERBS.items() if v != command.split()[0]}
    assert sorted(others & set(modules)) == []
    if command in ("get jobs", "logs x"):  # no waiting job to judge yet: no explain or estimate models
        assert sorted({"gpuctl.domain.explain", "gpuctl.domain.estimate"} & set(modules)) == []


@pytest.mark.parametrize(("verbose", "handlers"), [([], 0), (["-v"], 1), (["-vv"], 1)])
def test_logging_is_configured_only_with_verbose(verbose, handlers, tmp_path) -> None:
    code = (
        "import sys\n"
        "from gpuctl.main import main\n"
        "assert main(sys.argv[1:]) == 0\n"
        "logging = sys.modules.get('logging')\n"
        "print(len(logging.root.handlers) if logging else 0)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, *verbose, "version", "--client"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert int(p.stdout.splitlines()[-1]) == handlers


def test_importing_the_spec_builds_no_model() -> None:
    """The spec models are built on first use (`defer_build`), so `create -f` builds only its document's
    kind: no model instance made at import (a default written as an instance builds that model's validator
    and runs pydantic's plugin lookup, importlib.metadata)."""
    code = (
        "import sys\n"
        "import pydantic\n"
        "import gpuctl.spec\n"
        "models, todo = set(), [pydantic.BaseModel]\n"
        "while todo:\n"
        "    for c in todo.pop().__subclasses__():\n"
        "        models.add(c)\n"
        "        todo.append(c)\n"
        "spec = sorted(c.__name__ for c in models if c.__module__.startswith('gpuctl.spec'))\n"
        "assert len(spec) > 20, spec  # the walk found the models\n"
        "built = sorted(c.__name__ for c in models if c.__module__.startswith('gpuctl.spec')\n"
        "               and c.__pydantic_complete__)\n"
        "assert built == [], built\n"
        "assert 'importlib.metadata' not in sys.modules, 'plugin lookup at import'\n"
    )
    python_ok(code)
