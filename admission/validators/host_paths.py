"""`host-path`: hostPath volumes stay out of `constants.DENIED_HOST_PATHS` (and below; `/` only itself) unless
the admin allowed them (`--allowed-host-path`, `$GPUCTL_ALLOWED_HOST_PATHS`); relative paths are refused.
The deny list and its matching are the spec loader's (gpuctl.spec.models.path_denied).

Python (`check_host_paths`) and CEL (`cel_variables`: the team policy's `hostPaths` and `hostPath`, the
allowed paths compiled in as `variables.allowedHostPaths`) side by side, one fix (`fix`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Final

from admission.policies.cel import TeamCel, cel_list, var, var_name
from admission.rule_names import HOST_PATH
from admission.validators.hints import names
from admission.verdict import Violation
from admission.work import Work
from gpuctl.constants import DENIED_HOST_PATHS
from gpuctl.domain.shape import item, list_at, str_at
from gpuctl.spec.models import normalise_host_path, path_denied

__all__ = [
    "CEL",
    "FIX",
    "RELATIVE_FIX",
    "allowed_under",
    "check_host_paths",
    "fix",
    "host_path",
    "volume_name",
]

RELATIVE_FIX: Final = "use an absolute host path such as /data/<team>"


def fix(outside: str, listed: str = "") -> str:
    """host-path's fix: a directory outside `outside` (the webhook names the entry that denies; the policy,
    which cannot, every entry), the allowed list where the webhook has one, or the admin's flag."""
    return (
        f"mount a directory outside {outside}{listed}, or ask an admin to allow it "
        f"(--allowed-host-path on the webhook)"
    )


# The policy's fix (its findings do not say which entry denied).
FIX: Final = fix(", ".join(DENIED_HOST_PATHS))


def check_host_paths(w: Work, allowed: tuple[str, ...]) -> list[Violation]:
    volumes = w.spec.get("volumes")
    if volumes is None:
        return []
    out: list[Violation] = []
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
        norm, denied = host_path(raw, allowed)
        if denied is not None:
            inside = "" if denied == norm else f" (inside {denied})"
            listed = f" (allowed: {names(allowed)})" if allowed else ""
            out.append(
                Violation(
                    HOST_PATH,
                    f"volume {volume_name(vol)}: mounting host path {norm}{inside} is not allowed",
                    fix(denied, listed),
                    f"{HOST_PATH}={norm}",
                )
            )
    return out


@lru_cache(maxsize=1024)
def host_path(raw: str, allowed: tuple[str, ...]) -> tuple[str, str | None]:
    """(normalised path, the deny-list entry that forbids it or None): pure, and the same few paths (a
    team's data directories) come back in request after request."""
    norm = normalise_host_path(raw)
    return norm, path_denied(norm, allowed)


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


def cel_variables(root: str, pre: str) -> list[tuple[str, str]]:
    """`hostPaths` (each hostPath volume as {name, raw, norm}; device-access reads it too) and `hostPath`
    (the findings). Two steps: the API server's CEL has no cel.bind."""
    denied = cel_list(DENIED_HOST_PATHS)
    paths = (
        f"{var(pre, 'volumes')}.filter(v, has(v.hostPath)).map(v, "
        f"{{'name': string(v.name), 'raw': string(v.hostPath.path),\n"
        f"'norm': {_norm('string(v.hostPath.path)')}}})"
    )
    under = "h.norm == d || (d != '/' && h.norm.startsWith(d + '/'))"
    findings = (
        f"{var(pre, 'hostPaths')}.map(h,\n"
        f"!h.raw.startsWith('/') ?\n"
        f"'volume ' + h.name + ': hostPath ' + h.raw + ' is not an absolute path' :\n"
        f"{allowed_under('h')} ?\n"
        f"'' :\n"
        f"{denied}.exists(d, {under}) ?\n"
        f"'volume ' + h.name + ': mounting host path ' + h.norm + ' (inside ' + "
        f"{denied}.filter(d, {under})[0] + ') is not allowed' : '')"
        f".filter(f, f != '')"
    )
    return [(var_name(pre, "hostPaths"), paths), (var_name(pre, "hostPath"), findings)]


CEL: Final = TeamCel("hostPath", cel_variables)
