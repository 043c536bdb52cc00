"""`gpuctl completion bash|zsh|fish`: a shell completion script, as `kubectl completion` prints one.

The script asks `gpuctl __complete WORDS...` (the words after `gpuctl`, the last one being completed,
maybe empty) for candidates, one per line; that hidden command completes verbs, flags (from the
argparse tree itself, so never out of date), TYPEs, -o formats, --for states, and live names from
the cluster of the command line's --kubeconfig/--context: jobs (of -n, else the context's namespace,
else every namespace), pools, nodes, namespaces. Each name list is one API read (jobs: one per
controller kind, Job, Deployment and StatefulSet, as metadata only), each bounded by a 2 s timeout
and all by BUDGET; a cluster that does not answer in time, or refuses, just completes nothing.

`kubectl gpuctl <TAB>` (the plugin form) completes through kubectl_complete-gpuctl, the console
script kubectl runs for a plugin's completions (cobra's protocol: candidates, then `:4`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

SHELLS = ("bash", "zsh", "fish")
BUDGET = 3.0  # seconds for every API read of one completion together
READ_TIMEOUT = (2.0, 2.0)  # connect, read

BASH = r"""# gpuctl bash completion: source <(gpuctl completion bash)
_gpuctl_complete() {
    local cur="${COMP_WORDS[COMP_CWORD]}"
    [[ $cur == "=" ]] && cur=""  # --flag=<TAB>: bash made "=" a word of its own (COMP_WORDBREAKS)
    local IFS=$'\n'
    COMPREPLY=($(compgen -W "$(gpuctl __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)" -- "$cur"))
}
complete -o default -F _gpuctl_complete gpuctl
"""

ZSH = r"""#compdef gpuctl
# gpuctl zsh completion: source <(gpuctl completion zsh)
_gpuctl() {
    local -a candidates
    candidates=("${(@f)$(gpuctl __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    compadd -- "${candidates[@]}"
}
compdef _gpuctl gpuctl
"""

FISH = r"""# gpuctl fish completion: gpuctl completion fish | source
function __gpuctl_complete
    set -l words (commandline -opc)
    gpuctl __complete $words[2..-1] (commandline -ct) 2>/dev/null
end
complete -c gpuctl -f -a '(__gpuctl_complete)'
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH, "fish": FISH}


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, fish)",
        description="Print a completion script: `source <(gpuctl completion bash)` in ~/.bashrc; "
        "zsh: `source <(gpuctl completion zsh)`; fish: `gpuctl completion fish | source`.",
        parents=[common["cluster"]],  # kubectl's global flags, taken on every verb (the script ignores them)
    )
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or fish")
    p.set_defaults(run=lambda args: print(SCRIPTS[args.shell], end="") or 0)


# ----------------------------------------------------------------------------- candidates
def _verb_parser(verb: str) -> argparse.ArgumentParser | None:
    from gpuctl.cli.main import build_parser  # noqa: PLC0415 - lazy: CLI start-up

    parser = build_parser(only=verb)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(verb)
    return None


def _valued(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions if a.option_strings and a.nargs != 0 for s in a.option_strings}


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [
        s
        for a in parser._actions
        if a.option_strings and a.help != argparse.SUPPRESS
        for s in a.option_strings
        if s.startswith("--") or len(a.option_strings) == 1
    ]


def _flag_value(words: Sequence[str], names: tuple[str, ...]) -> str | None:
    for i, w in enumerate(words):
        for n in names:
            if w == n and i + 1 < len(words):
                return words[i + 1]
            if w.startswith(n + "=") and n.startswith("--"):
                return w.split("=", 1)[1]
    return None


class Names:
    """Live names from the cluster of the command line, within BUDGET."""

    def __init__(self, words: Sequence[str]):
        self.words = words
        self.deadline = time.monotonic() + BUDGET
        self._cluster = None

    def cluster(self):
        if self._cluster is None:
            from gpuctl.cluster import Cluster  # noqa: PLC0415 - lazy: CLI start-up

            self._cluster = Cluster.connect(
                kubeconfig=_flag_value(self.words, ("--kubeconfig",)),
                context=_flag_value(self.words, ("--context",)),
            )
        return self._cluster

    def metadata(self, kind: str, namespace: str | None = None, selector: str | None = None) -> list[dict]:
        from gpuctl.cluster.client import METADATA_ACCEPT  # noqa: PLC0415 - lazy: CLI start-up
        from gpuctl.cluster.paths import path  # noqa: PLC0415 - lazy: CLI start-up

        left = self.deadline - time.monotonic()
        if left <= 0:
            return []
        try:
            page = self.cluster().request(
                "GET",
                path(kind, namespace=namespace),
                query={"labelSelector": selector, "limit": 500},
                accept=METADATA_ACCEPT,
                timeout=(min(READ_TIMEOUT[0], left), min(READ_TIMEOUT[1], left)),
            )
        except Exception:  # completion never prints an error: nothing to offer
            return []
        return [i.get("metadata") or {} for i in page.get("items") or []]

    def namespace(self) -> str | None:
        ns = _flag_value(self.words, ("-n", "--namespace"))
        if ns or "-A" in self.words or "--all-namespaces" in self.words:
            return ns
        from gpuctl.cluster.config import context_namespace  # noqa: PLC0415 - lazy: CLI start-up

        try:
            return context_namespace(
                _flag_value(self.words, ("--kubeconfig",)), _flag_value(self.words, ("--context",))
            )
        except Exception:
            return None

    def jobs(self) -> list[str]:
        from gpuctl.constants import Labels  # noqa: PLC0415 - lazy: CLI start-up

        ns = self.namespace()
        kinds = ("Job", "Deployment", "StatefulSet")
        return sorted({m["name"] for kind in kinds for m in self.metadata(kind, ns, Labels.JOB_TYPE)})

    def nodes(self) -> list[str]:
        return sorted(m["name"] for m in self.metadata("Node"))

    def pools(self) -> list[str]:
        from gpuctl.constants import Labels  # noqa: PLC0415 - lazy: CLI start-up

        nodes = self.metadata("Node", selector=Labels.POOL)
        return sorted({(m.get("labels") or {})[Labels.POOL] for m in nodes})

    def namespaces(self) -> list[str]:
        return sorted(m["name"] for m in self.metadata("Namespace"))

    def of_type(self, type_word: str) -> list[str]:
        from gpuctl.cli.get import TYPES  # noqa: PLC0415 - lazy: CLI start-up

        kind = TYPES.get(type_word)
        return {
            "jobs": self.jobs,
            "pools": self.pools,
            "nodes": self.nodes,
            "labels": self.nodes,
            "quotas": self.namespaces,
            "namespaces": self.namespaces,
        }.get(kind or "", list)()


def _values(flag: str, names: Names) -> list[str] | None:
    """The values of a flag gpuctl can name (namespaces, -o formats, pools, --for states); None: not
    such a flag."""
    from gpuctl.cli.main import OUTPUT_FORMATS  # noqa: PLC0415 - lazy: CLI start-up

    if flag in ("-n", "--namespace"):
        return names.namespaces()
    if flag in ("-o", "--output"):
        return [f"{f}=" if f.startswith(("jsonpath", "custom-columns")) else f for f in OUTPUT_FORMATS]
    if flag == "--pool":
        return names.pools()
    if flag == "--for":
        from gpuctl.cli.wait import FOR  # noqa: PLC0415 - lazy: CLI start-up

        return list(FOR)
    return None


def rejoin(words: Sequence[str]) -> tuple[list[str], bool]:
    """The words with each `--flag=value` whole, and whether the last one was split. bash splits it at
    `=` (a COMP_WORDBREAKS character: `--for`, `=`, `ru`, or `=` alone while the value is empty) and
    then replaces only what follows `=`; zsh and fish pass it whole and replace the whole word."""
    out: list[str] = []
    split = False
    i = 0
    while i < len(words):
        w = words[i]
        if w == "=" and out and out[-1].startswith("-") and "=" not in out[-1]:
            value = words[i + 1] if i + 1 < len(words) else ""
            split = i + 1 >= len(words) - 1  # the value (maybe still empty) is the word being completed
            out[-1] = f"{out[-1]}={value}"
            i += 2
            continue
        out.append(w)
        i += 1
    return out, split


def candidates(words: Sequence[str]) -> list[str]:
    """What may come in place of words[-1], given the words before it (`--flag=value` words whole:
    rejoin)."""
    from gpuctl.cli.main import GLOBAL_FLAGS, VERBS, verb_of  # noqa: PLC0415 - lazy: CLI start-up

    *before, cur = list(words) or [""]
    prev = before[-1] if before else ""
    names = Names(before)
    if cur.startswith("-") and "=" in cur:  # --flag=<TAB>: the flag's values, after it
        flag = cur.split("=", 1)[0]
        return [f"{flag}={v}" for v in _values(flag, names) or []]
    values = _values(prev, names)
    if values is not None:
        return values
    verb = verb_of(before)
    if verb is None or verb not in VERBS:
        if cur.startswith("-"):
            return [f for flags, *_ in GLOBAL_FLAGS for f in flags if f.startswith("--")]
        return list(VERBS)
    parser = _verb_parser(verb)
    if parser is None:
        return []
    if cur.startswith("-"):
        return _flags(parser)
    if prev in _valued(parser):
        return []  # a value gpuctl cannot guess (a file, a selector)
    valued = _valued(parser)
    positional: list[str] = []
    skip = False
    for w in before[before.index(verb) + 1 :]:
        if skip:
            skip = False
        elif w.startswith("-"):
            skip = w in valued
        else:
            positional.append(w)
    return _positional(verb, positional, names)


def _positional(verb: str, positional: list[str], names: Names) -> list[str]:
    from gpuctl.cli import describe, get  # noqa: PLC0415 - lazy: CLI start-up

    if verb in ("get", "describe"):
        types = get.TYPES if verb == "get" else describe.TYPES
        if not positional:
            return sorted(types)
        return names.of_type(positional[0]) if len(positional) == 1 else []
    if verb in ("logs", "stop", "resume", "history", "keep", "top"):
        return names.jobs()
    if verb == "wait":
        return ["job"] if not positional else names.jobs()
    if verb == "delete":
        return ["job"] if not positional else names.jobs()
    if verb == "label":
        return names.nodes() if not positional else []
    if verb == "completion":
        return list(SHELLS) if not positional else []
    return []


def complete(words: Sequence[str]) -> int:
    """`gpuctl __complete WORDS...`: the candidates that start with the last word, one per line; of a
    `--flag=value` bash split, the part after `=` (what bash replaces)."""
    whole, split = rejoin(words)
    cur = whole[-1] if whole else ""
    cut = len(cur.split("=", 1)[0]) + 1 if split else 0
    for c in candidates(whole):
        if c.startswith(cur):
            print(c[cut:])
    return 0


def kubectl_plugin_complete() -> None:
    """kubectl_complete-gpuctl: kubectl runs it with the words after `kubectl gpuctl` (cobra's
    protocol: the candidates, then `:4`, no file completion)."""
    complete(sys.argv[1:])
    print(":4")
    sys.exit(0)
