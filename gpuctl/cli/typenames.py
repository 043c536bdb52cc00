"""kubectl's `TYPE/NAME` arguments: `gpuctl describe job/x`, `gpuctl delete job/a job/b`, and what
`-o name` prints read back (`job.batch/x`, `deployment.apps/y`, `statefulset.apps/z` are gpuctl jobs).

The command line is rewritten before argparse reads it: the verb's TYPE/NAME arguments become its TYPE
and NAME arguments (`delete job/a job/b` -> `delete job a b`). Options' values are never touched (a file
`-f job/x.yaml` stays a file): which options take a value is read from the verb's own parser.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Mapping, Sequence

from gpuctl.cli.errors import CommandError


@functools.cache
def job_resources() -> frozenset[str]:
    """The Kubernetes objects a gpuctl job is, as `-o name` (gpuctl.cluster.type_name) and kubectl print them,
    singular and plural: each kind's object (constants.KIND_TO_RESOURCE) and a multi-node service's
    LeaderWorkerSet."""
    from gpuctl.cluster.paths import RESOURCES, api_group  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.constants import KIND_TO_RESOURCE  # noqa: PLC0415 - lazy: CLI start-up

    kinds = {*KIND_TO_RESOURCE.values(), "LeaderWorkerSet"}
    return frozenset(f"{w}.{api_group(k)}" for k in kinds for w in (k.lower(), RESOURCES[k].plural))


def _valued_options(parsers: Sequence[argparse.ArgumentParser]) -> set[str]:
    return {s for p in parsers for s, a in p._option_string_actions.items() if a.nargs != 0}


def _type_of(word: str, types: Mapping[str, str]) -> str | None:
    """The verb's TYPE a `TYPE/` prefix names (None: not one of its types)."""
    if word in types:
        return word
    if word.lower() in job_resources() and "job" in types:
        return "job"
    return None


def split_type_names(
    argv: list[str], verb: str, top: argparse.ArgumentParser, types: Mapping[str, str]
) -> list[str]:
    """argv with the verb's TYPE/NAME arguments rewritten as TYPE NAME...; one type per command, and no
    separate TYPE beside them (kubectl's rules, its words)."""
    sub = next(
        a for a in top._actions if isinstance(a, argparse._SubParsersAction) and verb in a.choices
    ).choices[verb]
    valued = _valued_options([top, sub])
    out: list[str] = []
    slashed: list[tuple[int, str, str]] = []  # (position in out, type, name)
    plain: list[str] = []
    seen_verb, skip = False, False
    for a in argv:
        if skip:
            out.append(a)
            skip = False
            continue
        if a == "--":
            break
        if a.startswith("-") and len(a) > 1:
            out.append(a)
            name = a.split("=", 1)[0]
            skip = "=" not in a and name in valued
            continue
        if not seen_verb:
            seen_verb = a == verb
            out.append(a)
            continue
        prefix, sep, rest = a.partition("/")
        kind = _type_of(prefix, types) if sep and rest else None
        if kind is None:
            plain.append(a)
            out.append(a)
        else:
            slashed.append((len(out), kind, rest))
            out.append(a)
    if not slashed:
        return list(argv)
    if plain:
        raise CommandError(
            "there is no need to specify a resource type as a separate argument when passing arguments "
            f"in resource/name form (e.g. 'gpuctl {verb} {slashed[0][1]}/{slashed[0][2]}' instead of "
            f"'gpuctl {verb} {plain[0]} {slashed[0][1]}/{slashed[0][2]}')"
        )
    kinds = {types[k] for _, k, _ in slashed}
    if len(kinds) > 1:
        raise CommandError(f"{verb}: give names of one type at a time ({', '.join(sorted(kinds))} given)")
    first, drop = slashed[0][0], {i for i, _, _ in slashed}
    rebuilt: list[str] = []
    for i, a in enumerate(out):
        if i == first:
            rebuilt += [slashed[0][1], *(n for _, _, n in slashed)]
        elif i not in drop:
            rebuilt.append(a)
    return rebuilt + list(argv[len(out) :])
