"""`host-path`: a team pod mounts no system location, and writes only under a data root.

- A hostPath in `constants.DENIED_HOST_PATHS` or below (`/` only itself: /etc, /proc, /usr, /lib, /boot,
  /opt/cni, /var/log, /var/lib/containers, ...) is refused whatever the admin allows: root on the node (CNI
  plugins and kernel modules run as root), other teams' logs and containers (docs/security.md).
- A hostPath some container (init and ephemeral ones too) mounts without `readOnly: true` lies under a data
  root: `constants.HOST_PATH_ROOTS` (the data locations the earlier
  gpuctl's documents use as workdirs: /data, /datasets, /models, ...) or
  one the admin adds (`--allowed-host-path`, `$GPUCTL_ALLOWED_HOST_PATHS`, the chart's allowedHostPaths).
  Read-only mounts elsewhere stay allowed (a model cache, a dataset mirror).
- Relative paths are refused.

The rule is `gpuctl create`'s storage.workdirs rule (gpuctl.spec.models.host_path_refusal: workdirs are
always writable). Python (`check_host_paths`) and CEL (`cel_variables`: the team policy's `hostPaths` and
`hostPath`, the admin's roots compiled in as `variables.allowedHostPaths`) side by side, one fix (FIX).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Final

from admission.policies.cel import TeamCel, cel_list, pod_spec, var, var_name
from admission.rule_names import HOST_PATH
from admission.verdict import Violation
from admission.work import Work
from gpuctl.constants import DENIED_HOST_PATHS, HOST_PATH_ROOTS
from gpuctl.domain.shape import item, list_at, str_at
from gpuctl.spec.models import host_path_refusal, normalise_host_path

__all__ = [
    "CEL",
    "FIX",
    "RELATIVE_FIX",
    "allowed_under",
    "check_host_paths",
    "host_path",
    "volume_name",
    "writable_volumes",
]

RELATIVE_FIX: Final = "use an absolute host path such as /data/<team>"
FIX: Final = (
    "system locations are never mounted; mount a writable directory under a data root (/data/<team>, or one "
    "the admin adds with --allowed-host-path on the webhook), anything else readOnly: true"
)
_PARTS: Final = ("initContainers", "containers", "ephemeralContainers")


def check_host_paths(w: Work, allowed: tuple[str, ...]) -> list[Violation]:
    volumes = w.spec.get("volumes")
    if volumes is None:
        return []
    out: list[Violation] = []
    writable: frozenset[str] | None = None
    for i, vol in enumerate(list_at(w.spec, "volumes", w.spec_path)):
        if type(vol) is not dict:
            item(vol, f"{w.spec_path}.volumes[{i}]")
        hp = vol.get("hostPath")
        if hp is None:
            continue
        raw = hp.get("path") if type(hp) is dict else None
        if type(raw) is not str:
            where = f"{w.spec_path}.volumes[{i}]"
            raw = str_at(item(hp, f"{where}.hostPath"), "path", f"{where}.hostPath")
        if not raw.startswith("/"):
            out.append(
                Violation(
                    HOST_PATH,
                    f"volume {volume_name(vol)}: hostPath {raw!r} is not an absolute path",
                    RELATIVE_FIX,
                    f"{HOST_PATH}={raw}",
                )
            )
            continue
        if writable is None:
            writable = writable_volumes(w.spec, w.spec_path)
        norm, why = host_path(raw, volume_name(vol) in writable, allowed)
        if why:
            out.append(Violation(HOST_PATH, f"volume {volume_name(vol)}: {why}", FIX, f"{HOST_PATH}={norm}"))
    return out


@lru_cache(maxsize=1024)
def host_path(raw: str, writable: bool, allowed: tuple[str, ...]) -> tuple[str, str]:
    """(normalised path, why it may not be mounted or ""): pure, and the same few paths (a team's data
    directories) come back in request after request."""
    norm = normalise_host_path(raw)
    return norm, host_path_refusal(norm, writable, allowed)


def writable_volumes(spec: Mapping[str, Any], where: str) -> frozenset[str]:
    """The volumes some container (init, ephemeral) of the pod spec mounts without `readOnly: true`."""
    out: set[str] = set()
    for part in _PARTS:
        if spec.get(part) is None:
            continue
        for i, c in enumerate(list_at(spec, part, where)):
            cw = f"{where}.{part}[{i}]"
            for j, m in enumerate(list_at(item(c, cw), "volumeMounts", cw)):
                m = item(m, f"{cw}.volumeMounts[{j}]")
                if m.get("readOnly") is not True and type(m.get("name")) is str:
                    out.add(m["name"])
    return frozenset(out)


def volume_name(vol: Mapping[str, Any]) -> str:
    n = vol.get("name")
    return n if type(n) is str and n else "?"


# ---------------------------------------------------------------------------------------------------------
# CEL (the team policy): the same matching, normalise_host_path() in CEL ('..' never passes the API server's
# own validation).


def _norm(p: str) -> str:
    """CEL for normalise_host_path(): drop empty and '.' segments."""
    return f"'/' + {p}.split('/').filter(s, s != '' && s != '.').join('/')"


def allowed_under(h: str) -> str:
    """CEL: the host path `h` (a `hostPaths` entry) is under a path the admin allowed (device-access too)."""
    return f"variables.allowedHostPaths.exists(a, a == '/' || {h}.norm == a || {h}.norm.startsWith(a + '/'))"


def _writable(root: str) -> str:
    """CEL: some container of `root`'s pod spec mounts volume `v` without readOnly ('true'/'false': one map
    of strings)."""
    spec = pod_spec(root)
    parts = " + ".join(f"(has({spec}.{p}) ? {spec}.{p} : [])" for p in _PARTS)
    return (
        f"({parts}).exists(c, has(c.volumeMounts) && c.volumeMounts.exists(m, m.name == v.name && "
        "!(has(m.readOnly) && m.readOnly))) ? 'true' : 'false'"
    )


def cel_variables(root: str, pre: str) -> list[tuple[str, str]]:
    """`hostPaths` (each hostPath volume as {name, raw, norm, writable}; device-access reads it too) and
    `hostPath` (the findings). Two steps: the API server's CEL has no cel.bind."""
    denied = cel_list(DENIED_HOST_PATHS)
    roots = f"({cel_list(HOST_PATH_ROOTS)} + variables.allowedHostPaths)"
    paths = (
        f"{var(pre, 'volumes')}.filter(v, has(v.hostPath)).map(v, "
        f"{{'name': string(v.name), 'raw': string(v.hostPath.path),\n"
        f"'norm': {_norm('string(v.hostPath.path)')},\n"
        f"'writable': {_writable(root)}}})"
    )
    under = "h.norm == d || (d != '/' && h.norm.startsWith(d + '/'))"
    findings = (
        f"{var(pre, 'hostPaths')}.map(h,\n"
        f"!h.raw.startsWith('/') ?\n"
        f"'volume ' + h.name + ': hostPath ' + h.raw + ' is not an absolute path' :\n"
        f"{denied}.exists(d, {under}) ?\n"
        f"'volume ' + h.name + ': host path ' + h.norm + ' is a system location (inside ' + "
        f"{denied}.filter(d, {under})[0] + ')' :\n"
        f"h.writable == 'true' &&\n"
        f"!{roots}.exists(a, a == '/' || h.norm == a || h.norm.startsWith(a + '/')) ?\n"
        "'volume ' + h.name + ': host path ' + h.norm + ' would be mounted writable outside the data roots' "
        ":\n"
        "'')"
        f".filter(f, f != '')"
    )
    return [(var_name(pre, "hostPaths"), paths), (var_name(pre, "hostPath"), findings)]


CEL: Final = TeamCel("hostPath", cel_variables)
