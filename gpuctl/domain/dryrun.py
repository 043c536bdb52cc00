"""The one dry-run type, resolved once from the flags (kubectl's GetDryRunStrategy).

- NONE:   really write.
- CLIENT: compute and print what would be sent; no request that changes anything, and no request
          at all when the documents need nothing from the cluster.
- SERVER: send every write with dryRun=All: the API server (and its admission webhooks) validate it
          and persist nothing.

Every mutating function of gpuctl takes a DryRun and nothing downstream compares strings.
"""

from __future__ import annotations

from enum import StrEnum


class DryRun(StrEnum):
    NONE = "none"
    CLIENT = "client"
    SERVER = "server"

    @classmethod
    def parse(cls, value: str | bool | None) -> DryRun:
        """From a flag or API field: `--dry-run` alone (True or "") is client, as in kubectl;
        None/False/"none"/"false" is none; "client"/"server"/"true" as named."""
        if value is None or value is False:
            return cls.NONE
        if value is True:
            return cls.CLIENT
        v = str(value).strip().lower()
        if v in ("", "client", "true"):
            return cls.CLIENT
        if v in ("none", "false"):
            return cls.NONE
        if v in ("server", "all"):
            return cls.SERVER
        raise ValueError(f'invalid dry-run value "{value}": use none, client or server')

    @property
    def writes(self) -> bool:
        """Whether any write reaches the API server (SERVER writes with dryRun=All)."""
        return self is not DryRun.CLIENT

    @property
    def persists(self) -> bool:
        return self is DryRun.NONE

    def suffix(self) -> str:
        """What kubectl appends to each line of output."""
        return {DryRun.CLIENT: " (dry run)", DryRun.SERVER: " (server dry run)"}.get(self, "")
