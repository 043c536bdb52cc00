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

TYPE_CHECKING = False  # typing itself is not imported at run time (CLI start-up: bench/cli.py)
if TYPE_CHECKING:
    from typing import Any, NoReturn

# Verb -> the module that registers it (`register(subparsers, common)`), in `gpuctl --help`'s order. A
# command imports only its own verb's module (build_parser(only=verb_of(argv))).
VERBS: dict[str, str] = {
    "create": "gpuctl.cli.create",
    "apply": "gpuctl.cli.apply",
    "delete": "gpuctl.cli.delete",
    "get": "gpuctl.cli.get",
    "describe": "gpuctl.cli.describe",
    "logs": "gpuctl.cli.logs",
    "exec": "gpuctl.cli.exec",
    "attach": "gpuctl.cli.attach",
    "port-forward": "gpuctl.cli.port_forward",
    "wait": "gpuctl.cli.wait",
    "history": "gpuctl.cli.history",
    "top": "gpuctl.cli.top",
    "stop": "gpuctl.cli.stop",
    "resume": "gpuctl.cli.resume",
    "keep": "gpuctl.cli.keep",
    "label": "gpuctl.cli.label",
    "adopt": "gpuctl.cli.adopt",
    "version": "gpuctl.cli.version",
    "completion": "gpuctl.cli.completion",
    "admission": "gpuctl.cli.admission_cmd",
    "api": "gpuctl.cli.api_cmd",
    "serve": "gpuctl.cli.serve",
}

# The options build_parser also takes before the verb (`gpuctl -n team-a get jobs`, `gpuctl --as jane get
# jobs`), as kubectl does: (flag, dest, takes a value, help). The verb's own flags win when both are given.
GLOBAL_FLAGS: tuple[tuple[tuple[str, ...], str, bool, str], ...] = (
    (("--kubeconfig",), "kubeconfig", True, "path to the kubeconfig file ($KUBECONFIG, ~/.kube/config)"),
    (("--context",), "context", True, "kubeconfig context to use"),
    (
        ("-n", "--namespace"),
        "namespace",
        True,
        "namespace. Reads (get, describe, logs, wait, history) default to the context's namespace, else "
        "every gpuctl namespace; writes to the context's namespace, else $DEFAULT_NAMESPACE, else default",
    ),
    (("-s", "--server"), "server", True, "the API server's address and port (overrides the kubeconfig's)"),
    (("--token",), "token", True, "bearer token for the API server (overrides the kubeconfig's user)"),
    (("--as",), "as_user", True, "user to impersonate for the operation"),
    (("--as-group",), "as_group", True, "group to impersonate (repeat for several)"),
    (("--as-uid",), "as_uid", True, "UID to impersonate"),
    (("--certificate-authority",), "certificate_authority", True, "path to a CA file for the API server"),
    (("--insecure-skip-tls-verify",), "insecure_skip_tls_verify", False, "do not check the server's cert"),
    (
        ("--request-timeout",),
        "request_timeout",
        True,
        "how long to wait for one answer (1s, 2m, 3h; 0: the default, 30s per request)",
    ),
)
_VALUED_LONG = tuple(f for flags, _, valued, _ in GLOBAL_FLAGS if valued for f in flags if f.startswith("--"))
_VALUED_SHORT = "ns"  # -n NS, -s SERVER

# `gpuctl serve ...` / `gpuctl admission serve ...`: argv after the verb -> exit code (see gpuctl.main).
Services = Mapping[str, Callable[[list[str]], int]]


class Parser(argparse.ArgumentParser):
    """argparse with kubectl's usage errors: `error: MESSAGE` and where to read the usage, exit 1
    (argparse's own exit code 2 means nothing to a kubectl user's scripts)."""

    def error(self, message: str) -> NoReturn:
        hint = getattr(self, "usage_hint", None) or self.prog
        self.exit(1, f"error: {message}\nSee '{hint} --help' for usage.\n")


class _VerbsHelp(argparse.HelpFormatter):
    """argparse measures the verbs without the indent it prints them at, so the longest (`port-forward`)
    would have its help on the next line: count the indent."""

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction) and action.help is not argparse.SUPPRESS:
            longest = max((len(c) for c in action.choices), default=0)
            self._action_max_length = max(self._action_max_length, longest + self._current_indent + 2)


def _add_flag(g: Any, flags: tuple[str, ...], dest: str, valued: bool, text: str, *, hidden: bool) -> None:
    helptext = argparse.SUPPRESS if hidden else text
    if not valued:
        g.add_argument(*flags, dest=dest, action="store_true", default=None, help=helptext)
    elif dest == "as_group":
        g.add_argument(*flags, dest=dest, action="append", help=helptext)
    else:
        g.add_argument(*flags, dest=dest, help=helptext)


def cluster_flags() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("cluster access")
    for flags, dest, valued, text in GLOBAL_FLAGS:
        _add_flag(g, flags, dest, valued, text, hidden=False)
    return p


OUTPUT_FORMATS = (
    "json",
    "yaml",
    "wide",
    "name",
    "jsonpath",
    "jsonpath-file",
    "custom-columns",
    "custom-columns-file",
)
_WITH_ARGUMENT = ("jsonpath", "jsonpath-file", "custom-columns", "custom-columns-file")


def output_type(choices: Sequence[str]) -> Callable[[str], str]:
    """-o's value checked against the verb's formats: `json`, `jsonpath={.items[*].name}`, ..."""

    def check(value: str) -> str:
        name, sep, _ = value.partition("=")
        if name in choices and (name in _WITH_ARGUMENT) == bool(sep):
            return value
        raise argparse.ArgumentTypeError(
            f'unable to match a printer suitable for the output format "{value}", allowed formats are: '
            + ",".join(f"{c}=..." if c in _WITH_ARGUMENT else c for c in choices)
        )

    check.__name__ = "output format"
    return check


def output_flags(choices: Sequence[str] = ("json", "yaml", "wide")) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "-o",
        "--output",
        type=output_type(choices),
        metavar="FORMAT",
        help="output format: " + "|".join(f"{c}=..." if c in _WITH_ARGUMENT else c for c in choices),
    )
    p.add_argument("--json", action="store_true", help="same as -o json (earlier gpuctl)")
    return p


def read_flags() -> argparse.ArgumentParser:
    """kubectl's listing flags (gpuctl.cli.printers): every read verb's -o takes all of OUTPUT_FORMATS."""
    p = output_flags(OUTPUT_FORMATS)
    p.add_argument("--no-headers", action="store_true", help="print no header line (tables, custom-columns)")
    p.add_argument("--sort-by", metavar="PATH", help="sort by a JSONPath field of the items, e.g. .status")
    p.add_argument("--show-labels", action="store_true", help="add a LABELS column to the table")
    p.add_argument(
        "--field-selector", metavar="SELECTOR", help="only items whose fields match: status=Running,pool!=a"
    )
    return p


def verb_of(argv: Sequence[str]) -> str | None:
    """The verb of a command line: its first argument that is neither an option nor an option's value
    (GLOBAL_FLAGS that take one: -n, --kubeconfig, --context, --as, ...). None when there is none, or when
    a help option comes before it (`gpuctl --help get`: the whole tree's help)."""
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
            cut = min((flags.index(c) for c in _VALUED_SHORT if c in flags), default=len(flags))
            if "h" in flags[:cut]:
                return None
            if cut == len(flags) - 1:
                next(args, None)  # `-n NS`, `-vn NS`; `-nNS` carries its value
        else:
            return a
    return None


# The verbs whose TYPE NAME arguments may also be written TYPE/NAME, as kubectl's.
TYPE_NAME_VERBS = frozenset({"get", "describe", "delete"})


# The verbs that run a command given after `--` (gpuctl.cli.exec).
COMMAND_VERBS = frozenset({"exec"})


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser. only: register just this verb's subparser (the one a command runs; the other
    verb modules are not imported); the whole tree when it is None or no verb (so that --help lists
    every verb and argparse's error for an unknown verb names them all)."""
    parser = Parser(
        prog="gpuctl",
        description="Queued, pooled, multi-team GPUs on Kubernetes, built on Kueue.",
        formatter_class=_VerbsHelp,
    )
    parser.add_argument("--version", action="version", version=f"gpuctl {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log API calls (-vv: more)")
    # kubectl also takes these before the verb (`gpuctl --kubeconfig K get jobs`); the verb's own
    # flags win when both are given.
    for flags, dest, valued, text in GLOBAL_FLAGS:
        _add_flag(parser, flags, f"global_{dest}", valued, text, hidden=True)
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND")
    sub.required = True
    common = {"cluster": cluster_flags(), "output": output_flags, "read": read_flags}
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
    if argv[:1] == ["__complete"]:  # the completion scripts' question (gpuctl.cli.completion)
        from gpuctl.cli.completion import complete  # noqa: PLC0415 - lazy: CLI start-up

        return complete(argv[1:])
    verb = verb_of(argv)
    parser = build_parser(only=verb)
    parser.usage_hint = f"gpuctl {verb}" if verb in VERBS else "gpuctl"  # type: ignore[attr-defined]
    if verb in TYPE_NAME_VERBS:  # kubectl's TYPE/NAME arguments (gpuctl.cli.typenames)
        from gpuctl.cli.typenames import split_type_names  # noqa: PLC0415 - lazy: CLI start-up

        try:
            argv = split_type_names(argv, verb, parser, importlib.import_module(VERBS[verb]).TYPES)
        except CommandError as e:
            parser.error(str(e))
    # `gpuctl exec JOB [flags] -- CMD ARG...`: the words after `--` are the command's, flags or not (kubectl).
    command = None
    if verb in COMMAND_VERBS and "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    if command is not None:
        args.command = command
    args.services = dict(services or {})
    for _, name, _, _ in GLOBAL_FLAGS:
        if getattr(args, name, None) is None and getattr(args, f"global_{name}", None) is not None:
            setattr(args, name, getattr(args, f"global_{name}"))
    if getattr(args, "json", False) and not getattr(args, "output", None):
        args.output = "json"
    if args.verbose:
        _configure_logging(args.verbose)
    try:
        return int(args.run(args) or 0)
    except CommandError as e:
        print(e.line(), file=sys.stderr)
        return e.code
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
        from gpuctl.cli.cmdutil import connect  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.cluster.config import namespace_scope  # noqa: PLC0415 - lazy: CLI start-up

        kubeconfig, context = getattr(args, "kubeconfig", None), getattr(args, "context", None)
        ns = namespace_scope(getattr(args, "namespace", None), kubeconfig=kubeconfig, context=context)
        cluster = connect(args)
        return ns if ns and permissions_of(cluster).allows("list", "jobs", "batch", ns) else None
    except Exception:  # the hint is a courtesy: never let it hide the error itself
        return None


def entrypoint() -> None:
    """Kept for `python -m gpuctl.cli.main`; the console script is gpuctl.main:entrypoint."""
    sys.exit(main())


if __name__ == "__main__":
    entrypoint()
