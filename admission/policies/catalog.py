"""Every generated manifest of manifests/admission/ and its generator, in one table.

    python -m admission.policies.catalog --write manifests/admission   # regenerate every file
    python -m admission.policies.catalog --check manifests/admission   # exit 1 naming each stale file
    helm template gpuctl charts/gpuctl --show-only templates/admission.yaml ... \
      | python -m admission.policies.catalog --chart-objects URL CA.crt  # what hack/demo.sh installs

One list for the chart and the demo: the chart installs every file manifests/admission/kustomization.yaml
lists (charts/gpuctl/templates/admission.yaml), and hack/demo.sh installs the chart's own rendering of them
(`--chart-objects`: every policy and binding as the chart renders them, and its webhook configuration
pointed at the demo's process by URL), so the demo's admission objects are the chart's by construction
(tests/integration/test_demo.py compares the two sets on the demo's cluster).

(`python -m admission.policies.team --allowed-host-path /data > manifests/admission/policy.yaml` writes the
team policy with allowed host paths compiled in; the catalog writes the shipped defaults.)
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

import yaml

from admission.policies import (
    deletes,
    earlier_client,
    isolation,
    priority_classes,
    submitted_by,
    team,
    topology,
    workload_edit,
)

__all__ = ["GENERATED", "POLICY_KINDS", "chart_objects", "chart_policies", "main", "team_policies"]

# manifests/admission/<file> -> the generator of its text.
GENERATED: Final[dict[str, Callable[[], str]]] = {
    "policy.yaml": team.render_manifest,
    "topology.yaml": topology.render_manifest,
    "isolation.yaml": isolation.render_manifest,
    "earlier-client.yaml": earlier_client.render_manifest,
    "workload-edit.yaml": workload_edit.render_manifest,
    "submitted-by.yaml": submitted_by.render_manifest,
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
        *submitted_by.policies(),
    ]


POLICY_KINDS: Final = frozenset(
    {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
)
TESTBED_LABEL: Final = {"gpuctl.runwhere.ai/testbed": "true"}  # hack/cluster/down.sh deletes these first


def chart_policies(docs: Iterable[dict | None]) -> list[dict]:
    """The admission policies and bindings among a chart rendering's documents, as rendered."""
    return [d for d in docs if d and d.get("kind") in POLICY_KINDS]


def chart_objects(docs: Iterable[dict | None], url: str, ca_pem: bytes) -> list[dict]:
    """What a process-run webhook installs from the chart's rendering: its ValidatingWebhookConfiguration
    with each entry's Service pointed at `url` + its path (and `ca_pem`), then every policy and binding."""
    docs = [d for d in docs if d]
    (vwc,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    vwc["metadata"] = {"name": vwc["metadata"]["name"], "labels": dict(TESTBED_LABEL)}
    ca = base64.b64encode(ca_pem).decode()
    for w in vwc["webhooks"]:  # each entry on its own path (/validate, /isolation)
        w["clientConfig"] = {"url": url + w["clientConfig"]["service"]["path"], "caBundle": ca}
    return [vwc, *chart_policies(docs)]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m admission.policies.catalog", description=__doc__)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="DIR", help="write every generated manifest into DIR")
    mode.add_argument("--check", metavar="DIR", help="exit 1 if a generated manifest in DIR is stale")
    mode.add_argument(
        "--chart-objects",
        nargs=2,
        metavar=("URL", "CA"),
        help="read the chart's rendering on stdin; print (JSON, a v1 List) its "
        "webhook configuration pointed at URL with the CA file's certificate, and every policy",
    )
    args = ap.parse_args(argv)
    if args.chart_objects:
        url, ca = args.chart_objects
        items = chart_objects(yaml.safe_load_all(sys.stdin), url, Path(ca).read_bytes())
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        return 0
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
