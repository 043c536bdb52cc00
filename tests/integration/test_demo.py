"""hack/demo.sh, the README's first command, end to end on a cluster of its own, then tried as its users.

The demo must be the platform the chart installs (docs: README, "The demo"): the chart's identities, roles,
webhook configuration and every admission policy it renders, serve's own included, with the webhook and
gpuctl serve authenticated as their ServiceAccounts; so, as on a chart install, a team's namespace admin
(Kubernetes' `edit`) can neither delete nor replace the audit trail and `gpuctl history` shows only what the
platform wrote. Its output shows the headline features (a gang in one rack, a MIG slice with the pool's free
slices, one quota spent on both, an autoscaled service growing with its load, the webhook and policies
refusing raw kubectl); its Prometheus scrapes both processes (no GpuctlWebhookDown); the addresses it prints
open; the team member's kubeconfig it hands out holds her token only; hack/cluster/down.sh stops everything.
A few minutes once the cluster binaries are built.

The demo's cluster uses its own run directory and port offset ($GPUCTL_TEST_DEMO_PORT_OFFSET, default
700: the pytest session's cluster uses 100).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from admission.policies.catalog import POLICY_KINDS
from gpuctl.constants import ACTOR_HPA, VIEW_API_VERSION
from tests.integration.test_chart import CACHE, VERSIONS, render

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = CACHE / "bin" / f"k8s-{VERSIONS['K8S_VERSION']}" / "kubectl"
IDENTITY_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
ADMISSION_KINDS = (*sorted(POLICY_KINDS), "ValidatingWebhookConfiguration")
RESOURCES = {
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies.admissionregistration.k8s.io",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings.admissionregistration.k8s.io",
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies.admissionregistration.k8s.io",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings.admissionregistration.k8s.io",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations.admissionregistration.k8s.io",
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles.rbac.authorization.k8s.io",
    "ClusterRoleBinding": "clusterrolebindings.rbac.authorization.k8s.io",
    "Role": "roles.rbac.authorization.k8s.io",
    "RoleBinding": "rolebindings.rbac.authorization.k8s.io",
}
NSADMIN = "mallory"  # a team-a namespace admin: Kubernetes' `edit` in team-a, nothing else


def kubectl(
    kubeconfig: Path, *args: str, input: str | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(kubeconfig), *args], input=input, capture_output=True, text=True
    )
    if check and p.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {p.stderr}")
    return p


def _installed(kubeconfig: Path, kinds: tuple[str, ...]) -> dict[tuple[str, str], dict]:
    """gpuctl's objects of these kinds on a cluster, by (kind, name); namespaced ones in gpuctl-system."""
    items = json.loads(
        kubectl(kubeconfig, "get", ",".join(RESOURCES[k] for k in kinds), "-A", "-o", "json").stdout
    )["items"]
    return {
        (o["kind"], o["metadata"]["name"]): o
        for o in items
        if o["metadata"]["name"].startswith("gpuctl")
        and o["metadata"].get("namespace") in (None, "gpuctl-system")
    }


def _chart(kinds: tuple[str, ...]) -> dict[tuple[str, str], dict]:
    """The chart's rendering (values as shipped), the objects of these kinds, by (kind, name)."""
    docs = render("gpuctl-system", "--kube-version", VERSIONS["K8S_VERSION"])
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in kinds}


def _parity(kubeconfig: Path) -> None:
    """The demo installed every admission object and identity the chart renders, each as rendered."""
    installed, chart = _installed(kubeconfig, ADMISSION_KINDS), _chart(ADMISSION_KINDS)
    assert set(installed) == set(chart), set(installed) ^ set(chart)
    # serve's own policies among them (issue 41: the demo lacked them, so the audit trail was forgeable).
    assert {
        ("ValidatingAdmissionPolicy", "gpuctl-history-writer"),
        ("ValidatingAdmissionPolicy", "gpuctl-workload-events"),
        ("ValidatingAdmissionPolicy", "gpuctl-service-confinement"),
        ("MutatingAdmissionPolicy", "gpuctl-earlier-client-templates"),
        ("ValidatingAdmissionPolicy", "gpuctl-workload-edit"),
    } <= set(installed)
    for key, want in chart.items():
        got = installed[key]["spec"] if key[0] != "ValidatingWebhookConfiguration" else installed[key]
        if key[0] == "ValidatingAdmissionPolicy":
            assert got["validations"] == want["spec"]["validations"], key
            assert got.get("matchConditions") == want["spec"].get("matchConditions"), key
        elif key[0].endswith("Binding"):
            assert got.get("matchResources", {}).get("namespaceSelector") == want["spec"].get(
                "matchResources", {}
            ).get("namespaceSelector"), key
        elif key[0] == "ValidatingWebhookConfiguration":
            for w_got, w_want in zip(got["webhooks"], want["webhooks"], strict=True):
                assert (w_got["name"], w_got["rules"], w_got.get("matchConditions")) == (
                    w_want["name"],
                    w_want["rules"],
                    w_want.get("matchConditions"),
                )
                assert w_got["clientConfig"]["url"].startswith("https://127.0.0.1:")  # the process, by URL
    installed, chart = _installed(kubeconfig, IDENTITY_KINDS), _chart(IDENTITY_KINDS)
    assert set(installed) == set(chart), set(installed) ^ set(chart)
    for key, want in chart.items():
        for field in ("rules", "roleRef", "subjects"):
            assert installed[key].get(field) == want.get(field), (key, field)


def _as_their_service_accounts(run: Path) -> None:
    """The webhook and serve hold a kubeconfig with their ServiceAccount's token only, and run with it."""
    for who, process in (("gpuctl-admission", "gpuctl-webhook"), ("gpuctl-serve", "gpuctl-serve")):
        kc = run / "demo" / f"{who}.kubeconfig"
        assert kubectl(kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout == (
            f"system:serviceaccount:gpuctl-system:{who}"
        )
        pid = (run / "pids" / process).read_text().strip()
        assert str(kc) in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0"), who
    # serve leads on its Lease in gpuctl-system, as the chart's replicas do.
    lease = json.loads(
        kubectl(
            run / "kubeconfig", "-n", "gpuctl-system", "get", "lease", "gpuctl-serve", "-o", "json"
        ).stdout
    )
    assert lease["spec"]["holderIdentity"], lease


def _namespace_admin_cannot_rewrite_the_trail(kubeconfig: Path) -> None:
    """The done-when of issue 41: as team-a's namespace admin, the trail is neither deleted nor replaced,
    and `gpuctl history` shows only what the platform wrote."""
    kubectl(
        kubeconfig,
        "-n",
        "team-a",
        "create",
        "rolebinding",
        f"{NSADMIN}-edit",
        "--clusterrole=edit",
        f"--user={NSADMIN}",
    )
    as_admin = ["--as", NSADMIN, "-n", "team-a"]
    before = json.loads(
        kubectl(kubeconfig, "-n", "team-a", "get", "configmap", "gpuctl-history", "-o", "json").stdout
    )
    # The namespace admin may write ConfigMaps in general: the refusal below is the policy's, not RBAC's.
    assert kubectl(kubeconfig, *as_admin, "auth", "can-i", "delete", "configmaps").stdout.strip() == "yes"
    p = kubectl(kubeconfig, *as_admin, "delete", "configmap", "gpuctl-history", check=False)
    assert p.returncode != 0 and "[history-writer]" in p.stderr, p.stdout + p.stderr
    forged = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gpuctl-history", "namespace": "team-a"},
        "data": {
            "records.jsonl": json.dumps(
                {"action": "submitted", "actor": "ceo", "job": "invented-job", "namespace": "team-a",
                 "reason": "Job invented-job created", "time": "2026-01-01T00:00:00Z", "uid": "0"}
            ) + "\n"
        },
    }  # fmt: skip
    for verb in (["apply", "-f", "-"], ["replace", "-f", "-"]):
        p = kubectl(kubeconfig, *as_admin, *verb, input=json.dumps(forged), check=False)
        assert p.returncode != 0 and "[history-writer]" in p.stderr, (verb, p.stdout + p.stderr)
    after = json.loads(
        kubectl(kubeconfig, "-n", "team-a", "get", "configmap", "gpuctl-history", "-o", "json").stdout
    )
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    gpuctl = ROOT / ".venv/bin/gpuctl"
    p = subprocess.run(
        [str(gpuctl), "--kubeconfig", str(kubeconfig), "history", "-n", "team-a", "-o", "json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    items = json.loads(p.stdout)["items"]  # HistoryRecord objects (docs/cli.md): the record in spec
    assert {(i["apiVersion"], i["kind"]) for i in items} == {(VIEW_API_VERSION, "HistoryRecord")}, items
    records = [i["spec"] for i in items]
    jobs = {"pretrain-a", "finetune-a", "ablation-a", "llm-serving"}
    assert records and {r["job"] for r in records} <= jobs, records
    # The demo's autoscaled service scales: its records name the HPA controller (docs/audit.md), never a
    # client's own words.
    assert {r["actor"] for r in records} <= {"admin", "kueue", ACTOR_HPA}, records
    assert {r["job"] for r in records if r["action"] == "submitted"} == jobs
    assert "invented-job" not in p.stdout


def _get(url: str, ca: Path | None = None, token: str | None = None) -> int:
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else None
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
        return r.status


def _printed_addresses_open(out: str, run: Path) -> None:
    """Every address of the demo's "Open" block answers 200 (with the printed CA and alice's token)."""
    block = out.split("\nOpen (")[1].split("\n\n")[0]
    ca = run / "demo" / "ca.crt"
    urls = re.findall(r"(https?://127\.0\.0\.1:\d+[^\s\"')]*)", block)
    assert len(urls) == 6, block
    token = kubectl(run / "kubeconfig", "-n", "team-a", "create", "token", "alice").stdout.strip()
    for url in urls:
        status = _get(url, ca if url.startswith("https") else None, token if "/api/v1/pools" in url else None)
        assert status == 200, url
    # Debian's Prometheus has no /alerts (the 404): the demo prints the classic UI's pages.
    assert "/alerts " not in block.replace("/classic/alerts", "")


def _prometheus_sees_both(out: str) -> None:
    """Both processes scraped; the alerts on their absence are neither pending nor firing."""
    prom = re.search(r"demo: Prometheus on (http://127\.0\.0\.1:\d+)", out).group(1)
    q = urllib.parse.urlencode({"query": 'up{service=~"gpuctl|gpuctl-admission"}'})
    with urllib.request.urlopen(f"{prom}/api/v1/query?{q}", timeout=10) as r:
        ups = {s["metric"]["service"]: s["value"][1] for s in json.load(r)["data"]["result"]}
    assert ups == {"gpuctl": "1", "gpuctl-admission": "1"}, ups
    with urllib.request.urlopen(f"{prom}/api/v1/alerts", timeout=10) as r:
        alerts = {a["labels"]["alertname"] for a in json.load(r)["data"]["alerts"]}
    assert not alerts & {"GpuctlWebhookDown", "GpuctlServiceDown", "GpuctlWebhookReplicaDown"}, alerts


def _alices_kubeconfig_is_hers_only(run: Path) -> None:
    ak = run / "demo" / "alice.kubeconfig"
    cfg = yaml.safe_load(ak.read_text())
    assert [u["name"] for u in cfg["users"]] == ["alice"], cfg["users"]
    assert set(cfg["users"][0]["user"]) == {"token"}, "alice's kubeconfig holds more than her token"
    assert [c["name"] for c in cfg["contexts"]] == ["alice"]
    assert "client-certificate-data" not in ak.read_text() and "client-key-data" not in ak.read_text()
    who = kubectl(ak, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout
    assert who == "system:serviceaccount:team-a:alice"
    # No context or credential of hers reaches beyond her roles.
    # (`kubectl auth can-i` exits 1 on "no".)
    assert kubectl(ak, "auth", "can-i", "create", "clusterrolebindings", check=False).stdout.strip() == "no"


def _headline_features(out: str) -> None:
    # The gang: 2 x 8 GPUs, both ranks on two nodes of rack r1.
    ranks = out.split("# one gang, one rack")[1].split("\n$ ")[0]
    assert "GPUs:        2 nodes x 8 GPUs = 16 GPUs" in ranks, ranks
    rows = [line.split() for line in ranks.splitlines() if re.match(r"\s+[01]\s+llama-pretrain-", line)]
    assert [r[0] for r in rows] == ["0", "1"] and {r[4] for r in rows} == {"r1"}, ranks
    assert len({r[2] for r in rows}) == 2, ranks
    # The MIG slice and the pool's free slices per profile.
    slices = out.split("# free slices per profile")[1].split("\n$ ")[0]
    assert re.search(r"1g\.10gb\s+nvidia\.com/mig-1g\.10gb\s+14\s+1\s+13", slices), slices
    assert re.search(r"3g\.40gb\s+nvidia\.com/mig-3g\.40gb\s+4\s+0\s+4", slices), slices
    # One quota, whole GPUs and a slice: 16 + 1/7.
    assert re.search(r"team-c-quota\s+team-c\s+16\.14/18\s", out), out[-4000:]
    # The autoscaled service: its floor, then the burst under load.
    assert "floor 2 (never preempted within quota), burst 0 of at most 2" in out
    assert "floor 2 (never preempted within quota), burst 2 of at most 2" in out
    assert "-9223372036854775808" not in out  # the HPA's average over zero replicas is no reading
    # GPU use per job (`gpuctl top`): busiest first, as dcgm-exporter reported it; an idle notebook at 0 %.
    top = out.split("gpuctl top -A --window 10s")[1].split("\n$ ")[0]
    rows = {r[1]: r for r in (line.split() for line in top.splitlines()) if r and r[0].startswith("team-")}
    assert list(rows)[:3] == ["pretrain-a", "llama-pretrain", "carol-notebook"], top
    assert [rows[j][5] for j in ("pretrain-a", "llama-pretrain", "carol-notebook")] == ["93%", "87%", "35%"]
    assert rows["llama-pretrain"][4] == "16" and rows["alice-notebook"][5] == "0%", top
    # What to try next, last.
    assert "Try next:" in out.strip().splitlines()[-8], out.strip().splitlines()[-9:]


def test_demo_is_the_chart_shows_the_platform_and_down_stops_it(tmp_path: Path) -> None:
    if not shutil.which("prometheus") and os.geteuid() != 0:
        raise AssertionError("the demo needs Prometheus: apt-get install prometheus (hack/test.sh does)")
    run = tmp_path / "demo-cluster"
    env = {
        **os.environ,
        "GPUCTL_TESTBED_RUN": str(run),
        "GPUCTL_TESTBED_PORT_OFFSET": os.environ.get("GPUCTL_TEST_DEMO_PORT_OFFSET", "700"),
    }
    env.pop("KUBECONFIG", None)
    env.pop("GPUCTL_TESTBED_FAKE_RUNTIME", None)
    kc = run / "kubeconfig"
    try:
        p = subprocess.run([str(ROOT / "hack/demo.sh")], env=env, capture_output=True, text=True, timeout=900)
        out = p.stdout
        assert p.returncode == 0, out[-3000:] + p.stderr[-3000:]
        pids = {f.name: int(f.read_text()) for f in (run / "pids").iterdir()}
        assert {"gpuctl-webhook", "gpuctl-serve", "prometheus", "kube-apiserver", "kueue"} <= set(pids)
        # The autoscaling stack (docs/serving.md) beside it, for the demo's autoscaled service.
        assert {"serving-prometheus", "prometheus-adapter", "fake-exporter"} <= set(pids)
        _parity(kc)
        _as_their_service_accounts(run)
        _namespace_admin_cannot_rewrite_the_trail(kc)
        _prometheus_sees_both(out)
        _printed_addresses_open(out, run)
        _alices_kubeconfig_is_hers_only(run)
        # The fake nodes' run time is the demo's default, not a knob in the examples users copy.
        stage = (run / "kwok" / "pod-complete.yaml").read_text()
        assert "durationMilliseconds: 1800000" in stage
    finally:
        down = subprocess.run([str(ROOT / "hack/cluster/down.sh")], env=env, capture_output=True, text=True)
    assert down.returncode == 0, down.stderr
    # It says where it differs from a chart install.
    assert "(values as shipped), except:" in out and "ServiceAccount" in out
    # The webhook refused the raw Job, with its rule, the nearest pool and the fix.
    assert 'admission webhook "workloads.admission.runwhere.ai" denied the request' in out
    assert "[pool-exists]" in out and 'did you mean "training-pool"' in out and "Fix: " in out
    # ... and only for the pool: the topology policy gave it its topology request first.
    assert "breaks 1 rule(s): [pool-exists]" in out
    # The side-door pod in default (tolerating every taint, selecting the pool) is refused by the policy.
    assert "ValidatingAdmissionPolicy 'gpuctl-isolation'" in out and "[pool-toleration]" in out
    assert "gpuctl create -f job.yaml -n <team>" in out
    # A team member (gpuctl-user in team-a, gpuctl-pool-viewer) lists team-a's jobs from her context's
    # namespace, and only those; every namespace needs gpuctl-admin.
    member = out.split("gpuctl get jobs   # alice")[1].split("gpuctl get jobs -A   # every namespace")[0]
    assert "pretrain-a" in member and "finetune-a" in member, member
    assert "llm-serving" in member, member  # the autoscaled service, under its name
    assert "eval-b" not in member and "team-b" not in member and "team-c" not in member, member
    assert "needs gpuctl-admin" in out and "you may read team-a: pass -n team-a" in out
    _headline_features(out)
    # Per-pool GPU use from PromQL (the demo's jobs fill training-pool, the gang two nodes of pretrain-pool).
    assert "training-pool     16 of  16 GPUs held by pods (100%)" in out
    assert "pretrain-pool     16 of  24 GPUs held by pods (67%)" in out
    for pool in ("compute-pool", "dev-pool", "inference-pool", "mig-pool"):
        assert f"  {pool}" in out
    assert (
        ".venv/bin/gpuctl" not in out.split("(values as shipped), except:")[1]
    )  # commands as users type them
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
