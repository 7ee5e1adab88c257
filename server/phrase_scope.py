"""Which phrase-cache partition and identity an utterance speaks under, from the app's
state: its seed is fixed (the caller's, or its named voice's own), its caller is the token
it presented (server.runtime.phrase_cache holds the cache and the rules of a scope)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.auth import query_of, websocket_token
from server.runtime.phrase_cache import PhraseScope, scope_for

if TYPE_CHECKING:
    from starlette.websockets import WebSocket

    from server.state import AppState
    from streaming.utterance import UtteranceVoice

__all__ = ["context_scope", "utterance_scope"]


def utterance_scope(
    state: AppState, voice: str | None, *, seed_given: bool, fallback: bool, token: str | None
) -> PhraseScope | None:
    """How an utterance in ``voice`` may use the server's cache (:func:`scope_for`): its
    seed is fixed when the caller gave one or its named voice has its own."""
    return scope_for(
        state.phrases,
        state.worker.engine,
        fallback=fallback,
        seed_fixed=seed_given or _own_seed(state, voice, fallback=fallback),
        token=token,
        tokens_on=state.auth.enabled,
    )


def context_scope(
    state: AppState, voice: UtteranceVoice, websocket: WebSocket
) -> PhraseScope | None:
    """:func:`utterance_scope` for a WebSocket context, its caller the token the
    connection presented."""
    token = websocket_token(
        websocket.headers, websocket.scope.get("subprotocols", []), query_of(websocket)
    )
    return utterance_scope(
        state, voice.voice, seed_given=voice.seed_given, fallback=voice.fallback, token=token
    )


def _own_seed(state: AppState, voice: str | None, *, fallback: bool) -> bool:
    if voice is None:
        return False
    try:
        return state.voices.resolve(voice, fallback=fallback).seed is not None
    except Exception:  # resolved already by the caller: a name gone since is no seed
        return False
