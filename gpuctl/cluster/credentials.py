"""A kubeconfig user's credentials (gpuctl.cluster.config picks one per connection): the Authorization
header of every request, refreshed after a 401. A static token, a token file re-read as kubelet rotates
projected tokens, or a client.authentication.k8s.io exec plugin, run when its credential expires."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

TOKEN_FILE_REFRESH = 60.0  # seconds between re-reads of a token file (kubelet rotates projected tokens)


class ConfigError(ConnectionError):
    """A kubeconfig gpuctl cannot use; the message names the file and what to fix."""


class Auth:
    """The Authorization header of every request; `refresh()` after a 401 (True: retry may help)."""

    def header(self) -> str | None:
        return None

    def refresh(self) -> bool:
        return False


class StaticAuth(Auth):
    def __init__(self, value: str | None):
        self.value = value

    def header(self) -> str | None:
        return self.value


class TokenFileAuth(Auth):
    """A bearer token re-read from its file every TOKEN_FILE_REFRESH seconds and after a 401."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic):
        self.path, self.clock = path, clock
        self._token: str | None = None
        self._read_at = -1e18
        self._lock = threading.Lock()

    def header(self) -> str | None:
        with self._lock:
            if self.clock() - self._read_at >= TOKEN_FILE_REFRESH:
                self._token = self.path.read_text().strip()
                self._read_at = self.clock()
            return f"Bearer {self._token}" if self._token else None

    def refresh(self) -> bool:
        with self._lock:
            self._read_at = -1e18
        return True


class ExecAuth(Auth):
    """A client.authentication.k8s.io exec plugin (aws eks get-token, gke-gcloud-auth-plugin, kubelogin):
    run when first needed, again when its credential expires or the server answers 401."""

    def __init__(self, spec: Mapping[str, Any], base: Path, cluster: Mapping[str, Any]):
        if not spec.get("command") or not spec.get("apiVersion"):
            raise ConfigError("kubeconfig: user.exec needs command and apiVersion")
        self.spec, self.base, self.cluster = spec, base, cluster
        self._status: dict[str, Any] | None = None
        self._expires: float | None = None
        self._lock = threading.Lock()

    @property
    def cmd_name(self) -> str:
        return str(self.spec["command"])

    def _command(self) -> list[str]:
        cmd = str(self.spec["command"])
        # kubectl: a command with a path separator is relative to the kubeconfig; a bare name is on PATH.
        if os.sep in cmd and not os.path.isabs(cmd):
            cmd = str(self.base / cmd)
        return [cmd, *[str(a) for a in self.spec.get("args") or []]]

    def run(self) -> dict[str, Any]:
        interactive = sys.stdin.isatty() and self.spec.get("interactiveMode") != "Never"
        info: dict[str, Any] = {
            "apiVersion": self.spec["apiVersion"],
            "kind": "ExecCredential",
            "spec": {"interactive": interactive},
        }
        if self.spec.get("provideClusterInfo"):
            info["spec"]["cluster"] = dict(self.cluster)
        env = {**os.environ, **{e["name"]: e["value"] for e in self.spec.get("env") or []}}
        env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
        import subprocess  # noqa: PLC0415 - lazy: CLI start-up (exec plugins only)

        try:
            p = subprocess.run(
                self._command(),
                env=env,
                stdout=subprocess.PIPE,
                stderr=None if interactive else subprocess.PIPE,
                stdin=None if interactive else subprocess.DEVNULL,
                text=True,
                check=False,
            )
        except OSError as e:
            hint = self.spec.get("installHint") or ""
            msg = f"kubeconfig: exec plugin {self.cmd_name}: {e.strerror}. {hint}"
            raise ConfigError(msg.strip()) from None
        if p.returncode != 0:
            raise ConfigError(
                f"kubeconfig: exec plugin {self.cmd_name} exited {p.returncode}: "
                f"{(p.stderr or '').strip()[:500]}"
            )
        try:
            cred = json.loads(p.stdout)
            status = cred["status"]
        except (ValueError, KeyError, TypeError):
            raise ConfigError(
                f"kubeconfig: exec plugin {self.cmd_name} did not print an ExecCredential with a status"
            ) from None
        if cred.get("apiVersion") != self.spec["apiVersion"]:
            raise ConfigError(
                f"kubeconfig: exec plugin {self.cmd_name} answered {cred.get('apiVersion')}, "
                f"expected {self.spec['apiVersion']}"
            )
        exp = status.get("expirationTimestamp")
        from datetime import datetime  # noqa: PLC0415 - lazy: CLI start-up (exec plugins only)

        self._expires = datetime.fromisoformat(exp.replace("Z", "+00:00")).timestamp() if exp else None
        self._status = status
        return status

    def status(self) -> dict[str, Any]:
        with self._lock:
            if self._status is None or (self._expires is not None and time.time() >= self._expires - 10):
                return self.run()
            return self._status

    def header(self) -> str | None:
        token = self.status().get("token")
        return f"Bearer {token}" if token else None

    def refresh(self) -> bool:
        with self._lock:
            self._status = None
        return True


__all__ = ["TOKEN_FILE_REFRESH", "Auth", "ConfigError", "ExecAuth", "StaticAuth", "TokenFileAuth"]
