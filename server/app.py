"""The FastAPI application: HTTP routes and the WebSocket endpoint, on one port.

``create_app(settings)`` wires the parts :meth:`server.state.AppState.build` made from the
settings into routes, middleware and a lifespan; nothing lives at module level. The
engine loads on its own thread after start-up, so /health answers at once and /ready
turns true when the engine is loaded and warm.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import FastAPI, WebSocket
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import Receive, Scope, Send

from server import __version__, blas, logs
from server.config import Settings
from server.engines.select import EngineFactory
from server.gil import set_switch_interval
from server.heap import CollectionTimer, settle_heap
from server.http.errors import install_error_handlers
from server.http.middleware import BodyLimit, JsonBodies, RequestLog
from server.http.openai_routes import openai_routes
from server.http.speech import EXPOSED_HEADERS
from server.http.system_routes import mount_static, system_routes
from server.http.tts_routes import speech_routes
from server.http.voice_routes import voice_routes
from server.state import AppState
from server.transport import TransportTap, tap
from server.ws.endpoint import DenialLogFilter, run_websocket
from server.wyoming.server import WyomingServer
from streaming.errors import Unavailable

__all__ = ["AppState", "create_app", "time_the_loop"]

logger = logging.getLogger(__name__)

#: The event loop's lag is measured on a timer due this often (tts_event_loop_lag_seconds).
LOOP_TICK_S = 0.1


async def _watch(state: AppState, period_s: float = 1.0) -> None:
    """The engine worker's watchdog (server.runtime.worker), every ``period_s``; and,
    once the engine and the text front-end have loaded, the heap settled (server.heap)."""
    settled = False
    while True:
        await asyncio.sleep(period_s)
        state.worker.watch()
        loaded = state.frontend.loaded or not state.settings.warm_up  # else loaded lazily
        if not settled and loaded and state.worker.status.state != "loading":
            settled = True
            settle_heap(state.settings.heap, when="once loaded", collect=1)


async def time_the_loop(observe: Callable[[float], None], period_s: float = LOOP_TICK_S) -> None:
    """How late the running event loop runs a timer due every ``period_s``: each
    lateness (seconds) to ``observe``, until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + period_s
        await asyncio.sleep(period_s)
        observe(max(0.0, loop.time() - due))


def _lifespan(
    state: AppState, denials: DenialLogFilter
) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """Start-up and shutdown: the voice store, the Wyoming listener (--wyoming-port), the
    engine thread, the text front-end, the watchdog; in reverse at the end."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not state.auth.enabled:
            logger.warning(
                "no tokens configured (--token-file / TTS_TOKENS): the API is open to anyone"
            )
        try:
            await state.voices.registry.open()
        except Unavailable as exc:
            logger.critical("exiting: %s", exc.message)
            raise logs.Reported(exc.message) from None
        wyoming = await _start_wyoming(state)  # before the engine: a taken port stops at once
        settle_heap(state.settings.heap, when="before serving")
        set_switch_interval(state.settings.gil)
        collections = CollectionTimer(state.metrics.gc_pause).install()
        uvicorn_log = logging.getLogger("uvicorn.error")
        uvicorn_log.addFilter(denials)
        state.worker.start()
        if state.settings.warm_up:
            state.frontend.start()  # loads the text normaliser on its own thread
        hangup = _on_hangup(state.frontend.reload_lexicon) if state.frontend.lexicon_file else None
        watchdog = asyncio.create_task(_watch(state), name="engine-watchdog")
        timing = asyncio.create_task(time_the_loop(state.metrics.loop_lag.observe), name="loop-lag")
        try:
            yield
        finally:
            timing.cancel()
            if wyoming is not None:
                await wyoming.close(state.settings.drain_timeout_s)
            if hangup is not None:
                hangup()
            watchdog.cancel()
            collections.remove()
            state.frontend.close()
            await state.encoders.close()
            uvicorn_log.removeFilter(denials)
            await asyncio.to_thread(state.worker.stop)
            await state.voices.registry.close()
            await state.phrases.close()

    return lifespan


async def _start_wyoming(state: AppState) -> WyomingServer | None:
    """The Wyoming listener when --wyoming-port asks for one; a port that cannot be bound
    stops the start-up with one line saying why."""
    if not state.settings.wyoming.wyoming_port:
        return None
    try:
        return await WyomingServer.start(state)
    except OSError as exc:
        message = f"cannot serve the Wyoming protocol on --wyoming-port: {exc}"
        logger.critical("exiting: %s", message)
        raise logs.Reported(message) from None


def _on_hangup(callback: Callable[[], None]) -> Callable[[], None] | None:
    """Call ``callback`` on SIGHUP (the lexicon's reload); returns what removes it, or
    None where the loop cannot take signals (not the main thread, not Unix)."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGHUP, callback)
    except (AttributeError, NotImplementedError, RuntimeError, ValueError):
        return None

    def remove() -> None:
        loop.remove_signal_handler(signal.SIGHUP)

    return remove


class App(FastAPI):
    """FastAPI, with the streaming WebSocket (:meth:`stream_route`) taken straight to its
    endpoint.

    Through the middleware stack, each connection passes a dozen layers (FastAPI's and
    Starlette's error and exception handling, our body limits and request log, the
    router) that do nothing for a WebSocket but call the next, and the same layers wrap
    its ``send``; a burst of new streams pays them on the event loop. The endpoint
    handles its own errors (server.ws.endpoint). Behind a root path (``root_path``) the
    connection takes the stack and its router, as every other route does. What it
    leaves out besides: FastAPI's own OpenTelemetry span for the connection, made when
    a tracer is configured, and any middleware added later that acts on WebSockets.
    """

    _stream_path: str | None = None
    _stream: Callable[[WebSocket], Awaitable[None]] | None = None

    def stream_route(self, path: str, endpoint: Callable[[WebSocket], Awaitable[None]]) -> None:
        """Route WebSocket ``path`` to ``endpoint``: first in the router's table, and
        before the middleware where no root path is set."""
        # A plain Starlette route, first in the table: no FastAPI dependency solving
        # (cookies, query parameters), routed after one comparison.
        self.router.add_websocket_route(path, endpoint)
        self._stream_path, self._stream = path, endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = self._stream
        if (
            stream is not None
            and scope["type"] == "websocket"
            and scope["path"] == self._stream_path
            and not scope.get("root_path")
            and not self.root_path
        ):
            scope["app"] = self
            tap(scope, send)
            await stream(WebSocket(scope, receive, send))
            return
        await super().__call__(scope, receive, send)


def create_app(settings: Settings, *, engine: EngineFactory | None = None) -> App:
    """The app for ``settings``; ``engine`` overrides the engine choice (tests use it)."""
    blas.limit_threads()  # before the engine thread exists (server.blas says why)
    state = AppState.build(settings, engine)
    denials = DenialLogFilter()

    lifespan = _lifespan(state, denials)

    app = App(
        title="chattts-stream",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,  # served by system_routes from the installed package, not a CDN
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
    app.add_middleware(JsonBodies, openapi=app.openapi)  # inside BodyLimit
    app.add_middleware(
        BodyLimit, limit=settings.max_http_body_bytes, timeout_s=settings.body_timeout_s,
        metrics=state.metrics,
    )  # fmt: skip
    app.add_middleware(RequestLog, metrics=state.metrics)
    app.add_middleware(TransportTap)  # last added, so outermost: it must see the server's send
    app.state.tts = state
    install_error_handlers(app, state.metrics)

    async def stream(websocket: WebSocket) -> None:
        await run_websocket(state, websocket, denials)

    app.stream_route("/v1/stream", stream)
    for router in (system_routes, speech_routes, openai_routes, voice_routes):
        app.include_router(router(state))
    mount_static(app)
    return app
