"""`gpuctl serve` as a subprocess authenticated as its ServiceAccount (manifests/serve/rbac.yaml plus the
extra RBAC files a feature adds), the way the chart runs it: every integration module that needs a live
serve starts it here."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpuctl.cluster import Cluster, path
from gpuctl.server.leader import DEFAULT_LEASE_NAME, SYSTEM_NAMESPACE
from tests.integration.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]
SERVE_NS, SERVE_SA = "gpuctl-system", "gpuctl-serve"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service_account_kubeconfig(
    kube: Cluster, kubectl_bin: str, cluster_kubeconfig: str, out: Path, *extra_rbac: str
) -> Path:
    """Apply manifests/serve/rbac.yaml (and `extra_rbac` files of manifests/serve/) and write a kubeconfig
    that authenticates as its ServiceAccount."""
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SERVE_NS}})
    for f in ("rbac.yaml", *extra_rbac):
        subprocess.run(
            [
                kubectl_bin,
                "--kubeconfig",
                cluster_kubeconfig,
                "apply",
                "-f",
                str(ROOT / "manifests/serve" / f),
            ],
            check=True,
            capture_output=True,
        )
    token = kube.request(
        "POST",
        path("ServiceAccount", SERVE_SA, SERVE_NS, "token"),
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 7200},
        },
    )["status"]["token"]
    admin = yaml.safe_load(Path(cluster_kubeconfig).read_text())
    cl = admin["clusters"][0]["cluster"]
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cl}],
        "users": [{"name": SERVE_SA, "user": {"token": token}}],
        # The ServiceAccount's own namespace, as in a pod: gpuctl serve puts its Lease there by default
        # (kubectl's namespace rule), where manifests/serve/rbac.yaml's Role lets it.
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": SERVE_SA, "namespace": SERVE_NS}}],
        "current-context": "sa",
    }
    if "certificate-authority" in cl:  # make the file self-contained
        cl["certificate-authority-data"] = base64.b64encode(
            Path(cl.pop("certificate-authority")).read_bytes()
        ).decode()
    out.write_text(yaml.safe_dump(cfg))
    return out


def remove_serve_rbac(kubectl_bin: str, cluster_kubeconfig: str, *extra_rbac: str) -> None:
    """Undo service_account_kubeconfig's RBAC: `extra_rbac` files of manifests/serve/, then rbac.yaml."""
    for f in (*extra_rbac, "rbac.yaml"):
        subprocess.run(
            [kubectl_bin, "--kubeconfig", cluster_kubeconfig, "delete", "--ignore-not-found", "-f",
             str(ROOT / "manifests/serve" / f)],
            capture_output=True,
        )  # fmt: skip


def drop_leader_lease(kube: Cluster) -> None:
    """Delete serve's leader Lease left by another module's serve (its holder would keep this one standing by
    until the Lease expires)."""
    if kube.get_or_none(path("Lease", DEFAULT_LEASE_NAME, SYSTEM_NAMESPACE)):
        kube.delete(path("Lease", DEFAULT_LEASE_NAME, SYSTEM_NAMESPACE))


@dataclass
class ServeProcess:
    proc: subprocess.Popen
    port: int  # metrics (and /readyz)
    log: Path

    def alive(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"gpuctl serve exited:\n{self.log.read_text()[-4000:]}")

    def ready(self) -> bool:
        """/readyz answers 200 (every informer listed once); fails at once, with the log, if serve exited."""
        self.alive()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def wait_ready(self, timeout: float = 60) -> None:
        wait_until(self.ready, timeout, 0.5, what="gpuctl serve ready")

    def stop(self, timeout: float = 10) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)


def start_serve(
    kubeconfig: Path | str, log: Path, *flags: str, port: int | None = None, append: bool = False
) -> ServeProcess:
    """`python -m gpuctl.server.main --kubeconfig K --address 127.0.0.1 --metrics-port PORT FLAGS...`, its
    output in `log` (appended to with `append`: a restarted serve)."""
    port = free_port() if port is None else port
    out = log.open("a" if append else "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuctl.server.main", "--kubeconfig", str(kubeconfig),
         "--address", "127.0.0.1", "--metrics-port", str(port), *flags],
        stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
    )  # fmt: skip
    out.close()  # the child has its own descriptor
    return ServeProcess(proc, port, log)
