"""Finding the cluster: --kubeconfig/--context, $KUBECONFIG, ~/.kube/config, then in-cluster.

The one place that reads kubeconfig files and the in-cluster service account: `load()` gives the
`Connection` that `Cluster.connect` uses (the CLI, `gpuctl serve`, the REST API and the webhook all
connect that way) and `default_namespace()` the namespace a command defaults to.

kubectl's rules (client-go's loader), written here rather than borrowed from the `kubernetes` package,
whose import alone cost 170 ms of every command's start:
- $KUBECONFIG lists several files; they are merged: for each named cluster, user and context the first
  file that defines it wins, and so does the first `current-context`. `--kubeconfig` names one file.
- Relative paths in a file (certificates, token files, exec commands) are relative to that file.
- Credentials: client certificate and key (file or `-data`), a bearer `token` or `tokenFile` (re-read, as
  projected tokens rotate), basic auth, an `exec` credential plugin (client.authentication.k8s.io,
  cached until its `expirationTimestamp`, run again when the server answers 401), and the legacy `oidc`
  auth-provider's id-token. Other auth-providers (gcp, azure) were removed from kubectl in 1.26; they get
  a clear error naming the exec plugin that replaced them.
- `insecure-skip-tls-verify`, `tls-server-name`, `proxy-url` (http/https proxies) on the cluster.
- Without a `proxy-url`, the proxy of the environment, as Go's http.ProxyFromEnvironment picks it:
  HTTPS_PROXY (https servers) or HTTP_PROXY (http), upper or lower case, unless NO_PROXY names the
  host (a name, a `.domain` or `domain` suffix, an IP, a CIDR, `*`, each with an optional :port);
  `localhost` and loopback IPs are never proxied (Go's rule, so kubectl's).
- kubectl's global overrides (`Overrides`): --server, --token, --certificate-authority,
  --insecure-skip-tls-verify, --as/--as-group/--as-uid (impersonation headers), --request-timeout;
  --server (with --token or nothing) works without any kubeconfig, as kubectl does.
- In a pod: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the service account's CA, and
  its token file re-read every minute.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from gpuctl.cluster import kubeyaml
from gpuctl.cluster.credentials import Auth, ConfigError, ExecAuth, StaticAuth, TokenFileAuth
from gpuctl.cluster.proxy import proxy_from_environment
from gpuctl.cluster.transport import Pool
from gpuctl.constants import DEFAULT_NAMESPACE

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Connections kept per host: every informer's watch holds one for minutes, and the REST API's worker
# threads share the rest.
POOL_SIZE = 32


# ----------------------------------------------------------------------------- finding the files
def kubeconfig_files(kubeconfig: str | None) -> list[str]:
    if kubeconfig:
        return [kubeconfig]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [p for p in env.split(os.pathsep) if p and Path(p).exists()]
    home = Path.home() / ".kube" / "config"
    return [str(home)] if home.exists() else []


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (SERVICE_ACCOUNT / "token").exists()


# ----------------------------------------------------------------------------- merging (pure)
# The classes of this module are plain classes and NamedTuples, not dataclasses: every command builds
# its connection here, and a dataclass costs a compile of its generated methods at import (bench/reads.py).
class Entry(NamedTuple):
    """One named cluster, user or context, with the directory of the file that defined it."""

    name: str
    value: Mapping[str, Any]
    base: Path


class KubeConfig:
    """Several kubeconfig files merged the way kubectl merges $KUBECONFIG."""

    def __init__(self) -> None:
        self.clusters: dict[str, Entry] = {}
        self.users: dict[str, Entry] = {}
        self.contexts: dict[str, Entry] = {}
        self.current_context = ""
        self.files: list[str] = []

    def add(self, doc: Mapping[str, Any], source: str) -> None:
        base = Path(source).resolve().parent
        self.files.append(source)
        for section, key, into in (
            ("clusters", "cluster", self.clusters),
            ("users", "user", self.users),
            ("contexts", "context", self.contexts),
        ):
            for item in doc.get(section) or []:
                name = (item or {}).get("name")
                if name and name not in into:  # the first file that defines a name wins
                    into[name] = Entry(name, item.get(key) or {}, base)
        if not self.current_context and doc.get("current-context"):
            self.current_context = str(doc["current-context"])

    def resolve(self, context: str | None, server: str | None = None) -> tuple[Entry, Entry, Entry]:
        """(context, cluster, user) of `context`, or of the current context; `server` (--server)
        stands in for the cluster's."""
        where = " ".join(self.files)
        name = context or self.current_context
        if not name:
            raise ConfigError(f"kubeconfig {where}: no current-context; pass --context or set one")
        ctx = self.contexts.get(name)
        if ctx is None:
            raise ConfigError(
                f"kubeconfig {where}: context {name!r} not found "
                f"(contexts: {', '.join(self.contexts) or 'none'})"
            )
        cluster = self.clusters.get(ctx.value.get("cluster", ""))
        if cluster is None and server:
            cluster = Entry("", {"server": server}, Path.cwd())
        if cluster is None or not (server or cluster.value.get("server")):
            raise ConfigError(
                f"kubeconfig {where}: context {name!r} names cluster {ctx.value.get('cluster')!r}, "
                "which is not defined or has no server"
            )
        user = self.users.get(ctx.value.get("user", "")) or Entry("", {}, cluster.base)
        return ctx, cluster, user


def parse_kubeconfig(text: str, source: str) -> Any:
    """The document in a kubeconfig file's text: JSON as JSON; YAML through `kubeyaml` (the subset
    kubectl writes, without PyYAML's ~25 ms of import and parsing), else through PyYAML's SafeLoader."""
    if text.lstrip().startswith("{"):
        with contextlib.suppress(ValueError):
            return json.loads(text)
    doc = kubeyaml.loads(text)
    if doc is not None or not text.strip():
        return doc
    import yaml  # noqa: PLC0415 - lazy: only a kubeconfig outside kubeyaml's subset pays for PyYAML

    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise ConfigError(f"kubeconfig {source} is not valid YAML: {e}") from None


def read_kubeconfig(files: list[str]) -> KubeConfig:
    kc = KubeConfig()
    for f in files:
        try:
            text = Path(f).read_text()
        except OSError as e:
            raise ConfigError(f"cannot read kubeconfig {f}: {e.strerror}") from None
        doc = parse_kubeconfig(text, f)
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ConfigError(f"kubeconfig {f}: expected a Config mapping, got {type(doc).__name__}")
        kc.add(doc, f)
    return kc


def _file_or_data(entry: Entry, key: str, *, b64: bool = True) -> bytes | None:
    """`key-data` (base64) or the file `key` (relative to the kubeconfig that named it)."""
    data = entry.value.get(f"{key}-data")
    if data:
        return base64.b64decode(data) if b64 else str(data).encode()
    name = entry.value.get(key)
    if not name:
        return None
    p = Path(os.path.expanduser(str(name)))
    p = p if p.is_absolute() else entry.base / p
    try:
        return p.read_bytes()
    except OSError as e:
        raise ConfigError(f"kubeconfig: {key} {p} of {entry.name or 'the cluster'}: {e.strerror}") from None


# ----------------------------------------------------------------------------- the connection
class Connection:
    """How to reach one API server: where, TLS, credentials, and the context's namespace."""

    def __init__(
        self,
        host: str,
        namespace: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        proxy: str | None = None,
        auth: Auth | None = None,
        impersonate: dict[str, list[str]] | None = None,
        request_timeout: float | None = None,
    ):
        self.host = host
        self.namespace = namespace
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self.proxy = proxy
        self.auth = auth if auth is not None else Auth()
        # Impersonation headers (--as, --as-group, --as-uid): name -> values, a header line per value.
        self.impersonate = impersonate if impersonate is not None else {}
        self.request_timeout = request_timeout  # --request-timeout: seconds one answer may take (None: 30)

    def pool(self, maxsize: int = POOL_SIZE) -> Pool:
        """Keep-alive connections to the API server (gpuctl.cluster.transport), at most `maxsize` idle.
        insecure-skip-tls-verify is already in the context (_tls); tls-server-name names the
        certificate to expect; proxy-url tunnels through the proxy."""
        return Pool(
            self.host,
            ssl_context=self.ssl_context,
            server_hostname=self.server_hostname,
            proxy=self.proxy,
            maxsize=maxsize,
        )


class Overrides(NamedTuple):
    """kubectl's global flags over the kubeconfig (clientcmd's ConfigOverrides)."""

    server: str | None = None
    token: str | None = None
    certificate_authority: str | None = None
    insecure_skip_tls_verify: bool = False
    as_user: str | None = None
    as_groups: tuple[str, ...] = ()
    as_uid: str | None = None
    request_timeout: float | None = None

    def impersonation(self) -> dict[str, list[str]]:
        if (self.as_groups or self.as_uid) and not self.as_user:
            raise ConfigError("--as-group and --as-uid need --as (the user to impersonate), as kubectl's do")
        headers: dict[str, list[str]] = {}
        if self.as_user:
            headers["Impersonate-User"] = [self.as_user]
        if self.as_groups:
            headers["Impersonate-Group"] = list(self.as_groups)
        if self.as_uid:
            headers["Impersonate-Uid"] = [self.as_uid]
        return headers


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(h|m|s|ms))+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")


def parse_timeout(value: str) -> float | None:
    """--request-timeout: a bare number of seconds or a Go duration (1s, 2m, 1h30m); 0: none given."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        if not _DURATION.match(text):
            raise ConfigError(
                f"invalid --request-timeout {value!r}: a number of seconds or a duration such as 30s, 2m, 1h"
            ) from None
        unit = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
        seconds = sum(float(n) * unit[u] for n, u in _DURATION_PART.findall(text))
    if seconds < 0:
        raise ConfigError(f"invalid --request-timeout {value!r}: not negative")
    return seconds or None


def _checked_proxy(proxy: str | None, source: str) -> str | None:
    if proxy and urlsplit(proxy).scheme not in ("http", "https"):
        raise ConfigError(f"{source} {proxy}: only http:// and https:// proxies are supported (no socks5)")
    return proxy


def _tls(ca: bytes | None, cert: bytes | None, key: bytes | None, insecure: bool) -> ssl.SSLContext:
    """The client TLS context. With the kubeconfig's own CA, that CA alone is trusted (client-go sets
    RootCAs to certificate-authority(-data) only, so does kubectl); the system's bundle is loaded only
    when the kubeconfig names no CA: reading it costs ~20-70 ms of every command and trusts more."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname and CERT_REQUIRED by default
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif ca:
        ctx.load_verify_locations(cadata=ca.decode())
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if cert and key:
        try:
            _load_key_pair(ctx, cert, key)
        except ssl.SSLError as e:
            raise ConfigError(f"kubeconfig: client certificate and key do not load: {e}") from None
    return ctx


def _load_key_pair(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl loads a client key pair from files only. On Linux the files are anonymous memory (memfd,
    opened by OpenSSL through /proc/self/fd): nothing touches the disk. Elsewhere a private temporary
    directory, removed after loading."""
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None and os.path.isdir("/proc/self/fd"):
        fds: list[int] = []
        try:
            for data in (cert, key):
                fds.append(memfd("gpuctl-tls"))
                view = memoryview(data)
                while view:
                    view = view[os.write(fds[-1], view) :]
            ctx.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
            return
        finally:
            for fd in fds:
                os.close(fd)
    import tempfile  # noqa: PLC0415 - lazy: CLI start-up (no memfd)

    with tempfile.TemporaryDirectory(prefix="gpuctl-tls-") as d:
        cf, kf = Path(d, "cert"), Path(d, "key")
        for p, data in ((cf, cert), (kf, key)):
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        ctx.load_cert_chain(str(cf), str(kf))


def _auth(user: Entry, cluster: Entry) -> tuple[Auth, bytes | None, bytes | None]:
    """Credentials of `user`: (Auth, client cert, client key)."""
    u = user.value
    cert = _file_or_data(user, "client-certificate")
    key = _file_or_data(user, "client-key")
    if u.get("exec"):
        ex = ExecAuth(u["exec"], user.base, cluster.value)
        status = ex.status()
        if status.get("clientCertificateData") and status.get("clientKeyData"):
            cert, key = status["clientCertificateData"].encode(), status["clientKeyData"].encode()
        return ex, cert, key
    if u.get("token"):
        return StaticAuth(f"Bearer {u['token']}"), cert, key
    if u.get("tokenFile"):
        p = Path(os.path.expanduser(str(u["tokenFile"])))
        return TokenFileAuth(p if p.is_absolute() else user.base / p), cert, key
    if u.get("username") and u.get("password"):
        basic = base64.b64encode(f"{u['username']}:{u['password']}".encode()).decode()
        return StaticAuth(f"Basic {basic}"), cert, key
    provider = u.get("auth-provider") or {}
    if provider:
        token = (provider.get("config") or {}).get("id-token")
        if provider.get("name") == "oidc" and token:
            return StaticAuth(f"Bearer {token}"), cert, key
        raise ConfigError(
            f"kubeconfig user {user.name!r}: auth-provider {provider.get('name')!r} is not supported "
            "(kubectl dropped it in 1.26); use its exec plugin, e.g. gke-gcloud-auth-plugin or kubelogin"
        )
    return Auth(), cert, key


def from_kubeconfig(kc: KubeConfig, context: str | None, overrides: Overrides | None = None) -> Connection:
    o = overrides or Overrides()
    ctx, cluster, user = kc.resolve(context, server=o.server)
    c = cluster.value
    host = str(o.server or c["server"]).rstrip("/")
    auth, cert, key = _auth(user, cluster)
    if o.token:
        auth = StaticAuth(f"Bearer {o.token}")
    tls = None
    if host.startswith("https"):
        ca = Path(o.certificate_authority).read_bytes() if o.certificate_authority else None
        ca = ca or _file_or_data(cluster, "certificate-authority")
        insecure = o.insecure_skip_tls_verify or bool(c.get("insecure-skip-tls-verify"))
        if insecure and o.certificate_authority:
            raise ConfigError("--insecure-skip-tls-verify and --certificate-authority go apart: pick one")
        tls = _tls(None if insecure else ca, cert, key, insecure)
    proxy = _checked_proxy(c.get("proxy-url"), "kubeconfig proxy-url") or _checked_proxy(
        proxy_from_environment(host), "HTTPS_PROXY/HTTP_PROXY"
    )
    return Connection(
        host=host,
        namespace=ctx.value.get("namespace") or None,
        ssl_context=tls,
        server_hostname=c.get("tls-server-name") or None,
        proxy=proxy,
        auth=auth,
        impersonate=o.impersonation(),
        request_timeout=o.request_timeout,
    )


def from_service_account(root: Path = SERVICE_ACCOUNT, environ: Mapping[str, str] = os.environ) -> Connection:
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:  # IPv6
        host = f"[{host}]"
    ca = root / "ca.crt"
    ns = root / "namespace"
    return Connection(
        host=f"https://{host}:{port}",
        namespace=ns.read_text().strip() if ns.exists() else None,
        ssl_context=_tls(ca.read_bytes() if ca.exists() else None, None, None, False),
        auth=TokenFileAuth(root / "token"),
    )


def load(
    kubeconfig: str | None = None, context: str | None = None, overrides: Overrides | None = None
) -> Connection:
    """The connection: the kubeconfig if there is one (flag, $KUBECONFIG, ~/.kube/config), else the
    in-cluster service account; --server alone (kubectl's `--server URL --token T`) needs neither."""
    if kubeconfig and not Path(kubeconfig).exists():
        raise FileNotFoundError(f"kubeconfig {kubeconfig} not found")
    files = kubeconfig_files(kubeconfig)
    if files:
        return from_kubeconfig(read_kubeconfig(files), context, overrides)
    if overrides is not None and overrides.server:
        kc = KubeConfig()
        kc.add({"clusters": [{"name": "flags", "cluster": {"server": overrides.server}}],
                "contexts": [{"name": "flags", "context": {"cluster": "flags"}}],
                "current-context": "flags"}, "--server")  # fmt: skip
        return from_kubeconfig(kc, None, overrides)
    if in_cluster():
        conn = from_service_account()
        if overrides is not None:
            conn.impersonate, conn.request_timeout = overrides.impersonation(), overrides.request_timeout
        return conn
    raise ConfigError(
        "no cluster configured: pass --kubeconfig, set KUBECONFIG, or create ~/.kube/config "
        "(hack/cluster/up.sh starts a local cluster)"
    )


def _context_namespace(files: list[str], context: str | None) -> str | None:
    with contextlib.suppress(ConfigError):
        ctx, _, _ = read_kubeconfig(files).resolve(context)
        return ctx.value.get("namespace") or None
    return None


def context_namespace(kubeconfig: str | None = None, context: str | None = None) -> str | None:
    """The namespace the kubeconfig's context sets (in a pod without a kubeconfig: the service
    account's), as kubectl reads it; None when it sets none."""
    files = [f for f in kubeconfig_files(kubeconfig) if Path(f).exists()]
    if files:
        return _context_namespace(files, context)
    if in_cluster():
        p = SERVICE_ACCOUNT / "namespace"
        if p.exists():
            return p.read_text().strip() or None
    return None


def default_namespace(flag: str | None, kubeconfig: str | None = None, context: str | None = None) -> str:
    """-n wins; then the context's namespace; then $DEFAULT_NAMESPACE (earlier gpuctl); then default."""
    if flag:
        return flag
    return context_namespace(kubeconfig, context) or os.environ.get("DEFAULT_NAMESPACE") or DEFAULT_NAMESPACE


def namespace_scope(
    flag: str | None, all_namespaces: bool = False, kubeconfig: str | None = None, context: str | None = None
) -> str | None:
    """The namespace a namespaced read uses, like kubectl: -n; -A: None (every namespace); else the
    context's namespace; else None (every namespace, as the earlier gpuctl read without -n)."""
    if flag:
        return flag
    if all_namespaces:
        return None
    return context_namespace(kubeconfig, context)
