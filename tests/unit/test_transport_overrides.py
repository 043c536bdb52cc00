"""kubectl's transport settings in gpuctl's client: the proxy of the environment (Go's rules), the
override flags and impersonation headers. The proxy and the flags on the real API server:
tests/integration/test_cli_kubectl.py."""

from __future__ import annotations

import pytest

from gpuctl.cluster.config import ConfigError, KubeConfig, Overrides, from_kubeconfig, parse_timeout
from gpuctl.cluster.proxy import proxy_from_environment
from gpuctl.cluster.transport import _Headers

PROXY = "http://127.0.0.1:3128"


@pytest.mark.parametrize(
    ("url", "env", "expected"),
    [
        ("https://api.corp:6443", {"HTTPS_PROXY": PROXY}, PROXY),
        ("https://api.corp:6443", {"https_proxy": PROXY}, PROXY),
        ("https://api.corp:6443", {"HTTP_PROXY": PROXY}, None),  # https servers use HTTPS_PROXY only
        ("http://api.corp:8080", {"HTTP_PROXY": PROXY}, PROXY),
        ("https://api.corp:6443", {"HTTPS_PROXY": "127.0.0.1:3128"}, PROXY),  # scheme-less
        ("https://127.0.0.1:6443", {"HTTPS_PROXY": PROXY}, None),  # loopback: never (Go)
        ("https://localhost:6443", {"HTTPS_PROXY": PROXY}, None),
        ("https://[::1]:6443", {"HTTPS_PROXY": PROXY}, None),
        ("https://api.corp:6443", {"HTTPS_PROXY": PROXY, "NO_PROXY": "corp"}, None),  # and its subdomains
        ("https://corp:6443", {"HTTPS_PROXY": PROXY, "NO_PROXY": ".corp"}, PROXY),  # subdomains only
        ("https://api.corp:6443", {"HTTPS_PROXY": PROXY, "NO_PROXY": ".corp"}, None),
        ("https://api.corp:6443", {"HTTPS_PROXY": PROXY, "NO_PROXY": "*.corp"}, None),
        ("https://api.corp:6443", {"HTTPS_PROXY": PROXY, "NO_PROXY": "api.corp:443"}, PROXY),  # other port
        ("https://api.corp:6443", {"HTTPS_PROXY": PROXY, "NO_PROXY": "api.corp:6443"}, None),
        ("https://10.1.2.3:6443", {"HTTPS_PROXY": PROXY, "NO_PROXY": "10.0.0.0/8"}, None),
        ("https://10.1.2.3:6443", {"HTTPS_PROXY": PROXY, "NO_PROXY": "10.1.2.4"}, PROXY),
        ("https://api.corp:6443", {"HTTPS_PROXY": PROXY, "NO_PROXY": "*"}, None),
        ("https://api.corp:6443", {"HTTPS_PROXY": PROXY, "NO_PROXY": "other.com, corp"}, None),
        ("https://apicorp:6443", {"HTTPS_PROXY": PROXY, "NO_PROXY": "corp"}, PROXY),  # not a suffix match
    ],
)
def test_proxy_from_environment(url, env, expected) -> None:
    assert proxy_from_environment(url, env) == expected


def _kc(server: str = "https://api.corp:6443", **cluster) -> KubeConfig:
    kc = KubeConfig()
    kc.add(
        {
            "clusters": [
                {"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True, **cluster}}
            ],
            "users": [{"name": "u", "user": {"token": "from-file"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        },
        "/tmp/kubeconfig",
    )
    return kc


def test_kubeconfig_proxy_url_wins_over_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", PROXY)
    assert from_kubeconfig(_kc(), None).proxy == PROXY
    assert from_kubeconfig(_kc(**{"proxy-url": "http://other:8080"}), None).proxy == "http://other:8080"
    with pytest.raises(ConfigError, match="no socks5"):
        from_kubeconfig(_kc(**{"proxy-url": "socks5://p:1080"}), None)


def test_overrides_replace_server_token_and_add_impersonation(monkeypatch) -> None:
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    o = Overrides(server="https://other:6443", token="t", as_user="jane", as_groups=("a", "b"), as_uid="42")
    conn = from_kubeconfig(_kc(), None, o)
    assert conn.host == "https://other:6443"
    assert conn.auth.header() == "Bearer t"
    assert conn.impersonate == {
        "Impersonate-User": ["jane"],
        "Impersonate-Group": ["a", "b"],
        "Impersonate-Uid": ["42"],
    }
    assert from_kubeconfig(_kc(), None).auth.header() == "Bearer from-file"


def test_group_without_user_is_refused() -> None:
    with pytest.raises(ConfigError, match="need --as"):
        Overrides(as_groups=("a",)).impersonation()


def test_repeated_headers_are_sent_once_per_value() -> None:
    assert list(_Headers({"Impersonate-Group": ["a", "b"], "Accept": "x"}).items()) == [
        ("Impersonate-Group", "a"),
        ("Impersonate-Group", "b"),
        ("Accept", "x"),
    ]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5", 5.0), ("1.5", 1.5), ("30s", 30.0), ("2m", 120.0), ("1h30m", 5400.0), ("250ms", 0.25), ("0", None)],
)
def test_request_timeout(text, seconds) -> None:
    assert parse_timeout(text) == seconds


def test_request_timeout_refuses_words() -> None:
    with pytest.raises(ConfigError, match="invalid --request-timeout"):
        parse_timeout("soon")
