"""The composition root: everything the routes and sessions share, built once from the
settings and handed down finished.

:meth:`AppState.build` is the one place that turns :class:`~server.config.Settings`
into running parts: it decides the engine once (:func:`engine_choice`, the model's
manifest read once), and builds the engine worker, admission, the voice store and
registry, the text front-end, metrics and the ffmpeg encoders. The modules below take
plain values or these finished objects and never import the settings; the HTTP routes
(:mod:`server.http`) and the WebSocket endpoint (:mod:`server.ws`) take the state and
never read settings into objects of their own. Nothing here imports a route, so the
routes may import this module freely.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from fastapi import Request

from server.auth import TokenAuth, bearer_token
from server.config import Settings
from server.connection_guard import ConnectionGuard
from server.encoding import Encoders
from server.engines.remote import remote_factory
from server.engines.select import (
    EngineChoice,
    EngineFactory,
    choose_engine,
    engine_factory,
    fallback_factory,
)
from server.lexicon import LexiconFile
from server.metrics import Metrics
from server.runtime.admission import Admission
from server.runtime.phrase_cache import PhraseCache, build_phrase_cache
from server.runtime.worker import EngineWorker
from server.textnorm import TextFrontend
from server.transport import pending_bytes
from server.voices import DirectoryStore, VoiceRegistry, Voices, VoiceStore
from streaming.errors import Unauthorized, Unavailable
from streaming.text import LexiconError

__all__ = ["AppState"]

logger = logging.getLogger(__name__)


class LiveSession(Protocol):
    """What the state needs of a running WebSocket session (server.ws.session.Session)."""

    @property
    def transport(self) -> Any: ...

    @property
    def holds_unspoken_text(self) -> bool: ...

    async def go_away(self, grace_s: float) -> None: ...

    async def drain(self, deadline: float) -> None: ...


class AppState:
    """Everything the routes and sessions share (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        *,
        metrics: Metrics,
        worker: EngineWorker,
        admission: Admission,
        frontend: TextFrontend,
        voices: Voices,
        engine_choice: EngineChoice,
    ) -> None:
        self.settings = settings
        #: The engine start-up chose (the one that serves may be the fallback voice).
        self.engine_choice = engine_choice
        self.metrics = metrics
        self.auth = TokenAuth(settings.tokens)
        self.worker = worker
        self.admission = admission
        self.frontend = frontend
        self.voices = voices
        self.encoders = Encoders()
        #: Segments spoken before, served without the engine (server.runtime.phrase_cache).
        self.phrases: PhraseCache = build_phrase_cache(
            settings.phrase_cache, metrics, settings.voices_store
        )
        #: Connections still to send a request head (uvicorn's protocol, server.lifecycle).
        self.guard = ConnectionGuard(settings.connection_guard, metrics)
        #: The named model is a random-weight checkpoint (reported by /ready).
        self.random_weights = engine_choice.random_weights
        self.connections = 0
        self.draining = False
        #: time.monotonic() by which a drain closes connections (None: not draining).
        self.drain_deadline: float | None = None
        self.sessions: set[LiveSession] = set()
        self._drains: set[asyncio.Task[None]] = set()

    @classmethod
    def build(cls, settings: Settings, engine: EngineFactory | None = None) -> AppState:
        """The state for ``settings``; ``engine`` overrides the engine choice (tests,
        benchmarks)."""
        metrics = Metrics()
        choice = engine_choice(settings)
        fallback = fallback_factory(choice, enabled=settings.fallback_on_synthesis_failure)
        factory = engine or engine_factory(choice)
        if settings.engine_process:
            factory = remote_factory(
                factory, log_level=settings.log_level, log_format=settings.log_format
            )
        worker = EngineWorker(factory, metrics, settings.runtime, fallback=fallback)
        admission = Admission(worker, metrics, settings.admission, has_fallback=bool(fallback))
        frontend = TextFrontend(
            allow_control_tags=settings.allow_control_tags,
            cache_dir=settings.text_cache_dir,
            lexicon=lexicon_file(settings),
            inline_max_chars=settings.text_inline_max_chars,
        )
        voices = Voices(VoiceRegistry(voice_store(settings)), worker)
        metrics.follow_admission(lambda: admission.streams, lambda: _stream_limit(admission))
        return cls(
            settings,
            metrics=metrics,
            worker=worker,
            admission=admission,
            frontend=frontend,
            voices=voices,
            engine_choice=choice,
        )

    def refusal(self) -> Unavailable | None:
        """Why the server cannot take new work now (draining, engine not ready), or None."""
        if self.draining:
            return Unavailable("the server is shutting down", code="draining")
        if not self.worker.ready:
            return Unavailable(f"the engine is {self.worker.status.state}", code="not_ready")
        return None

    def require_token(self, request: Request) -> None:
        """Refuse an HTTP request without one of the configured bearer tokens."""
        if not self.auth.accepts(bearer_token(request.headers)):
            raise Unauthorized("missing or invalid bearer token")

    def tell_sessions_draining(self, deadline: float) -> None:
        """On the event loop, as a drain begins: every session tells its client at once
        and ends its open contexts after the text they accepted (server.ws.session)."""
        self.drain_deadline = deadline
        loop = asyncio.get_running_loop()
        for session in list(self.sessions):
            task = loop.create_task(session.drain(deadline))
            self._drains.add(task)
            task.add_done_callback(self._drains.discard)

    async def release_blocked_sessions(self, grace_s: float) -> None:
        """At shutdown: sessions whose client stopped reading go away (1001) within
        ``grace_s`` instead of holding the process (the others get uvicorn's 1012)."""
        blocked = [s for s in self.sessions if pending_bytes(s.transport)]
        await asyncio.gather(*(session.go_away(grace_s) for session in blocked))

    def has_pending_text(self) -> bool:
        """True while any context holds text not yet spoken (read from the drain thread)."""
        try:
            return any(session.holds_unspoken_text for session in list(self.sessions))
        except RuntimeError:  # a dict changed size under us: ask again later
            return True


def _stream_limit(admission: Admission) -> int:
    """Admission's limit for the metrics; -1 while unbounded (an engine that interleaves,
    not measured yet, takes any number: admission's stand-in is 2**30)."""
    limit = admission.limit()
    return -1 if limit >= 1 << 30 else limit


def lexicon_file(settings: Settings) -> LexiconFile | None:
    """The lexicon file the settings name, read now; a bad one stops the start-up."""
    if settings.lexicon is None:
        return None
    try:
        return LexiconFile(
            settings.lexicon, settings.lexicon_limits, check_s=settings.lexicon_check_s
        )
    except (OSError, UnicodeDecodeError, LexiconError) as exc:
        raise SystemExit(f"cannot use the lexicon (--lexicon, TTS_LEXICON): {exc}") from None


def engine_choice(settings: Settings) -> EngineChoice:
    """The engine the settings name, decided once (its model's manifest read once)."""
    return choose_engine(
        settings.engine,
        settings.model_dir,
        settings.chattts,
        max_active_segments=settings.max_active_segments,
        fallback_on_load_failure=settings.fallback_on_load_failure,
    )


def voice_store(settings: Settings) -> VoiceStore:
    """The store the settings name: Redis for ``--voices-store``, else the directory."""
    if settings.voices_store:
        from server.voices.redis_store import RedisStore

        return RedisStore(
            settings.voices_store,
            timeout_s=settings.voices_store_timeout_s,
            check_timeout_s=settings.voices_store_check_timeout_ms / 1000,
        )
    return DirectoryStore(settings.voices_dir)
