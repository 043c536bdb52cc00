"""Finding the cluster: --kubeconfig/--context, $KUBECONFIG, ~/.kube/config, then in-cluster."""

from __future__ import annotations

import os
from pathlib import Path

from gpuctl.constants import DEFAULT_NAMESPACE


def kubeconfig_files(kubeconfig: str | None) -> list[str]:
    if kubeconfig:
        return [kubeconfig]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [p for p in env.split(os.pathsep) if p and Path(p).exists()]
    home = Path.home() / ".kube" / "config"
    return [str(home)] if home.exists() else []


def in_cluster() -> bool:
    return (
        bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        and Path("/var/run/secrets/kubernetes.io/serviceaccount/token").exists()
    )


def default_namespace(flag: str | None, kubeconfig: str | None = None, context: str | None = None) -> str:
    """-n wins; then the context's namespace; then $DEFAULT_NAMESPACE (earlier gpuctl); then default."""
    if flag:
        return flag
    files = kubeconfig_files(kubeconfig)
    if files:
        try:
            from kubernetes.config import list_kube_config_contexts

            contexts, current = list_kube_config_contexts(config_file=files[0])
            ctx = next((c for c in contexts if c["name"] == context), None) if context else current
            ns = (ctx or {}).get("context", {}).get("namespace")
            if ns:
                return ns
        except Exception:
            pass
    elif in_cluster():
        p = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        if p.exists():
            return p.read_text().strip()
    return os.environ.get("DEFAULT_NAMESPACE") or DEFAULT_NAMESPACE
