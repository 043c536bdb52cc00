"""gpuctl.server.api.auth: TokenReview/SubjectAccessReview with a cache, and hashed API keys."""

from __future__ import annotations

import os
import time

import pytest

from gpuctl.cluster import ApiError
from gpuctl.server.api.auth import (
    MISS,
    SAR_PATH,
    TOKEN_REVIEW_PATH,
    Access,
    ApiKeys,
    Authenticator,
    AuthError,
    Caller,
    TTLCache,
    bearer_token,
    hash_key,
    new_api_key,
)


class FakeKube:
    """Answers TokenReview from `tokens` and SubjectAccessReview from `grants` (user -> attribute sets)."""

    def __init__(self) -> None:
        self.tokens: dict[str, dict] = {}
        self.grants: dict[str, list[dict]] = {}
        self.calls: list[tuple[str, dict]] = []
        self.fail: Exception | None = None

    def request(self, method: str, path: str, *, body: dict, **_: object) -> dict:
        self.calls.append((path, body))
        if self.fail is not None:
            raise self.fail
        if path == TOKEN_REVIEW_PATH:
            user = self.tokens.get(body["spec"]["token"])
            return {"status": {"authenticated": True, "user": user} if user else {"authenticated": False}}
        assert path == SAR_PATH
        spec = body["spec"]
        ok = any(
            all(spec["resourceAttributes"].get(k) == v for k, v in g.items())
            for g in self.grants.get(spec["user"], [])
        )
        return {"status": {"allowed": ok}}

    def count(self, path: str) -> int:
        return sum(1 for p, _ in self.calls if p == path)


ALICE = {
    "username": "system:serviceaccount:team-a:alice",
    "uid": "u-1",
    "groups": ["system:serviceaccounts", "system:authenticated"],
    "extra": {"authentication.kubernetes.io/pod-name": ["p"]},
}


@pytest.fixture
def kube() -> FakeKube:
    k = FakeKube()
    k.tokens["tok-alice"] = ALICE
    k.grants[ALICE["username"]] = [
        {"verb": "list", "resource": "jobs", "group": "batch", "namespace": "team-a"}
    ]
    return k


def test_token_review_maps_the_user_and_is_cached(kube):
    auth = Authenticator(lambda: kube, ttl=60)
    c = auth.authenticate("tok-alice")
    assert c == Caller(
        username=ALICE["username"],
        uid="u-1",
        groups=("system:serviceaccounts", "system:authenticated"),
        extra=(("authentication.kubernetes.io/pod-name", ("p",)),),
    )
    assert auth.authenticate("tok-alice") == c
    assert kube.count(TOKEN_REVIEW_PATH) == 1
    # The cache is keyed by a hash: the token itself is not kept.
    assert "tok-alice" not in repr(auth._tokens._data)


def test_bad_token_is_401_and_cached_too(kube):
    auth = Authenticator(lambda: kube, ttl=60)
    for _ in range(3):
        with pytest.raises(AuthError) as e:
            auth.authenticate("nope")
        assert e.value.status == 401
    assert kube.count(TOKEN_REVIEW_PATH) == 1


def test_kubernetes_unreachable_is_503_and_not_cached(kube):
    auth = Authenticator(lambda: kube, ttl=60)
    kube.fail = ConnectionRefusedError("refused")
    with pytest.raises(AuthError) as e:
        auth.authenticate("tok-alice")
    assert e.value.status == 503
    kube.fail = ApiError(403, "Forbidden", "tokenreviews is forbidden")
    with pytest.raises(AuthError) as e:
        auth.authenticate("tok-alice")
    assert e.value.status == 503 and "tokenreviews is forbidden" in e.value.message
    kube.fail = None
    assert auth.authenticate("tok-alice").username == ALICE["username"]


def test_audiences_are_sent(kube):
    Authenticator(lambda: kube, audiences=["gpuctl"]).authenticate("tok-alice")
    assert kube.calls[0][1]["spec"]["audiences"] == ["gpuctl"]


def test_access_review_sends_the_whole_identity_and_caches_both_answers(kube):
    auth = Authenticator(lambda: kube, ttl=60)
    alice = auth.authenticate("tok-alice")
    own = Access("list", "jobs", "batch", "team-a")
    other = Access("list", "jobs", "batch", "team-b")
    assert auth.allowed(alice, own) is True
    assert auth.allowed(alice, other) is False
    assert auth.allowed(alice, own) is True and auth.allowed(alice, other) is False
    assert kube.count(SAR_PATH) == 2
    spec = kube.calls[1][1]["spec"]
    assert spec["user"] == ALICE["username"] and spec["uid"] == "u-1"
    assert spec["groups"] == ALICE["groups"]
    assert spec["extra"] == {"authentication.kubernetes.io/pod-name": ["p"]}
    assert spec["resourceAttributes"] == {
        "verb": "list",
        "resource": "jobs",
        "group": "batch",
        "namespace": "team-a",
    }


def test_access_attributes_and_description():
    a = Access("get", "pods", "", "team-a", "p-1", "log")
    assert a.attributes() == {
        "verb": "get",
        "resource": "pods",
        "group": "",
        "namespace": "team-a",
        "name": "p-1",
        "subresource": "log",
    }
    assert a.describe() == "get pods/log p-1 in namespace team-a"
    assert Access("create", "resourceflavors", "kueue.x-k8s.io").describe() == (
        "create resourceflavors.kueue.x-k8s.io cluster-wide"
    )


def test_ttl_cache_expires_and_stays_bounded():
    now = [0.0]
    c = TTLCache(ttl=10, max_entries=3, clock=lambda: now[0])
    c.put("a", 1)
    now[0] = 9.9
    assert c.get("a") == 1
    now[0] = 10.0
    assert c.get("a") is MISS
    for k in "bcde":
        c.put(k, k)
    assert len(c) == 3 and c.get("b") is MISS  # the least recently used went first
    c.get("c")
    c.put("f", "f")
    assert c.get("c") == "c" and c.get("d") is MISS


def test_ttl_zero_disables_caching(kube):
    auth = Authenticator(lambda: kube, ttl=0)
    auth.authenticate("tok-alice")
    auth.authenticate("tok-alice")
    assert kube.count(TOKEN_REVIEW_PATH) == 2


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token(header, token):
    assert bearer_token(header) == token


# ----------------------------------------------------------------------------- API keys
def _keys_file(tmp_path, text: str):
    p = tmp_path / "keys.yaml"
    p.write_text(text)
    return p


def test_api_keys_are_checked_by_hash_and_never_sent_to_kubernetes(tmp_path, kube):
    key = new_api_key()
    assert key.startswith("gpk_") and len(key) > 40
    f = _keys_file(
        tmp_path,
        f"keys:\n- name: ci\n  sha256: {hash_key(key)}\n  groups: [automation]\n"
        f"- name: other\n  sha256: '{'0' * 64}'\n  user: robot\n",
    )
    auth = Authenticator(lambda: kube, api_keys=ApiKeys(f))
    assert auth.authenticate(key) == Caller("gpuctl:apikey:ci", groups=("automation",), via="apikey")
    with pytest.raises(AuthError) as e:
        auth.authenticate("gpk_wrong")
    assert e.value.status == 401
    assert kube.calls == []
    assert key not in f.read_text()


def test_api_keys_without_a_file_are_refused(kube):
    with pytest.raises(AuthError):
        Authenticator(lambda: kube).authenticate(new_api_key())
    assert kube.calls == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("keys: nope", "expected `keys:`"),
        ("- a", "expected `keys:`"),
        ("keys:\n- sha256: " + "a" * 64, "needs a name"),
        ("keys:\n- name: x\n  sha256: abc", "64 hex digits"),
        ("keys:\n- name: x\n  sha256: " + "g" * 64, "64 hex digits"),
        ("keys:\n- name: x\n  sha256: " + "1" * 64, "quoted"),
        ("keys:\n- name: x\n  sha256: " + "a" * 64 + "\n  groups: admin", "groups must be a list"),
        ("keys: [", "not YAML"),
    ],
)
def test_a_broken_keys_file_is_refused_at_start(tmp_path, text, problem):
    with pytest.raises(ValueError, match=problem):
        ApiKeys(_keys_file(tmp_path, text))


def test_api_keys_follow_the_file(tmp_path):
    now = [0.0]
    k1, k2 = new_api_key(), new_api_key()
    f = tmp_path / "keys.yaml"
    keys = ApiKeys(f, clock=lambda: now[0])  # a missing file (optional Secret) means no keys
    assert len(keys) == 0 and keys.lookup(k1) is None
    f.write_text(f"keys:\n- name: one\n  sha256: {hash_key(k1)}\n")
    now[0] += ApiKeys.RECHECK_SECONDS
    assert keys.lookup(k1) is not None
    # Rotation: a new file replaces the old keys (checked at most every RECHECK_SECONDS).
    f.write_text(f"keys:\n- name: two\n  sha256: {hash_key(k2)}\n")
    os.utime(f, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert keys.lookup(k1) is not None  # not re-read yet
    now[0] += ApiKeys.RECHECK_SECONDS
    assert keys.lookup(k1) is None and keys.lookup(k2).username == "gpuctl:apikey:two"
    # A broken update keeps the previous keys; a removed file revokes them.
    f.write_text("keys: [")
    now[0] += ApiKeys.RECHECK_SECONDS
    assert keys.lookup(k2) is not None
    f.unlink()
    now[0] += ApiKeys.RECHECK_SECONDS
    assert keys.lookup(k2) is None
