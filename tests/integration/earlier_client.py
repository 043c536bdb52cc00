"""The earlier gpuctl's own client, installed from its public source, as our users still have it.

`../shared/fixtures/earlier-gpuctl.tar.gz` is the public source at the commit in
`earlier-gpuctl.commit` (its README). `earlier_gpuctl()` unpacks it and `pip install`s it into a
throwaway venv cached under the testbed cache, keyed by that commit (its dependencies, the
`kubernetes` package among them, come from PyPI): the first call of a machine takes about a minute,
later ones nothing. `EarlierClient.run(...)` runs its `gpuctl` console script unchanged, with its
defaults (namespace `default` without `-n`), against the kubeconfig given.

Its YAML examples are in `EarlierClient.examples` (`tests/yamls/<kind>/*.yaml` of its source).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT.parent / "shared" / "fixtures"
TARBALL = FIXTURES / "earlier-gpuctl.tar.gz"
COMMIT_FILE = FIXTURES / "earlier-gpuctl.commit"
CACHE = Path(os.environ.get("GPUCTL_TESTBED_CACHE", Path.home() / ".cache" / "gpuctl-testbed"))


@dataclass(frozen=True)
class EarlierClient:
    home: Path  # the cache folder: src/ (unpacked source) and venv/

    @property
    def bin(self) -> Path:
        return self.home / "venv" / "bin" / "gpuctl"

    @property
    def examples(self) -> Path:
        return self.home / "src" / "earlier-gpuctl" / "tests" / "yamls"

    def run(
        self, kubeconfig: str, *args: str, cwd: Path | None = None, timeout: float = 180
    ) -> subprocess.CompletedProcess:
        """Its `gpuctl ARGS` as a user runs it: KUBECONFIG set, nothing else of ours in the env."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("GPUCTL_", "PYTHON", "VIRTUAL_ENV")) and k != "DEFAULT_NAMESPACE"
        }
        env["KUBECONFIG"] = kubeconfig
        env["PATH"] = f"{self.bin.parent}:{env.get('PATH', '/usr/bin:/bin')}"
        return subprocess.run(
            [str(self.bin), *args],
            env=env,
            cwd=cwd or self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def earlier_gpuctl() -> EarlierClient:
    """The installed earlier client (installed on first use; a file lock makes concurrent callers wait)."""
    commit = COMMIT_FILE.read_text().strip()
    home = CACHE / f"earlier-gpuctl-{commit[:12]}"
    client = EarlierClient(home)
    if (home / ".complete").exists():
        return client
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / ".complete").exists():
            return client
        shutil.rmtree(home / "src", ignore_errors=True)
        shutil.rmtree(home / "venv", ignore_errors=True)
        with tarfile.open(TARBALL) as tar:
            tar.extractall(home / "src", filter="data")
        subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
        pip = subprocess.run(
            [str(home / "venv" / "bin" / "pip"), "install", "-q", str(home / "src" / "earlier-gpuctl")],
            capture_output=True,
            text=True,
        )
        if pip.returncode != 0:
            raise RuntimeError(
                f"installing the earlier gpuctl failed:\n{pip.stdout[-2000:]}{pip.stderr[-3000:]}"
            )
        (home / ".complete").write_text(commit + "\n")
    return client
