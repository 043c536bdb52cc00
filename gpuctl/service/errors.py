"""Errors of the service layer, and turning any exception into one line for a user."""

from __future__ import annotations

import json

from gpuctl.service.access import Permissions, describe_forbidden, forbidden_message


class ServiceError(Exception):
    """A rule of gpuctl was not met; the message says what and how to fix it."""

    status = 400


class NotFound(ServiceError):
    """resource (kubectl's plural: jobs, pools, nodes, quotas, namespaces) and name: the object asked for
    by name that does not exist; the CLI prints kubectl's `Error from server (NotFound): jobs "x" not
    found` for every verb (gpuctl.cli.errors.not_found); the message stays the API's text."""

    status = 404

    def __init__(self, message: str, *, resource: str | None = None, name: str | None = None):
        super().__init__(message)
        self.resource, self.name = resource, name


class Conflict(ServiceError):
    status = 409


class Forbidden(ServiceError):
    status = 403


def require(
    perms: Permissions, verb: str, resource: str, group: str = "", namespace: str | None = None
) -> None:
    """Forbidden, naming the role to bind, unless the caller may (asked before a change that only
    some roles may make, so a team member learns it needs gpuctl-admin rather than a later check's
    complaint about the cluster's state)."""
    if not perms.allows(verb, resource, group, namespace):
        raise Forbidden(forbidden_message(verb, resource, group, namespace))


def describe_exception(e: BaseException, readable: str | None = None) -> str:
    """One line for any exception: for a 403, what was refused and the role to bind (readable: the
    namespace the caller may read instead, suggested as -n); the API server's message for other API
    errors, else str(e)."""
    forbidden = describe_forbidden(e, readable)
    if forbidden:
        return forbidden
    body = getattr(e, "body", None)
    if isinstance(body, dict):  # gpuctl.cluster.ApiError: the API server's Status, already decoded
        return str(body.get("message") or getattr(e, "message", "") or e)
    if body:
        try:
            return str(json.loads(body).get("message") or body)
        except (ValueError, AttributeError):
            return str(body)
    reason = getattr(e, "reason", None)
    status = getattr(e, "status", None)
    if reason and status:
        return f"{status} {reason}"
    return str(e) or type(e).__name__
