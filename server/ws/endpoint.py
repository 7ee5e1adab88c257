"""The WebSocket endpoint: authenticate the upgrade, apply the connection limit (and, with
``--busy-at-upgrade``, refuse it while the engine is full), run a
:class:`~server.ws.session.Session`."""

from __future__ import annotations

import contextlib
import logging

from fastapi import WebSocket
from fastapi.responses import JSONResponse
from starlette.websockets import WebSocketState

from server import logs
from server.auth import query_of, websocket_token
from server.errors import report
from server.state import AppState
from server.transport import SCOPE_KEY, bound_send_buffer
from server.ws.session import Session
from streaming import protocol as p
from streaming.errors import CLOSE_INTERNAL_ERROR, TTSError, Unauthorized, Unavailable, outcome

__all__ = ["DenialLogFilter", "run_websocket"]

logger = logging.getLogger(__name__)


class DenialLogFilter(logging.Filter):
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


def _refusal(state: AppState, websocket: WebSocket, offered: list[str]) -> TTSError | None:
    token = websocket_token(websocket.headers, offered, query_of(websocket))
    if not state.auth.accepts(token):
        return Unauthorized("missing or invalid token")
    refusal = state.refusal()
    if refusal is not None:
        return refusal
    limit = state.settings.max_connections
    if state.connections >= limit:
        return Unavailable(
            f"the server holds its maximum of {limit} connections",
            code="too_many_connections",
            limit=limit,
        )
    return _no_room(state)


def _no_room(state: AppState) -> Unavailable | None:
    """With --busy-at-upgrade: ``busy`` while a new stream would be refused, so that a
    balancer retries the upgrade on another replica (nothing reached the client yet).
    Not with --when-busy fallback: there a full server still speaks, on the fallback."""
    settings = state.settings
    if not settings.busy_at_upgrade or settings.when_busy != "refuse":
        return None
    return state.admission.refusal()


async def run_websocket(state: AppState, websocket: WebSocket, denials: DenialLogFilter) -> None:
    """Authenticate, apply the connection limit, then run a session."""
    metrics = state.metrics
    offered = list(websocket.scope.get("subprotocols") or [])
    refusal = _refusal(state, websocket, offered)
    if refusal is not None:
        metrics.sessions_refused.labels(reason=refusal.code).inc()
        await websocket.send_denial_response(
            JSONResponse(refusal.to_body(), status_code=outcome(refusal).http_status)
        )
        denials.pending += 1
        return
    state.connections += 1
    metrics.sessions.inc()
    metrics.active_sessions.inc()
    # The client's X-Request-ID names the session when it sends one (echoed in ready).
    session_id = logs.new_request_id(websocket.headers.get("x-request-id"))
    logs.SESSION_ID.set(session_id)  # this task and the context tasks it starts
    try:
        await websocket.accept(subprotocol=p.SUBPROTOCOL if p.SUBPROTOCOL in offered else None)
        bound_send_buffer(websocket.scope.get(SCOPE_KEY), state.settings.ws_send_buffer_bytes)
        logger.info("connected from %s", websocket.client)
        session = Session(websocket, state, session_id)
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
