"""The webhook and the generated CEL agree, rule by rule, over the recorded admission corpus.

gpuctl's stateless admission rules exist twice: the webhook's Python (admission.rules.review,
admission.isolation.review_isolation) and the ValidatingAdmissionPolicies generated from its tables
(admission.policies.team, .deletes, .isolation). This test runs every request of the recorded corpus
(tests/unit/golden/admission/corpus.json.gz, test_admission_corpus.py) through both:

- the CEL side: hack/celeval (tests/unit/celeval.py), kube-apiserver's own ValidatingAdmissionPolicy
  compiler, matcher and validator of the test cluster's Kubernetes version, on the generated policies and
  bindings. A policy applies where the API server would apply it: its resource rules, its binding's
  namespaceSelector, its matchConditions.
- the webhook side: the Python evaluator behind each entry of manifests/admission/webhook.yaml, for the
  requests the API server would send it: each entry's rules, namespaceSelector and matchConditions are
  evaluated by the same harness (as a policy with the entry's match criteria), then `review` or
  `review_isolation` judges the request.

For every rule both carry (RULES below), per request: the webhook denies with the rule iff the policy's
validation for it fails, and where both deny, the findings (and the fix) each one names are the same words.
Rules only one side has, and known differences, are listed in RULES with the reason: nothing is skipped
in silence, and a rule added to either side fails `test_every_rule_is_listed` until it is listed.

The corpus's requests are taken as an API server would send them (`realize`): the resource named after
the kind, the name and namespace filled from the object, a DELETE's object as its oldObject, the objects
decoded into their kind's Go type by the harness (the webhook then judges the same decoded objects);
requests no API server sends (PATCH, no namespace, a namespace the cluster does not have, an object that
does not decode) are counted, not compared.
"""

from __future__ import annotations

import copy
import gzip
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson
import pytest
import yaml

from admission import isolation
from admission.policies import deletes, team
from admission.policies import isolation as isolation_policy
from admission.rule_names import (
    DEVICE_ACCESS,
    GANG_FITS,
    GPU_FITS_NODE,
    GPU_QUEUE,
    GPU_RESOURCE_RULE,
    GPU_TOPOLOGY,
    HOST_PATH,
    JOB_TYPE,
    KUEUE_GATE,
    MIG_PROFILE,
    NODE_POOL,
    ORPHAN_DELETE,
    OWNER_CLAIM,
    POOL_EXISTS,
    POOL_PLACEMENT,
    PRIORITY,
    PRIORITY_CLASS_RULE,
    RULES as WEBHOOK_RULES,
    SET_ASIDE_TOLERATION,
    UNKNOWN_KEY,
)
from admission.rules import AdmissionConfig, Malformed, review
from admission.state import ClusterState
from tests.unit import celeval

ROOT: Final = Path(__file__).resolve().parents[2]
CORPUS: Final = Path(__file__).parent / "golden" / "admission" / "corpus.json.gz"
ALLOWED: Final = ("/data/../proc", "/var/run")  # test_admission_corpus.ALLOWED: a case's `paths`


@dataclass(frozen=True)
class Rule:
    """How one rule's two implementations are compared. `policy`: the harness key of the policy that
    carries it ("" for a webhook-only rule); `text`: the findings' words are compared too (else only the
    decision); `why`: the reason for whatever is not compared."""

    policy: str
    text: bool
    why: str = ""


WEBHOOK_ONLY: Final = ""
# Every rule of the webhook, and where its CEL is. One table: what is compared and why not more.
RULES: Final[dict[str, Rule]] = {
    HOST_PATH: Rule("team", True),
    PRIORITY: Rule("team", True),
    JOB_TYPE: Rule("team", True),
    UNKNOWN_KEY: Rule("team", True),
    PRIORITY_CLASS_RULE: Rule("team", True),
    DEVICE_ACCESS: Rule("team", True),
    OWNER_CLAIM: Rule("team", True),
    KUEUE_GATE: Rule("team", True),
    GPU_RESOURCE_RULE: Rule("team", True),
    SET_ASIDE_TOLERATION: Rule("team", True),
    ORPHAN_DELETE: Rule("deletes", True),
    isolation.POOL_TOLERATION: Rule("isolation", True),
    isolation.POOL_SELECTION: Rule("isolation", True),
    # Rules that read the cluster (admission.rule_names.CACHE_RULES): no CEL, the API server has no cache.
    GPU_QUEUE: Rule(WEBHOOK_ONLY, False, "reads the cluster's LocalQueues and ClusterQueues"),
    GPU_TOPOLOGY: Rule(WEBHOOK_ONLY, False, "reads the pool's nodes and topology"),
    POOL_EXISTS: Rule(WEBHOOK_ONLY, False, "reads the cluster's ResourceFlavors"),
    POOL_PLACEMENT: Rule(WEBHOOK_ONLY, False, "reads the cluster's ResourceFlavors and LocalQueues"),
    GPU_FITS_NODE: Rule(WEBHOOK_ONLY, False, "reads the pool's nodes' GPUs"),
    NODE_POOL: Rule(WEBHOOK_ONLY, False, "reads the cluster's ResourceFlavors"),
    MIG_PROFILE: Rule(WEBHOOK_ONLY, False, "reads the pool's nodes' MIG profiles"),
    GANG_FITS: Rule(WEBHOOK_ONLY, False, "reads the pool's nodes"),
    isolation.POOL_NODE_NAME: Rule(WEBHOOK_ONLY, False, "reads the cluster's nodes"),
}


def _policies() -> dict[str, tuple[dict, dict]]:
    """The generated policies by harness key (with and without the corpus's allowed host paths)."""
    vap, binding = team.policy()
    with_paths = team.policy(ALLOWED)
    return {
        "team": (vap, binding),
        "team-paths": (with_paths[0], with_paths[1]),
        "deletes": tuple(deletes.policy()),  # type: ignore[dict-item]
        "isolation": tuple(isolation_policy.policy()),  # type: ignore[dict-item]
    }


def _webhooks() -> dict[str, tuple[dict, dict]]:
    """Each entry of webhook.yaml as a policy with the entry's match criteria: the harness says whether the
    API server would call it. Keyed `webhook:<path>:<entry>`."""
    vwc = next(
        d
        for d in yaml.safe_load_all((ROOT / "manifests/admission/webhook.yaml").read_text())
        if d and d["kind"] == "ValidatingWebhookConfiguration"
    )
    out = {}
    for hook in vwc["webhooks"]:
        name = f"webhook:{hook['clientConfig']['service']['path']}:{hook['name']}"
        constraints: dict[str, Any] = {
            "resourceRules": hook["rules"],
            "matchPolicy": hook.get("matchPolicy", "Equivalent"),
        }
        if "namespaceSelector" in hook:
            constraints["namespaceSelector"] = hook["namespaceSelector"]
        vap = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": hook["failurePolicy"],
                "matchConstraints": constraints,
                "matchConditions": hook.get("matchConditions", []),
                "validations": [{"expression": "false", "message": "called"}],
            },
        }
        binding = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }
        out[name] = (vap, binding)
    return out


# ---------------------------------------------------------------------------------------------------------
# The corpus's requests as an API server sends them.


def _namespaces(state_objects: list[dict]) -> list[dict]:
    """The recorded cluster's namespaces with the label the API server sets on every namespace."""
    out = []
    for obj in state_objects:
        if obj.get("kind") == "Namespace":
            ns = copy.deepcopy(obj)
            meta = ns["metadata"]
            meta["labels"] = {**meta.get("labels", {}), "kubernetes.io/metadata.name": meta["name"]}
            out.append(ns)
    return out


_OPERATIONS: Final = ("CREATE", "UPDATE", "DELETE", "CONNECT")


def realize(request: Any, namespaces: set[str]) -> tuple[dict | None, str]:
    """(the request as an API server would send it, "") or (None, why no API server sends it)."""
    if type(request) is not dict or type(request.get("kind")) is not dict:
        return None, "not an AdmissionRequest"
    op, kind = request.get("operation"), request["kind"]
    if op not in _OPERATIONS:
        return None, f"operation {op!r}"
    r = copy.deepcopy(request)
    obj, old = r.get("object"), r.get("oldObject")
    if op == "DELETE":  # the API server sends the object being deleted as oldObject, object null
        obj, old = None, old if type(old) is dict else obj
        r["object"], r["oldObject"] = None, old
    elif op in ("CREATE", "UPDATE") and type(obj) is not dict:
        return None, f"{op} without an object"
    elif op == "UPDATE" and type(old) is not dict:
        return None, "UPDATE without oldObject"
    subject = obj if type(obj) is dict else old
    meta = subject.get("metadata") if type(subject) is dict else None
    meta = meta if type(meta) is dict else {}
    group, version, k = kind.get("group", ""), kind.get("version", ""), kind.get("kind", "")
    r["resource"] = {"group": group, "version": version, "resource": f"{str(k).lower()}s"}
    r.pop("requestResource", None)
    r.pop("requestKind", None)
    if not r.get("name") and type(meta.get("name")) is str:
        r["name"] = meta["name"]
    if k == "Node":
        r["namespace"] = ""
    else:
        ns = r.get("namespace") or meta.get("namespace")
        if type(ns) is not str or not ns:
            return None, "a namespaced kind without a namespace"
        if ns not in namespaces:
            return None, "a namespace the recorded cluster does not have"
        r["namespace"] = ns
    return r, ""


# ---------------------------------------------------------------------------------------------------------
# The comparison.


@dataclass
class Finding:
    """One side's answer for one rule on one request: denied, and the findings' words and fix."""

    denied: bool
    findings: str = ""
    fix: str = ""


def _cel_findings(message: str, rule: str) -> Finding:
    """A denial of the generated policies: `gpuctl policy: <subject> breaks [<rule>]: <findings>. Fix: <fix>`."""
    head = f" breaks [{rule}]: "
    if head not in message or ". Fix: " not in message:
        return Finding(True, f"<not a gpuctl policy message: {message}>")
    body = message.split(head, 1)[1]
    findings, _, fix = body.rpartition(". Fix: ")
    return Finding(True, findings, fix)


def _webhook_findings(violations: tuple, rule: str) -> Finding:
    mine = [v for v in violations if v.rule == rule]
    if not mine:
        return Finding(False)
    return Finding(True, "; ".join(v.message for v in mine), mine[0].fix)


@dataclass
class Outcome:
    compared: Counter  # rule -> requests compared
    denied: Counter  # (rule, side) -> denials
    allowed: Counter  # rule -> requests both sides allowed where the rule's policy applied
    disagreements: list[str]
    excluded: Counter  # why -> requests not compared


def _load() -> tuple[list[dict], list[dict]]:
    doc = orjson.loads(gzip.decompress(CORPUS.read_bytes()))
    return doc["state"], doc["cases"]


def compare(cases: list[dict], state_objects: list[dict]) -> Outcome:
    """Both sides over `cases` (corpus entries), rule by rule."""
    namespaces = _namespaces(state_objects)
    state = ClusterState.from_objects(state_objects)
    policies, hooks = _policies(), _webhooks()
    lines: list[dict] = [{"namespaces": namespaces}]
    lines += [{"define": k, "policy": p, "binding": b} for k, (p, b) in {**policies, **hooks}.items()]
    excluded: Counter = Counter()
    realized: list[tuple[dict, dict]] = []
    known = {n["metadata"]["name"] for n in namespaces}
    for case in cases:
        try:
            request = orjson.loads(case["body"]).get("request")
        except (orjson.JSONDecodeError, AttributeError):
            request = None
        r, why = realize(request, known)
        if r is None:
            excluded[why] += 1
            continue
        realized.append((case, r))
        keys = ["team-paths" if case["paths"] else "team", "deletes", "isolation", *hooks]
        lines.append({"review": r, "policies": keys})
    answers = celeval.evaluate(lines)
    setup, answers = answers[: len(lines) - len(realized)], answers[len(lines) - len(realized) :]
    bad_setup = [a for a in setup if a.get("error")]
    assert not bad_setup, f"the harness refused a policy: {bad_setup}"

    out = Outcome(Counter(), Counter(), Counter(), [], excluded)
    for (case, r), answer in zip(realized, answers, strict=True):
        if answer.get("invalid"):
            excluded["an object that does not decode as its kind"] += 1
            continue
        r = {**r, "object": answer.get("object"), "oldObject": answer.get("oldObject")}
        results = {x["policy"]: x for x in answer["results"]}
        for key, x in results.items():
            assert not x["error"], f"{key}: {x['error']} for {r}"
        called = {k.split(":")[1] for k, x in results.items() if k.startswith("webhook:") and x["matched"]}
        config = AdmissionConfig(allowed_host_paths=ALLOWED if case["paths"] else ())
        violations: tuple = ()
        try:
            if "/validate" in called:
                violations = review(r, state, config).violations
            elif "/isolation" in called:
                violations = isolation.review_isolation(r, state, config).violations
        except Malformed as e:
            out.disagreements.append(f"the webhook answers 400 ({e}) to a request the API server sends: {r}")
            continue
        for rule, how in RULES.items():
            if not how.policy:
                continue
            key = ("team-paths" if case["paths"] else "team") if how.policy == "team" else how.policy
            x = results[key]
            if not x["matched"]:
                cel = Finding(False)
            else:
                policy = policies[key][0]
                index = next(
                    i
                    for i, v in enumerate(policy["spec"]["validations"])
                    if f"[{rule}]" in v["messageExpression"]
                )
                v = x["validations"][index]
                if v["error"]:
                    out.disagreements.append(f"[{rule}] the policy's CEL fails: {v['error']} on {r}")
                    continue
                cel = Finding(False) if v["passed"] else _cel_findings(v["message"], rule)
            hook = _webhook_findings(violations, rule)
            out.compared[rule] += 1
            out.denied[(rule, "cel")] += cel.denied
            out.denied[(rule, "webhook")] += hook.denied
            if x["matched"] and not cel.denied and not hook.denied:
                out.allowed[rule] += 1
            if cel.denied != hook.denied:
                side = "the policy" if cel.denied else "the webhook"
                out.disagreements.append(
                    f"[{rule}] only {side} denies: policy {cel}, webhook {hook}; request {_brief(r)}"
                )
            elif cel.denied and how.text and (cel.findings, cel.fix) != (hook.findings, hook.fix):
                out.disagreements.append(
                    f"[{rule}] both deny, in other words:\n  policy  {cel.findings!r}\n  webhook "
                    f"{hook.findings!r}\n  policy fix  {cel.fix!r}\n  webhook fix {hook.fix!r}\n"
                    f"  request {_brief(r)}"
                )
    return out


def _brief(r: Mapping[str, Any]) -> str:
    return orjson.dumps(r).decode()[:1500]


@pytest.fixture(scope="module")
def outcome() -> Outcome:
    state_objects, cases = _load()
    return compare(cases, state_objects)


def test_every_rule_is_listed() -> None:
    assert set(RULES) == set(WEBHOOK_RULES) | set(isolation.ISOLATION_RULES)
    carried = {
        **{r: "team" for r in team.POLICY_RULES},
        ORPHAN_DELETE: "deletes",
        **{r: "isolation" for r in isolation.STATELESS_RULES},
    }
    assert {r: how.policy for r, how in RULES.items() if how.policy} == carried


def test_webhook_and_policies_agree_rule_by_rule(outcome: Outcome) -> None:
    assert not outcome.disagreements, (
        f"{len(outcome.disagreements)} disagreement(s); the first ones:\n"
        + "\n".join(outcome.disagreements[:8])
    )


def test_every_compared_rule_is_seen_allowed_and_denied(outcome: Outcome) -> None:
    for rule, how in RULES.items():
        if how.policy:
            assert outcome.denied[(rule, "cel")] > 0, f"no request of the corpus breaks {rule}"
            assert outcome.allowed[rule] > 0, f"no request of the corpus passes {rule}'s policy"
