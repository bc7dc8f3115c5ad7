"""Errors the workbench raises on purpose, each carrying the HTTP status and the field at fault.

Handlers and the CLI turn these into a JSON error or an exit code; anything else that escapes is a
bug and is logged, never shown to the user as a traceback.
"""

from __future__ import annotations

# How much of a user's value an error message repeats: enough to recognise it, never megabytes of it.
QUOTE_LIMIT = 200
# The longest field path an error names (a path made of the keys a user sent).
FIELD_LIMIT = 200
# The longest message an error carries, whatever it embeds (the last guard against echoing input).
MESSAGE_LIMIT = 1000


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """`repr(value)`, shortened to its first `limit` characters and the length it had, for messages
    that name the value a user sent."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


class CubeError(Exception):
    """A failure the user can act on: a message, a machine-readable reason and an HTTP status."""

    status = 400
    reason = "BadRequest"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        if len(message) > MESSAGE_LIMIT:
            message = message[:MESSAGE_LIMIT] + "... (shortened)"
        super().__init__(message)
        self.message = message
        self.field = None if field is None else field[:FIELD_LIMIT]

    def to_dict(self) -> dict[str, str]:
        body = {"message": self.message, "reason": self.reason}
        if self.field is not None:  # "" too: the empty key of a JSON object
            body["field"] = self.field
        return body


class InvalidInput(CubeError):
    """A request or spec field has a bad value."""


class NotFound(CubeError):
    status = 404
    reason = "NotFound"


class PayloadTooLarge(CubeError):
    """A request body over the size the server reads."""

    status = 413
    reason = "PayloadTooLarge"


class Conflict(CubeError):
    status = 409
    reason = "Conflict"


class NotServed(CubeError):
    """The request needs a kind the cluster does not serve (its operator's CRD is not installed):
    nothing the caller can fix by changing it, but not the workbench failing either, so a 409 that
    names the missing CRD, while everything else keeps working."""

    status = 409
    reason = "NotServed"


class Forbidden(CubeError):
    status = 403
    reason = "Forbidden"


class QuotaExceeded(Forbidden):
    reason = "QuotaExceeded"


class BackendUnavailable(CubeError):
    """The backend (cluster API, child process) could not be reached or refused the request."""

    status = 503
    reason = "BackendUnavailable"


class ConfigError(CubeError):
    """Admin configuration is invalid; raised at startup so the server never runs half-configured."""

    reason = "InvalidConfig"
