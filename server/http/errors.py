"""Every HTTP error answered in the one error shape (OpenAI's error object), counted and
logged once through :func:`server.errors.report`."""

from __future__ import annotations

import logging
import math

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from server.errors import report
from server.http.middleware import SENT_CONTENT_TYPE_KEY, SUMMARY_KEY
from server.metrics import Metrics
from streaming.errors import ClientError, TTSError, outcome

__all__ = ["install_error_handlers"]

logger = logging.getLogger(__name__)


def validation_error(exc: RequestValidationError) -> ClientError:
    """One ClientError for FastAPI's list of problems (each named by its field)."""
    problems, fields = [], []
    for err in exc.errors():
        if err["type"] == "json_invalid":
            reason = (err.get("ctx") or {}).get("error", "invalid JSON")
            return ClientError(f"the body is not JSON: {reason}", code="invalid_json")
        field = ".".join(str(part) for part in err["loc"][1:])
        if not field and err["type"] in ("model_attributes_type", "dict_type", "model_type"):
            # pydantic's words for a body that is JSON but not an object
            return ClientError("the body must be a JSON object ({...})", code="invalid_request")
        fields.append(field)
        problems.append(f"{field or 'body'}: {err['msg']}")
    if not fields:
        return ClientError("invalid request", code="invalid_request")
    return ClientError("; ".join(problems), code="invalid_request", param=fields[0] or None)


def install_error_handlers(app: FastAPI, metrics: Metrics) -> None:
    """Register the handlers that turn every failure into the one error shape."""

    @app.exception_handler(TTSError)
    async def tts_error(request: Request, exc: TTSError) -> JSONResponse:
        report(exc, metrics=metrics, log=logger, where=f"{request.method} {request.url.path}")
        request.scope.get(SUMMARY_KEY, {})["error"] = exc.code
        headers = {}
        if exc.retry_after_ms is not None:
            headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_ms / 1000)))
        return JSONResponse(exc.to_body(), status_code=outcome(exc).http_status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        error = validation_error(exc)
        status = 422
        sent = request.scope.get(SENT_CONTENT_TYPE_KEY)
        if sent is not None and error.code == "invalid_json":
            status = 415  # not JSON, and not said to be: say what to send
            error = ClientError(
                "the body must be a JSON object sent with content-type: application/json "
                f"(curl: -H 'content-type: application/json'); it came with {sent[:100]} "
                "and is not JSON",
                code="unsupported_media_type",
            )
        report(error, metrics=metrics, log=logger, where=f"{request.method} {request.url.path}")
        return JSONResponse(error.to_body(), status_code=status)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        """A bug: logged with its traceback (by the server, after this), answered in the
        one error shape without its details."""
        error = TTSError("internal error (logged on the server)")
        # Not report(): Starlette's ServerErrorMiddleware logs the traceback after this.
        metrics.errors.labels(kind=error.code, fault="server").inc()
        return JSONResponse(error.to_body(), status_code=500)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        codes = {
            404: "not_found", 405: "method_not_allowed", 408: "body_timeout",
            413: "body_too_large",
        }  # fmt: skip
        error = ClientError(
            f"{request.method} {request.url.path}: {exc.detail}",
            code=codes.get(exc.status_code, "invalid_request"),
        )
        body = error.to_body()
        if exc.status_code == 404:
            body["error"]["type"] = "not_found_error"  # type: ignore[index]
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)
