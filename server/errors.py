"""The server's exceptions, and the one place each maps to an HTTP status.

    TTSError                      (500 internal_error)
    ├── InvalidRequest            (400)
    ├── LimitExceeded             (413, names the limit)
    ├── Unauthorized              (401)
    ├── Unavailable               (503: not ready, too many connections)
    └── SynthesisError            (500 synthesis_failed)
        └── SynthesisTimeout      (504)

WebSocket client mistakes are :class:`streaming.protocol.ProtocolError` (an ``error``
event, the connection stays open); HTTP and upgrade refusals are the classes here.
"""

from __future__ import annotations


class TTSError(Exception):
    code = "internal_error"
    http_status = 500

    def __init__(self, message: str, *, code: str | None = None, limit: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.limit = limit

    def to_body(self) -> dict[str, object]:
        body: dict[str, object] = {"code": self.code, "message": self.message}
        if self.limit is not None:
            body["limit"] = self.limit
        return {"error": body}


class InvalidRequest(TTSError):
    code = "invalid_request"
    http_status = 400


class LimitExceeded(TTSError):
    code = "limit_exceeded"
    http_status = 413


class Unauthorized(TTSError):
    code = "unauthorized"
    http_status = 401


class Unavailable(TTSError):
    code = "unavailable"
    http_status = 503


class SynthesisError(TTSError):
    code = "synthesis_failed"
    http_status = 500


class SynthesisTimeout(SynthesisError):
    code = "synthesis_timeout"
    http_status = 504
