"""The client's errors: one hierarchy, and one table from the server's error codes to it.

    TTSClientError            code, message, context_id, limit, status_code, body
    ├── AuthError             unauthorized (401): the token is missing or wrong
    ├── UnavailableError      503: no new work now: draining, too_many_connections,
    │   │                     voices_unavailable (the shared voice store is away),
    │   │                     engine_stalled (the engine thread is stuck)
    │   ├── NotReadyError     not_ready: the engine is still loading, or has stopped
    │   ├── BusyError         busy: the engine speaks all it can keep in real time;
    │   │                     retry_after_ms says when to try again
    │   └── ResumeError       resume_failed: a context whose server drained or was lost
    │                         could not be continued on any server (the client's
    │                         ResumePolicy ran out); ``body`` says where its text stopped
    ├── ProtocolError         a message one end could not accept; raised as itself
    │   │                     when the server sent what this client cannot read
    │   └── RequestError      the server refused a message as sent (400): bad_json,
    │       │                 invalid_field, voice_not_found, context_exists, ...
    │       └── LimitError    ... because it broke a limit (``limit``, 413):
    │                         message_too_large, text_too_long, buffer_full,
    │                         too_many_contexts
    └── ContextError          a segment of a context failed on the server (500, 504):
                              synthesis_failed, synthesis_timeout, internal_error;
                              the context goes on with its next segment

The server says every error the same way: a ``code``, a ``message`` and, where they
apply, the ``context_id``, the ``limit`` broken and ``retry_after_ms``. A refused
WebSocket upgrade carries them in its JSON body (``{"error": {...}}``) with an HTTP
status; an ``error`` event carries them on the open connection.
:func:`error_from_event` and :func:`error_from_handshake` turn either into one of the
classes above. Connection failures stay what they are: :class:`OSError` when nothing
answers, :class:`TimeoutError`, and ``websockets``' ``ConnectionClosed`` when the
connection ends.
"""

from __future__ import annotations

import json
from typing import Any

from websockets.exceptions import InvalidStatus

__all__ = [
    "AuthError",
    "BusyError",
    "ContextError",
    "LimitError",
    "NotReadyError",
    "ProtocolError",
    "RequestError",
    "ResumeError",
    "TTSClientError",
    "UnavailableError",
    "error_from_event",
    "error_from_handshake",
]


class TTSClientError(Exception):
    """Base of every error this client raises for what the server said or sent."""

    #: The HTTP status the server gives this error: the refused upgrade's, or for an
    #: ``error`` event the status the same error gets on the HTTP routes.
    status_code: int | None = None

    def __init__(
        self,
        code: str,
        message: str,
        *,
        context_id: str | None = None,
        limit: int | None = None,
        status_code: int | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        #: The server's stable error code (``busy``, ``voice_not_found``, ...).
        self.code = code
        self.message = message
        #: The context the error concerns; ``None`` for the connection as a whole.
        self.context_id = context_id
        #: The configured limit that was reached, when one was.
        self.limit = limit
        if status_code is not None:
            self.status_code = status_code
        #: What the server sent: the ``error`` event, or the upgrade body's ``error``.
        self.body = body or {}


class AuthError(TTSClientError):
    """The server refused the token (HTTP 401): pass the right one to ``connect``."""

    status_code = 401


class UnavailableError(TTSClientError):
    """The server takes no new work now (HTTP 503): try again later, or another replica."""

    status_code = 503


class NotReadyError(UnavailableError):
    """The engine is still loading, or has stopped: wait for ``/ready``, then reconnect."""


class BusyError(UnavailableError):
    """The engine is at capacity; streams already speaking go on. Try again after
    ``retry_after_ms``."""

    def __init__(self, code: str, message: str, **kwargs: Any) -> None:
        super().__init__(code, message, **kwargs)
        hint = self.body.get("retry_after_ms")
        #: When trying again is worth it, in milliseconds (the server's hint).
        self.retry_after_ms: int | None = hint if isinstance(hint, int) else None


class ResumeError(UnavailableError):
    """A context whose server drained or went away could not be continued on another
    within the client's :class:`~chattts_client.ResumePolicy` (``body``: ``attempts``,
    and ``unspoken_from_char``, the first character of its text not heard). The cause
    (``__cause__``) is the last refusal or connection error."""


class ProtocolError(TTSClientError):
    """A message one end could not accept. Raised as itself when the server sent what
    this client cannot read (not ``ready`` first, a frame that is not JSON or is too
    short for an audio header, an upgrade refusal without the server's error body)."""


class RequestError(ProtocolError):
    """The server refused one of this client's messages as sent (HTTP 400): fix the
    field the message names. The connection and its other contexts go on."""

    status_code = 400


class LimitError(RequestError):
    """The message broke a configured limit (``limit``; HTTP 413). ``buffer_full``:
    resend the delta once audio has played; ``too_many_contexts``: end one first."""

    status_code = 413


class ContextError(TTSClientError):
    """The server failed on a segment of the context (HTTP 500, 504 for a timeout): its
    audio has a gap, and the context goes on with its next segment."""

    status_code = 500


#: The server's codes whose class is not what the HTTP status alone would give.
_BY_CODE: dict[str, type[TTSClientError]] = {
    "unauthorized": AuthError,
    "busy": BusyError,
    "not_ready": NotReadyError,
    "engine_stalled": UnavailableError,
    "draining": UnavailableError,
    "too_many_connections": UnavailableError,
    "unavailable": UnavailableError,
    "voices_unavailable": UnavailableError,
    "format_unavailable": UnavailableError,
    "synthesis_failed": ContextError,
    "synthesis_timeout": ContextError,
    "internal_error": ContextError,
}
_STATUS_OF_CODE = {"synthesis_timeout": 504}


def error_from_event(event: dict[str, Any], *, status_code: int | None = None) -> TTSClientError:
    """The exception for an ``error`` event, or for an upgrade refusal's error object
    with its HTTP ``status_code``."""
    code = str(event.get("code") or "unknown_error")
    message = str(event.get("message") or "")
    limit = event.get("limit")
    cls = _BY_CODE.get(code)
    if cls is None and status_code in (401, 503):
        cls = AuthError if status_code == 401 else UnavailableError
    if cls is None and (status_code is None or 400 <= status_code < 500):
        cls = LimitError if isinstance(limit, int) else RequestError
    if cls is None:
        cls = TTSClientError  # a status the server does not use for a coded error
    context_id = event.get("context_id")
    return cls(
        code,
        message,
        context_id=context_id if isinstance(context_id, str) else None,
        limit=limit if isinstance(limit, int) else None,
        status_code=status_code or _STATUS_OF_CODE.get(code),
        body=event,
    )


def error_from_handshake(exc: InvalidStatus) -> TTSClientError:
    """The exception for a refused WebSocket upgrade: its status and JSON error body.

    A refusal without the server's body (a proxy's page, say) is still an
    :class:`AuthError` for 401 and an :class:`UnavailableError` for 503; any other
    status is a :class:`ProtocolError` (not a chattts-stream answer: check the URL).
    """
    status = exc.response.status_code
    try:
        body = json.loads(exc.response.body or b"")
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and "code" in error:
        return error_from_event(error, status_code=status)
    reason = exc.response.reason_phrase or "no error body"
    if status in (401, 503):
        code = "unauthorized" if status == 401 else "unavailable"
        return error_from_event({"code": code, "message": reason}, status_code=status)
    return ProtocolError(
        "unexpected_status",
        f"the upgrade was answered {status} {reason}, not by a chattts-stream server",
        status_code=status,
    )
