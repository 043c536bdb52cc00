"""hack/demo.sh, the README's first command, end to end on a cluster of its own: it must show a raw
`kubectl apply` refused by the webhook, a side-door pod outside the teams refused by the isolation
policy, and per-pool GPU use from Prometheus, and hack/cluster/down.sh
must stop everything it started. About a minute once the cluster binaries are built.

The demo's cluster uses its own run directory and port offset ($GPUCTL_TEST_DEMO_PORT_OFFSET, default
700: the pytest session's cluster uses 100).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from admission.policies.catalog import POLICY_KINDS
from tests.integration.test_chart import CACHE, VERSIONS, render

ROOT = Path(__file__).resolve().parents[2]


def _admission_objects(kubeconfig: Path) -> set[tuple[str, str]]:
    """(kind, name) of every gpuctl admission policy, binding and webhook configuration on a cluster."""
    kinds = ",".join(
        f"{r}.admissionregistration.k8s.io"
        for r in (
            "validatingadmissionpolicies",
            "validatingadmissionpolicybindings",
            "mutatingadmissionpolicies",
            "mutatingadmissionpolicybindings",
            "validatingwebhookconfigurations",
        )
    )
    kubectl = CACHE / "bin" / f"k8s-{VERSIONS['K8S_VERSION']}" / "kubectl"
    p = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), "get", kinds, "-o", "json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    items = json.loads(p.stdout)["items"]
    return {(o["kind"], o["metadata"]["name"]) for o in items if o["metadata"]["name"].startswith("gpuctl-")}


def test_demo_shows_the_platform_and_down_stops_it(tmp_path: Path) -> None:
    if not shutil.which("prometheus") and os.geteuid() != 0:
        raise AssertionError("the demo needs Prometheus: apt-get install prometheus (hack/test.sh does)")
    run = tmp_path / "demo-cluster"
    env = {
        **os.environ,
        "GPUCTL_TESTBED_RUN": str(run),
        "GPUCTL_TESTBED_PORT_OFFSET": os.environ.get("GPUCTL_TEST_DEMO_PORT_OFFSET", "700"),
    }
    env.pop("KUBECONFIG", None)
    try:
        p = subprocess.run([str(ROOT / "hack/demo.sh")], env=env, capture_output=True, text=True, timeout=900)
        out = p.stdout
        assert p.returncode == 0, out[-3000:] + p.stderr[-3000:]
        pids = {f.name: int(f.read_text()) for f in (run / "pids").iterdir()}
        assert {"gpuctl-webhook", "gpuctl-serve", "prometheus", "kube-apiserver", "kueue"} <= set(pids)
        # The autoscaling stack (docs/serving.md) beside it, for the demo's autoscaled service.
        assert {"serving-prometheus", "prometheus-adapter", "fake-exporter"} <= set(pids)
        installed = _admission_objects(run / "kubeconfig")
    finally:
        down = subprocess.run([str(ROOT / "hack/cluster/down.sh")], env=env, capture_output=True, text=True)
    assert down.returncode == 0, down.stderr
    # The webhook refused the raw Job, with its rule, the nearest pool and the fix.
    assert 'admission webhook "workloads.admission.runwhere.ai" denied the request' in out
    assert "[pool-exists]" in out and 'did you mean "training-pool"' in out and "Fix: " in out
    # ... and only for the pool: the topology policy gave it its topology request first.
    assert "breaks 1 rule(s): [pool-exists]" in out
    # The side-door pod in default (tolerating every taint, selecting the pool) is refused by the policy.
    assert "ValidatingAdmissionPolicy 'gpuctl-isolation'" in out and "[pool-toleration]" in out
    assert "gpuctl create -f job.yaml -n <team>" in out
    # Per-pool GPU use from PromQL (the demo's jobs fill training-pool).
    # A team member (gpuctl-user in team-a, gpuctl-pool-viewer) lists team-a's jobs from her context's
    # namespace, and only those; every namespace needs gpuctl-admin.
    member = out.split("gpuctl get jobs   # alice")[1].split("gpuctl get jobs -A   # every namespace")[0]
    assert "pretrain-a" in member and "finetune-a" in member, member
    # The autoscaled service through the webhook: its floor's replicas, under the service's name.
    assert "llm-serving" in member, member
    assert " floor " in out, out[-3000:]
    assert "eval-b" not in member and "team-b" not in member, member
    assert "needs gpuctl-admin" in out and "you may read team-a: pass -n team-a" in out
    assert "training-pool     16 of  16 GPUs held by pods (100%)" in out
    for pool in ("compute-pool", "dev-pool", "inference-pool"):
        assert f"  {pool}" in out
    assert "Prometheus  http://127.0.0.1:" in out and "metrics     http://127.0.0.1:" in out
    # The demo installs the chart's admission objects, every one (issue 33: it lacked earlier-client and
    # workload-edit, so the earlier client was refused in a team namespace on the demo).
    chart = {
        (d["kind"], d["metadata"]["name"])
        for d in render(
            "gpuctl-system",
            "--show-only",
            "templates/admission.yaml",
            "--kube-version",
            VERSIONS["K8S_VERSION"],
        )
        if d["kind"] in POLICY_KINDS or d["kind"] == "ValidatingWebhookConfiguration"
    }
    assert installed == chart, installed ^ chart
    assert {("MutatingAdmissionPolicy", "gpuctl-earlier-client-templates"),
            ("ValidatingAdmissionPolicy", "gpuctl-workload-edit")} <= installed  # fmt: skip
    # down.sh stopped every process the demo and the cluster started.
    alive = []
    for name, pid in pids.items():
        try:
            os.kill(pid, 0)
            alive.append(name)
        except ProcessLookupError:
            pass
    assert alive == []
    assert not run.exists()
