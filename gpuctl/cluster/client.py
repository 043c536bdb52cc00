"""A small JSON client for the Kubernetes API, the way kubectl talks to it.

Why not the generated `kubernetes` API classes: they deserialise every list into model objects, which
costs more than the network for big lists (2,000 pods: seconds), and importing the package costs 170 ms
of every command. gpuctl.cluster.config reads kubeconfigs (TLS, tokens, exec plugins, in-cluster) and
this client speaks plain JSON over one pool of keep-alive connections (gpuctl.cluster.transport): paged
lists with `limit`/`continue`, server-side apply with field manager `gpuctl`, merge patches, watches as
line-delimited JSON.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import urlencode

from gpuctl.cluster.config import POOL_SIZE, Connection, Overrides, in_cluster, kubeconfig_files
from gpuctl.cluster.config import load as load_config
from gpuctl.cluster.paths import object_path, path
from gpuctl.cluster.transport import Pool, ReadTimeout
from gpuctl.constants import FIELD_MANAGER

PAGE_SIZE = 500
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")
VISIBILITY_PAGE = 1000
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
METADATA_ACCEPT = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
MAX_RETRIES = 10  # client-go's default for answers that carry Retry-After
MAX_RETRY_WAIT = 10.0  # seconds; a longer Retry-After is shortened to this
ORJSON_MIN_BYTES = 512 * 1024  # smaller bodies: the standard library's json (see loads)


def loads(body: bytes, *, stream: bool = False) -> Any:
    """Decode one API server response body, or one line of a watch (stream=True): every decode of this
    client goes through here.

    orjson decodes a 2,000-pod list about 3x faster than json, but importing it costs a few ms of every
    command: bodies below ORJSON_MIN_BYTES (a get, a status, a short list: json takes well under a
    millisecond there) use json, which the interpreter has loaded anyway; bigger ones and watches
    (long-lived, a line per event) use orjson."""
    if stream or len(body) >= ORJSON_MIN_BYTES:
        import orjson  # noqa: PLC0415 - lazy: CLI start-up (small answers never need it)

        return orjson.loads(body)
    return json.loads(body)


def retry_after(status: int, header: str | None) -> float | None:
    """Seconds to wait before asking again, or None when the answer is final.

    Like client-go's checkWait: a 429 or a 5xx that carries an integer Retry-After is worth retrying; a
    429 without the header is retried after one second (the server still refused before doing anything).
    """
    if status != 429 and not (500 <= status < 600 and header):
        return None
    try:
        seconds = float(int(header)) if header else 1.0
    except ValueError:
        return None if status != 429 else 1.0
    return min(max(seconds, 0.0), MAX_RETRY_WAIT)


class ApiError(Exception):
    """A non-2xx answer from the API server; `message` is the server's own explanation."""

    def __init__(self, status: int, reason: str, message: str, body: dict | None = None):
        super().__init__(f"{message} ({status} {reason})" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}


class WatchIdle(TimeoutError):
    """A watch said nothing, not even a bookmark, for its read timeout: the connection may be dead."""


def iter_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Newline-delimited JSON lines from a stream of chunks (a line may span chunks)."""
    buf = b""
    for chunk in chunks:
        buf += chunk
        while True:
            i = buf.find(b"\n")
            if i < 0:
                break
            line, buf = buf[:i], buf[i + 1 :]
            if line.strip():
                yield line
    if buf.strip():
        yield buf


def _drain(resp: Any) -> None:
    """Read a short answer to its end (a 401 or 429 being retried) so its connection is reused."""
    with contextlib.suppress(Exception):
        resp.data  # noqa: B018 - read for its side effect


def _close(resp: Any) -> None:
    """Release a streaming response; closing a socket another thread reads may raise anything."""
    for name in ("release_conn", "close"):
        fn = getattr(resp, name, None)
        if fn is not None:
            with contextlib.suppress(Exception):
                fn()


class Cluster:
    """One connection to one cluster. `connect()` returns the same instance for the same config."""

    _instances: dict[tuple, Cluster] = {}
    _lock = threading.Lock()

    def __init__(self, connection: Connection, *, pool_size: int = POOL_SIZE):
        self.connection = connection
        self.host = connection.host.rstrip("/")
        self.context_namespace = connection.namespace
        self._pool: Pool = connection.pool(pool_size)
        self._visibility: str | bool | None = None  # the visibility API version served; False: none
        self.kubeconfig: str | None = None  # what connect() was given: member() reads its other contexts
        self.overrides: Overrides | None = None
        # Worker name -> a kubeconfig file of its own (`gpuctl serve --worker-kubeconfig NAME=PATH`):
        # member() reads it instead of a context of this one's kubeconfig (a pod has no such contexts).
        self.member_kubeconfigs: dict[str, str] = {}

    # ---------------------------------------------------------------- construction
    @classmethod
    def connect(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        *,
        pool_size: int = POOL_SIZE,
        overrides: Overrides | None = None,
    ) -> Cluster:
        """The process's connection to the cluster of (kubeconfig, context, kubectl's override flags),
        made once. Keyed by the files the kubeconfig resolves to ($KUBECONFIG, ~/.kube/config) and
        whether a service account is mounted, so a changed environment never reuses another
        cluster's connection."""
        key = (tuple(kubeconfig_files(kubeconfig)), context, in_cluster(), overrides)
        with cls._lock:
            if key not in cls._instances:
                cls._instances[key] = cls._load(kubeconfig, context, pool_size=pool_size, overrides=overrides)
                cls._instances[key].kubeconfig = kubeconfig
                cls._instances[key].overrides = overrides
            return cls._instances[key]

    def member(self, context: str) -> Cluster:
        """Another cluster reached through the context `context` of this one's kubeconfig: a MultiKueue
        worker, whose context is named after it (docs/multicluster.md). ConfigError when there is none.
        A worker given its own kubeconfig file (member_kubeconfigs) is that file's current context."""
        own = self.member_kubeconfigs.get(context)
        if own is not None:
            return Cluster.connect(kubeconfig=own)
        return Cluster.connect(kubeconfig=self.kubeconfig, context=context)

    @classmethod
    def _load(
        cls,
        kubeconfig: str | None,
        context: str | None,
        *,
        pool_size: int = POOL_SIZE,
        overrides: Overrides | None = None,
    ) -> Cluster:
        return cls(load_config(kubeconfig, context, overrides), pool_size=pool_size)

    # ---------------------------------------------------------------- raw HTTP
    def _headers(
        self, content_type: str | None = None, accept: str = "application/json"
    ) -> dict[str, str | list[str]]:
        h: dict[str, str | list[str]] = {"Accept": accept, "User-Agent": "gpuctl"}
        h.update(self.connection.impersonate)
        token = self.connection.auth.header()
        if token:
            h["Authorization"] = token
        if content_type:
            h["Content-Type"] = content_type
        return h

    def request(
        self,
        method: str,
        api_path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        stream: bool = False,
        timeout: float | tuple[float, float] | None = 30,
        raw: bool = False,
        accept: str = "application/json",
    ) -> Any:
        """Send one request; return the decoded JSON (or the response when streaming/raw: a
        gpuctl.cluster.transport.Response, whose body the caller reads, streams or releases)."""
        url = api_path
        q = {k: v for k, v in (query or {}).items() if v is not None and v is not False}
        if q:
            url += "?" + urlencode(q)
        data: bytes | None = None
        if body is not None:
            text = body if isinstance(body, (bytes, str)) else json.dumps(body)
            data = text.encode() if isinstance(text, str) else text
        if isinstance(timeout, tuple):
            connect, read = timeout
        else:
            # --request-timeout bounds every answer but a stream's (a watch, `logs -f`: their own).
            limit = self.connection.request_timeout
            connect, read = 10, ((limit if limit and not stream else timeout) or None)
            if limit and not stream:
                connect = min(connect, limit)
        refreshed = False
        for attempt in range(MAX_RETRIES + 1):
            resp = self._pool.request(
                method,
                url,
                body=data,
                headers=self._headers(content_type if body is not None else None, accept),
                connect_timeout=connect,
                read_timeout=read,
            )
            # An expired credential (exec plugin, rotated token file): fetch a new one and ask once more.
            if resp.status == 401 and not refreshed and self.connection.auth.refresh():
                refreshed = True
                _drain(resp)
                continue
            # The server asked to come back later (429 "storage is (re)initializing" after an etcd or API
            # server restart, 429 from priority and fairness, 5xx with Retry-After): wait as told and ask
            # again, as client-go does for every verb, at most MAX_RETRIES times.
            wait = retry_after(resp.status, resp.headers.get("Retry-After"))
            if wait is not None and attempt < MAX_RETRIES:
                _drain(resp)
                time.sleep(wait)
                continue
            break
        if resp.status >= 400:
            payload = resp.data
            try:
                status_body = loads(payload)
                msg = status_body.get("message", "")
            except (ValueError, AttributeError):
                status_body, msg = None, payload.decode(errors="replace")[:500] if payload else ""
            raise ApiError(resp.status, resp.reason or "", msg, status_body)
        if stream or raw:
            return resp
        data_in = resp.data
        return loads(data_in) if data_in else {}

    # ---------------------------------------------------------------- verbs
    def get(self, api_path: str, **query: Any) -> dict:
        return self.request("GET", api_path, query=query)

    def get_or_none(self, api_path: str, **query: Any) -> dict | None:
        try:
            return self.get(api_path, **query)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def pages(
        self,
        api_path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = PAGE_SIZE,
        accept: str = "application/json",
        **query: Any,
    ) -> Iterator[dict]:
        """Every page of a list, fetched `limit` items at a time with `continue` (kubectl's chunking)."""
        cont = None
        while True:
            page = self.request(
                "GET",
                api_path,
                query={
                    "labelSelector": label_selector,
                    "fieldSelector": field_selector,
                    "limit": limit,
                    "continue": cont,
                    **query,
                },
                accept=accept,
            )
            yield page
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return

    def list(
        self,
        api_path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = PAGE_SIZE,
    ) -> list[dict]:
        """All items, as plain dicts."""
        return self.list_with_version(
            api_path, label_selector=label_selector, field_selector=field_selector, limit=limit
        )[0]

    def list_with_version(
        self,
        api_path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = PAGE_SIZE,
    ) -> tuple[list[dict], str]:
        """Like list(), plus the resourceVersion to start a watch from."""
        items: list[dict] = []
        rv = ""
        for page in self.pages(
            api_path, label_selector=label_selector, field_selector=field_selector, limit=limit
        ):
            items.extend(page.get("items") or [])
            rv = (page.get("metadata") or {}).get("resourceVersion", rv)
        return items, rv

    def list_table(
        self,
        api_path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = PAGE_SIZE,
    ) -> list[dict]:
        """Like list(), as the API server's Table (what kubectl prints) with each object's metadata only:
        a pod costs ~0.9 kB instead of ~5 kB. Each item is {"metadata": ..., "table": {column: cell,
        "Completed": bool}}, "Completed" being the row condition kubectl hides finished pods by."""
        items: list[dict] = []
        for page in self.pages(
            api_path,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            accept=TABLE_ACCEPT,
            includeObject="Metadata",
        ):
            if page.get("kind") != "Table":
                raise ApiError(406, "NotAcceptable", f"{api_path} did not answer with a Table")
            names = [c["name"] for c in page.get("columnDefinitions") or []]
            for row in page.get("rows") or []:
                cells = dict(zip(names, row.get("cells") or [], strict=False))
                conditions = row.get("conditions") or []
                cells["Completed"] = any(
                    c.get("type") == "Completed" and c.get("status") == "True" for c in conditions
                )
                obj = row.get("object") or {}
                items.append({"metadata": obj.get("metadata") or {}, "table": cells})
        return items

    def list_metadata(self, api_path: str, *, label_selector: str | None = None) -> list[dict]:
        """The metadata of every object of a list (kubectl's PartialObjectMetadataList): names, labels
        and owners at a fraction of the bytes of the objects."""
        items: list[dict] = []
        for page in self.pages(api_path, label_selector=label_selector, accept=METADATA_ACCEPT):
            items += [i.get("metadata") or {} for i in page.get("items") or []]
        return items

    def pending_workloads(self, cluster_queue: str) -> list[dict] | None:
        """Kueue's visibility API for one ClusterQueue: every pending Workload with its position, paged
        by `offset` (the API's own limit is 1,000 per answer); None when the API is not served, or
        this identity may not read it (403: RBAC on clusterqueues/pendingworkloads), so the caller
        computes the answer from the Workloads instead."""
        return self._pending(f"clusterqueues/{cluster_queue}/pendingworkloads")

    def pending_in_local_queue(self, namespace: str, local_queue: str) -> list[dict] | None:
        """The same for one LocalQueue (what a team member may read: localqueues/pendingworkloads in
        its namespace); each item's positionInClusterQueue is its place in the ClusterQueue."""
        return self._pending(f"namespaces/{namespace}/localqueues/{local_queue}/pendingworkloads")

    def _pending(self, resource_path: str) -> list[dict] | None:
        if self._visibility is False:
            return None
        items: list[dict] = []
        for version in [self._visibility] if self._visibility else VISIBILITY_VERSIONS:
            base = f"/apis/visibility.kueue.x-k8s.io/{version}/{resource_path}"
            try:
                while True:
                    page = self.get(base, limit=VISIBILITY_PAGE, offset=len(items)).get("items") or []
                    items += page
                    if len(page) < VISIBILITY_PAGE:
                        self._visibility = version
                        return items
            except ApiError as e:
                if e.status == 403:
                    return None  # served, not to us (may differ per queue: not remembered)
                if e.status == 404 and (e.body.get("details") or {}).get("kind"):
                    self._visibility = version  # served: Kueue itself says it knows no such queue
                    return None
                if e.status not in (404, 503):
                    raise
                items = []
        self._visibility = False
        return None

    def create(self, obj: dict, *, dry_run: bool = False) -> dict:
        meta = obj["metadata"]
        return self.request(
            "POST",
            path(obj["kind"], None, meta.get("namespace")),
            query={"fieldManager": FIELD_MANAGER, "dryRun": "All" if dry_run else None},
            body=obj,
        )

    def apply(self, obj: dict, *, force: bool = True, dry_run: bool = False) -> dict:
        """Server-side apply with field manager `gpuctl`: gpuctl owns exactly the fields it sends."""
        return self.request(
            "PATCH",
            object_path(obj),
            query={
                "fieldManager": FIELD_MANAGER,
                "force": "true" if force else None,
                "dryRun": "All" if dry_run else None,
            },
            body=obj,
            content_type="application/apply-patch+yaml",
        )

    def merge_patch(
        self, api_path: str, patch: dict, *, dry_run: bool = False, field_manager: str = FIELD_MANAGER
    ) -> dict:
        return self.request(
            "PATCH",
            api_path,
            query={"fieldManager": field_manager, "dryRun": "All" if dry_run else None},
            body=patch,
            content_type="application/merge-patch+json",
        )

    def delete(
        self,
        api_path: str,
        *,
        propagation: str = "Background",
        grace_seconds: int | None = None,
        dry_run: bool = False,
        precondition_uid: str | None = None,
    ) -> bool:
        """Delete; False if it was already gone."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        if precondition_uid:
            body["preconditions"] = {"uid": precondition_uid}
        if dry_run:
            body["dryRun"] = ["All"]
        try:
            self.request("DELETE", api_path, body=body)
            return True
        except ApiError as e:
            if e.status == 404:
                return False
            raise

    def watch(
        self,
        api_path: str,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        read_timeout: float | None = None,
        raw: bool = False,
        on_open: Callable[[Callable[[], None]], None] | None = None,
    ) -> Iterator[tuple[str, dict]]:
        """Yield (type, object) watch events until the server closes the watch: the line reader.

        raw=False (a command following changes): BOOKMARKs are skipped and an ERROR event raises
        ApiError. raw=True (gpuctl.cluster.informer, which owns the protocol): every event as sent,
        BOOKMARK and ERROR included. `read_timeout` bounds the silence between two lines (bookmarks
        come about once a minute), after which WatchIdle is raised; `on_open(close)` hands the caller
        a function that aborts the stream from another thread.
        """
        resp = self.request(
            "GET",
            api_path,
            query={
                "watch": "true",
                "resourceVersion": resource_version,
                "labelSelector": label_selector,
                "fieldSelector": field_selector,
                "timeoutSeconds": timeout_seconds,
                "allowWatchBookmarks": "true",
            },
            stream=True,
            timeout=(10, read_timeout or timeout_seconds + 30),
        )
        if on_open is not None:
            on_open(lambda: _close(resp))
        try:
            for line in iter_lines(resp.stream(65536, decode_content=True)):
                ev = loads(line, stream=True)
                etype = ev.get("type", "")
                if not raw:
                    if etype == "BOOKMARK":
                        continue
                    if etype == "ERROR":
                        st = ev.get("object") or {}
                        raise ApiError(
                            int(st.get("code") or 500), st.get("reason", ""), st.get("message", ""), st
                        )
                yield etype, ev.get("object") or {}
        except ReadTimeout as e:
            raise WatchIdle(f"no watch event for {read_timeout}s on {api_path}") from e
        finally:
            _close(resp)

    def server_version(self) -> str:
        return self.get("/version").get("gitVersion", "")
