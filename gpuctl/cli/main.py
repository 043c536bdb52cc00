"""`gpuctl` entry point: the argparse tree and the error/exit-code policy.

Every verb module exposes `register(subparsers, common)` and a `run(args) -> int`. Flags shared by all
verbs live in `common` parents so they work after the verb (`gpuctl get jobs -n team-a -o wide`), the
way kubectl reads them. Exit codes: 0 success, 1 any failure (kubectl's convention).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from gpuctl import __version__
from gpuctl.cli import admission_cmd, apply, create, delete, describe, get, label, logs, serve, version
from gpuctl.cli.errors import CommandError

VERBS = (create, apply, delete, get, describe, logs, label, version, admission_cmd, serve)


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


def build_parser() -> argparse.ArgumentParser:
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
    for verb in VERBS:
        verb.register(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # The long-running services own their flags: pass everything after the verb straight through
    # (argparse would otherwise try to read `--metrics-port` itself).
    if argv[:1] == ["serve"]:
        from gpuctl.server.main import main as serve_main

        return int(serve_main(argv[1:]) or 0)
    if argv[:2] == ["admission", "serve"]:
        from admission.server import main as admission_main

        return int(admission_main(argv[2:]) or 0)
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("kubeconfig", "context", "namespace"):
        if getattr(args, name, None) is None and getattr(args, f"global_{name}", None) is not None:
            setattr(args, name, getattr(args, f"global_{name}"))
    if getattr(args, "json", False) and not getattr(args, "output", None):
        args.output = "json"
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2), format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(args.run(args) or 0)
    except CommandError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        from gpuctl.service.errors import describe_exception

        print(f"error: {describe_exception(e)}", file=sys.stderr)
        if args.verbose:
            raise
        return 1


def entrypoint() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entrypoint()
