"""What hack/demo.sh takes from the chart: the demo is `helm install charts/gpuctl` with its pods run as
processes on this machine.

    helm template gpuctl charts/gpuctl -n gpuctl-system ... > chart.yaml
    python hack/demo_chart.py identities < chart.yaml        # before the processes start
    python hack/demo_chart.py objects URL CA.crt < chart.yaml  # once the webhook answers
    python hack/demo_chart.py args gpuctl-serve < chart.yaml   # one argument a line

Together `identities` and `objects` print (JSON, v1 Lists) every object of the rendering the demo installs:
the ServiceAccounts and RBAC of every component (the webhook's, serve's, the REST API's, the user roles);
the Kueue objects the chart keeps (priority classes, the budget flavor, the node Topology), and through
admission.policies.catalog.chart_objects the webhook configuration pointed at the demo's process by URL and
every admission policy and binding the chart renders, serve's own (history-policy.yaml, confinement.yaml)
included. Left out: what the processes stand in for (Deployments, Services, PodDisruptionBudgets, the TLS
Secrets), the NetworkPolicies (no pod to select) and the dashboards (no Grafana): DIFFERENCES says so, and
hack/demo.sh prints it. tests/integration/test_demo.py compares what the demo installed with the chart.

`args DEPLOYMENT` prints that Deployment's container command (without the `gpuctl` of the image's
entrypoint) and arguments as the chart renders them; the demo appends its own address, port, certificate
and kubeconfig flags (the last of a flag wins), so the process runs with the chart's flags otherwise.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import yaml

from admission.policies.catalog import chart_objects

IDENTITY_KINDS: Final = frozenset(
    {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
)
KUEUE_KINDS: Final = frozenset({"WorkloadPriorityClass", "ResourceFlavor", "Topology"})
# What a chart install has and the demo does not, one line each (hack/demo.sh prints it; README, "The demo").
DIFFERENCES: Final = (
    "the webhook and gpuctl serve (with the REST API) run as one process each on this machine, not as 2 + 2 "
    "pods; each authenticates with a token of its own ServiceAccount (gpuctl-system/gpuctl-admission, "
    "gpuctl-serve), as the pods do",
    "the API server calls the webhook by URL (https://127.0.0.1:PORT), not through Service gpuctl-admission; "
    "both listen on 127.0.0.1 with certificates of the demo's own CA (the chart: its self-signed CA or "
    "cert-manager)",
    "Prometheus scrapes both by static targets (the chart: the Services' prometheus.io annotations or a "
    "ServiceMonitor); no Grafana, so no dashboards; no NetworkPolicies or PodDisruptionBudgets (no pods)",
    "the GPU nodes are KWOK's fakes: pods run without containers, GPUs are numbers",
)


def identities(docs: Iterable[dict | None]) -> list[dict]:
    """The rendering's ServiceAccounts, roles and bindings: who the processes run as, and the user roles."""
    return [d for d in docs if d and d["kind"] in IDENTITY_KINDS]


def demo_objects(docs: Iterable[dict | None], url: str, ca_pem: bytes) -> list[dict]:
    """The rendering's Kueue objects, then chart_objects' webhook configuration (by URL) and every policy."""
    docs = [d for d in docs if d]
    return [*(d for d in docs if d["kind"] in KUEUE_KINDS), *chart_objects(docs, url, ca_pem)]


def as_list(items: list[dict]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def deployment_args(docs: Iterable[dict | None], name: str) -> list[str]:
    """The container command after `gpuctl` and the arguments of Deployment `name`, as rendered."""
    (dep,) = [d for d in docs if d and d["kind"] == "Deployment" and d["metadata"]["name"] == name]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    command = c.get("command") or []
    if command[:1] != ["gpuctl"]:
        raise SystemExit(f"Deployment {name} runs {command}, not gpuctl")
    return [*command[1:], *c.get("args", [])]


def main(argv: list[str]) -> int:
    if argv == ["identities"]:
        print(as_list(identities(yaml.safe_load_all(sys.stdin))))
        return 0
    if argv[:1] == ["objects"] and len(argv) == 3:
        print(as_list(demo_objects(yaml.safe_load_all(sys.stdin), argv[1], Path(argv[2]).read_bytes())))
        return 0
    if argv[:1] == ["args"] and len(argv) == 2:
        print("\n".join(deployment_args(yaml.safe_load_all(sys.stdin), argv[1])))
        return 0
    if argv == ["differences"]:
        print("\n".join(f"  - {d}" for d in DIFFERENCES))
        return 0
    print("usage: demo_chart.py identities | objects URL CA | args DEPLOYMENT | differences", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
