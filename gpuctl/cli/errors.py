"""Errors a command reports to the user: message on stderr, exit code 1."""

from __future__ import annotations


class CommandError(Exception):
    """A failure the user can act on. `str(e)` is printed as `error: ...`."""
