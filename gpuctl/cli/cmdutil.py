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

from gpuctl.cli.errors import CommandError

if TYPE_CHECKING:
    from gpuctl.cluster import Cluster


def connect(args: argparse.Namespace) -> Cluster:
    """The process's connection to the cluster of --kubeconfig/--context."""
    from gpuctl.cluster import Cluster  # noqa: PLC0415 - lazy: CLI start-up

    return Cluster.connect(kubeconfig=args.kubeconfig, context=args.context)


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


def note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)


def guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A service error (not found, conflict, refused) becomes the CLI's one-line error."""

    def wrapper(args: argparse.Namespace) -> int:
        from gpuctl.service.errors import ServiceError  # noqa: PLC0415 - lazy: CLI start-up

        try:
            return fn(args)
        except ServiceError as e:
            raise CommandError(str(e)) from None

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def interruptible() -> None:
    """Ctrl-C ends a command that runs until interrupted (-w, logs -f), as it ends kubectl's: a process
    started with SIGINT ignored (a shell's background job, a test runner's worker) would otherwise never
    see KeyboardInterrupt, since Python keeps an inherited SIG_IGN (Go's signal.Notify replaces it)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def kv(pairs: list[tuple[str, object]], indent: int = 0) -> None:
    """`Key:   value` lines, aligned (kubectl describe)."""
    width = max((len(k) for k, _ in pairs), default=0) + 2
    for k, v in pairs:
        print(" " * indent + f"{k + ':':<{width}}{'' if v is None else v}")


def or_dash(v: object) -> object:
    return "-" if v is None else v


def quota_gpu(q: dict[str, Any]) -> str:
    """A quota row's GPU cell: used/quota."""
    g = q["gpu"]
    total = "unlimited" if g["quota"] is None else g["quota"]
    return f"{g['used']}/{total}"
