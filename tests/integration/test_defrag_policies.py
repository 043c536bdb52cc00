"""Defragmentation where the chart runs (issue 33): the chart's gpuctl-workload-edit policy refused gpuctl
serve's own Workload writes ("only spec.active may change": the move's markers are annotations), so no
move ever happened where the chart was installed, and no test had that policy and defrag on together.

The scenario of tests/integration/test_defrag_anypool.py (a fragmented training-pool gets a whole node for
an 8-GPU job: one job moved, requeued by Kueue, running again) with the chart's admission policy
manifests/admission/workload-edit.yaml in force (its binding as shipped: every team namespace) and the
history policies of manifests/serve/history-policy.yaml (their bindings limited to this test's namespace,
so other tests' serves, which run as the test's admin, are not judged). serve runs as its ServiceAccount
gpuctl-system/gpuctl-serve, as the chart runs it.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuctl.cluster import ApiError, path
from tests.integration.test_cli_cluster import gpuctl, pools  # noqa: F401 - fixtures
from tests.integration.test_defrag_anypool import serve, team  # noqa: F401 - fixtures
from tests.integration.test_defrag_anypool import (
    test_fragmented_pool_gets_a_whole_node_for_an_eight_gpu_job as fragmented_pool_scenario,
)

ROOT = Path(__file__).resolve().parents[2]
ID = uuid.uuid4().hex[:6]
# a bare hex ID such as 5e3210 reads as a number in YAML ("cannot unmarshal number"): starts with letters
MARK = {"gpuctl.runwhere.ai/defrag-policies-test": f"id-{ID}"}


def _policies(ns: str) -> list[dict]:
    edit = [d for d in yaml.safe_load_all((ROOT / "manifests/admission/workload-edit.yaml").read_text()) if d]
    history = [d for d in yaml.safe_load_all((ROOT / "manifests/serve/history-policy.yaml").read_text()) if d]
    for d in history:
        d["metadata"]["name"] = f"{d['metadata']['name']}-{ID}"
        if d["kind"] == "ValidatingAdmissionPolicyBinding":
            d["spec"]["policyName"] = f"{d['spec']['policyName']}-{ID}"
            d["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": MARK}}
    return edit + history


@pytest.fixture
def chart_policies(team, kube, kubectl_bin, cluster) -> Iterator[None]:  # noqa: F811
    ns, _member = team
    kube.merge_patch(path("Namespace", ns), {"metadata": {"labels": MARK}})
    docs = _policies(ns)

    def kubectl(*args: str, input: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [kubectl_bin, "--kubeconfig", cluster, *args], input=input, capture_output=True, text=True
        )

    kept = kube.get_or_none(path("ValidatingAdmissionPolicy", "gpuctl-workload-edit")) is not None
    p = kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    assert p.returncode == 0, p.stderr
    try:
        yield
    finally:
        drop = docs[2:] if kept else docs  # leave what was there before this test
        kubectl("delete", "--ignore-not-found", "-f", "-", input=yaml.safe_dump_all(drop))


def test_defrag_moves_a_job_with_the_charts_policies_installed(chart_policies, team, serve, kube, tmp_path):  # noqa: F811
    fragmented_pool_scenario(team, serve, kube, tmp_path)
    # The policy was in force all along: the same kind of write from anyone else (here the test's admin)
    # is refused, naming it.
    ns, _ = team
    (wl,) = [
        w
        for w in kube.list(path("Workload", namespace=ns))
        if "runwhere.ai/moved-for" in (w["metadata"].get("annotations") or {})
    ]
    with pytest.raises(ApiError, match="breaks \\[workload-edit\\]"):
        kube.merge_patch(
            path("Workload", wl["metadata"]["name"], ns),
            {"metadata": {"annotations": {"runwhere.ai/moved-for": "forged"}}},
            dry_run=True,
        )
