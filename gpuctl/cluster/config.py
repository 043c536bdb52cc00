"""Finding the cluster: --kubeconfig/--context, $KUBECONFIG, ~/.kube/config, then in-cluster.

The one place that reads kubeconfig files and the in-cluster service account: `load()` gives the
connection settings `Cluster.connect` uses (the CLI, `gpuctl serve`, the REST API and the webhook all
connect that way) and `default_namespace()` the namespace a command defaults to. Nothing else in gpuctl
calls `kubernetes.config`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuctl.constants import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from kubernetes.client import Configuration

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Connections kept per host: every informer's watch holds one for minutes, and the REST API's worker
# threads share the rest (the package's default, CPUs x 5, would make them open and drop connections).
POOL_SIZE = 32


def kubeconfig_files(kubeconfig: str | None) -> list[str]:
    if kubeconfig:
        return [kubeconfig]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [p for p in env.split(os.pathsep) if p and Path(p).exists()]
    home = Path.home() / ".kube" / "config"
    return [str(home)] if home.exists() else []


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (SERVICE_ACCOUNT / "token").exists()


def _context_namespace(config_file: str, context: str | None) -> str | None:
    """The namespace of `context` (or the current context) in `config_file`; None if it names none."""
    # lazy: `import kubernetes` costs ~170 ms; commands that never reach a cluster must not pay it.
    from kubernetes import config as k8s_config  # noqa: PLC0415 - lazy: kubernetes import is ~170 ms

    try:
        contexts, current = k8s_config.list_kube_config_contexts(config_file=config_file)
    except Exception:  # a kubeconfig the package cannot parse names no namespace; load() reports it
        return None
    ctx: Any = next((c for c in contexts if c["name"] == context), None) if context else current
    return (ctx or {}).get("context", {}).get("namespace")


def load(
    kubeconfig: str | None = None, context: str | None = None, *, pool_size: int = POOL_SIZE
) -> tuple[Configuration, str | None]:
    """Connection settings and the context's namespace: the kubeconfig if there is one (flag,
    $KUBECONFIG, ~/.kube/config), else the in-cluster service account. Exec credential plugins, client
    certificates and TLS are the official package's work."""
    from kubernetes import client as k8s_client  # noqa: PLC0415 - lazy: kubernetes import is ~170 ms
    from kubernetes import config as k8s_config  # noqa: PLC0415 - lazy: kubernetes import is ~170 ms

    cfg = k8s_client.Configuration()
    if kubeconfig and not Path(kubeconfig).exists():
        raise FileNotFoundError(f"kubeconfig {kubeconfig} not found")
    files = kubeconfig_files(kubeconfig)
    namespace = None
    if files:
        try:
            k8s_config.load_kube_config(config_file=files[0], context=context, client_configuration=cfg)
        except k8s_config.ConfigException as e:
            raise ConnectionError(f"cannot use kubeconfig {files[0]}: {e}") from None
        namespace = _context_namespace(files[0], context)
    elif in_cluster():
        k8s_config.load_incluster_config(client_configuration=cfg)
        ns_file = SERVICE_ACCOUNT / "namespace"
        namespace = ns_file.read_text().strip() if ns_file.exists() else None
    else:
        raise ConnectionError(
            "no cluster configured: pass --kubeconfig, set KUBECONFIG, or create ~/.kube/config "
            "(hack/cluster/up.sh starts a local cluster)"
        )
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, pool_size)
    return cfg, namespace


def default_namespace(flag: str | None, kubeconfig: str | None = None, context: str | None = None) -> str:
    """-n wins; then the context's namespace; then $DEFAULT_NAMESPACE (earlier gpuctl); then default."""
    if flag:
        return flag
    files = kubeconfig_files(kubeconfig)
    if files:
        if Path(files[0]).exists():
            ns = _context_namespace(files[0], context)
            if ns:
                return ns
    elif in_cluster():
        p = SERVICE_ACCOUNT / "namespace"
        if p.exists():
            return p.read_text().strip()
    return os.environ.get("DEFAULT_NAMESPACE") or DEFAULT_NAMESPACE
