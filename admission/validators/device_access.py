"""`device-access`: nothing in a team namespace's pod reaches the node's devices (GPUs) behind its requests.

No privileged container, no capability beyond Pod Security `baseline`'s (`constants.BASELINE_CAPABILITIES`;
`CAP_` prefix and case ignored), no `NVIDIA_VISIBLE_DEVICES` & co. set by hand
(`constants.NVIDIA_DEVICE_ENV`),
no hostPath under /dev (`constants.DEVICE_HOST_PATHS`) unless the admin allowed the path, no hostPID/hostIPC.
Init and ephemeral (`kubectl debug`) containers too. A CPU-only pod is charged 0 GPUs but would see every GPU
of its node. docs/admission.md, "Privileged device access". Its CEL (`cel_variables`, the team policy's
`deviceAccess`) is below, on the same tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Final

from admission.policies.cel import POD_SPEC_PATH, TeamCel, cel_list, old_skip, pod_spec, var, var_name
from admission.rule_names import DEVICE_ACCESS
from admission.validators.host_paths import allowed_under, volume_name
from admission.verdict import Malformed, Violation
from admission.work import Work
from gpuctl.constants import BASELINE_CAPABILITIES, DEVICE_HOST_PATHS, NVIDIA_DEVICE_ENV
from gpuctl.domain.shape import item, list_at, obj_at
from gpuctl.spec.models import normalise_host_path

__all__ = ["CEL", "FIX", "check_device_access"]

BASELINE_CAPS: Final = frozenset(BASELINE_CAPABILITIES)
NVIDIA_ENV: Final = frozenset(NVIDIA_DEVICE_ENV)
_DEVICE_FIX: Final = "request GPUs with nvidia.com/gpu (Kueue counts them)"
FIX: Final = (
    "no privileged containers, no capabilities beyond Pod Security baseline's, no hostPath under "
    f"{', '.join(DEVICE_HOST_PATHS)}, no {NVIDIA_DEVICE_ENV[0]} & co., no hostPID/hostIPC: {_DEVICE_FIX}"
)


_CONTAINER_PARTS: Final = ("initContainers", "containers", "ephemeralContainers")


def check_device_access(w: Work, allowed: tuple[str, ...]) -> list[Violation]:
    """device-access: nothing in the pod reaches the node's devices (GPUs) behind its resource requests.
    (Written for CPU like the rest: a container with neither securityContext nor env costs two lookups, and
    paths and texts are only built for what is found.)"""
    spec, sp = w.spec, w.spec_path
    out: list[Violation] = []
    if spec.get("hostPID") is True or spec.get("hostIPC") is True:
        for flag, what in (("hostPID", "process"), ("hostIPC", "IPC")):
            if spec.get(flag) is True:
                out.append(
                    Violation(
                        DEVICE_ACCESS,
                        f"{sp}.{flag} is true: the pod would share the node's {what} namespace with other "
                        f"teams' GPU processes",
                        f"remove {flag}",
                        f"{DEVICE_ACCESS}: {flag}",
                    )
                )
    for part in _CONTAINER_PARTS:
        items = spec.get(part)
        if items is None:
            continue
        if type(items) is not list:
            items = list_at(spec, part, sp)
        for i, c in enumerate(items):
            if type(c) is not dict:
                item(c, f"{sp}.{part}[{i}]")
            sc, env = c.get("securityContext"), c.get("env")
            if sc is not None or env is not None:
                _container_devices(c, sp, part, i, out)
    volumes = spec.get("volumes")
    if volumes is None:
        return out
    if type(volumes) is not list:
        volumes = list_at(spec, "volumes", sp)
    for i, vol in enumerate(volumes):
        if type(vol) is not dict:
            item(vol, f"{sp}.volumes[{i}]")
        hp = vol.get("hostPath")
        raw = hp.get("path") if type(hp) is dict else None
        if type(raw) is not str or not raw.startswith("/"):
            continue  # a missing or relative path is host-path's finding
        norm = normalise_host_path(raw)
        inside = _device_path(norm, allowed)
        if inside is not None:
            out.append(
                Violation(
                    DEVICE_ACCESS,
                    f"volume {volume_name(vol)}: host path {norm} (inside {inside}) holds the node's device "
                    f"nodes",
                    f"remove the volume ({_DEVICE_FIX}; for shared memory use an emptyDir with medium: "
                    f"Memory), or ask an admin to allow the path (--allowed-host-path)",
                    f"{DEVICE_ACCESS}: hostPath {norm}",
                )
            )
    return out


def _container_devices(c: Mapping[str, Any], sp: str, part: str, i: int, out: list[Violation]) -> None:
    """device-access for one container that has a securityContext or env."""
    where = f"{sp}.{part}[{i}]"
    name = c.get("name")
    name = name if type(name) is str and name else str(i)
    if c.get("securityContext") is not None:
        sc = obj_at(c, "securityContext", where)
        if sc.get("privileged") is True:
            out.append(
                Violation(
                    DEVICE_ACCESS,
                    f"container {name} is privileged: it sees every device of the node, GPUs included, while "
                    f"Kueue counts only what it requests",
                    f"remove {part}[{i}].securityContext.privileged; {_DEVICE_FIX}",
                    f"{DEVICE_ACCESS}: {part}/{name} privileged",
                )
            )
        caps = obj_at(sc, "capabilities", f"{where}.securityContext")
        for cap in list_at(caps, "add", f"{where}.securityContext.capabilities"):
            if type(cap) is not str:
                raise Malformed(f"{where}.securityContext.capabilities.add must hold strings")
            if cap.upper().removeprefix("CAP_") not in BASELINE_CAPS:
                out.append(
                    Violation(
                        DEVICE_ACCESS,
                        f"container {name} adds capability {cap}, beyond Pod Security baseline's",
                        f"drop it (baseline allows {', '.join(BASELINE_CAPABILITIES)})",
                        f"{DEVICE_ACCESS}: {part}/{name} cap {cap}",
                    )
                )
    if c.get("env") is None:
        return
    for j, e in enumerate(list_at(c, "env", where)):
        env = (e if type(e) is dict else item(e, f"{where}.env[{j}]")).get("name")
        if env in NVIDIA_ENV:
            out.append(
                Violation(
                    DEVICE_ACCESS,
                    f"container {name} sets {env}: the NVIDIA container runtime would hand it GPUs no quota "
                    f"counted",
                    f"remove it: the device plugin sets it for the GPUs the pod requests; {_DEVICE_FIX}",
                    f"{DEVICE_ACCESS}: {part}/{name} env {env}",
                )
            )


@lru_cache(maxsize=256)
def _device_path(norm: str, allowed: tuple[str, ...]) -> str | None:
    """The DEVICE_HOST_PATHS entry a normalised host path lies in, unless the admin allowed it."""
    for a in allowed:
        a = normalise_host_path(a)
        if a == "/" or norm == a or norm.startswith(a.rstrip("/") + "/"):
            return None
    for d in DEVICE_HOST_PATHS:
        if norm == d or norm.startswith(d + "/"):
            return d
    return None


def cel_variables(root: str, pre: str) -> list[tuple[str, str]]:
    """`deviceAccess`: hostPID/hostIPC, each container part's privileged, capabilities and NVIDIA env, and the
    hostPath volumes (`hostPaths`, host-path's) under DEVICE_HOST_PATHS the admin did not allow."""
    spec, where = pod_spec(root), POD_SPEC_PATH
    base = cel_list(BASELINE_CAPABILITIES)
    up = "(a.upperAscii().startsWith('CAP_') ? a.upperAscii().substring(4) : a.upperAscii())"
    env = cel_list(NVIDIA_DEVICE_ENV)
    parts = []
    for part in _CONTAINER_PARTS:
        lst = f"(has({spec}.{part}) ? {spec}.{part} : [])"
        sc = "has(c.securityContext)"
        add = f"{sc} && has(c.securityContext.capabilities) && has(c.securityContext.capabilities.add)"
        parts += [
            f"{lst}.filter(c, {sc} && has(c.securityContext.privileged) && c.securityContext.privileged)"
            f".map(c, 'container ' + c.name + ' is privileged')",
            f"{lst}.filter(c, {add} && c.securityContext.capabilities.add.exists(a, !({up} in {base})))"
            f".map(c, 'container ' + c.name + ' adds capability ' + "
            f"c.securityContext.capabilities.add.filter(a, !({up} in {base})).join(', '))",
            f"{lst}.filter(c, has(c.env) && c.env.exists(e, e.name in {env}))"
            f".map(c, 'container ' + c.name + ' sets ' + c.env.filter(e, e.name in {env}).map(e, e.name)"
            f".join(', '))",
        ]
    dev = cel_list(DEVICE_HOST_PATHS)
    findings = (
        f"{old_skip(root)}(has({spec}.hostPID) && {spec}.hostPID ? [{where} + '.hostPID is true'] : []) +\n"
        f"(has({spec}.hostIPC) && {spec}.hostIPC ? [{where} + '.hostIPC is true'] : []) +\n"
        + " +\n".join(parts)
        + f" +\n{var(pre, 'hostPaths')}.filter(h, h.raw.startsWith('/') && !({allowed_under('h')}) &&\n"
        f"{dev}.exists(d, h.norm == d || h.norm.startsWith(d + '/')))"
        f".map(h, 'volume ' + h.name + ': host path ' + h.norm + ' holds the node\\'s device nodes')"
    )
    return [(var_name(pre, "deviceAccess"), findings)]


CEL: Final = TeamCel("deviceAccess", cel_variables)
