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

For every rule with CEL (admission.registry names the policy carrying it, and why the others have none),
per request: the webhook denies with the rule iff the policy's validation for it fails, and where both deny,
the findings and the fix are compared as far as WORDS says. Where the two decide differently on purpose or
by a known bug, DIFFERENCES says so with the reason (TODO(rules) for what should not differ): nothing is
skipped in silence. A rule given CEL fails `test_every_rule_with_cel_is_compared` until it is in WORDS, and
a listed difference that stops occurring fails `test_each_listed_difference_still_occurs`.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson
import pytest
import yaml

from admission import isolation, registry
from admission.policies import deletes, team
from admission.policies import isolation as isolation_policy
from admission.rule_names import (
    DELETE_GRACE,
    DEVICE_ACCESS,
    EXTENDED_RESOURCE,
    GPU_RESOURCE_RULE,
    HOST_PATH,
    JOB_TYPE,
    KUEUE_GATE,
    ORPHAN_DELETE,
    OWNER_CLAIM,
    POOL_SELECTION,
    POOL_TOLERATION,
    PRIORITY,
    PRIORITY_CLASS_RULE,
    SET_ASIDE_TOLERATION,
    TERMINATION_GRACE,
    UNKNOWN_KEY,
)
from admission.rules import AdmissionConfig, Malformed, review
from admission.state import ClusterState
from gpuctl.constants import Labels
from tests.unit import celeval
from tests.unit.test_admission_fixtures import PLAIN, queued_pod, raw_pod
from tests.unit.test_admission_fixtures import review as admission_review

ROOT: Final = Path(__file__).resolve().parents[2]
CORPUS: Final = Path(__file__).parent / "golden" / "admission" / "corpus.json.gz"
ALLOWED: Final = ("/data/../proc", "/var/run")  # test_admission_corpus.ALLOWED: a case's `paths`


# How much of a denial's text is compared, where both sides deny. Findings: SAME words; PREFIX, each of the
# webhook's findings starts with the policy's (the webhook adds a hint CEL does not compute: "did you mean",
# the consequence); DIFFER, only the decision is compared (the reason says why, TODO for what should not).
SAME: Final = "same"
PREFIX: Final = "prefix"
DIFFER: Final = "differ"
TEXT: Final = "words today differ; TODO(rules): one message and fix per rule, written once for both languages"


@dataclass(frozen=True)
class Words:
    """How much of one rule's denial text is compared: `findings` and `fix` SAME, PREFIX or DIFFER (above);
    `why` for whatever is not compared."""

    findings: str = SAME
    fix: str = SAME
    why: str = ""


# The policy each rule's CEL is in (admission.registry; a webhook-only rule says there why it has none), by
# its key in the harness.
_KEYS: Final = {
    registry.TEAM_POLICY: "team",
    registry.DELETE_POLICY: "deletes",
    registry.ISOLATION_POLICY: "isolation",
}
CARRIED: Final = {r.name: _KEYS[r.policy] for r in registry.REGISTRY if r.cel is not None}
# Every rule with CEL and how much of its words are compared: the one table of this test, with DIFFERENCES
# below (the requests where the two decide differently, on purpose or by a known bug).
WORDS: Final[dict[str, Words]] = {
    HOST_PATH: Words(DIFFER, DIFFER, f"'/etc (inside /etc)' vs '/etc', quoted relative paths; {TEXT}"),
    PRIORITY: Words(PREFIX, DIFFER, TEXT),
    JOB_TYPE: Words(PREFIX, SAME, 'the webhook adds "did you mean" (an edit distance CEL lacks)'),
    UNKNOWN_KEY: Words(PREFIX, DIFFER, TEXT),
    PRIORITY_CLASS_RULE: Words(PREFIX, DIFFER, TEXT),
    DEVICE_ACCESS: Words(DIFFER, DIFFER, f"'/dev/nvidia0 (inside /dev)' vs '/dev/nvidia0'; {TEXT}"),
    OWNER_CLAIM: Words(DIFFER, DIFFER, f"the policy names the owner's uid, the webhook its maker; {TEXT}"),
    KUEUE_GATE: Words(
        DIFFER,
        DIFFER,
        "the LocalQueue named when the new object has the queue annotation and the old one the label: the "
        f"webhook names the new object's, the policy the old label's; {TEXT}",
    ),
    GPU_RESOURCE_RULE: Words(DIFFER, SAME, f"the policy names the container, the webhook not; {TEXT}"),
    SET_ASIDE_TOLERATION: Words(),
    ORPHAN_DELETE: Words(DIFFER, SAME, f"'Orphan' quoted by the webhook only; {TEXT}"),
    POOL_TOLERATION: Words(),
    POOL_SELECTION: Words(),
    EXTENDED_RESOURCE: Words(DIFFER, SAME, f"the policy names the container, the webhook the field; {TEXT}"),
    TERMINATION_GRACE: Words(DIFFER, SAME, f"the webhook says what the grace costs; {TEXT}"),
    DELETE_GRACE: Words(DIFFER, SAME, f"the webhook says what the grace costs; {TEXT}"),
}


def _kind(r: Mapping[str, Any]) -> str:
    return r["kind"]["kind"]


def _pod_spec(obj: Any) -> Mapping[str, Any]:
    spec = obj.get("spec") if type(obj) is dict else None
    if type(spec) is dict and type(spec.get("template")) is dict:
        spec = spec["template"].get("spec")
    return spec if type(spec) is dict else {}


def _backsteps(r: Mapping[str, Any]) -> bool:
    volumes = _pod_spec(r.get("object")).get("volumes") or []
    return any(".." in str((v.get("hostPath") or {}).get("path", "")).split("/") for v in volumes)


def _no_containers(r: Mapping[str, Any]) -> bool:
    return _pod_spec(r.get("object")).get("containers") is None


def _empty_priority(r: Mapping[str, Any]) -> bool:
    obj = r.get("object") or {}
    places = [obj.get("metadata", {}), obj.get("spec", {}).get("template", {}).get("metadata", {})]
    return any((m.get("labels") or {}).get(Labels.PRIORITY) == "" for m in places if type(m) is dict)


@dataclass(frozen=True)
class Difference:
    """Requests where the two decide a rule differently, and why. `side`: who denies alone ("webhook",
    "policy"), or "error" (the policy's CEL fails where the webhook answers)."""

    rule: str
    side: str
    where: Callable[[Mapping[str, Any]], bool]
    why: str


# Each one must still occur in the corpus (test_each_listed_difference_still_occurs), so a fix on either
# side makes its entry fail until it is removed.
DIFFERENCES: Final = (
    Difference(
        HOST_PATH,
        "webhook",
        _backsteps,
        "a hostPath with '..': the API server refuses it before admission (validatePathNoBacksteps); the "
        "webhook resolves '..', the CEL does not",
    ),
    Difference(
        DEVICE_ACCESS,
        "error",
        _no_containers,
        "a pod template without containers: the API server refuses "
        "it before admission (containers is required); the CEL cannot iterate null",
    ),
    Difference(
        GPU_RESOURCE_RULE,
        "error",
        _no_containers,
        "a pod template without containers: the API server "
        "refuses it before admission (containers is required); the CEL cannot iterate null",
    ),
    Difference(
        EXTENDED_RESOURCE,
        "error",
        _no_containers,
        "a pod template without containers: the API server "
        "refuses it before admission (containers is required); the CEL cannot iterate null",
    ),
    Difference(
        UNKNOWN_KEY,
        "webhook",
        lambda r: _kind(r) == "Node",
        "a Node's runwhere.ai/ keys: the webhook's nodes entry judges them with node-pool; no policy matches "
        "Nodes. TODO(rules): a policy twin for Nodes, or say in docs/admission.md that it is webhook-only",
    ),
    Difference(
        HOST_PATH,
        "webhook",
        lambda r: _kind(r) == "JobSet",
        "JobSets: the webhook judges each replicated job's pod template, no policy matches "
        "jobset.x-k8s.io/jobsets. TODO(rules): the team policy for JobSets (every rule of it)",
    ),
    Difference(
        PRIORITY,
        "webhook",
        _empty_priority,
        'runwhere.ai/priority: "": the webhook denies the empty value, the CEL reads it as no label. '
        "TODO(rules): one reading",
    ),
    Difference(
        DEVICE_ACCESS,
        "policy",
        lambda r: r.get("subResource") == "ephemeralcontainers",
        "kubectl debug's ephemeral containers (pods/ephemeralcontainers): the policy matches the "
        "subresource, webhook.yaml's pods entry does not register it. TODO(rules): register it, or say in "
        "docs/admission.md that the policy alone guards it",
    ),
)


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
    findings: tuple[str, ...] = ()
    fix: str = ""


def _cel_findings(message: str, rule: str) -> Finding:
    """A denial of the generated policies: `gpuctl policy: <subject> breaks [<rule>]: <findings, joined by
    '; '>. Fix: <fix>`."""
    head = f" breaks [{rule}]: "
    if head not in message or ". Fix: " not in message:
        return Finding(True, (f"<not a gpuctl policy message: {message}>",))
    findings, _, fix = message.split(head, 1)[1].rpartition(". Fix: ")
    return Finding(True, tuple(findings.split("; ")), fix)


def _webhook_findings(violations: tuple, rule: str) -> Finding:
    mine = [v for v in violations if v.rule == rule]
    if not mine:
        return Finding(False)
    return Finding(True, tuple("; ".join(v.message for v in mine).split("; ")), mine[0].fix)


_LEVEL: Final = {SAME: 0, PREFIX: 1, DIFFER: 2}


def _findings_level(cel: Finding, hook: Finding) -> str:
    """SAME, PREFIX or DIFFER (above), in any order: the two list the same findings in their own order."""
    if sorted(cel.findings) == sorted(hook.findings):
        return SAME
    left = list(hook.findings)
    for c in sorted(cel.findings, key=len, reverse=True):
        match = next((h for h in left if h.startswith(c)), None)
        if match is None:
            return DIFFER
        left.remove(match)
    return DIFFER if left else PREFIX


@dataclass
class Outcome:
    denied: Counter = field(default_factory=Counter)  # (rule, "policy"|"webhook") -> requests denied
    allowed: Counter = field(default_factory=Counter)  # rule -> requests its policy applied to, both allowed
    unexpected: list[str] = field(default_factory=list)  # disagreements no entry of DIFFERENCES excuses
    excused: Counter = field(default_factory=Counter)  # index in DIFFERENCES -> requests it excused
    words: dict = field(default_factory=dict)  # (rule, "findings"|"fix") -> the most different level seen
    excluded: Counter = field(default_factory=Counter)  # why -> requests no API server sends
    requests: int = 0  # requests compared


def _load() -> tuple[list[dict], list[dict]]:
    doc = orjson.loads(gzip.decompress(CORPUS.read_bytes()))
    return doc["state"], doc["cases"]


def _validation_index(policy: Mapping[str, Any], rule: str) -> int:
    return next(
        i for i, v in enumerate(policy["spec"]["validations"]) if f"[{rule}]" in v["messageExpression"]
    )


def _excuse(out: Outcome, rule: str, side: str, r: Mapping[str, Any], what: str) -> None:
    for i, d in enumerate(DIFFERENCES):
        if d.rule == rule and d.side == side and d.where(r):
            out.excused[i] += 1
            return
    out.unexpected.append(f"[{rule}] {what}; request {_brief(r)}")


def _compare_words(out: Outcome, rule: str, cel: Finding, hook: Finding, r: Mapping[str, Any]) -> None:
    how = WORDS[rule]
    for part, level, allowed in (
        ("findings", _findings_level(cel, hook), how.findings),
        ("fix", SAME if cel.fix == hook.fix else DIFFER, how.fix),
    ):
        seen = out.words.get((rule, part), SAME)
        out.words[(rule, part)] = level if _LEVEL[level] > _LEVEL[seen] else seen
        if _LEVEL[level] > _LEVEL[allowed]:
            out.unexpected.append(
                f"[{rule}] both deny, but the {part} are not the {allowed} words:\n"
                f"  policy  {cel.findings if part == 'findings' else cel.fix!r}\n"
                f"  webhook {hook.findings if part == 'findings' else hook.fix!r}\n  request {_brief(r)}"
            )


def compare(cases: list[dict], state_objects: list[dict]) -> Outcome:
    """Both sides over `cases` (corpus entries), rule by rule."""
    namespaces = _namespaces(state_objects)
    state = ClusterState.from_objects(state_objects)
    policies, hooks = _policies(), _webhooks()
    lines: list[dict] = [{"namespaces": namespaces}]
    lines += [{"define": k, "policy": p, "binding": b} for k, (p, b) in {**policies, **hooks}.items()]
    setup = len(lines)
    out = Outcome()
    realized: list[tuple[dict, dict]] = []
    known = {n["metadata"]["name"] for n in namespaces}
    for case in cases:
        try:
            request = orjson.loads(case["body"]).get("request")
        except (orjson.JSONDecodeError, AttributeError):
            request = None
        r, why = realize(request, known)
        if r is None:
            out.excluded[why] += 1
            continue
        realized.append((case, r))
        lines.append({"review": r, "policies": [_team(case), "deletes", "isolation", *hooks]})
    answers = celeval.evaluate(lines)
    refused = [a for a in answers[:setup] if a.get("error")]
    assert not refused, f"the harness refused a policy: {refused}"
    for (case, r), answer in zip(realized, answers[setup:], strict=True):
        if answer.get("invalid"):
            out.excluded["an object that does not decode as its kind"] += 1
            continue
        out.requests += 1
        _compare_one(out, case, {**r, "object": answer.get("object"), "oldObject": answer.get("oldObject")},
                     {x["policy"]: x for x in answer["results"]}, policies, state)  # fmt: skip
    return out


def _team(case: Mapping[str, Any]) -> str:
    return "team-paths" if case["paths"] else "team"


def _compare_one(
    out: Outcome,
    case: Mapping[str, Any],
    r: dict,
    results: Mapping[str, Any],
    policies: Mapping[str, tuple[dict, dict]],
    state: ClusterState,
) -> None:
    """One request: the webhook's findings (from the entries the API server calls) against each policy's."""
    for key, x in results.items():
        assert not x["error"], f"{key}: {x['error']} for {_brief(r)}"
    called = {k.split(":")[1] for k, x in results.items() if k.startswith("webhook:") and x["matched"]}
    config = AdmissionConfig(allowed_host_paths=ALLOWED if case["paths"] else ())
    violations: tuple = ()
    try:
        if "/validate" in called:
            violations = review(r, state, config).violations
        elif "/isolation" in called:
            violations = isolation.review_isolation(r, state, config).violations
    except Malformed as e:
        out.unexpected.append(f"the webhook answers 400 ({e}) to a request an API server sends: {_brief(r)}")
        return
    for rule, policy in CARRIED.items():
        key = _team(case) if policy == "team" else policy
        x = results[key]
        cel = Finding(False)
        if x["matched"]:
            v = x["validations"][_validation_index(policies[key][0], rule)]
            if v["error"]:
                _excuse(out, rule, "error", r, f"the policy's CEL fails: {v['error']}")
                continue
            cel = Finding(False) if v["passed"] else _cel_findings(v["message"], rule)
        hook = _webhook_findings(violations, rule)
        out.denied[(rule, "policy")] += cel.denied
        out.denied[(rule, "webhook")] += hook.denied
        if cel.denied != hook.denied:
            side = "policy" if cel.denied else "webhook"
            _excuse(out, rule, side, r, f"only the {side} denies: policy {cel}, webhook {hook}")
        elif cel.denied:
            _compare_words(out, rule, cel, hook, r)
        elif x["matched"]:
            out.allowed[rule] += 1


def _brief(r: Mapping[str, Any]) -> str:
    return orjson.dumps(r).decode()[:1500]


@pytest.fixture(scope="module")
def outcome() -> Outcome:
    state_objects, cases = _load()
    return compare(cases, state_objects)


def test_every_rule_with_cel_is_compared() -> None:
    """Every rule whose CEL a policy carries (admission.registry) is in WORDS, and the policies compared are
    the generators' (a rule's validation found in its policy by its name)."""
    assert set(WORDS) == set(CARRIED)
    assert set(CARRIED.values()) == {"team", "deletes", "isolation"}
    policies = _policies()
    for rule, key in CARRIED.items():
        _validation_index(policies[key][0], rule)
    for rule, how in WORDS.items():
        assert SAME == how.findings == how.fix or how.why, f"{rule}: words not compared say why"


def test_webhook_and_policies_agree_rule_by_rule(outcome: Outcome) -> None:
    assert outcome.requests > 900
    assert not outcome.unexpected, (
        f"{len(outcome.unexpected)} disagreement(s) between the webhook and the generated policies; the "
        "first ones:\n" + "\n".join(outcome.unexpected[:8])
    )


def test_each_listed_difference_still_occurs(outcome: Outcome) -> None:
    """A difference fixed on either side, or words that became closer, must leave the tables."""
    stale = [f"DIFFERENCES[{i}] ({d.rule}, {d.side}): {d.why}" for i, d in enumerate(DIFFERENCES)
             if not outcome.excused[i]]  # fmt: skip
    for rule, how in WORDS.items():
        for part, declared in (("findings", how.findings), ("fix", how.fix)):
            seen = outcome.words.get((rule, part))
            if seen is not None and seen != declared:
                stale.append(f"WORDS[{rule!r}].{part} is {declared!r}: the corpus shows {seen!r} at most")
    assert not stale, "no longer true, tighten the table:\n" + "\n".join(stale)


def test_every_compared_rule_is_seen_allowed_and_denied(outcome: Outcome) -> None:
    for rule in CARRIED:
        assert outcome.denied[(rule, "policy")] > 0, f"no request of the corpus breaks {rule}"
        assert outcome.allowed[rule] > 0, f"no request of the corpus passes {rule}'s policy"


def test_the_harness_is_the_test_clusters_kubernetes() -> None:
    """hack/celeval pins k8s.io/apiserver (and its siblings) at the version the test cluster's kube-apiserver
    is built from (hack/cluster/versions.env), so the CEL evaluated here is the cluster's."""
    env = (ROOT / "hack" / "cluster" / "versions.env").read_text()
    k8s = next(x.split("=", 1)[1] for x in env.splitlines() if x.startswith("K8S_VERSION="))
    staging = "v0." + k8s.split(".", 1)[1]
    gomod = (celeval.SOURCE / "go.mod").read_text()
    for module in ("k8s.io/api", "k8s.io/apimachinery", "k8s.io/apiserver", "k8s.io/client-go"):
        assert f"\t{module} {staging}\n" in gomod, f"hack/celeval/go.mod: {module} is not {staging}"


def test_the_harness_tells_pass_deny_error_and_not_applied_apart() -> None:
    """Each answer of the harness on a policy of four validations and one matchCondition: a validation that
    holds, one that fails (its messageExpression), one whose CEL errs, and one of Kubernetes' own library
    (quantity(): not cel-go's standard library)."""
    vap, binding = copy.deepcopy(_policies()["team"])
    vap["spec"]["matchConditions"] = [{"name": "not-bob", "expression": "request.userInfo.username != 'bob'"}]
    vap["spec"]["variables"] = [{"name": "n", "expression": "object.metadata.name"}]
    vap["spec"]["validations"] = [
        {"expression": "variables.n != ''"},
        {"expression": "variables.n != 'p'", "messageExpression": "'named ' + variables.n"},
        {"expression": "object.spec.nope == 1"},
        {"expression": "quantity('1Gi').isGreaterThan(quantity('1Mi'))"},
    ]
    namespaces = _namespaces(_load()[0])
    pod = admission_review(queued_pod("p"))["request"]
    bob = {**pod, "userInfo": {"username": "bob"}}
    plain = admission_review(raw_pod("p", PLAIN))["request"]
    bad = copy.deepcopy(pod)
    bad["object"]["spec"]["containers"] = "not a list"
    lines = [{"namespaces": namespaces}, {"define": "t", "policy": vap, "binding": binding}]
    lines += [{"review": r, "policies": ["t"]} for r in (pod, bob, plain, bad)]
    _, defined, judged, skipped, unbound, invalid = celeval.evaluate(lines)
    assert defined == {"defined": "t"}
    [result] = judged["results"]
    assert result["matched"] and not result["error"]
    passed, denied, erred, library = result["validations"]
    assert passed == {"passed": True, "message": "", "error": ""}
    assert denied == {"passed": False, "message": "named p", "error": ""}
    assert not erred["passed"] and "no such key: nope" in erred["error"]
    assert library["passed"]
    assert judged["object"]["spec"]["containers"][0]["name"] == "main"
    assert skipped["results"][0] | {"validations": None} == {
        "policy": "t", "matched": False, "skipped": "matchConditions", "error": "", "validations": None,
    }  # fmt: skip
    assert unbound["results"][0]["skipped"] == "namespace selector"
    assert "containers" in invalid["invalid"] and "results" not in invalid
