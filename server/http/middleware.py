"""The app's own ASGI middleware: a request body limit, and the request log and counter.

Plain ASGI rather than ``@app.middleware``: Starlette's BaseHTTPMiddleware re-streams
every body through a queue and hides the server's ``send`` (and so the transport, see
:mod:`server.transport`) from the middleware outside it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server import logs
from server.errors import report
from server.metrics import Metrics
from streaming.errors import LimitExceeded

logger = logging.getLogger(__name__)

__all__ = ["SUMMARY_KEY", "BodyLimit", "BodyTooLarge", "RequestLog"]


class BodyLimit:
    """ASGI middleware: refuse an HTTP request body over ``limit`` bytes with 413, by its
    Content-Length up front or, when it is chunked, as soon as it grows past the limit."""

    def __init__(self, app: ASGIApp, limit: int, metrics: Metrics) -> None:
        self.app = app
        self.limit = limit
        self.metrics = metrics

    def _too_large(self) -> JSONResponse:
        error = LimitExceeded(
            f"the request body exceeds the limit of {self.limit} bytes (--max-http-body-bytes)",
            code="body_too_large",
            limit=self.limit,
        )
        report(error, metrics=self.metrics, log=logger, where="request body")
        return JSONResponse(error.to_body(), status_code=413)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large()(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        try:
            await self.app(scope, counted, send)
        except BodyTooLarge:
            await self._too_large()(scope, receive, send)


class BodyTooLarge(StarletteHTTPException):
    """Raised while the body is read: an HTTPException so FastAPI passes it on as is."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body exceeds the limit of {limit} bytes")


#: Routes whose summary line is logged at DEBUG: probes and scrapes, every few seconds.
_QUIET_ROUTES = frozenset({"/health", "/ready", "/metrics"})
#: Where a route leaves the fields of its request's summary line (a dict).
SUMMARY_KEY = "chattts_stream.summary"


class RequestLog:
    """ASGI middleware: every HTTP request gets an id (the client's ``X-Request-ID`` when
    sane, else a new one), echoed in the response and put on every log line written
    while serving it; when it ends, it is counted by route template and status and gets
    exactly one summary line (see server.logs)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        offered = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = logs.new_request_id(offered)
        token = logs.REQUEST_ID.set(request_id)
        fields: dict[str, Any] = {}
        scope[SUMMARY_KEY] = fields
        status = 500  # what the server answers if the app fails before starting a response
        started = time.perf_counter()

        async def tagged(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, tagged)
        finally:
            path = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.http_requests.labels(route=path, status=str(status)).inc()
            elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
            line = f"{scope['method']} {scope['path']} {status}"
            fields = {"method": scope["method"], "route": path, "status": status,
                      "ms": elapsed_ms, **fields}  # fmt: skip
            if path in _QUIET_ROUTES and status < 400:
                logs.summary("http", line, level=logging.DEBUG, **fields)
            else:
                logs.summary("http", line, **fields)
            logs.REQUEST_ID.reset(token)
