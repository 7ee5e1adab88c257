"""The service's errors: one hierarchy, and one table from each error to what every
interface says about it.

    TTSError                     internal_error     HTTP 500   a bug: logged with its traceback
    ├── ClientError              invalid_request    HTTP 400   a request or message that cannot be accepted
    │   ├── LimitExceeded        limit_exceeded     HTTP 413   names the limit it broke
    │   ├── NotFound             not_found          HTTP 404   a voice, a model, a route
    │   └── Conflict             conflict           HTTP 409   a voice name taken, a preset
    ├── Unauthorized             unauthorized       HTTP 401
    ├── Unavailable              unavailable        HTTP 503   not_ready, draining, too_many_connections,
    │                                                          busy (at capacity: retry_after_ms),
    │                                                          voices_unavailable (the voice store)
    ├── SynthesisError           synthesis_failed   HTTP 500   the engine failed on a segment
    │   └── SynthesisTimeout     synthesis_timeout  HTTP 504
    └── (the engines' own, caught inside the server, never sent as they are)
        Cancelled (cancelled), EspeakError (engine_failed), ModelLoadError (model_load_failed)

Every error carries a stable ``code`` (a subclass's default, or a more precise one such as
``bad_json`` or ``buffer_full``), a ``message`` for humans, and where they apply the
``context_id`` it concerns and the ``limit`` it broke. On the WebSocket an error is an
``error`` event and the connection stays open, whatever the error; only a failure of the
connection itself (never bad input) closes it, with :data:`CLOSE_INTERNAL_ERROR`.
:func:`outcome` is the one table: HTTP status, whose fault, how loudly to log.
Any other exception is reported as ``internal_error`` without its internals.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = [
    "CLOSE_GOING_AWAY",
    "CLOSE_INTERNAL_ERROR",
    "CLOSE_MESSAGE_TOO_BIG",
    "CLOSE_NORMAL",
    "CLOSE_SERVICE_RESTART",
    "ClientError",
    "Conflict",
    "LimitExceeded",
    "NotFound",
    "Outcome",
    "SynthesisError",
    "SynthesisTimeout",
    "TTSError",
    "Unauthorized",
    "Unavailable",
    "outcome",
    "public_message",
]

# WebSocket close codes (RFC 6455 §7.4.1 and IANA's registry), each with its one cause.
CLOSE_NORMAL = 1000  # the client closed, or the server finished
CLOSE_GOING_AWAY = 1001  # shutdown: the drain deadline passed with sends still blocked
CLOSE_MESSAGE_TOO_BIG = 1009  # a frame beyond the transport limit (the websockets library)
CLOSE_INTERNAL_ERROR = 1011  # the connection itself failed (a bug), never bad input
CLOSE_SERVICE_RESTART = 1012  # shutdown after the drain (uvicorn): reconnect and resend


class TTSError(Exception):
    """Base of every error the service reports; see the module docstring for the tree."""

    code = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        context_id: str | None = None,
        limit: int | None = None,
        retry_after_ms: int | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        #: The request field at fault, when one is (HTTP bodies: OpenAI's ``param``).
        self.param = param
        self.message = message
        if code is not None:
            self.code = code
        self.context_id = context_id
        self.limit = limit
        #: When trying again is worth it (busy): a hint, in milliseconds.
        self.retry_after_ms = retry_after_ms

    def to_body(self) -> dict[str, object]:
        """The JSON body of an HTTP error response, the same on every route: OpenAI's
        error object (``message``, ``type``, ``param``, ``code``) plus what applies of
        ``limit`` and ``retry_after_ms``."""
        body: dict[str, object] = {
            "message": self.message,
            "type": outcome(self).error_type,
            "param": self.param,
            "code": self.code,
        }
        if self.limit is not None:
            body["limit"] = self.limit
        if self.retry_after_ms is not None:
            body["retry_after_ms"] = self.retry_after_ms
        return {"error": body}


class ClientError(TTSError):
    """A request or message that cannot be accepted as sent; nothing else is affected."""

    code = "invalid_request"


class LimitExceeded(ClientError):
    """A configured limit was reached; ``limit`` says which value."""

    code = "limit_exceeded"


class NotFound(ClientError):
    """What the request names does not exist (a voice, a model, a route)."""

    code = "not_found"


class Conflict(ClientError):
    """The request contradicts what exists (a voice name taken, a preset)."""

    code = "conflict"


class Unauthorized(TTSError):
    code = "unauthorized"


class Unavailable(TTSError):
    """The service cannot take this work now (loading, stopping, full); try again later."""

    code = "unavailable"


class SynthesisError(TTSError):
    code = "synthesis_failed"


class SynthesisTimeout(SynthesisError):
    code = "synthesis_timeout"


@dataclass(frozen=True)
class Outcome:
    """What one kind of error means to each interface."""

    http_status: int
    #: "client" (the caller's mistake) or "server" (ours, or the engine's).
    fault: str
    #: ``logging`` level for the one log line the error gets where it is handled.
    log_level: int
    #: Whether that line carries the traceback (only for what is a bug).
    traceback: bool
    #: OpenAI's error ``type`` (its clients branch on the status; people read this).
    error_type: str = "invalid_request_error"


_OUTCOMES: dict[type[TTSError], Outcome] = {
    ClientError: Outcome(400, "client", logging.DEBUG, False),
    LimitExceeded: Outcome(413, "client", logging.DEBUG, False),
    NotFound: Outcome(404, "client", logging.DEBUG, False, "not_found_error"),
    Conflict: Outcome(409, "client", logging.DEBUG, False),
    Unauthorized: Outcome(401, "client", logging.INFO, False, "authentication_error"),
    Unavailable: Outcome(503, "server", logging.INFO, False, "server_error"),
    # The engine thread logs the failure itself, with its traceback, where it happens.
    SynthesisError: Outcome(500, "server", logging.WARNING, False, "server_error"),
    SynthesisTimeout: Outcome(504, "server", logging.WARNING, False, "server_error"),
    TTSError: Outcome(500, "server", logging.ERROR, True, "server_error"),
}


def outcome(exc: BaseException) -> Outcome:
    """The table row for ``exc``: its class's, or its nearest ancestor's."""
    if isinstance(exc, TTSError):
        for cls in type(exc).__mro__:
            if cls in _OUTCOMES:
                return _OUTCOMES[cls]
    return _OUTCOMES[TTSError]


def public_message(exc: BaseException) -> tuple[str, str]:
    """``(code, message)`` to tell a client about ``exc``: internals never leave the server."""
    if isinstance(exc, TTSError):
        return exc.code, exc.message
    return TTSError.code, "internal error (logged on the server)"
