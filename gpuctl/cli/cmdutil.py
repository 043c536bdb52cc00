"""What every verb module shares (kubectl's pkg/cmd/util): the connection, where a read looks, notes,
turning a service error into the CLI's, and key: value blocks.

Module level imports only the standard library (CLI start-up); the cluster client is imported when a
command connects.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuctl.cli.errors import CommandError, not_found
from gpuctl.cli.terminal import escape_terminal

if TYPE_CHECKING:
    from gpuctl.cluster import Cluster
    from gpuctl.cluster.config import Overrides
    from gpuctl.service.prometheus import Prometheus


def connect(args: argparse.Namespace) -> Cluster:
    """The process's connection to the cluster of --kubeconfig/--context and kubectl's override flags."""
    from gpuctl.cluster import Cluster  # noqa: PLC0415 - lazy: CLI start-up

    return Cluster.connect(
        kubeconfig=getattr(args, "kubeconfig", None),
        context=getattr(args, "context", None),
        overrides=overrides_of(args),
    )


def overrides_of(args: argparse.Namespace) -> Overrides | None:
    """--server, --token, --as, ... (gpuctl.cluster.config.Overrides); None when none is given."""
    from gpuctl.cluster.config import ConfigError, Overrides, parse_timeout  # noqa: PLC0415 - lazy: CLI start-up

    timeout = getattr(args, "request_timeout", None)
    try:
        o = Overrides(
            server=getattr(args, "server", None),
            token=getattr(args, "token", None),
            certificate_authority=getattr(args, "certificate_authority", None),
            insecure_skip_tls_verify=bool(getattr(args, "insecure_skip_tls_verify", False)),
            as_user=getattr(args, "as_user", None),
            as_groups=tuple(getattr(args, "as_group", None) or ()),
            as_uid=getattr(args, "as_uid", None),
            request_timeout=parse_timeout(timeout) if timeout else None,
        )
    except ConfigError as e:
        raise CommandError(str(e)) from None
    return None if o == Overrides() else o


def scope(args: argparse.Namespace) -> str | None:
    """Where a namespaced read looks (kubectl's rule): -n; -A: every namespace; else the context's
    namespace; else every namespace (the earlier gpuctl's habit, kept for admins)."""
    from gpuctl.cluster.config import namespace_scope  # noqa: PLC0415 - lazy: CLI start-up

    return namespace_scope(
        args.namespace,
        getattr(args, "all_namespaces", False),
        kubeconfig=args.kubeconfig,
        context=args.context,
    )


def job_object_name(kind: str, name: str) -> str:
    """kubectl's TYPE/NAME of a job's Kubernetes object (job.batch/x, deployment.apps/y,
    statefulset.apps/z), as `-o name` and `wait` print it and kubectl reads it back."""
    from gpuctl.cluster.paths import type_name  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.constants import KIND_TO_RESOURCE  # noqa: PLC0415 - lazy: CLI start-up

    return type_name(KIND_TO_RESOURCE.get(kind, "Job"), name)  # type: ignore[call-overload]


def note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)


def guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A service error (not found, conflict, refused) becomes the CLI's one-line error."""

    def wrapper(args: argparse.Namespace) -> int:
        from gpuctl.service.errors import ServiceError  # noqa: PLC0415 - lazy: CLI start-up

        try:
            return fn(args)
        except ServiceError as e:
            raise command_error(e) from None

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def command_error(e: Exception) -> CommandError:
    """A service error as the CLI reports it: a named object that does not exist in kubectl's one
    NotFound text (gpuctl.cli.errors.not_found), any other as its message."""
    resource = getattr(e, "resource", None)
    if resource is not None:
        return not_found(resource, getattr(e, "name", None) or "")
    return CommandError(str(e))


def interruptible() -> None:
    """Ctrl-C ends a command that runs until interrupted (-w, logs -f), as it ends kubectl's: a process
    started with SIGINT ignored (a shell's background job, a test runner's worker) would otherwise never
    see KeyboardInterrupt, since Python keeps an inherited SIG_IGN (Go's signal.Notify replaces it)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def kv(pairs: list[tuple[str, object]], indent: int = 0) -> None:
    """`Key:   value` lines, aligned (kubectl describe); values escaped (output.escape_terminal)."""
    width = max((len(k) for k, _ in pairs), default=0) + 2
    for k, v in pairs:
        print(" " * indent + f"{k + ':':<{width}}{'' if v is None else escape_terminal(str(v))}")


def or_dash(v: object) -> object:
    return "-" if v is None else v


def quota_gpu(q: dict[str, Any]) -> str:
    """A quota row's GPU cell: used/quota."""
    g = q["gpu"]
    total = "unlimited" if g["quota"] is None else g["quota"]
    return f"{g['used']}/{total}"


# ----------------------------------------------------------------------------- GPU use (docs/utilisation.md)
NO_PROMETHEUS = (
    "no Prometheus to read GPU use from: pass --prometheus-url URL, or set $GPUCTL_PROMETHEUS_URL or "
    "prometheusURL in ~/.config/gpuctl/config.yaml (docs/utilisation.md)"
)


def add_prometheus_flag(p: argparse.ArgumentParser) -> None:
    """--prometheus-url: where `top`, `describe job` and `get jobs -o wide` read GPU use."""
    p.add_argument(
        "--prometheus-url",
        metavar="URL",
        help="the Prometheus that scrapes dcgm-exporter, for GPU use (default: $GPUCTL_PROMETHEUS_URL, "
        "else prometheusURL in the config file $GPUCTL_CONFIG or ~/.config/gpuctl/config.yaml)",
    )


def prometheus_of(args: argparse.Namespace, *, required: bool = True) -> Prometheus | None:
    """The Prometheus to read GPU use from (gpuctl.service.prometheus.configured). None when none is set
    and not `required` (describe and get -o wide then show none); required: a CommandError naming how."""
    from gpuctl.service.errors import ServiceError  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.prometheus import configured  # noqa: PLC0415 - lazy: CLI start-up

    try:
        prom = configured(getattr(args, "prometheus_url", None))
    except ServiceError as e:
        raise CommandError(str(e)) from None
    if prom is None and required:
        raise CommandError(NO_PROMETHEUS)
    return prom
