"""The gpuctl CLI: the argparse tree and the error/exit-code policy.

Every verb module exposes `register(subparsers, common)` and a `run(args) -> int`. Flags shared by all
verbs live in `common` parents so they work after the verb (`gpuctl get jobs -n team-a -o wide`), the
way kubectl reads them. Exit codes: 0 success, 1 any failure (kubectl's convention).

Start-up cost: a command registers (and imports) only its own verb's module (`VERBS`, `verb_of`);
`--help` and errors build the whole tree. This module and the verb modules import only the standard
library, argparse and gpuctl.constants at module level. Everything else (spec/pydantic,
yaml, the cluster client, the service layer, the views) is imported inside `run`, marked
`# noqa: PLC0415 - lazy: CLI start-up`. tests/unit/test_cli_startup.py keeps it that way and
bench/cli.py measures it against `kubectl version --client`.

The console script is gpuctl.main, which sits above gpuctl.cli, gpuctl.server and admission: it runs
`gpuctl serve` and `gpuctl admission serve` itself and passes them in as `services`, since this
package must not import the server or the webhook.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from gpuctl import __version__
from gpuctl.cli.errors import CommandError

# Verb -> the module that registers it (`register(subparsers, common)`), in `gpuctl --help`'s order. A
# command imports only its own verb's module (build_parser(only=verb_of(argv))).
VERBS: dict[str, str] = {
    "create": "gpuctl.cli.create",
    "apply": "gpuctl.cli.apply",
    "delete": "gpuctl.cli.delete",
    "get": "gpuctl.cli.get",
    "describe": "gpuctl.cli.describe",
    "logs": "gpuctl.cli.logs",
    "history": "gpuctl.cli.history",
    "stop": "gpuctl.cli.stop",
    "resume": "gpuctl.cli.resume",
    "label": "gpuctl.cli.label",
    "adopt": "gpuctl.cli.adopt",
    "version": "gpuctl.cli.version",
    "admission": "gpuctl.cli.admission_cmd",
    "api": "gpuctl.cli.api_cmd",
    "serve": "gpuctl.cli.serve",
}

# The options build_parser gives before the verb that take a value (`gpuctl -n team-a get jobs`).
_VALUED_LONG = ("--kubeconfig", "--context", "--namespace")
_VALUED_SHORT = "n"

# `gpuctl serve ...` / `gpuctl admission serve ...`: argv after the verb -> exit code (see gpuctl.main).
Services = Mapping[str, Callable[[list[str]], int]]


def cluster_flags() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("cluster access")
    g.add_argument("--kubeconfig", help="path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    g.add_argument("--context", help="kubeconfig context to use")
    g.add_argument(
        "-n",
        "--namespace",
        help="namespace (default: the context's namespace, or $DEFAULT_NAMESPACE, or default)",
    )
    return p


def output_flags(choices: Sequence[str] = ("json", "yaml", "wide")) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("-o", "--output", choices=list(choices), help="output format")
    p.add_argument("--json", action="store_true", help="same as -o json (earlier gpuctl)")
    return p


def verb_of(argv: Sequence[str]) -> str | None:
    """The verb of a command line: its first argument that is neither an option nor an option's value
    (-n/--namespace, --kubeconfig, --context before the verb take one). None when there is none, or
    when a help option comes before it (`gpuctl --help get`: the whole tree's help)."""
    args = iter(argv)
    for a in args:
        if a == "--":
            return None
        if a.startswith("--"):
            name = a.split("=", 1)[0]
            if len(name) > 2 and "--help".startswith(name):
                return None
            # argparse takes unique prefixes too (`--kube K`)
            if "=" not in a and len(a) > 2 and any(o.startswith(a) for o in _VALUED_LONG):
                next(args, None)
        elif a.startswith("-") and len(a) > 1:
            flags = a[1:]
            if "h" in flags.split(_VALUED_SHORT, 1)[0]:
                return None
            if flags.endswith(_VALUED_SHORT) and _VALUED_SHORT not in flags[:-1]:
                next(args, None)  # `-n NS`, `-vn NS`; `-nNS` carries its value
        else:
            return a
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser. only: register just this verb's subparser (the one a command runs; the other
    verb modules are not imported); the whole tree when it is None or no verb (so that --help lists
    every verb and argparse's error for an unknown verb names them all)."""
    parser = argparse.ArgumentParser(
        prog="gpuctl",
        description="Queued, pooled, multi-team GPUs on Kubernetes, built on Kueue.",
    )
    parser.add_argument("--version", action="version", version=f"gpuctl {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log API calls (-vv: more)")
    # kubectl also takes these before the verb (`gpuctl --kubeconfig K get jobs`); the verb's own
    # flags win when both are given.
    parser.add_argument("--kubeconfig", dest="global_kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--context", dest="global_context", help=argparse.SUPPRESS)
    parser.add_argument("-n", "--namespace", dest="global_namespace", help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND")
    sub.required = True
    common = {"cluster": cluster_flags(), "output": output_flags}
    for verb in [only] if only in VERBS else VERBS:
        importlib.import_module(VERBS[verb]).register(sub, common)
    return parser


def _configure_logging(verbose: int) -> None:
    """-v/-vv only: without them no handler is built (a warning still reaches stderr through
    logging's last-resort handler, as its bare message)."""
    import logging  # noqa: PLC0415 - lazy: CLI start-up (only -v needs it)

    logging.basicConfig(
        level=logging.WARNING - 10 * min(verbose, 2), format="%(levelname)s %(name)s: %(message)s"
    )


def main(argv: Sequence[str] | None = None, services: Services | None = None) -> int:
    """Run one CLI command; `services` runs `serve` and `admission serve` (given by gpuctl.main)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(only=verb_of(argv))
    args = parser.parse_args(argv)
    args.services = dict(services or {})
    for name in ("kubeconfig", "context", "namespace"):
        if getattr(args, name, None) is None and getattr(args, f"global_{name}", None) is not None:
            setattr(args, name, getattr(args, f"global_{name}"))
    if getattr(args, "json", False) and not getattr(args, "output", None):
        args.output = "json"
    if args.verbose:
        _configure_logging(args.verbose)
    try:
        return int(args.run(args) or 0)
    except CommandError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`gpuctl get jobs | head`): stop quietly, as kubectl does. Point stdout
        # at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as e:
        from gpuctl.service.errors import describe_exception  # noqa: PLC0415 - lazy: CLI start-up

        print(f"error: {describe_exception(e, _readable_namespace(args, e))}", file=sys.stderr)
        if args.verbose:
            raise
        return 1


def _readable_namespace(args: argparse.Namespace, e: Exception) -> str | None:
    """For a request RBAC refused: the namespace the user may read instead (-n or the context's, when
    its credential may list jobs there), for the error to suggest."""
    from gpuctl.service.access import permissions_of, refused  # noqa: PLC0415 - lazy: CLI start-up

    if refused(e) is None:
        return None
    try:
        from gpuctl.cluster import Cluster  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.cluster.config import namespace_scope  # noqa: PLC0415 - lazy: CLI start-up

        kubeconfig, context = getattr(args, "kubeconfig", None), getattr(args, "context", None)
        ns = namespace_scope(getattr(args, "namespace", None), kubeconfig=kubeconfig, context=context)
        cluster = Cluster.connect(kubeconfig=kubeconfig, context=context)
        return ns if ns and permissions_of(cluster).allows("list", "jobs", "batch", ns) else None
    except Exception:  # the hint is a courtesy: never let it hide the error itself
        return None


def entrypoint() -> None:
    """Kept for `python -m gpuctl.cli.main`; the console script is gpuctl.main:entrypoint."""
    sys.exit(main())


if __name__ == "__main__":
    entrypoint()
