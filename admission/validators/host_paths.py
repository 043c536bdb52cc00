"""`host-path`: hostPath volumes stay out of `constants.DENIED_HOST_PATHS` (and below; `/` only itself) unless
the admin allowed them (`--allowed-host-path`, `$GPUCTL_ALLOWED_HOST_PATHS`); relative paths are refused.
The deny list and its matching are the spec loader's (gpuctl.spec.models.path_denied)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from admission.rule_names import HOST_PATH
from admission.validators.hints import names
from admission.verdict import Violation
from admission.work import Work
from gpuctl.domain.shape import item, list_at, str_at
from gpuctl.spec.models import normalise_host_path, path_denied

__all__ = ["check_host_paths", "host_path", "volume_name"]


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
                    "use an absolute host path such as /data/<team>",
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
                    f"mount a directory outside {denied}{listed}, or ask an admin to allow it "
                    f"(--allowed-host-path on the webhook)",
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
