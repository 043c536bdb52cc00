"""`gpuctl completion` and `gpuctl __complete` without a cluster: verbs, flags, types, formats. Live
names (jobs, pools, nodes, namespaces) from the local cluster: tests/integration/test_cli_kubectl.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuctl.cli.completion import candidates, complete, rejoin
from gpuctl.cli.main import VERBS, main


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ([""], list(VERBS)),
        (["get", ""], ["job", "jobs", "label", "labels", "namespace", "namespaces", "node", "nodes", "ns"]),
        (["describe", "j"], ["job", "jobs"]),
        (["get", "jobs", "-o", ""], ["json", "yaml", "wide", "name", "jsonpath=", "jsonpath-file="]),
        (["wait", ""], ["job"]),
        (["wait", "job", "x", "--for", ""], ["admitted", "running", "complete", "failed", "deleted"]),
        (["completion", ""], ["bash", "zsh", "fish"]),
        (["get", "jobs", "-l", ""], []),  # a selector: nothing to guess
    ],
)
def test_candidates(words, expected) -> None:
    got = [c for c in candidates(words) if c.startswith(words[-1])]
    assert got[: len(expected)] == expected


def test_flags_come_from_the_parser_itself() -> None:
    flags = candidates(["get", "jobs", "--"])
    for f in (
        "--sort-by",
        "--no-headers",
        "--show-labels",
        "--field-selector",
        "--watch",
        "--as",
        "--output",
    ):
        assert f in flags
    assert "--pods" not in flags  # hidden
    assert "--for" in candidates(["wait", "job", "x", "--"])
    assert "--since-time" in candidates(["logs", "x", "--"])


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script(shell, capsys) -> None:
    assert main(["completion", shell]) == 0
    assert "gpuctl __complete" in capsys.readouterr().out


def test_completion_takes_the_global_flags_as_every_verb(capsys) -> None:
    """`completion bash --kubeconfig F` was a usage error (issue 42); kubectl takes its global flags."""
    assert main(["completion", "bash", "--kubeconfig", "/nowhere", "--context", "c", "-n", "x"]) == 0
    assert "gpuctl __complete" in capsys.readouterr().out


def _bash(tmp_path, *asks: tuple[str, int]) -> list[str]:
    """The script sourced in bash, asked as bash asks at <TAB>: each (COMP_WORDS, COMP_CWORD)'s COMPREPLY."""
    script = (
        "source <(gpuctl completion bash)\n"
        + 'show() { _gpuctl_complete; printf "%s\\n" "${COMPREPLY[@]}"; }\n'
    )
    script += "".join(f"COMP_WORDS=({words}); COMP_CWORD={cword}; show\n" for words, cword in asks)
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=_env(tmp_path), timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def test_bash_completes_through_the_script(tmp_path) -> None:
    assert shutil.which("bash")
    assert _bash(tmp_path, ("gpuctl get jobs --sort", 3), ("gpuctl wai", 1)) == ["--sort-by", "wait"]


def _env(tmp_path) -> dict:
    bindir = Path(sys.executable).parent
    return {"PATH": f"{bindir}:/usr/bin:/bin", "KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)}


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed here (apt-get install fish)")
def test_fish_completes_through_the_script(tmp_path) -> None:
    script = 'gpuctl completion fish | source; complete -C"gpuctl wai"; complete -C"gpuctl get jobs --sort"'
    p = subprocess.run(["fish", "-c", script], capture_output=True, text=True, env=_env(tmp_path), timeout=60)
    assert p.returncode == 0, p.stderr
    assert [line.split("\t")[0] for line in p.stdout.splitlines()] == ["wait", "--sort-by"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed here (apt-get install zsh)")
def test_zsh_completes_through_the_script(tmp_path) -> None:
    """The function zsh calls at <TAB>, with its words and CURRENT, compadd replaced by a printer (a
    real compadd needs an interactive completion widget)."""
    script = (
        "autoload -Uz compinit; compinit -u -d $HOME/.zcompdump; source <(gpuctl completion zsh)\n"
        'compadd() { shift; printf "%s\\n" "$@"; }\n'
        "words=(gpuctl wai); CURRENT=2; _gpuctl\n"
        "words=(gpuctl get jobs --sort); CURRENT=4; _gpuctl\n"
    )
    p = subprocess.run(["zsh", "-c", script], capture_output=True, text=True, env=_env(tmp_path), timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["wait", "--sort-by"]


# ----------------------------------------------------------------------------- --flag=value (issue 42)
@pytest.mark.parametrize(
    ("words", "printed"),
    [
        # zsh and fish pass the word whole and replace it whole
        (
            ["wait", "job", "x", "--for="],
            ["--for=admitted", "--for=running", "--for=complete", "--for=failed", "--for=deleted"],
        ),
        (["wait", "job", "x", "--for=r"], ["--for=running"]),
        (["get", "jobs", "--output=ya"], ["--output=yaml"]),
        # bash splits it at "=" (COMP_WORDBREAKS) and replaces only what follows "="
        (["wait", "job", "x", "--for", "="], ["admitted", "running", "complete", "failed", "deleted"]),
        (["wait", "job", "x", "--for", "=", "r"], ["running"]),
        (["get", "jobs", "-o", "=", "ya"], ["yaml"]),
        # a --flag=value earlier on the line is one word: the TYPE is still the first positional
        (["describe", "--namespace", "=", "team-a", "j"], ["job", "jobs"]),
        (["describe", "--namespace=team-a", "j"], ["job", "jobs"]),
    ],
)
def test_flag_equals_value_completes_the_flags_values(words, printed, capsys) -> None:
    assert complete(words) == 0
    assert capsys.readouterr().out.splitlines() == printed


def test_rejoin_undoes_bashs_split_at_equals() -> None:
    assert rejoin(["get", "-n", "=", "a", "jobs"]) == (["get", "-n=a", "jobs"], False)
    assert rejoin(["wait", "--for", "="]) == (["wait", "--for="], True)
    assert rejoin(["wait", "--for", "=", "ru"]) == (["wait", "--for=ru"], True)
    assert rejoin(["x", "=", "y"]) == (["x", "=", "y"], False)  # not a flag: left alone


def test_bash_completes_a_flags_value_after_equals(tmp_path) -> None:
    """`gpuctl wait job x --for=<TAB>` as bash asks: it completed file names."""
    asks = [("gpuctl wait job x --for =", 5), ("gpuctl wait job x --for = ru", 6)]
    assert _bash(tmp_path, *asks) == ["admitted", "running", "complete", "failed", "deleted", "running"]
