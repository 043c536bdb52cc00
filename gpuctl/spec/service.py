"""`service:` and `storage:`: the port a service kind exposes, and the host directories a job mounts."""

from __future__ import annotations

import os.path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from gpuctl.constants import DEFAULT_SERVICE_PORT, DENIED_HOST_PATHS, HOST_PATH_ROOTS, NOTEBOOK_PORT
from gpuctl.spec.autoscaling import Autoscaling
from gpuctl.spec.fields import (
    HOST_PATH_FIX,
    NOTEBOOK_REPLICAS_FIX,
    NonNegInt,
    Port,
    SpecModel,
    Text,
    aliases,
    fail,
    show,
)
from gpuctl.spec.suggest import closest

_PROTOCOLS = ("TCP", "UDP", "SCTP")
_SERVICE_TYPES = {t.lower(): t for t in ("NodePort", "ClusterIP", "LoadBalancer")}


class Service(SpecModel):
    """`service:` — replicas (or `autoscaling`) and the port exposed through the NodePort Service
    `svc-<name>`."""

    replicas: NonNegInt = 1
    autoscaling: Autoscaling | None = None
    port: Port = DEFAULT_SERVICE_PORT
    health_check: Text | None = Field(
        None, validation_alias=aliases("healthCheck", "health_check", "health-check")
    )
    timeout: Text | None = None
    target_port: Port | None = Field(
        None, validation_alias=aliases("targetPort", "target_port", "target-port")
    )
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    type: Literal["NodePort", "ClusterIP", "LoadBalancer"] = "NodePort"

    @field_validator("protocol", mode="before")
    @classmethod
    def _protocol(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().upper() in _PROTOCOLS:
            return value.strip().upper()
        raise fail("protocol", f"unknown protocol {show(value)}", f"use one of {', '.join(_PROTOCOLS)}")

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in _SERVICE_TYPES:
            return _SERVICE_TYPES[value.strip().lower()]
        hint = closest(str(value), list(_SERVICE_TYPES.values())) if isinstance(value, str) else None
        fix = f"use one of {', '.join(_SERVICE_TYPES.values())}" + (
            f" (did you mean '{hint}'?)" if hint else ""
        )
        raise fail("service_type", f"unknown Service type {show(value)}", fix)

    @field_validator("health_check")
    @classmethod
    def _health_check(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise fail(
                "health_check",
                f"{show(value)} is not an HTTP path",
                f"start the path with '/', e.g. healthCheck: /{value.lstrip('/') or 'health'}",
            )
        return value

    @model_validator(mode="after")
    def _replicas_or_autoscaling(self) -> Service:
        if self.autoscaling is not None and "replicas" in self.model_fields_set:
            raise fail(
                "replicas_and_autoscaling",
                "service.replicas and service.autoscaling are both set: a service is either fixed-size or "
                "autoscaled",
                "remove service.replicas (the autoscaler keeps minReplicas to maxReplicas), or remove "
                "service.autoscaling for a fixed number of replicas",
                at="replicas",
            )
        return self


class NotebookService(Service):
    """A notebook's service: the Service port is also the container port (the earlier gpuctl defaulted the
    Service to 8000 while Jupyter listened on 8888), and there is exactly one replica."""

    port: Port = NOTEBOOK_PORT

    @field_validator("replicas")
    @classmethod
    def _one_replica(cls, value: int) -> int:
        if value != 1:
            raise fail("notebook_replicas", f"a notebook cannot have {value} replicas", NOTEBOOK_REPLICAS_FIX)
        return value

    @field_validator("autoscaling")
    @classmethod
    def _not_autoscaled(cls, value: Autoscaling | None) -> Autoscaling | None:
        if value is not None:
            raise fail("notebook_replicas", "a notebook cannot be autoscaled", "remove service.autoscaling")
        return value


def normalise_host_path(path: str) -> str:
    """`os.path.normpath`, plus folding POSIX's preserved leading `//` (which would dodge the deny list)."""
    norm = os.path.normpath(path)
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    return norm


def _under(path: str, root: str) -> bool:
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


def path_denied(path: str) -> str | None:
    """The system location (DENIED_HOST_PATHS entry) that forbids hostPath `path` (normalised) whatever the
    admin allows, or None. A path is denied if it equals or lies under an entry; `/` denies only itself."""
    for denied in DENIED_HOST_PATHS:
        if path == denied or (denied != "/" and path.startswith(denied + "/")):
            return denied
    return None


def data_roots(allowed: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
    """Where a writable hostPath may be: HOST_PATH_ROOTS and the admin's `allowed` roots (normalised)."""
    return tuple(dict.fromkeys([*HOST_PATH_ROOTS, *(normalise_host_path(a) for a in allowed)]))


def outside_roots(path: str, allowed: tuple[str, ...] | list[str] = ()) -> bool:
    """A writable hostPath `path` (normalised) lies under no data root."""
    return not any(_under(path, root) for root in data_roots(allowed))


def host_path_refusal(path: str, writable: bool, allowed: tuple[str, ...] | list[str] = ()) -> str:
    """Why hostPath `path` (normalised) may not be mounted, "" when it may: the one rule of `gpuctl create`'s
    storage.workdirs (always writable) and admission's host-path (docs/security.md, "Host paths")."""
    denied = path_denied(path)
    if denied is not None:
        inside = "" if denied == path else f" (inside {denied})"
        return f"host path {path}{inside} is a system location: no team pod mounts it"
    if writable and outside_roots(path, allowed):
        return (
            f"host path {path} would be mounted writable outside the data roots "
            f"({', '.join(data_roots(allowed))})"
        )
    return ""


class Workdir(SpecModel):
    """One `storage.workdirs` entry: a host directory mounted read-write at the same path."""

    path: str

    @model_validator(mode="before")
    @classmethod
    def _plain_path(cls, data: Any) -> Any:
        return {"path": data} if isinstance(data, str) else data

    @field_validator("path")
    @classmethod
    def _path(cls, value: str, info: ValidationInfo) -> str:
        if not value.startswith("/"):
            raise fail(
                "host_path_relative",
                f"{show(value)} is not an absolute path",
                "use an absolute host path such as /data/<team>",
            )
        norm = normalise_host_path(value)
        allowed = tuple((info.context or {}).get("allowed_host_paths", ()))
        why = host_path_refusal(norm, True, allowed)  # a workdir is mounted read-write
        if why:
            raise fail("host_path_denied", why, HOST_PATH_FIX)
        return norm


class Storage(SpecModel):
    """`storage:` — host directories to mount (no PVCs, as in the earlier gpuctl)."""

    workdirs: list[Workdir] = []

    @field_validator("workdirs")
    @classmethod
    def _unique(cls, value: list[Workdir]) -> list[Workdir]:
        seen: dict[str, int] = {}
        for i, workdir in enumerate(value):
            if workdir.path in seen:
                raise fail(
                    "duplicate_workdir",
                    f"{workdir.path} is listed twice (also at [{seen[workdir.path]}])",
                    "remove the duplicate entry",
                    at=f"[{i}]",
                )
            seen[workdir.path] = i
        return value
