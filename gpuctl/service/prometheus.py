"""Prometheus' HTTP query API (docs/utilisation.md): where it is, and the two calls gpuctl makes (an instant
query and
a range query, each evaluated at a time gpuctl chooses, so one reading is one instant).

Where (the first that is set): the CLI's `--prometheus-url`, `$GPUCTL_PROMETHEUS_URL`, `prometheusURL:` in
gpuctl's config file (`$GPUCTL_CONFIG`, else ~/.config/gpuctl/config.yaml: the file that holds
`allowedHostPaths`); `gpuctl serve --prometheus-url` for the REST API and the idle reclaimer. Not set: no
GPU use is read, and the views say so. Queries are POSTed (form-encoded, as Prometheus' API takes them)
so a long selector never meets a URL limit; a bearer token, when set ($GPUCTL_PROMETHEUS_TOKEN or
`prometheusToken:`), is sent, for a Prometheus behind an authenticating proxy (docs/utilisation.md).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass
from typing import Any

from gpuctl.constants import (
    CONFIG_ENV,
    DEFAULT_CONFIG_PATH,
    PROMETHEUS_TIMEOUT_SECONDS,
    PROMETHEUS_URL_ENV,
)
from gpuctl.service.errors import ServiceError

PROMETHEUS_TOKEN_ENV = "GPUCTL_PROMETHEUS_TOKEN"


class PrometheusError(ServiceError):
    """Prometheus could not be asked, or refused the query: the message names the URL and the cause."""

    status = 502


@dataclass(frozen=True)
class Prometheus:
    url: str
    token: str | None = None
    timeout: float = PROMETHEUS_TIMEOUT_SECONDS

    def query(self, expr: str, at: float) -> dict[str, Any]:
        """An instant query evaluated at `at` (epoch seconds): the answer's `data`."""
        return self._post("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})

    def query_range(self, expr: str, start: float, end: float, step: int) -> dict[str, Any]:
        """A range query from `start` to `end` every `step` seconds: the answer's `data`."""
        return self._post(
            "/api/v1/query_range",
            {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(int(step))},
        )

    def _post(self, api: str, form: dict[str, str]) -> dict[str, Any]:
        # urllib.request loads http.client and the email package: only when Prometheus is asked, not in
        # every describe (test_cli_startup: a read imports no http or email).
        import urllib.error  # noqa: PLC0415 - lazy
        import urllib.request  # noqa: PLC0415 - lazy

        url = self.url.rstrip("/") + api
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(
            url, data=urllib.parse.urlencode(form).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            body = _json(e.read())
            why = body.get("error") or f"HTTP {e.code}"
            raise PrometheusError(f"Prometheus at {self.url} refused the query: {why}") from None
        except (OSError, ValueError) as e:
            raise PrometheusError(f"Prometheus at {self.url} did not answer: {e}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"Prometheus at {self.url}: {body.get('error') or 'no answer'}")
        return body.get("data") or {}


def _json(raw: bytes) -> dict[str, Any]:
    try:
        d = json.loads(raw or b"{}")
        return d if isinstance(d, dict) else {}
    except ValueError:
        return {}


def _config() -> dict[str, Any]:
    """gpuctl's config file, as SpecConfig reads it (a missing file is no settings)."""
    path = os.environ.get(CONFIG_ENV) or os.path.expanduser(DEFAULT_CONFIG_PATH)
    if not os.path.exists(path):
        return {}
    import yaml  # noqa: PLC0415 - lazy: only when a command reads GPU use

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError) as e:
        raise ServiceError(f"{path}: not readable as YAML: {e}") from None
    return data if isinstance(data, dict) else {}


def configured(url: str | None = None, token: str | None = None) -> Prometheus | None:
    """The Prometheus gpuctl reads, from the flag, else the environment, else the config file; None when
    none is set. A URL that is not http(s) is refused, naming where it came from."""
    source = "--prometheus-url"
    if not url:
        url, source = os.environ.get(PROMETHEUS_URL_ENV), f"${PROMETHEUS_URL_ENV}"
    conf: dict[str, Any] | None = None
    if not url:
        conf = _config()
        url, source = conf.get("prometheusURL"), f"prometheusURL in {CONFIG_ENV} / {DEFAULT_CONFIG_PATH}"
    if not url:
        return None
    if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ServiceError(f"{source}: {url!r} is not an http(s) URL, e.g. http://prometheus.monitoring:9090")
    if token is None:
        token = os.environ.get(PROMETHEUS_TOKEN_ENV)
        if token is None:
            conf = _config() if conf is None else conf
            token = conf.get("prometheusToken")
    return Prometheus(url, token=token or None)
