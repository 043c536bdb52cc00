"""The shipped manifests agree with the code and with the safety choices docs/admission.md promises.

(`kubectl apply --dry-run=server` of the same files runs in tests/integration/test_admission_webhook.py.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from admission.identities import CONTROLLER_USERS, JOB_MAKERS, KCM_USER, KUEUE_USER, LWS_USER, STS_MAKERS
from admission.policies import deletes
from admission.policies.skeleton import not_a_jobsets_job, not_an_lws_statefulset
from admission.server import DEFAULT_PORT
from admission.state import OPTIONAL_RESOURCES, RESOURCES
from admission.validators.orphan_delete import ORPHAN_KINDS

DIR = Path(__file__).resolve().parents[2] / "manifests" / "admission"
SYSTEM = {"kube-system", "kube-public", "kube-node-lease", "kueue-system", "gpuctl-system"}


def docs() -> list[dict]:
    out = []
    for f in sorted(DIR.glob("*.yaml")):
        if f.name != "kustomization.yaml":
            out += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return out


def one(kind: str, name: str | None = None) -> dict:
    found = [d for d in docs() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def webhooks() -> dict[str, dict]:
    return {w["name"]: w for w in one("ValidatingWebhookConfiguration")["webhooks"]}


def test_kustomization_lists_every_file():
    k = yaml.safe_load((DIR / "kustomization.yaml").read_text())
    assert sorted(k["resources"]) == sorted(
        f.name for f in DIR.glob("*.yaml") if f.name != "kustomization.yaml"
    )


@pytest.mark.parametrize(
    "name",
    [
        "workloads.admission.runwhere.ai",
        "jobsets.admission.runwhere.ai",
        "leaderworkersets.admission.runwhere.ai",
        "pods.admission.runwhere.ai",
        "nodes.admission.runwhere.ai",
    ],
)  # deletes.admission.runwhere.ai: below
def test_every_webhook_fails_closed_quickly_and_supports_dry_run(name):
    w = webhooks()[name]
    assert w["failurePolicy"] == "Fail"
    assert w["timeoutSeconds"] == 3
    assert w["sideEffects"] == "None"
    assert w["admissionReviewVersions"] == ["v1"]
    assert w["clientConfig"]["service"] == {
        "name": "gpuctl-admission",
        "namespace": "gpuctl-system",
        "path": "/validate",
        "port": 443,
    }
    assert w["matchConditions"], "the API server must only call when there is something to check"
    assert all(r["operations"] == ["CREATE", "UPDATE"] for r in w["rules"])


def test_deletes_are_sent_only_when_they_would_orphan_a_jobs_or_statefulsets_pods():
    """The webhook's orphan-delete: the same kinds and the same CEL as the policy
    (admission.policies.deletes)."""
    w = webhooks()["deletes.admission.runwhere.ai"]
    assert (w["failurePolicy"], w["timeoutSeconds"], w["sideEffects"]) == ("Fail", 3, "None")
    assert w["clientConfig"] == webhooks()["pods.admission.runwhere.ai"]["clientConfig"]
    assert w["namespaceSelector"] == webhooks()["pods.admission.runwhere.ai"]["namespaceSelector"]
    covered = {(g, r) for rule in w["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert covered == {(g, f"{k.lower()}s") for g, k in ORPHAN_KINDS}
    assert all(r["operations"] == ["DELETE"] for r in w["rules"])
    conds = {c["name"]: c["expression"] for c in w["matchConditions"]}
    assert conds["not-kueue"] == f"request.userInfo.username != '{KUEUE_USER}'"
    assert conds["orphaning"] == f"({deletes.orphaning()}) != ''"


def test_namespaced_webhooks_only_see_team_namespaces_and_never_system_ones():
    for name in ("workloads.admission.runwhere.ai", "pods.admission.runwhere.ai"):
        exprs = {e["key"]: e for e in webhooks()[name]["namespaceSelector"]["matchExpressions"]}
        assert exprs["runwhere.ai/namespace"] == {
            "key": "runwhere.ai/namespace",
            "operator": "In",
            "values": ["true"],
        }
        assert exprs["kubernetes.io/metadata.name"]["operator"] == "NotIn"
        assert set(exprs["kubernetes.io/metadata.name"]["values"]) == SYSTEM


def test_webhook_rules_cover_exactly_the_kinds_the_server_reviews():
    # (the isolation entry, for other namespaces, is checked by tests/unit/test_admission_isolation.py)
    covered = {
        (g, r)
        for name, w in webhooks().items()
        if name != "isolation.admission.runwhere.ai"
        for rule in w["rules"]
        if rule["operations"] != ["DELETE"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert covered == {
        ("batch", "jobs"),
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("apps", "replicasets"),
        ("", "pods"),
        ("", "nodes"),
        ("jobset.x-k8s.io", "jobsets"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ("autoscaling", "horizontalpodautoscalers"),  # hpa-queued (docs/serving.md)
    }
    # Never a status subresource: status updates carry nothing the rules read.
    assert not any("/" in r for _, r in covered)


def test_match_conditions_exclude_kueue_and_controller_made_pods():
    pods = {c["name"]: c["expression"] for c in webhooks()["pods.admission.runwhere.ai"]["matchConditions"]}
    assert pods["not-kueue"] == f"request.userInfo.username != '{KUEUE_USER}'"
    # Each controller kind is skipped only together with its own controller's username (the code's table).
    skip = pods["not-made-by-its-controller"]
    for (group, kind), user in CONTROLLER_USERS.items():
        if kind == "Deployment":
            continue
        assert re.search(
            rf"r\.kind == '{kind}' && r\.apiVersion\.startsWith\('{group}/'\) &&\s*"
            rf"\(request\.userInfo\.username == '{re.escape(user)}' \|\|\s*"
            rf"request\.userInfo\.username == '{KCM_USER}'\)",
            skip,
        ), kind
    assert skip.count("request.userInfo.username") == 6
    workloads = {
        c["name"]: c["expression"] for c in webhooks()["workloads.admission.runwhere.ai"]["matchConditions"]
    }
    assert workloads["not-kueue"] == pods["not-kueue"]
    rs = workloads["not-a-deployments-replicaset-from-its-controller"]
    assert f"(request.userInfo.username == '{CONTROLLER_USERS[('apps', 'Deployment')]}' ||" in rs
    # A JobSet's Jobs, only from the JobSet controller (the code's table), only with a JobSet controller ref.
    ((group, kind), user), *more = JOB_MAKERS.items()
    assert not more
    js = workloads["not-a-jobsets-job-from-its-controller"]
    assert js == not_a_jobsets_job()["expression"]  # the topology policies' condition, written once
    assert f"request.userInfo.username == '{user}'" in js and KCM_USER not in js
    assert f"r.kind == '{kind}' && r.apiVersion.startsWith('{group}/')" in js
    # A LeaderWorkerSet's StatefulSets, only from the LeaderWorkerSet controller, with its controller ref.
    lws = workloads["not-a-leaderworkersets-statefulset-from-its-controller"]
    assert lws == not_an_lws_statefulset()["expression"]  # the topology policies' too, written once
    assert set(STS_MAKERS.values()) == {LWS_USER} and f"request.userInfo.username == '{LWS_USER}'" in lws
    assert "request.kind.kind != 'StatefulSet'" in lws and KCM_USER not in lws
    for entry in ("jobsets", "leaderworkersets"):
        own = {
            c["name"]: c["expression"]
            for c in webhooks()[f"{entry}.admission.runwhere.ai"]["matchConditions"]
        }
        assert own["not-kueue"] == pods["not-kueue"]
        assert (
            webhooks()[f"{entry}.admission.runwhere.ai"]["namespaceSelector"]
            == (webhooks()["workloads.admission.runwhere.ai"]["namespaceSelector"])
        )
    for needle in (
        "nvidia.com/gpu",
        "runwhere.ai/",
        "hostPath",
        "runwhere.ai/pool",
        "kueue.x-k8s.io/priority-class",
    ):
        assert needle in pods["relevant"]
    nodes = webhooks()["nodes.admission.runwhere.ai"]["matchConditions"]
    assert "runwhere.ai/pool" in nodes[0]["expression"]


def test_tls_comes_from_the_certificate_the_deployment_mounts():
    vwc = one("ValidatingWebhookConfiguration")
    cert = one("Certificate", "gpuctl-admission")
    ns = cert["metadata"]["namespace"]
    assert vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{ns}/gpuctl-admission"
    assert "gpuctl-admission.gpuctl-system.svc" in cert["spec"]["dnsNames"]
    pod = one("Deployment")["spec"]["template"]["spec"]
    secret = next(v["secret"]["secretName"] for v in pod["volumes"] if v["name"] == "tls")
    assert secret == cert["spec"]["secretName"]
    args = pod["containers"][0]["args"]
    assert "--tls-cert=/tls/tls.crt" in args and "--tls-key=/tls/tls.key" in args


def test_deployment_is_highly_available_and_probed_on_readiness():
    dep = one("Deployment")
    assert dep["spec"]["replicas"] == 2
    labels = dep["spec"]["template"]["metadata"]["labels"]
    pdb = one("PodDisruptionBudget")
    assert (
        pdb["spec"]["minAvailable"] == 1 and pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    )
    svc = one("Service")
    assert svc["spec"]["selector"].items() <= labels.items()
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["ports"][0]["containerPort"] == DEFAULT_PORT
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["command"] == ["gpuctl", "admission", "serve"]  # the image's entrypoint (hack/image.sh)


def test_rbac_is_list_and_watch_of_exactly_the_watched_kinds():
    role = one("ClusterRole")
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    watched = {(r.custom[0] if r.custom else "", r.name) for r in (*RESOURCES, *OPTIONAL_RESOURCES)}
    assert granted == watched
    assert all(sorted(rule["verbs"]) == ["list", "watch"] for rule in role["rules"])
    binding = one("ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpuctl-admission", "namespace": "gpuctl-system"}
    ]
