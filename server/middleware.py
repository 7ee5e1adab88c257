"""The app's own ASGI middleware: a request body limit and the request counter.

Plain ASGI rather than ``@app.middleware``: Starlette's BaseHTTPMiddleware re-streams
every body through a queue and hides the server's ``send`` (and so the transport, see
:mod:`server.transport`) from the middleware outside it.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.metrics import Metrics
from streaming.errors import LimitExceeded

__all__ = ["BodyLimit", "BodyTooLarge", "RequestCounter"]


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
        self.metrics.errors.labels(kind=error.code).inc()
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


class RequestCounter:
    """ASGI middleware: counts each HTTP request by route template and status.

    Plain ASGI rather than ``@app.middleware``: Starlette's BaseHTTPMiddleware re-streams
    every body through a queue and hides the server's ``send`` (and so the transport) from
    the middleware outside it."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what the server answers if the app fails before starting a response

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            path = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.http_requests.labels(route=path, status=str(status)).inc()
