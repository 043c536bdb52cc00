"""Errors a command reports to the user: message on stderr, exit code 1 (kubectl's)."""

from __future__ import annotations


class CommandError(Exception):
    """A failure the user can act on. `str(e)` is printed as `error: ...`; with a reason (an API
    status reason such as NotFound) as kubectl prints a server's refusal: `Error from server
    (NotFound): ...`. code: the exit code (1, as kubectl's; `wait` uses others)."""

    def __init__(self, message: str, *, reason: str | None = None, code: int = 1):
        super().__init__(message)
        self.reason = reason
        self.code = code

    def line(self) -> str:
        """What the user reads on stderr."""
        return f"error: {self}" if self.reason is None else f"Error from server ({self.reason}): {self}"


def not_found(resource: str, name: str) -> CommandError:
    """The one NotFound every verb prints, kubectl's: `Error from server (NotFound): jobs "x" not found`
    (resource: the plural kubectl names, jobs, pools, nodes, quotas, namespaces), exit 1."""
    return CommandError(f'{resource} "{name}" not found', reason="NotFound")
