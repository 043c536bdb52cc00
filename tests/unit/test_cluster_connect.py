"""Cluster.connect reuses a connection only for the same resolved kubeconfig: a process whose
$KUBECONFIG changes (a test session, an embedding tool) never talks to the previous cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.cluster import Cluster
from gpuctl.cluster.config import ConfigError


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


def test_a_member_with_its_own_kubeconfig_is_that_files_cluster(monkeypatch, tmp_path) -> None:
    """`gpuctl serve --worker-kubeconfig worker-a=PATH`: member("worker-a") is PATH's current context; any
    other member is still a context of the manager's kubeconfig (the CLI's way), and none is an error."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    manager = Cluster.connect(kubeconfig=_kubeconfig(tmp_path / "m", "https://127.0.0.1:11"))
    manager.member_kubeconfigs = {"worker-a": _kubeconfig(tmp_path / "wa", "https://127.0.0.1:12")}
    assert manager.member("worker-a").host == "https://127.0.0.1:12"
    assert manager.member("c").host == "https://127.0.0.1:11"  # a context of its own kubeconfig
    with pytest.raises(ConfigError, match="worker-b"):
        manager.member("worker-b")
