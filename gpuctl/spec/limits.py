"""The size limits of one gpuctl YAML text (constants YAML_MAX_BYTES, YAML_MAX_EXPANDED_NODES), checked
before the loader constructs anything, so `gpuctl create -f` and the REST API refuse the same texts with
the same words (docs/security.md, the attacks before and after: the CLI had no alias limit; 10 nested aliases
took 28 s and 2.2 GB)."""

from __future__ import annotations

import yaml

from gpuctl.constants import YAML_MAX_BYTES, YAML_MAX_EXPANDED_NODES

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def expanded_size(text: str, limit: int = YAML_MAX_EXPANDED_NODES) -> int:
    """How many nodes the documents have once aliases are expanded (stops counting past `limit`).
    Composing builds each aliased node once; only the count multiplies."""
    memo: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in memo:
            return memo[key]
        memo[key] = 1  # a recursive alias counts once (the loader rejects or bounds it)
        n = 1
        if isinstance(node, yaml.SequenceNode):
            n += sum(size(c) for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            n += sum(size(k) + size(v) for k, v in node.value)
        memo[key] = min(n, limit + 1)
        return memo[key]

    total = 0
    try:
        for doc in yaml.compose_all(text, Loader=_Loader):
            if doc is not None:
                total += size(doc)
            if total > limit:
                break
    except yaml.YAMLError:
        return 0  # not YAML: the loader reports it with a line number
    return total


def limit_problem(text: str) -> tuple[str, str] | None:
    """(message, fix) when `text` is over a limit, else None."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > YAML_MAX_BYTES:
        return (
            f"{size:,} bytes of YAML, more than the limit of {YAML_MAX_BYTES:,} (1 MiB)",
            "split the documents over several files (repeat -f)",
        )
    # Every alias is written `*name`: without a `*` nothing can expand (skips a second parse).
    if "*" in text and expanded_size(text) > YAML_MAX_EXPANDED_NODES:
        return (
            f"the YAML expands to more than {YAML_MAX_EXPANDED_NODES:,} nodes through its aliases (*name)",
            "write the repeated parts out instead of nesting anchors and aliases",
        )
    return None
