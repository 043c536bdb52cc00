"""gpuctl.domain.nodeaffinity: kube-scheduler's NodeAffinity matching (k8s.io/component-helpers
scheduling/corev1/nodeaffinity), table-driven, and gpuctl.domain.shape's typed reads."""

from __future__ import annotations

import pytest

from gpuctl.domain.nodeaffinity import (
    has_other_conditions,
    listed_values,
    node_matches,
    requirement_matches,
    term_admits,
    term_requires,
)
from gpuctl.domain.shape import ShapeError, item, list_at, obj_at, str_at, strmap_at


@pytest.mark.parametrize(
    ("op", "values", "value", "want"),
    [
        ("In", ["a", "b"], "a", True),
        ("In", ["a"], None, False),
        ("NotIn", ["a"], "b", True),
        ("NotIn", ["a"], None, True),
        ("NotIn", ["a"], "a", False),
        ("Exists", [], "x", True),
        ("Exists", [], None, False),
        ("DoesNotExist", [], None, True),
        ("DoesNotExist", [], "x", False),
        ("Gt", ["3"], "4", True),
        ("Gt", ["3"], "3", False),
        ("Lt", ["3"], "2", True),
        ("Gt", ["3"], "x", False),  # not an integer: no match
        ("Bogus", ["a"], "a", False),  # an unknown operator matches nothing
    ],
)
def test_requirement(op, values, value, want):
    assert requirement_matches({"key": "k", "operator": op, "values": values}, value) is want


LABELS = {"zone": "a", "runwhere.ai/pool": "p1", "disk": "ssd"}


@pytest.mark.parametrize(
    ("case", "selector", "terms", "skip", "want"),
    [
        ("nothing asked", {}, [], None, True),
        ("selector matches", {"zone": "a"}, [], None, True),
        ("selector misses", {"zone": "b"}, [], None, False),
        ("selector misses only on the skipped key", {"runwhere.ai/pool": "p2"}, [], "runwhere.ai/pool", True),
        (
            "terms are ORed",
            {},
            [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                {"matchExpressions": [{"key": "disk", "operator": "Exists"}]},
            ],
            None,
            True,
        ),
        (
            "a term's requirements are ANDed",
            {},
            [
                {
                    "matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["a"]},
                        {"key": "disk", "operator": "DoesNotExist"},
                    ]
                }
            ],
            None,
            False,
        ),
        (
            "matchFields metadata.name",
            {},
            [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}],
            None,
            True,
        ),
        (
            "matchFields, another node",
            {},
            [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}],
            None,
            False,
        ),
    ],
)
def test_node_matches(case, selector, terms, skip, want):
    assert node_matches("n1", LABELS, selector, terms, skip) is want, case


def test_term_helpers():
    pinned = {"matchExpressions": [{"key": "runwhere.ai/pool", "operator": "In", "values": ["p1", "p2"]}]}
    excluding = {"matchExpressions": [{"key": "runwhere.ai/pool", "operator": "NotIn", "values": ["p1"]}]}
    other = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    assert term_requires(pinned, "runwhere.ai/pool") and not term_requires(excluding, "runwhere.ai/pool")
    assert term_admits(pinned, "runwhere.ai/pool", "p2") and not term_admits(
        excluding, "runwhere.ai/pool", "p1"
    )
    assert term_admits(other, "runwhere.ai/pool", "p1")  # says nothing about the pool
    assert has_other_conditions(other, "runwhere.ai/pool") and not has_other_conditions(
        pinned, "runwhere.ai/pool"
    )
    assert has_other_conditions({"matchFields": [{"key": "metadata.name"}]}, "runwhere.ai/pool")
    assert listed_values([pinned, excluding, other], "runwhere.ai/pool") == {"p1", "p2"}


def test_shape_reads_name_the_field():
    doc = {"m": {"k": "v"}, "l": [1], "s": "x", "bad": 3, "labels": {"a": 1}}
    assert obj_at(doc, "m", "x") == {"k": "v"} and obj_at(doc, "none", "x") == {}
    assert list_at(doc, "l", "x") == [1] and list_at(doc, "none", "x") == []
    assert str_at(doc, "s", "x") == "x" and str_at(doc, "none", "x") == ""
    for read, msg in (
        (lambda: obj_at(doc, "bad", "spec"), "spec.bad must be an object, not int"),
        (lambda: list_at(doc, "bad", "spec"), "spec.bad must be a list, not int"),
        (lambda: str_at(doc, "bad", "spec"), "spec.bad must be a string, not int"),
        (lambda: item(3, "spec.l[0]"), "spec.l[0] must be an object, not int"),
        (lambda: strmap_at(doc, "labels", "metadata"), "metadata.labels['a'] must be a string, not int"),
    ):
        with pytest.raises(ShapeError) as e:
            read()
        assert str(e.value) == msg
