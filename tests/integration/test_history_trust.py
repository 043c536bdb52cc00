"""The audit trail is gpuctl serve's alone (issue 33), tried as a namespace admin on the local cluster.

A tenant with Kubernetes' `edit` in its team namespace (and, to try forging Events, a Role that lets it
create them) attacks what `gpuctl history` is made of: the ConfigMap gpuctl-history and the Events about
Workloads. The chart's policies (manifests/serve/history-policy.yaml) are installed as the chart does, with
serve's ServiceAccount in a namespace of this module's own and their bindings limited to this module's
namespaces (other tests' serves, running as the test's admin, are not judged). serve's writes go through
gpuctl.service.history.append authenticated as that ServiceAccount.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuctl.cluster import Cluster, path
from gpuctl.constants import HISTORY_CONFIGMAP, HISTORY_DATA_KEY
from gpuctl.domain.history import Record
from gpuctl.service.history import append, read
from tests.integration.applied import applied
from tests.integration.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
ID = uuid.uuid4().hex[:6]
SYSTEM_NS = f"ht-{ID}"  # plays gpuctl-system
# a bare hex ID such as 1e5432 reads as a number in YAML: the label value starts with letters
MARK = {"gpuctl.runwhere.ai/history-trust-test": f"id-{ID}"}
TENANT = f"eve-{ID}"
KUEUE = "system:serviceaccount:kueue-system:kueue-controller-manager"
CLUSTER_KINDS = (
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
WRITER = "[history-writer]"
EVENTS = "[workload-events]"


def installed() -> list[dict]:
    """serve's RBAC and the history policies, as the chart renders them for release namespace SYSTEM_NS,
    cluster-wide names prefixed, bindings limited to namespaces labelled MARK."""
    docs = []
    for f in ("serve/rbac.yaml", "serve/history-policy.yaml"):
        text = (MANIFESTS / f).read_text().replace("gpuctl-system", SYSTEM_NS)
        docs += [d for d in yaml.safe_load_all(text) if d and d["kind"] != "Namespace"]
    for d in docs:
        if d["kind"] in CLUSTER_KINDS:
            d["metadata"]["name"] = f"{SYSTEM_NS}-{d['metadata']['name']}"
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding") and d["roleRef"]["kind"] == "ClusterRole":
            d["roleRef"]["name"] = f"{SYSTEM_NS}-{d['roleRef']['name']}"
        if d["kind"] == "ValidatingAdmissionPolicyBinding":
            d["spec"]["policyName"] = f"{SYSTEM_NS}-{d['spec']['policyName']}"
            d["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": MARK}}
    return docs


@pytest.fixture(scope="module")
def serve(cluster, kubectl_bin, kube) -> Iterator[Cluster]:
    """gpuctl serve's client (its ServiceAccount's token), with the policies in force."""
    with applied(kubectl_bin, cluster, SYSTEM_NS, installed(), CLUSTER_KINDS):
        token = kube.request(
            "POST",
            path("ServiceAccount", "gpuctl-serve", SYSTEM_NS, "token"),
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        )["status"]["token"]
        cl = yaml.safe_load(Path(cluster).read_text())["clusters"][0]["cluster"]
        if "certificate-authority" in cl:
            cl["certificate-authority-data"] = base64.b64encode(
                Path(cl.pop("certificate-authority")).read_bytes()
            ).decode()
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": cl}],
            "users": [{"name": "serve", "user": {"token": token}}],
            "contexts": [
                {"name": "sa", "context": {"cluster": "c", "user": "serve", "namespace": SYSTEM_NS}}
            ],
            "current-context": "sa",
        }
        kc = Path(f"/tmp/gpuctl-history-trust-{ID}.kubeconfig")
        kc.write_text(yaml.safe_dump(cfg))
        yield Cluster.connect(kubeconfig=str(kc))


@pytest.fixture
def team(kube, kubectl, serve) -> Iterator[str]:
    """A team namespace whose admin is TENANT (`edit`, plus creating Events), the policies' bindings on it."""
    ns = f"team-{uuid.uuid4().hex[:6]}"
    labels = {"runwhere.ai/namespace": "true", **MARK}
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}})
    kubectl("-n", ns, "create", "rolebinding", "admin", "--clusterrole=edit", f"--user={TENANT}")
    kubectl(
        "-n",
        ns,
        "create",
        "role",
        "events",
        "--verb=create,update,patch",
        "--resource=events,events.events.k8s.io",
    )
    kubectl("-n", ns, "create", "rolebinding", "events", "--role=events", f"--user={TENANT}")
    probe = yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": HISTORY_CONFIGMAP}})
    wait_until(
        lambda: (
            WRITER
            in kubectl(
                "-n", ns, "create", "--dry-run=server", "--as", TENANT, "-f", "-", input=probe, check=False
            ).stderr
        ),
        60,
        what="the history policy judges the new namespace",
    )
    yield ns
    kube.delete(f"/api/v1/namespaces/{ns}")


def rec(ns: str, action: str, actor: str, minute: int) -> Record:
    return Record(f"2026-11-27T10:{minute:02d}:00Z", ns, "train", action, actor, "r", "u-1")


def as_tenant(kubectl, ns: str, *args: str, obj: dict | None = None):
    return kubectl("-n", ns, "--as", TENANT, *args, input=yaml.safe_dump(obj) if obj else None, check=False)


def test_a_namespace_admin_can_neither_rewrite_nor_erase_what_serve_wrote(serve, kube, kubectl, team) -> None:
    assert append(serve, team, [rec(team, "submitted", "alice", 0)]) == 1
    original = read(kube, team)
    forged = rec(team, "submitted", "mallory", 0).line() + "\n"
    attempts = {
        "rewrite": (
            "patch",
            "configmap",
            HISTORY_CONFIGMAP,
            "--type=merge",
            "-p",
            yaml.safe_dump({"data": {HISTORY_DATA_KEY: forged}}),
        ),
        "immutable": ("patch", "configmap", HISTORY_CONFIGMAP, "--type=merge", "-p", '{"immutable": true}'),
        "label": ("label", "configmap", HISTORY_CONFIGMAP, "x=y"),
        "delete": ("delete", "configmap", HISTORY_CONFIGMAP),
    }
    for what, args in attempts.items():
        p = as_tenant(kubectl, team, *args)
        assert p.returncode == 1 and WRITER in p.stderr, (what, p.stderr)
        assert f"{TENANT} may not" in p.stderr
    # Delete and recreate (the attack of the issue): the delete is refused, so is a replace.
    cm = kube.get(path("ConfigMap", HISTORY_CONFIGMAP, team))
    cm["data"][HISTORY_DATA_KEY] = forged
    p = as_tenant(kubectl, team, "replace", "-f", "-", obj=cm)
    assert p.returncode == 1 and WRITER in p.stderr
    assert read(kube, team) == original
    # serve still writes.
    assert append(serve, team, [rec(team, "admitted", "kueue", 1)]) == 1
    assert [(r.action, r.actor) for r in read(kube, team)] == [("submitted", "alice"), ("admitted", "kueue")]


def test_no_store_made_in_advance_and_other_configmaps_untouched(kubectl, team) -> None:
    forged = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": HISTORY_CONFIGMAP},
        "data": {HISTORY_DATA_KEY: rec(team, "submitted", "mallory", 0).line() + "\n"},
    }
    p = as_tenant(kubectl, team, "create", "-f", "-", obj=forged)
    assert p.returncode == 1 and WRITER in p.stderr
    other = {**forged, "metadata": {"name": "my-notes"}}
    assert as_tenant(kubectl, team, "create", "-f", "-", obj=other).returncode == 0


def test_a_cluster_admin_is_refused_too(kube, serve, kubectl, team) -> None:
    """Only serve writes the trail: the test's own admin user (not serve) is refused like the tenant."""
    append(serve, team, [rec(team, "submitted", "alice", 0)])
    p = kubectl("-n", team, "delete", "configmap", HISTORY_CONFIGMAP, check=False)
    assert p.returncode == 1 and WRITER in p.stderr


def _core_event(ns: str, regarding_ns: str, reason: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"e-{uuid.uuid4().hex[:6]}"},
        "involvedObject": {
            "kind": "Workload",
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "name": "job-train-x",
            "namespace": regarding_ns,
        },
        "reason": reason,
        "message": "Preempted to accommodate a workload (UID: u-2, JobUID: j) due to prioritization",
        "type": "Normal",
    }


def _new_event(ns: str, regarding_ns: str) -> dict:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"e-{uuid.uuid4().hex[:6]}"},
        "regarding": {
            "kind": "Workload",
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "name": "job-train-x",
            "namespace": regarding_ns,
        },
        "reason": "Admitted",
        "note": "Admitted by ClusterQueue x",
        "type": "Normal",
        "action": "Admit",
        "reportingController": "kueue",
        "reportingInstance": "kueue-1",
        "eventTime": "2026-11-27T10:00:00.000000Z",
    }


def test_events_about_workloads_come_from_kueue_and_serve_of_their_own_namespace(kubectl, team, kube) -> None:
    other = f"team-{uuid.uuid4().hex[:6]}"
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": other, "labels": {"runwhere.ai/namespace": "true"}},
        }
    )
    try:
        for reason in ("Preempted", "Admitted", "GpuctlDefragMove"):
            p = as_tenant(kubectl, team, "create", "-f", "-", obj=_core_event(team, team, reason))
            assert p.returncode == 1 and EVENTS in p.stderr, (reason, p.stderr)
        # The leak of the issue: an events.k8s.io Event in one team naming another team's Workload, refused
        # even from Kueue's identity.
        for who in (TENANT, KUEUE):
            p = kubectl(
                "-n",
                team,
                "--as",
                who,
                "create",
                "--dry-run=server",
                "-f",
                "-",
                input=yaml.safe_dump(_new_event(team, other)),
                check=False,
            )
            assert p.returncode == 1 and EVENTS in p.stderr, (who, p.stderr)
        assert f"not {other}" in p.stderr
        # Kueue about its own namespace's Workloads, and the tenant about its pods: as before.
        p = kubectl(
            "-n",
            team,
            "--as",
            KUEUE,
            "create",
            "--dry-run=server",
            "-f",
            "-",
            input=yaml.safe_dump(_new_event(team, team)),
            check=False,
        )
        assert p.returncode == 0, p.stderr
        pod_event = _core_event(team, team, "Started")
        pod_event["involvedObject"] = {"kind": "Pod", "name": "p", "namespace": team}
        assert as_tenant(kubectl, team, "create", "-f", "-", obj=pod_event).returncode == 0
    finally:
        kube.delete(f"/api/v1/namespaces/{other}")


def test_deleting_the_team_namespace_still_removes_its_store(serve, kube, kubectl) -> None:
    """The namespace controller deletes the store with its namespace (the policy lets it)."""
    ns = f"team-{uuid.uuid4().hex[:6]}"
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"runwhere.ai/namespace": "true", **MARK}},
        }
    )
    append(serve, ns, [rec(ns, "submitted", "alice", 0)])
    kube.delete(f"/api/v1/namespaces/{ns}")
    wait_until(
        lambda: kube.get_or_none(f"/api/v1/namespaces/{ns}") is None, 90, what=f"namespace {ns} deleted"
    )
