"""The kubectl plugin form: the console scripts and the krew-style manifest agree (the plugin run by
the real kubectl: tests/integration/test_cli_kubectl.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

import gpuctl

ROOT = Path(__file__).resolve().parents[2]


def test_console_scripts_give_the_plugin_and_its_completion() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-gpuctl"] == scripts["gpuctl"] == "gpuctl.main:entrypoint"
    assert scripts["kubectl_complete-gpuctl"] == "gpuctl.cli.completion:kubectl_plugin_complete"


def test_krew_manifest_names_the_plugin_binary_and_version() -> None:
    doc = yaml.safe_load((ROOT / "plugins" / "gpuctl.yaml").read_text())
    assert doc["kind"] == "Plugin" and doc["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert doc["metadata"]["name"] == "gpuctl"
    assert doc["spec"]["version"] == f"v{gpuctl.__version__}"
    assert [p["bin"] for p in doc["spec"]["platforms"]] == ["kubectl-gpuctl"]
    assert len(doc["spec"]["shortDescription"]) <= 50  # krew's limit


def test_plugin_completion_speaks_cobras_protocol(tmp_path) -> None:
    """kubectl runs kubectl_complete-gpuctl with the words after `kubectl gpuctl`, the last being
    completed, and reads candidates then a `:DIRECTIVE` line."""
    exe = shutil.which("kubectl_complete-gpuctl", path=str(Path(sys.executable).parent))
    assert exe, "pip install -e . installs kubectl_complete-gpuctl next to the interpreter"
    env = {"KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    p = subprocess.run([exe, "get", "po"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["pool", "pools", ":4"]
