"""Write manifests/prometheus/prometheusrule.yaml from manifests/prometheus/rules.yaml (the source).

    python hack/prometheusrule.py        # rewrites the file; tests/unit/test_metrics_manifests.py checks it

The PrometheusRule carries rules.yaml's groups verbatim, for people who apply manifests/ with kubectl and
run the Prometheus Operator (the Helm chart wraps rules.yaml's groups itself).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "manifests/prometheus/rules.yaml"
OUT = ROOT / "manifests/prometheus/prometheusrule.yaml"
HEADER = """\
# gpuctl's alerts and recording rules for the Prometheus Operator: the groups of rules.yaml, verbatim
# (generated: python hack/prometheusrule.py; tests/unit/test_metrics_manifests.py fails when they differ).
# Your Prometheus may select rules by a label (ruleSelector, e.g. release: <helm release>): add it to
# metadata.labels.
"""


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # Long expressions and texts folded (>-), as in rules.yaml; short ones plain.
    style = ">" if len(value) > 100 or "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render() -> str:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpuctl",
            "namespace": "gpuctl-system",
            "labels": {"app.kubernetes.io/name": "gpuctl-serve", "app.kubernetes.io/part-of": "gpuctl"},
        },
        "spec": {"groups": groups},
    }
    return HEADER + yaml.dump(rule, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True)


if __name__ == "__main__":
    OUT.write_text(render())
    sys.exit(0)
