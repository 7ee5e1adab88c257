"""The FastAPI application: HTTP routes and the WebSocket endpoint, on one port.

``create_app(settings)`` builds everything from the settings; nothing lives at module
level. The engine loads on its own thread after start-up, so /health answers at once and
/ready turns true when the engine is loaded and warm.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.websockets import WebSocketState
from swagger_ui_bundle import swagger_ui_path

from server import __version__, logs
from server.admission import Admission
from server.api_schema import ErrorBody, Health, Readiness
from server.auth import TokenAuth, bearer_token, websocket_token
from server.config import Settings
from server.engines.select import EngineFactory, engine_factory, fallback_factory
from server.errors import report
from server.http_audio import Encoders
from server.http_speech import EXPOSED_HEADERS
from server.metrics import Metrics
from server.middleware import SUMMARY_KEY, BodyLimit, RequestLog
from server.openai_api import openai_routes
from server.session import Session
from server.speech_api import speech_routes
from server.textnorm import TextFrontend
from server.transport import SCOPE_KEY, TransportTap, bound_send_buffer, pending_bytes
from server.voices import VoiceRegistry, Voices
from server.voices_api import voice_routes
from server.worker import EngineWorker
from streaming import protocol as p
from streaming.errors import (
    CLOSE_INTERNAL_ERROR,
    ClientError,
    TTSError,
    Unauthorized,
    Unavailable,
    outcome,
)

logger = logging.getLogger(__name__)

WEB_DIR = Path(__file__).resolve().parent.parent / "web"


class _DenialLogFilter(logging.Filter):
    """Drops uvicorn's spurious ERROR after each WebSocket denial response we send.

    uvicorn's websockets-sansio protocol never marks the handshake complete after a
    ``websocket.http.response`` denial, so every refused client (bad token, server full)
    logs "ASGI callable returned without completing handshake." at ERROR, which trips
    log-level alerting (upstream Kludex/uvicorn PR #3138). The record is emitted right
    after our handler returns, so counting our own denials drops exactly those records.
    """

    MESSAGE = "ASGI callable returned without completing handshake."

    def __init__(self) -> None:
        super().__init__()
        self.pending = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if self.pending > 0 and record.getMessage() == self.MESSAGE:
            self.pending -= 1
            return False
        return True


class AppState:
    """Everything the routes share, built from the settings."""

    def __init__(self, settings: Settings, factory: EngineFactory | None = None) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.auth = TokenAuth(settings.tokens)
        factory = factory or engine_factory(settings)
        self.worker = EngineWorker(
            factory,
            self.metrics,
            warm_up=settings.warm_up,
            fallback=fallback_factory(settings),
            idle_release_s=settings.idle_release_s,
            max_active=settings.max_active_segments,
            policy=settings.batch_policy,
            headroom=settings.admission_headroom,
        )
        self.admission = Admission(
            self.worker,
            self.metrics,
            max_streams=settings.max_streams,
            when_busy=settings.when_busy,
            retry_after_ms=settings.busy_retry_after_ms,
            has_fallback=fallback_factory(settings) is not None,
        )
        self.frontend = TextFrontend(
            allow_control_tags=settings.allow_control_tags, cache_dir=settings.text_cache_dir
        )
        self.voices = Voices(VoiceRegistry(settings.voices_dir), self.worker)
        self.encoders = Encoders()
        self.connections = 0
        self.draining = False
        self.sessions: set[Session] = set()
        self.denial_log_filter = _DenialLogFilter()

    async def release_blocked_sessions(self, grace_s: float) -> None:
        """At shutdown: sessions whose client stopped reading go away (1001) within
        ``grace_s`` instead of holding the process (the others get uvicorn's 1012)."""
        blocked = [s for s in self.sessions if pending_bytes(s.transport)]
        await asyncio.gather(*(session.go_away(grace_s) for session in blocked))

    def require_token(self, request: Request) -> None:
        """Refuse an HTTP request without one of the configured bearer tokens."""
        if not self.auth.accepts(bearer_token(request.headers)):
            raise Unauthorized("missing or invalid bearer token")

    def has_pending_text(self) -> bool:
        """True while any context holds text not yet spoken (read from the drain thread)."""
        try:
            return any(session.core.holds_unspoken_text for session in list(self.sessions))
        except RuntimeError:  # a dict changed size under us: ask again later
            return True


def _validation_error(exc: RequestValidationError) -> ClientError:
    """One ClientError for FastAPI's list of problems (each named by its field)."""
    problems, fields = [], []
    for err in exc.errors():
        if err["type"] == "json_invalid":
            reason = (err.get("ctx") or {}).get("error", "invalid JSON")
            return ClientError(f"the body is not JSON: {reason}", code="invalid_json")
        field = ".".join(str(part) for part in err["loc"][1:])
        fields.append(field)
        problems.append(f"{field or 'body'}: {err['msg']}")
    if not fields:
        return ClientError("invalid request", code="invalid_request")
    return ClientError("; ".join(problems), code="invalid_request", param=fields[0] or None)


def create_app(settings: Settings, *, engine: EngineFactory | None = None) -> FastAPI:
    """The app for ``settings``; ``engine`` overrides the engine choice (tests use it)."""
    state = AppState(settings, engine)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not state.auth.enabled:
            logger.warning(
                "no tokens configured (--token-file / TTS_TOKENS): the API is open to anyone"
            )
        uvicorn_log = logging.getLogger("uvicorn.error")
        uvicorn_log.addFilter(state.denial_log_filter)
        state.worker.start()
        if settings.warm_up:
            state.frontend.start()  # loads the text normaliser on its own thread
        try:
            yield
        finally:
            state.frontend.close()
            await state.encoders.close()
            uvicorn_log.removeFilter(state.denial_log_filter)
            await asyncio.to_thread(state.worker.stop)

    app = FastAPI(
        title="chattts-stream",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,  # served below from the installed package, not a CDN
        redoc_url=None,
        description="Streaming Chinese speech: a WebSocket for text as it arrives "
        "(docs/protocol.md), OpenAI's speech API, this server's own HTTP routes.",
    )
    if settings.cors_origins:
        origins = [o.strip() for o in settings.cors_origins.split(",") if o.strip()]
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
            expose_headers=[*EXPOSED_HEADERS, "Retry-After"],
        )  # fmt: skip
    app.add_middleware(BodyLimit, limit=settings.max_http_body_bytes, metrics=state.metrics)
    app.add_middleware(RequestLog, metrics=state.metrics)
    app.add_middleware(TransportTap)  # last added, so outermost: it must see the server's send
    app.state.tts = state

    @app.exception_handler(TTSError)
    async def tts_error(request: Request, exc: TTSError) -> JSONResponse:
        report(exc, metrics=state.metrics, log=logger, where=f"{request.method} {request.url.path}")
        request.scope.get(SUMMARY_KEY, {})["error"] = exc.code
        headers = {}
        if exc.retry_after_ms is not None:
            headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_ms / 1000)))
        return JSONResponse(exc.to_body(), status_code=outcome(exc).http_status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        error = _validation_error(exc)
        report(
            error, metrics=state.metrics, log=logger, where=f"{request.method} {request.url.path}"
        )
        return JSONResponse(error.to_body(), status_code=422)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        """A bug: logged with its traceback (by the server, after this), answered in the
        one error shape without its details."""
        error = TTSError("internal error (logged on the server)")
        state.metrics.errors.labels(kind=error.code, fault="server").inc()
        return JSONResponse(error.to_body(), status_code=500)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        codes = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
        error = ClientError(
            f"{request.method} {request.url.path}: {exc.detail}",
            code=codes.get(exc.status_code, "invalid_request"),
        )
        body = error.to_body()
        if exc.status_code == 404:
            body["error"]["type"] = "not_found_error"  # type: ignore[index]
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.get(
        "/health",
        response_model=Health,
        responses={503: {"model": Health, "description": "the engine thread has died"}},
    )
    async def health() -> JSONResponse:
        """Liveness: the process serves HTTP and its engine thread has not died."""
        if not state.worker.alive:
            return JSONResponse({"status": "engine thread stopped"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get(
        "/ready",
        response_model=Readiness,
        responses={503: {"model": Readiness, "description": "loading, failed or draining"}},
    )
    async def ready() -> JSONResponse:
        """Readiness: the engine is loaded and warmed up."""
        status = state.worker.status
        # Without warm-up the normaliser loads on first use, so it cannot hold /ready back.
        text_ready = state.frontend.loaded or not settings.warm_up
        ready = state.worker.ready and text_ready and not state.draining
        body = {
            "ready": ready,
            "state": "draining" if state.draining else status.state,
            "text_frontend": {
                "loaded": state.frontend.loaded,
                "normalizer": state.frontend.has_normalizer,
                "load_seconds": state.frontend.load_seconds,
            },
            "engine": status.engine,
            "degraded": status.degraded,
            "detail": status.detail,
            "load_seconds": status.load_seconds,
            "sample_rate": state.worker.engine.sample_rate_hz if state.worker.engine else None,
        }
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get(
        "/metrics",
        response_class=Response,
        responses={
            200: {
                "description": "Prometheus text exposition format",
                "content": {
                    state.metrics.content_type.split(";")[0]: {"schema": {"type": "string"}}
                },
            },
            401: {"model": ErrorBody, "description": "--protect-metrics and no valid token"},
        },
    )
    async def metrics(request: Request) -> Response:
        if settings.protect_metrics:
            state.require_token(request)
        return Response(state.metrics.render(), media_type=state.metrics.content_type)

    app.include_router(speech_routes(state))
    app.include_router(openai_routes(state))
    app.include_router(voice_routes(state))

    @app.get("/docs", include_in_schema=False)
    async def docs() -> Response:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="chattts-stream API",
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="/docs-assets/favicon-32x32.png",
        )

    app.mount("/docs-assets", StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get(
        "/",
        response_class=FileResponse,
        responses={200: {"description": "the live player page", "content": {"text/html": {}}}},
    )
    async def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    if WEB_DIR.is_dir():
        app.mount("/web", StaticFiles(directory=WEB_DIR), name="web")

    @app.websocket("/v1/stream")
    async def stream(websocket: WebSocket) -> None:
        await run_websocket(state, websocket)

    return app


async def run_websocket(state: AppState, websocket: WebSocket) -> None:
    """Authenticate, apply the connection limit, then run a session."""
    settings = state.settings
    metrics = state.metrics
    offered = list(websocket.scope.get("subprotocols") or [])
    token = websocket_token(websocket.headers, offered, websocket.query_params)
    refusal: TTSError | None = None
    if not state.auth.accepts(token):
        refusal = Unauthorized("missing or invalid token")
    elif state.draining:
        refusal = Unavailable("the server is shutting down", code="draining")
    elif not state.worker.ready:
        refusal = Unavailable(f"the engine is {state.worker.status.state}", code="not_ready")
    elif state.connections >= settings.max_connections:
        refusal = Unavailable(
            f"the server holds its maximum of {settings.max_connections} connections",
            code="too_many_connections",
            limit=settings.max_connections,
        )
    if refusal is not None:
        metrics.sessions_refused.labels(reason=refusal.code).inc()
        await websocket.send_denial_response(
            JSONResponse(refusal.to_body(), status_code=outcome(refusal).http_status)
        )
        state.denial_log_filter.pending += 1
        return
    subprotocol = p.SUBPROTOCOL if p.SUBPROTOCOL in offered else None
    state.connections += 1
    metrics.sessions.inc()
    metrics.active_sessions.inc()
    # The client's X-Request-ID names the session when it sends one (echoed in ready).
    session_id = logs.new_request_id(websocket.headers.get("x-request-id"))
    logs.SESSION_ID.set(session_id)  # this task and the context tasks it starts
    try:
        await websocket.accept(subprotocol=subprotocol)
        bound_send_buffer(websocket.scope.get(SCOPE_KEY), settings.ws_send_buffer_bytes)
        logger.info("connected from %s", websocket.client)
        session = Session(
            websocket,
            settings,
            state.worker,
            metrics,
            session_id,
            state.frontend,
            state.admission,
            state.voices,
        )
        state.sessions.add(session)
        try:
            await session.run()
        finally:
            state.sessions.discard(session)
    except Exception as exc:
        report(exc, metrics=metrics, log=logger, where="session")
        if websocket.application_state == WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                await websocket.close(code=CLOSE_INTERNAL_ERROR, reason="internal error")
    finally:
        state.connections -= 1
        metrics.active_sessions.dec()
        logger.info("disconnected")
