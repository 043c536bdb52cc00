"""Every generated manifest of manifests/admission/ and its generator, in one table.

    python -m admission.policies.catalog --write manifests/admission   # regenerate every file
    python -m admission.policies.catalog --check manifests/admission   # exit 1 naming each stale file

(`python -m admission.policies.team --allowed-host-path /data > manifests/admission/policy.yaml` writes the
team policy with allowed host paths compiled in; the catalog writes the shipped defaults.)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from admission.policies import (
    deletes,
    earlier_client,
    isolation,
    priority_classes,
    team,
    topology,
    workload_edit,
)

__all__ = ["GENERATED", "main", "team_policies"]

# manifests/admission/<file> -> the generator of its text.
GENERATED: Final[dict[str, Callable[[], str]]] = {
    "policy.yaml": team.render_manifest,
    "topology.yaml": topology.render_manifest,
    "isolation.yaml": isolation.render_manifest,
    "earlier-client.yaml": earlier_client.render_manifest,
    "workload-edit.yaml": workload_edit.render_manifest,
}


def team_policies(allowed: tuple[str, ...] = ()) -> list[dict]:
    """Every policy (and binding) bound to the team namespaces or cluster-scoped: what the generated files
    hold but isolation.yaml, whose binding covers every other namespace."""
    return [
        *team.policy(allowed),
        *deletes.policy(),
        *priority_classes.policy(),
        *topology.policies(),
        *earlier_client.policies(),
        *workload_edit.policies(),
    ]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m admission.policies.catalog", description=__doc__)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="DIR", help="write every generated manifest into DIR")
    mode.add_argument("--check", metavar="DIR", help="exit 1 if a generated manifest in DIR is stale")
    args = ap.parse_args(argv)
    stale = []
    for name, render in GENERATED.items():
        path = Path(args.write or args.check) / name
        text = render()
        if args.write:
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            stale.append(str(path))
    for p in stale:
        print(f"{p} is stale: python -m admission.policies.catalog --write {Path(p).parent}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
