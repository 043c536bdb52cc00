"""`gpuctl serve` and `python -m gpuctl.server.api` define their shared flags once (gpuctl.server.flags):
the same spelling gives the same dest and value in both (issue 30: they used to differ, tls_cert vs
tls_cert_file, metrics_port vs port), and serve --api takes the API's authentication flags."""

from __future__ import annotations

from gpuctl.server.api.__main__ import build_parser as api_parser
from gpuctl.server.main import build_parser as serve_parser

SHARED = [
    "--kubeconfig", "k", "--context", "c", "--address", "127.0.0.2", "--port", "8181",
    "--tls-cert", "crt", "--tls-key", "key", "--api-keys-file", "keys.yaml", "--auth-cache-seconds", "3",
    "--audience", "a1", "--audience", "a2", "--threads", "7", "--log-level", "debug",
]  # fmt: skip


def test_the_shared_flags_mean_the_same_in_both() -> None:
    serve, api = vars(serve_parser().parse_args(SHARED)), vars(api_parser().parse_args(SHARED))
    assert set(api) - set(serve) == {"new_api_key"}  # the API's own: everything else is shared
    assert {k: serve[k] for k in api if k in serve} == {k: v for k, v in api.items() if k != "new_api_key"}
    assert (api["port"], api["tls_cert"], api["audience"], api["threads"]) == (8181, "crt", ["a1", "a2"], 7)


def test_each_keeps_its_own_default_port_and_spellings() -> None:
    assert serve_parser().parse_args([]).port == 9090
    assert api_parser().parse_args([]).port == 8080
    assert serve_parser().parse_args(["--metrics-port", "9191"]).port == 9191
    assert api_parser().parse_args(["--tls-cert-file", "c", "--tls-key-file", "k"]).tls_key == "k"


def test_the_keys_file_defaults_to_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("GPUCTL_API_KEYS_FILE", "/etc/keys.yaml")
    assert serve_parser().parse_args([]).api_keys_file == "/etc/keys.yaml"
    assert api_parser().parse_args([]).api_keys_file == "/etc/keys.yaml"
