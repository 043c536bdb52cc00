"""Kueue's controller is trusted by who it is, and who it is is configurable (issue 25's audit).

Kueue may run in another namespace or under another ServiceAccount than its defaults (kueue-system /
kueue-controller-manager). The chart's values kueue.namespace and kueue.serviceAccountName then reach
every matchCondition and binding (tests/integration/test_chart.py) and the webhook's `--kueue-user`
flag (here): the configured identity is skipped, and the default one is an ordinary user (somebody
allowed to create a namespace named kueue-system must not become Kueue).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from admission import command
from admission.identities import KUEUE_USER
from admission.isolation import review_isolation
from admission.policies import skeleton
from admission.rules import AdmissionConfig, Mode, review
from tests.unit.test_admission_fixtures import PLAIN, TEAM, raw_pod, state
from tests.unit.test_admission_fixtures import review as admission_review

ROOT = Path(__file__).resolve().parents[2]
OTHER = "system:serviceaccount:kueue-prod:kueue-ctrl"
STATE = state()


def _bad_team_pod() -> dict:
    # A hostPath of the deny list: refused in a team namespace whoever asks, unless it is Kueue.
    return raw_pod("bad", TEAM, volumes=[{"name": "h", "hostPath": {"path": "/etc"}}], labels={"app": "x"})


def _bad_plain_pod() -> dict:
    # A pod outside team namespaces that tolerates every taint (the pool taint too): isolation refuses it.
    return raw_pod("bad", PLAIN, tolerations=[{"operator": "Exists"}])


def test_default_config_trusts_kueues_default_identity() -> None:
    cfg = AdmissionConfig()
    assert cfg.kueue_user == KUEUE_USER == "system:serviceaccount:kueue-system:kueue-controller-manager"
    v = review(admission_review(_bad_team_pod(), username=KUEUE_USER)["request"], STATE, cfg)
    assert v.allowed and v.skipped == "Kueue's own request", v
    assert not review(admission_review(_bad_team_pod(), username="alice")["request"], STATE, cfg).allowed


@pytest.mark.parametrize("route", ["validate", "isolation"])
def test_a_configured_kueue_identity_is_trusted_and_the_default_one_no_longer_is(route: str) -> None:
    cfg = AdmissionConfig(mode=Mode.ENFORCE, kueue_user=OTHER)
    judge, obj = (review, _bad_team_pod()) if route == "validate" else (review_isolation, _bad_plain_pod())
    trusted = judge(admission_review(obj, username=OTHER)["request"], STATE, cfg)
    assert trusted.allowed and trusted.skipped == "Kueue's own request", trusted
    default = judge(admission_review(obj, username=KUEUE_USER)["request"], STATE, cfg)
    assert not default.allowed and not default.skipped, default
    assert default.violations, default


def test_orphaning_delete_by_the_configured_kueue_only() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": TEAM, "labels": {"kueue.x-k8s.io/queue-name": "default"}},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
    }
    orphan = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "propagationPolicy": "Orphan"}
    cfg = AdmissionConfig(kueue_user=OTHER)

    def delete(user: str):
        req = admission_review(job, op="DELETE", old=job, options=orphan, username=user)["request"]
        req["object"] = None
        return review(req, STATE, cfg)

    assert delete(OTHER).allowed
    refused = delete(KUEUE_USER)
    assert not refused.allowed and "orphan-delete" in refused.rules, refused


def test_the_webhook_flag_sets_the_identity_and_refuses_a_non_serviceaccount(tmp_path: Path, capsys) -> None:
    args = command._parser().parse_args(["--tls-cert=c", "--tls-key=k", f"--kueue-user={OTHER}"])
    assert args.kueue_user == OTHER
    assert command._parser().parse_args(["--tls-cert=c", "--tls-key=k"]).kueue_user == KUEUE_USER
    for f in ("c", "k"):
        (tmp_path / f).write_text("x")
    rc = command.main(
        ["serve", f"--tls-cert={tmp_path / 'c'}", f"--tls-key={tmp_path / 'k'}", "--kueue-user=kueue"]
    )
    assert rc == 2
    assert "--kueue-user 'kueue' is not a ServiceAccount user name" in capsys.readouterr().err


def test_the_shipped_deployment_passes_the_identity_every_manifest_skips() -> None:
    """manifests/admission/deployment.yaml's --kueue-user is the identity the generated policies and the
    webhook configuration skip (the chart rewrites all of them together)."""
    (dep,) = [
        d
        for d in yaml.safe_load_all((ROOT / "manifests/admission/deployment.yaml").read_text())
        if d and d["kind"] == "Deployment"
    ]
    args = command._parser().parse_args(dep["spec"]["template"]["spec"]["containers"][0]["args"])
    assert args.kueue_user == KUEUE_USER
    namespace = KUEUE_USER.split(":")[2]
    assert namespace in skeleton.SYSTEM_NAMESPACES
    for f in ("webhook.yaml", "policy.yaml", "isolation.yaml", "topology.yaml", "earlier-client.yaml"):
        text = (ROOT / "manifests/admission" / f).read_text()
        assert f"'{KUEUE_USER}'" in text, f
