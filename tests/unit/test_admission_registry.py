"""admission.registry names every rule once, and the webhook, the policies and the docs follow it.

(That the generated CEL answers what the Python check answers, rule by rule, is the CEL evaluator's test over
the recorded corpus; here: the registry is complete and consistent, and nothing lists rules beside it.)
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import yaml

from admission import registry, rule_names
from admission.policies import deletes, isolation, team
from admission.policies.cel import DeleteCel, IsolationCel, TeamCel

ROOT = Path(__file__).resolve().parents[2]


def _rule_names() -> set[str]:
    return {
        v for k, v in vars(rule_names).items() if k.isupper() and isinstance(v, str) and not k.startswith("_")
    }


def test_every_rule_name_is_registered_once_with_a_check_a_fix_and_its_cel_or_why_not():
    assert len(set(registry.RULES)) == len(registry.RULES)
    assert set(registry.RULES) == _rule_names()
    assert set(registry.RULES) >= rule_names.CACHE_RULES
    for r in registry.REGISTRY:
        assert r.denies and "\n" not in r.denies and "|" not in r.denies, r.name
        assert r.fix, r.name
        assert r.checks, r.name
        # A rule has its CEL in a policy, or says in one line why only the webhook can judge it.
        assert bool(r.policy) != bool(r.webhook_only), r.name
        assert (r.cel is not None) == bool(r.policy), r.name
        # Only rules that read the cache are webhook-only.
        assert r.cache == (r.webhook_only != "") or r.name == registry.POOL_NODE_NAME, r.name


def test_each_rules_check_and_cel_live_in_the_file_it_names():
    for r in registry.REGISTRY:
        module = importlib.import_module(f"admission.validators.{r.file}")
        source = inspect.getsource(module)
        assert f" {_constant(r.name)}" in source or f"({_constant(r.name)}" in source, (r.name, r.file)
        if isinstance(r.cel, TeamCel):
            for part in (r.cel.variables, r.cel.change):
                assert part is None or part.__module__ == module.__name__, (r.name, part)
        elif isinstance(r.cel, IsolationCel):
            assert r.cel.finding.__module__ == module.__name__, r.name
        elif isinstance(r.cel, DeleteCel):
            assert r.cel.variables.__module__ == module.__name__, r.name


def _constant(name: str) -> str:
    """The rule_names constant spelling `name`."""
    (found,) = [k for k, v in vars(rule_names).items() if v == name and k.isupper()]
    return found


def test_the_policies_carry_the_registrys_rules_in_its_order_with_its_fix():
    def rules_and_fixes(docs: list[dict]) -> list[tuple[str, str]]:
        out = []
        for d in docs:
            if d["kind"] != "ValidatingAdmissionPolicy":
                continue
            for v in d["spec"]["validations"]:
                text = v["messageExpression"]
                name = text.split("breaks [", 1)[1].split("]", 1)[0]
                out.append((name, text))
        return out

    for policy, docs in (
        (registry.TEAM_POLICY, team.policy()),
        (registry.ISOLATION_POLICY, isolation.policy()),
        (registry.DELETE_POLICY, deletes.policy()),
    ):
        found = rules_and_fixes(docs)
        assert [n for n, _ in found] == [r.name for r in registry.cel_rules(policy)], policy
        for name, text in found:
            fix = registry.rule(name).fix.replace("'", "\\'")
            assert f"Fix: {fix}'" in text, (name, text[-300:])
    assert tuple(r.name for r in registry.cel_rules(registry.TEAM_POLICY)) == team.POLICY_RULES


def test_the_shipped_policy_file_has_one_validation_per_registered_rule():
    docs = list(yaml.safe_load_all((ROOT / "manifests" / "admission" / "policy.yaml").read_text()))
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    assert {registry.TEAM_POLICY, registry.DELETE_POLICY} <= names


def test_the_docs_rule_tables_are_the_registrys():
    table = registry.markdown_table()
    for doc in ("docs/admission.md", "docs/architecture.md"):
        assert table in (ROOT / doc).read_text(), f"{doc}: paste `python -m admission.registry`'s table"


def test_the_dispatchers_run_each_stages_checks_once_in_registry_order():
    work = registry.checks(registry.WORK)
    assert len(work) == len(set(work))
    # The labels check finds three rules and is run once; the Node check serves two rules.
    assert len(registry.checks(registry.NODE)) == 1
    assert len(work) < sum(1 for r in registry.REGISTRY for s, _ in r.checks if s == registry.WORK)
