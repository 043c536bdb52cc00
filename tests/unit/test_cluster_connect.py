"""Cluster.connect reuses a connection only for the same resolved kubeconfig: a process whose
$KUBECONFIG changes (a test session, an embedding tool) never talks to the previous cluster."""

from __future__ import annotations

from pathlib import Path

from gpuctl.cluster import Cluster


def _kubeconfig(path: Path, server: str) -> str:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{server}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return str(path)


def test_connect_follows_the_environment(monkeypatch, tmp_path) -> None:
    a = _kubeconfig(tmp_path / "a", "https://127.0.0.1:1")
    b = _kubeconfig(tmp_path / "b", "https://127.0.0.1:2")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", a)
    first = Cluster.connect()
    monkeypatch.setenv("KUBECONFIG", b)
    second = Cluster.connect()
    assert (first.host, second.host) == ("https://127.0.0.1:1", "https://127.0.0.1:2")
    monkeypatch.setenv("KUBECONFIG", a)
    assert Cluster.connect() is first
    assert Cluster.connect(kubeconfig=b) is second
