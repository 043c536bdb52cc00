"""Errors of the service layer, and turning any exception into one line for a user."""

from __future__ import annotations

import json


class ServiceError(Exception):
    """A rule of gpuctl was not met; the message says what and how to fix it."""

    status = 400


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class Forbidden(ServiceError):
    status = 403


def describe_exception(e: BaseException) -> str:
    """One line for any exception: the API server's message for ApiException, else str(e)."""
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
