"""Who is calling, and may they do this? Kubernetes answers both: TokenReview and SubjectAccessReview.

Why Kubernetes and not users and roles of our own: the earlier gpuctl's API had no authentication, and
anything we invent would be a second permission system to keep in step with RBAC. Here a caller is
whoever the API server says its bearer token belongs to, and a request is allowed exactly when RBAC
would allow that user the equivalent Kubernetes request (`kubectl auth can-i`). The API then acts with
its own ServiceAccount through the service layer, which it may only do after that check.

Both answers are cached for a few seconds (bounded LRU): without the cache every API request would
cost two extra round trips to the API server, with it a busy client costs two per 10 seconds. The
price is that a revoked token or a removed RoleBinding still works for up to `ttl` seconds (the
API server's own webhook authenticator caches for two minutes).

Static API keys are for automation that has no Kubernetes identity. A key maps to a user name and
groups, which are then authorised with SubjectAccessReview like any token: RBAC still decides, through
RoleBindings to that user name. Only the SHA-256 of a key is stored; keys are long random strings,
so a fast hash is enough (there is nothing to brute-force).
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuctl.cluster import ApiError, Cluster
from gpuctl.server.flags import API_KEYS_ENV

log = logging.getLogger("gpuctl.api.auth")

API_KEY_PREFIX = "gpk_"
TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class AuthError(Exception):
    """Authentication or authorisation failed; `status` is the HTTP status to answer (401, 403, 503)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Caller:
    """An authenticated identity, as the API server (or the API-key file) names it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    via: str = "token"  # token | apikey

    def sar_user(self) -> dict[str, Any]:
        """The user part of a SubjectAccessReview spec."""
        spec: dict[str, Any] = {"user": self.username, "groups": list(self.groups)}
        if self.uid:
            spec["uid"] = self.uid
        if self.extra:
            spec["extra"] = {k: list(v) for k, v in self.extra}
        return spec


@dataclass(frozen=True)
class Access:
    """One Kubernetes permission, as SubjectAccessReview's resourceAttributes spell it.

    namespace None means cluster-scoped, or "in every namespace" for a namespaced resource (what
    `kubectl get pods -A` needs).
    """

    verb: str
    resource: str
    group: str = ""
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None

    def attributes(self) -> dict[str, str]:
        attrs = {"verb": self.verb, "resource": self.resource, "group": self.group}
        for key in ("namespace", "name", "subresource"):
            value = getattr(self, key)
            if value:
                attrs[key] = value
        return attrs

    def describe(self) -> str:
        """`create jobs.batch in namespace team-b`, the way a 403 message names it."""
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        what += f".{self.group}" if self.group else ""
        if self.name:
            what += f" {self.name}"
        where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
        return f"{self.verb} {what} {where}"


# ----------------------------------------------------------------------------- cache
MISS = object()


class TTLCache:
    """A thread-safe LRU whose entries expire `ttl` seconds after they were stored."""

    def __init__(self, ttl: float, max_entries: int, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self.max_entries = max_entries
        self.clock = clock
        self._data: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        """The value, or the module's MISS sentinel when absent or expired."""
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return MISS
            expires, value = item
            if expires <= self.clock():
                del self._data[key]
                return MISS
            self._data.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            self._data[key] = (self.clock() + self.ttl, value)
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


# ----------------------------------------------------------------------------- API keys
def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_api_key() -> str:
    """A fresh key: the prefix tells the API not to send it to the Kubernetes TokenReview."""
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class ApiKey:
    name: str
    sha256: str
    user: str
    groups: tuple[str, ...] = ()


class ApiKeys:
    """The static keys of a YAML file, re-read when the file changes (a mounted Secret is updated in place).

    File format::

        keys:
        - name: ci-bot                      # for logs and the default user name
          sha256: "9f86d08..."               # hex SHA-256 of the key, quoted (--new-api-key prints it)
          user: gpuctl:apikey:ci-bot         # optional; the default is gpuctl:apikey:<name>
          groups: [gpuctl-automation]        # optional
    """

    RECHECK_SECONDS = 5.0

    def __init__(self, path: str | os.PathLike[str], clock: Callable[[], float] = time.monotonic):
        self.path = Path(path)
        self.clock = clock
        self._by_hash: dict[str, ApiKey] = {}
        self._sig: tuple[int, int, int] | None = None
        self._checked = float("-inf")
        self._lock = threading.Lock()
        self._load()  # a broken file at start-up is fatal (ValueError); later the old keys stay

    @staticmethod
    def parse(text: str, source: str = "api keys") -> dict[str, ApiKey]:
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            raise ValueError(f"{source}: not YAML: {e}") from None
        entries = data.get("keys") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise ValueError(f"{source}: expected `keys:` with a list of {{name, sha256}}")
        out: dict[str, ApiKey] = {}
        for i, e in enumerate(entries):
            if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not e["name"]:
                raise ValueError(f"{source}: keys[{i}]: needs a name")
            raw = e.get("sha256")
            digest = raw.lower() if isinstance(raw, str) else ""
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                # Unquoted, YAML may read a hex digest as a number (all digits, or 12e34...).
                raise ValueError(
                    f"{source}: keys[{i}] ({e['name']}): sha256 must be 64 hex digits, quoted as a string"
                )
            groups = e.get("groups") or []
            if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
                raise ValueError(f"{source}: keys[{i}] ({e['name']}): groups must be a list of strings")
            user = e.get("user") or f"gpuctl:apikey:{e['name']}"
            out[digest] = ApiKey(e["name"], digest, str(user), tuple(groups))
        return out

    def _signature(self) -> tuple[int, int, int] | None:
        """(mtime, inode, size) of the file, None when absent. A Secret volume swaps a symlink on
        update, so the inode changes even when the mtime does not."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_ino, st.st_size

    def _load(self) -> None:
        sig = self._signature()
        if sig is None:
            # An optional Secret that does not exist (yet): no keys; picked up when it appears.
            if self._by_hash:
                log.warning("%s is gone: API keys revoked", self.path)
            self._by_hash = {}
        else:
            self._by_hash = self.parse(self.path.read_text(), str(self.path))
            log.info("loaded %d API keys from %s", len(self._by_hash), self.path)
        self._sig = sig

    def _maybe_reload(self) -> None:
        now = self.clock()
        if now - self._checked < self.RECHECK_SECONDS:
            return
        self._checked = now
        try:
            if self._signature() != self._sig:
                self._load()
        except (OSError, ValueError) as e:
            log.error("keeping the previous API keys: %s", e)

    def lookup(self, key: str) -> Caller | None:
        with self._lock:
            self._maybe_reload()
            entry = self._by_hash.get(hash_key(key))
        if entry is None:
            return None
        return Caller(username=entry.user, groups=entry.groups, via="apikey")

    def __len__(self) -> int:
        return len(self._by_hash)


# ----------------------------------------------------------------------------- the authenticator
class Authenticator:
    """TokenReview + SubjectAccessReview with a short cache. Blocking methods: call them in a thread.

    `cached_*` methods never do I/O, so the event loop can try them first and only hop to a thread on
    a miss.
    """

    def __init__(
        self,
        cluster_factory: Callable[[], Cluster],
        *,
        api_keys: ApiKeys | None = None,
        ttl: float = 10.0,
        max_entries: int = 10_000,
        audiences: Iterable[str] = (),
    ):
        self.cluster_factory = cluster_factory
        self.api_keys = api_keys
        self.audiences = list(audiences)
        self._tokens = TTLCache(ttl, max_entries)
        self._decisions = TTLCache(ttl, max_entries)

    # ---------------------------------------------------------------- authentication
    @staticmethod
    def _token_key(token: str) -> str:
        # Never keep raw tokens in memory longer than the request: key the cache by their hash.
        return hash_key(token)

    def cached_caller(self, token: str) -> Caller | object | None:
        """The cached answer for a token: a Caller, None (known bad), or MISS."""
        if token.startswith(API_KEY_PREFIX):
            return self._api_key_caller(token)
        value = self._tokens.get(self._token_key(token))
        return value

    def _api_key_caller(self, key: str) -> Caller | None:
        if self.api_keys is None:
            return None
        return self.api_keys.lookup(key)

    def authenticate(self, token: str) -> Caller:
        """Who holds this token; AuthError(401) if nobody, AuthError(503) if Kubernetes cannot say."""
        cached = self.cached_caller(token)
        if cached is MISS:
            cached = self._review_token(token)
            self._tokens.put(self._token_key(token), cached)
        if cached is None:
            raise AuthError(401, "invalid or expired token")
        assert isinstance(cached, Caller)
        return cached

    def _review_token(self, token: str) -> Caller | None:
        body: dict[str, Any] = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        if self.audiences:
            body["spec"]["audiences"] = self.audiences
        try:
            review = self.cluster_factory().request("POST", TOKEN_REVIEW_PATH, body=body)
        except ApiError as e:
            raise AuthError(503, f"cannot verify the token with Kubernetes (TokenReview): {e}") from None
        except Exception as e:  # connection refused, TLS, timeouts: the cluster is unreachable
            raise AuthError(503, f"cannot reach Kubernetes to verify the token: {e}") from None
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return None
        user = status.get("user") or {}
        extra = tuple(sorted((k, tuple(v or ())) for k, v in (user.get("extra") or {}).items()))
        return Caller(
            username=user.get("username", ""),
            uid=user.get("uid", ""),
            groups=tuple(user.get("groups") or ()),
            extra=extra,
            via="token",
        )

    # ---------------------------------------------------------------- authorisation
    def cached_decision(self, caller: Caller, access: Access) -> bool | None:
        value = self._decisions.get((caller, access))
        if value is MISS:
            return None
        return bool(value)

    def allowed(self, caller: Caller, access: Access) -> bool:
        """Would RBAC (any authorizer of the API server) let `caller` do `access`?"""
        cached = self.cached_decision(caller, access)
        if cached is not None:
            return cached
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {**caller.sar_user(), "resourceAttributes": access.attributes()},
        }
        try:
            review = self.cluster_factory().request("POST", SAR_PATH, body=body)
        except ApiError as e:
            raise AuthError(
                503, f"cannot check permissions with Kubernetes (SubjectAccessReview): {e}"
            ) from None
        except Exception as e:
            raise AuthError(503, f"cannot reach Kubernetes to check permissions: {e}") from None
        status = review.get("status") or {}
        decision = bool(status.get("allowed")) and not status.get("denied")
        self._decisions.put((caller, access), decision)
        return decision


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer ...` header (scheme case-insensitive), else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


__all__ = [
    "API_KEYS_ENV",
    "API_KEY_PREFIX",
    "MISS",
    "Access",
    "ApiKeys",
    "AuthError",
    "Authenticator",
    "Caller",
    "TTLCache",
    "bearer_token",
    "hash_key",
    "new_api_key",
]
