"""gpuctl's own identities confined (issue 33), tried as them on the local cluster: `gpuctl serve`
(ServiceAccount gpuctl-serve, which the chart also binds to the API's role with serve.api) and the REST
API (gpuctl-api) write namespaced objects only in team namespaces (manifests/serve/confinement.yaml), make
no existing namespace a team's, delete only namespaces gpuctl created, and read no Secret: the MultiKueue
workers' kubeconfigs in kueue-system stay Kueue's.

Each request is made with kubectl --as the ServiceAccount (the API server authorizes and admits it as that
user: RBAC and the ValidatingAdmissionPolicy both apply), with --dry-run=server where it would be allowed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.applied import applied
from tests.integration.conftest import require_controller, wait_until

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
# A release namespace and name prefix of this module's own, so its cluster-wide roles and policy never
# meet another test's copy of gpuctl's (the chart's `helm install` refuses objects it did not create).
SYSTEM_NS = f"cf-{uuid.uuid4().hex[:6]}"
PREFIX = SYSTEM_NS
API = f"system:serviceaccount:{SYSTEM_NS}:gpuctl-api"
SERVE = f"system:serviceaccount:{SYSTEM_NS}:gpuctl-serve"
RBAC_FILES = [
    "serve/rbac.yaml",
    "serve/rbac-api.yaml",
    "api/rbac.yaml",
    "serve/defrag/rbac.yaml",
    "serve/evict/rbac.yaml",
]
REFUSED = "[service-confinement]"
CLUSTER_KINDS = (
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def installed() -> list[dict]:
    """gpuctl's RBAC and confinement policy as the chart installs them with serve.api (the API's bindings
    also name gpuctl-serve), in SYSTEM_NS (as the chart's release namespace) with PREFIX on cluster-wide
    names. Rules and CEL unchanged."""
    docs = []
    for f in [*RBAC_FILES, "serve/confinement.yaml"]:
        text = (MANIFESTS / f).read_text().replace("gpuctl-system", SYSTEM_NS)
        docs += [d for d in yaml.safe_load_all(text) if d]
    for d in docs:
        if d["kind"] in CLUSTER_KINDS:
            d["metadata"]["name"] = f"{PREFIX}-{d['metadata']['name']}"
        ref = d.get("roleRef", {})
        if ref.get("kind") == "ClusterRole" and ref["name"].startswith("gpuctl"):
            ref["name"] = f"{PREFIX}-{ref['name']}"
        if d["kind"] == "ValidatingAdmissionPolicyBinding":
            d["spec"]["policyName"] = f"{PREFIX}-{d['spec']['policyName']}"
        if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"].startswith(f"{PREFIX}-gpuctl-api"):
            d["subjects"].append({"kind": "ServiceAccount", "name": "gpuctl-serve", "namespace": SYSTEM_NS})
    return docs


def _job(name: str) -> dict:
    """A Job that would read the MultiKueue kubeconfigs, were it admitted in kueue-system."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": ["ls", "/secrets"]}],
                    "volumes": [{"name": "s", "secret": {"secretName": "gpuctl-cluster-worker"}}],
                }
            },
        },
    }


def _workload(kind: str) -> dict:
    obj = _job(f"steal-{kind.lower()}")
    if kind == "Job":
        return obj
    tpl = obj["spec"]["template"]
    tpl["metadata"] = {"labels": {"app": "steal"}}
    tpl["spec"]["restartPolicy"] = "Always"
    spec = {"replicas": 1, "selector": {"matchLabels": {"app": "steal"}}, "template": tpl}
    if kind == "StatefulSet":
        spec["serviceName"] = "steal"
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": obj["metadata"], "spec": spec}


@pytest.fixture(scope="module")
def confined(cluster, kubectl_bin) -> Iterator[None]:
    """installed() applied, then wait until the policy refuses; all of it deleted afterwards."""
    with applied(kubectl_bin, cluster, SYSTEM_NS, installed(), CLUSTER_KINDS) as kubectl:
        job = yaml.safe_dump({**_job("probe"), "metadata": {"name": "probe", "namespace": "kueue-system"}})
        wait_until(
            lambda: (
                REFUSED
                in kubectl(
                    "create", "--as", API, "--dry-run=server", "-f", "-", input=job, check=False
                ).stderr
            ),
            60,
            what="the confinement policy refuses",
        )
        yield


@pytest.fixture
def team(kube) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    labels = {"runwhere.ai/namespace": "true", "app.kubernetes.io/managed-by": "gpuctl"}
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    yield name
    kube.delete(f"/api/v1/namespaces/{name}")


def as_(kubectl, who: str, *args: str, obj: dict | None = None):
    return kubectl("--as", who, *args, input=yaml.safe_dump(obj) if obj else None, check=False)


@pytest.mark.parametrize("who", [API, SERVE], ids=["api", "serve"])
@pytest.mark.parametrize("kind", ["Job", "Deployment", "StatefulSet"])
def test_no_workload_in_kueue_system_nor_any_other_non_team_namespace(
    confined, kubectl, namespace, who: str, kind: str
) -> None:
    for ns in ("kueue-system", "kube-system", namespace):
        p = as_(kubectl, who, "-n", ns, "create", "--dry-run=server", "-f", "-", obj=_workload(kind))
        assert p.returncode == 1 and REFUSED in p.stderr, (ns, p.stderr)
        assert f"may create {kind.lower()}s only in team namespaces" in p.stderr
    # A bare pod is not even in the role.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": _job("x")["spec"]["template"]["spec"],
    }
    p = as_(kubectl, who, "-n", "kueue-system", "create", "--dry-run=server", "-f", "-", obj=pod)
    assert p.returncode == 1 and 'cannot create resource "pods"' in p.stderr
    # Deletes too: their role may delete Services anywhere, the policy keeps them to team namespaces.
    p = as_(kubectl, who, "-n", "default", "delete", "service", "kubernetes", "--dry-run=server")
    assert p.returncode == 1 and "may delete services only in team namespaces" in p.stderr, p.stderr


@pytest.mark.parametrize("who", [API, SERVE], ids=["api", "serve"])
def test_the_same_writes_in_a_team_namespace_pass(confined, kubectl, team, who: str) -> None:
    """The same workloads, less their Secret volume (which the next test's rule refuses everywhere)."""
    for kind in ("Job", "Deployment", "StatefulSet"):
        obj = _workload(kind)
        del obj["spec"]["template"]["spec"]["volumes"]
        p = as_(kubectl, who, "-n", team, "create", "--dry-run=server", "-f", "-", obj=obj)
        assert p.returncode == 0, p.stderr
        assert "created (server dry run)" in p.stdout


def _reads_a_secret(how: str) -> dict:
    """A Job in a team namespace whose pod would read one of the team's Secrets (or act as another of its
    ServiceAccounts), by `how`; "pull" only names an imagePullSecret, which the containers never see."""
    job = _job(f"secret-{how.lower()}")
    spec = job["spec"]["template"]["spec"]
    c = spec["containers"][0]
    del spec["volumes"]
    if how == "volume":
        spec["volumes"] = [{"name": "s", "secret": {"secretName": "hf-token"}}]
    elif how == "projected":
        spec["volumes"] = [{"name": "s", "projected": {"sources": [{"secret": {"name": "hf-token"}}]}}]
    elif how == "token":
        spec["volumes"] = [
            {"name": "s", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "audience": "x"}}]}}
        ]
    elif how == "env":
        c["env"] = [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "t"}}}]
    elif how == "envFrom":
        spec["initContainers"] = [{**c, "name": "init", "envFrom": [{"secretRef": {"name": "hf-token"}}]}]
    elif how == "serviceAccount":
        spec["serviceAccountName"] = "ci-bot"
    elif how == "pull":
        spec["imagePullSecrets"] = [{"name": "registry"}]
        spec["serviceAccountName"] = "default"
    return job


SECRET_REFS = {
    "volume": "volume s",
    "projected": "projected volume s",
    "token": "projected volume s",
    "env": "secretKeyRef in container c",
    "envFrom": "envFrom secretRef in container init",
    "serviceAccount": "serviceAccountName ci-bot",
}


@pytest.mark.parametrize("who", [API, SERVE], ids=["api", "serve"])
def test_no_pod_they_start_in_a_team_namespace_reads_its_secrets(confined, kubectl, team, who: str) -> None:
    """A compromised service cannot take a team's Secrets through a pod it starts there either: gpuctl
    never writes a Secret reference into a pod template (only imagePullSecrets, read by the kubelet)."""
    for how, named in SECRET_REFS.items():
        p = as_(kubectl, who, "-n", team, "create", "--dry-run=server", "-f", "-", obj=_reads_a_secret(how))
        assert p.returncode == 1 and REFUSED in p.stderr, (how, p.stderr)
        said = "may not start pods that read Secrets or act as another ServiceAccount"
        assert f"{said} ({named} in" in p.stderr
    p = as_(kubectl, who, "-n", team, "create", "--dry-run=server", "-f", "-", obj=_reads_a_secret("pull"))
    assert p.returncode == 0, p.stderr


def _lws(name: str, leader: dict | None = None, worker: dict | None = None) -> dict:
    """A LeaderWorkerSet (what the API makes of a service of multi-node replicas), its templates' pod specs
    extended by `leader` and `worker`."""

    def spec(extra: dict | None) -> dict:
        return {"containers": [{"name": "c", "image": "busybox"}], **(extra or {})}

    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": {"spec": spec(leader)},
                "workerTemplate": {"spec": spec(worker)},
            },
        },
    }


@pytest.mark.parametrize("who", [API, SERVE], ids=["api", "serve"])
def test_no_leader_worker_set_they_make_reads_a_secret_either(
    confined, kubectl, kube, team, who: str
) -> None:
    """The API's role may create LeaderWorkerSets: a Secret in either template is refused, naming it."""
    require_controller(
        kube, "leaderworkersets.leaderworkerset.x-k8s.io", "LeaderWorkerSet", "GPUCTL_TESTBED_LWS"
    )
    p = as_(kubectl, who, "-n", team, "create", "--dry-run=server", "-f", "-", obj=_lws("clean"))
    assert p.returncode == 0, p.stderr
    env = [
        {
            "name": "T",
            "image": "busybox",
            "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "t"}}}],
        }
    ]
    for obj, named in (
        (_lws("w", worker={"containers": env}), "secretKeyRef in container T"),
        (_lws("w2", worker={"volumes": [{"name": "s", "secret": {"secretName": "hf-token"}}]}), "volume s"),
        (_lws("l", leader={"serviceAccountName": "ci-bot"}), "serviceAccountName ci-bot"),
    ):
        p = as_(kubectl, who, "-n", team, "create", "--dry-run=server", "-f", "-", obj=obj)
        assert p.returncode == 1 and REFUSED in p.stderr, (named, p.stderr)
        assert f"({named} in leaderworkersets {team}/" in p.stderr, p.stderr


def test_a_workload_made_with_a_secret_by_its_owner_is_still_patched_by_the_services(
    confined, kubectl, team
) -> None:
    """The rule judges what they write: a Deployment its owner made with a Secret (kubectl, the admin's
    own credentials) may be scaled or labelled by the API, not given a new template."""
    dep = _workload("Deployment")
    dep["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "T", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "t"}}}
    ]
    del dep["spec"]["template"]["spec"]["volumes"]
    assert kubectl("-n", team, "create", "-f", "-", input=yaml.safe_dump(dep), check=False).returncode == 0
    name = dep["metadata"]["name"]
    p = as_(kubectl, API, "-n", team, "patch", "deployment", name, "-p", '{"spec":{"replicas":0}}')
    assert p.returncode == 0, p.stderr
    p = as_(kubectl, API, "-n", team, "set", "image", f"deployment/{name}", "c=busybox:2")
    assert p.returncode == 1 and "secretKeyRef in container c" in p.stderr, p.stderr


@pytest.mark.parametrize("who", [API, SERVE], ids=["api", "serve"])
def test_no_secret_is_readable_anywhere(confined, kubectl, who: str) -> None:
    for verb in ("get", "list", "watch"):
        for scope in (["-n", "kueue-system"], ["-A"]):
            p = kubectl("auth", "can-i", verb, "secrets", *scope, "--as", who, check=False)
            assert p.stdout.strip() == "no", (verb, scope, p.stdout)
    p = as_(kubectl, who, "-n", "kueue-system", "get", "secrets")
    assert p.returncode == 1 and 'cannot list resource "secrets"' in p.stderr
    listed = kubectl("auth", "can-i", "--list", "-n", "kueue-system", "--as", who).stdout
    assert "secrets" not in listed and not any(line.startswith("*.* ") for line in listed.splitlines())


def test_no_gpuctl_role_grants_secrets() -> None:
    """Every role gpuctl ships (its services' and its callers': gpuctl-user, gpuctl-admin, ...): no Secret,
    no wildcard, so no gpuctl binding makes the MultiKueue kubeconfigs readable to anyone but Kueue."""
    roles = [
        d
        for f in MANIFESTS.rglob("*.yaml")
        for d in yaml.safe_load_all(f.read_text())
        if d and d.get("kind") in ("ClusterRole", "Role")
    ]
    assert {r["metadata"]["name"] for r in roles} >= {
        "gpuctl-api",
        "gpuctl-serve",
        "gpuctl-user",
        "gpuctl-admin",
    }
    for r in roles:
        for rule in r["rules"]:
            assert "secrets" not in rule.get("resources", []), r["metadata"]["name"]
            assert "*" not in rule.get("resources", []) and "*" not in rule.get("verbs", []), r["metadata"][
                "name"
            ]


def test_serve_keeps_its_lease_and_history_in_its_own_namespace(confined, kubectl) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gpuctl-history"}}
    assert (
        as_(kubectl, SERVE, "-n", SYSTEM_NS, "create", "--dry-run=server", "-f", "-", obj=cm).returncode == 0
    )
    p = as_(kubectl, SERVE, "-n", "kueue-system", "create", "--dry-run=server", "-f", "-", obj=cm)
    assert p.returncode == 1 and REFUSED in p.stderr


@pytest.mark.parametrize("who", [API, SERVE], ids=["api", "serve"])
def test_no_existing_namespace_becomes_a_team_and_none_is_deleted_unless_gpuctl_made_it(
    confined, kubectl, namespace, team, who: str
) -> None:
    for ns in ("kueue-system", namespace):
        p = as_(kubectl, who, "label", "namespace", ns, "runwhere.ai/namespace=true", "--dry-run=server")
        assert p.returncode == 1 and f"may not make namespace {ns} a team namespace" in p.stderr, p.stderr
        assert "kubectl label namespace" in p.stderr  # the fix: adopt it with your own credentials
        p = as_(
            kubectl, who, "label", "namespace", ns, "app.kubernetes.io/managed-by=gpuctl", "--dry-run=server"
        )
        assert p.returncode == 1 and REFUSED in p.stderr
        p = as_(kubectl, who, "delete", "namespace", ns, "--dry-run=server")
        assert p.returncode == 1 and "deletes only namespaces gpuctl created" in p.stderr
    # What gpuctl made stays gpuctl's: relabelled, deleted (server dry run).
    assert (
        as_(kubectl, who, "label", "namespace", team, "runwhere.ai/quota=q", "--dry-run=server").returncode
        == 0
    )
    assert as_(kubectl, who, "delete", "namespace", team, "--dry-run=server").returncode == 0
    fresh = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"t-{uuid.uuid4().hex[:8]}"}}
    assert as_(kubectl, who, "create", "--dry-run=server", "-f", "-", obj=fresh).returncode == 0


def test_other_identities_are_not_confined(confined, kubectl, namespace) -> None:
    """The policy matches gpuctl's two ServiceAccounts only: an admin (the test's own user) still writes."""
    p = kubectl(
        "-n", namespace, "create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(_job("x")), check=False
    )
    assert p.returncode == 0, p.stderr
