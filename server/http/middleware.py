"""The app's own ASGI middleware: a request body's size and time limits, JSON bodies sent
without their content type, and the request log and counter.

Plain ASGI rather than ``@app.middleware``: Starlette's BaseHTTPMiddleware re-streams
every body through a queue and hides the server's ``send`` (and so the transport, see
:mod:`server.transport`) from the middleware outside it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server import logs
from server.errors import report
from server.metrics import Metrics
from streaming.errors import LimitExceeded

logger = logging.getLogger(__name__)

__all__ = [
    "SENT_CONTENT_TYPE_KEY",
    "SUMMARY_KEY",
    "BodyLimit",
    "BodyTooLarge",
    "BodyTooSlow",
    "JsonBodies",
    "RequestLog",
]


class BodyLimit:
    """ASGI middleware: refuse an HTTP request body over ``limit`` bytes with 413, by its
    Content-Length up front or, when it is chunked, as soon as it grows past the limit;
    and one that has not arrived whole ``timeout_s`` after the app first asks for it (a
    client trickling it) with 408 and ``connection: close``."""

    def __init__(self, app: ASGIApp, limit: int, metrics: Metrics, timeout_s: float = 60.0) -> None:
        self.app = app
        self.limit = limit
        self.timeout_s = timeout_s
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
        deadline: float | None = None
        whole = False

        async def counted() -> Message:
            nonlocal seen, deadline, whole
            if whole:  # after the body: a wait for the client's disconnect, unbounded
                return await receive()
            loop = asyncio.get_running_loop()
            if deadline is None:
                deadline = loop.time() + self.timeout_s
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                self.metrics.connections_closed.labels(reason="body_timeout").inc()
                raise BodyTooSlow(self.timeout_s) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)
                whole = not message.get("more_body", False)
            else:
                whole = True
            return message

        try:
            await self.app(scope, counted, send)
        except BodyTooLarge:
            await self._too_large()(scope, receive, send)


class BodyTooLarge(StarletteHTTPException):
    """Raised while the body is read: an HTTPException so FastAPI passes it on as is."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body exceeds the limit of {limit} bytes")


class BodyTooSlow(StarletteHTTPException):
    """Raised while the body is read, when it is late: FastAPI passes it on as is and the
    app's HTTP error handler answers it (408 ``body_timeout``); its response closes the
    connection (the rest of the body is never read)."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            408,
            f"the request body did not arrive within {timeout_s:g} s (--body-timeout-s)",
            headers={"connection": "close"},
        )


#: Where :class:`JsonBodies` leaves the content type a JSON route's body came with, when
#: it was not JSON's (a body that then does not parse is refused 415, saying so).
SENT_CONTENT_TYPE_KEY = "chattts_stream.sent_content_type"


class JsonBodies:
    """ASGI middleware: a body sent to a route that takes JSON without JSON's content type
    (curl's default ``application/x-www-form-urlencoded``, ``text/plain``, or none) is
    read as JSON: when it parses, the request is served as if the header had been
    right; when it does not, the error handler answers 415 saying what to send
    (:data:`SENT_CONTENT_TYPE_KEY`). ``openapi``: the app's OpenAPI schema, read at the
    first request for the routes whose request body is JSON."""

    def __init__(self, app: ASGIApp, openapi: Callable[[], dict[str, Any]]) -> None:
        self.app = app
        self._openapi = openapi
        self._json_routes: list[tuple[str, re.Pattern[str]]] | None = None

    def _takes_json(self, scope: Scope) -> bool:
        if self._json_routes is None:
            self._json_routes = json_body_routes(self._openapi())
        method, path = scope["method"], scope["path"]
        return any(m == method and regex.fullmatch(path) for m, regex in self._json_routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
            sent = None
            for name, value in scope["headers"]:
                if name == b"content-type":
                    sent = value.decode("latin-1")
            if not _is_json(sent) and self._takes_json(scope):
                headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
                scope = dict(scope, headers=[*headers, (b"content-type", b"application/json")])
                scope[SENT_CONTENT_TYPE_KEY] = sent or "no content type"
        await self.app(scope, receive, send)


def json_body_routes(openapi: dict[str, Any]) -> list[tuple[str, re.Pattern[str]]]:
    """``(METHOD, path regex)`` of each operation of ``openapi`` whose request body is JSON."""
    found = []
    for template, operations in openapi.get("paths", {}).items():
        parts = re.split(r"(\{[^}/]+\})", template)
        regex = re.compile("".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts))
        for method, operation in operations.items():
            content = (operation.get("requestBody") or {}).get("content", {})
            if "application/json" in content:
                found.append((method.upper(), regex))
    return found


def _is_json(content_type: str | None) -> bool:
    """Whether FastAPI reads a body of ``content_type`` as JSON (application/json and
    application/*+json, any parameters)."""
    if content_type is None:
        return False
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (
        kind.startswith("application/") and kind.endswith("+json")
    )


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
