"""A team namespace's LimitRange from the quota document (`limitRange:`, optional, documented defaults)."""

from __future__ import annotations

import pytest

from gpuctl.constants import LIMIT_RANGE_NAME, MANAGED_BY_VALUE, Labels
from gpuctl.service.convert import team_limit_range
from gpuctl.service.plan import plan_documents
from gpuctl.spec import SpecError, load_text


def entry(block: str = ""):
    text = f"kind: quota\nquota: {{name: q}}\nnamespace:\n  team-a:\n    gpu: 4\n{block}"
    (doc,) = load_text(text, "quota.yaml")
    return doc.spec.entries()["team-a"]


def test_every_team_gets_default_requests_unless_switched_off() -> None:
    lr = team_limit_range("team-a", entry())
    assert lr["metadata"] == {
        "name": LIMIT_RANGE_NAME,
        "namespace": "team-a",
        "labels": {Labels.MANAGED_BY: MANAGED_BY_VALUE, Labels.TEAM: "team-a"},
    }
    assert lr["spec"] == {
        "limits": [{"type": "Container", "defaultRequest": {"cpu": "100m", "memory": "256Mi"}}]
    }
    assert team_limit_range("team-a", entry("    limitRange: false\n")) is None


def test_all_fields_and_aliases() -> None:
    e = entry(
        "    limit-range:\n      defaultRequest: {cpu: 250m}\n"
        "      default: {cpu: 1, memory: 2Gi}\n      max: {memory: 64Gi}\n"
    )
    (item,) = team_limit_range("team-a", e)["spec"]["limits"]
    assert item == {
        "type": "Container",
        "defaultRequest": {"cpu": "250m"},
        "default": {"cpu": "1", "memory": "2Gi"},
        "max": {"memory": "64Gi"},
    }


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            "    limitRange: {defaultRequest: {cpu: 2}, default: {cpu: 1}}\n",
            "defaultRequest.cpu 2 is more than default.cpu 1",
        ),
        (
            "    limitRange: {defaultRequest: {memory: 8Gi}, max: {memory: 4Gi}}\n",
            "defaultRequest.memory 8Gi is more than max.memory 4Gi",
        ),
        ("    limitRange: {defaultRequest: {cpu: lots}}\n", "not a Kubernetes quantity"),
    ],
)
def test_bad_limit_range_is_an_error_naming_the_field(block: str, message: str) -> None:
    with pytest.raises(SpecError) as e:
        entry(block)
    text = str(e.value)
    assert (
        "quota.yaml" in text and "limitRange" in text.replace("limit_range", "limitRange") and message in text
    )


def test_client_dry_run_shows_the_limit_range() -> None:
    docs = load_text(
        "kind: quota\nquota: {name: q}\nnamespace: {team-a: {gpu: 1}, team-b: {limitRange: false}}\n",
        "q.yaml",
    )
    kinds = [(o["kind"], o["metadata"].get("namespace")) for o in plan_documents(docs, "default").objects]
    assert ("LimitRange", "team-a") in kinds and ("LimitRange", "team-b") not in kinds
