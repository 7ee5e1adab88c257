"""Which engine to run, decided from the settings, with the fallback voice as degradation."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from server.config import Settings
from server.engines.base import Engine
from server.engines.chattts.options import ChatTTSOptions

logger = logging.getLogger(__name__)

EngineFactory = Callable[[], tuple[Engine, bool, "str | None"]]


def engine_factory(settings: Settings) -> EngineFactory:
    """A callable that builds the engine on the engine thread: (engine, degraded, detail).

    With ``engine=auto`` and no model directory the fallback voice is the intended
    engine, not a degradation. When ChatTTS was asked for and fails to load, the fallback
    voice serves instead if ``fallback_on_load_failure`` is set, and /ready says so.
    """

    def build() -> tuple[Engine, bool, str | None]:
        from server.engines.espeak import EspeakEngine

        choice = settings.resolved_engine()
        if choice == "espeak":
            detail = None
            if settings.engine == "auto":
                detail = (
                    "no ChatTTS model configured (--model-dir): using the espeak fallback voice"
                )
                logger.warning(detail)
            return EspeakEngine(), False, detail
        try:
            from server.engines.chattts.engine import ChatTTSEngine

            assert settings.model_dir is not None
            return ChatTTSEngine(settings.model_dir, chattts_options(settings)), False, None
        except Exception as exc:
            if not settings.fallback_on_load_failure:
                raise
            detail = f"ChatTTS failed to load ({type(exc).__name__}: {exc}); serving the espeak fallback voice"
            logger.exception("ChatTTS failed to load; falling back to espeak")
            return EspeakEngine(), True, detail

    return build


def fallback_factory(settings: Settings) -> Callable[[], Engine] | None:
    """The engine that speaks segments the main engine failed on, if enabled."""
    if not settings.fallback_on_synthesis_failure or settings.resolved_engine() == "espeak":
        return None

    def build() -> Engine:
        from server.engines.espeak import EspeakEngine

        return EspeakEngine()

    return build


def chattts_options(settings: Settings) -> ChatTTSOptions:
    """The ChatTTS options the settings fix, with what depends on the server resolved."""
    options = settings.chattts
    if options.gpt_cache_slots == 0:  # 0: one slot per segment the worker may interleave
        options = dataclasses.replace(options, gpt_cache_slots=settings.max_active_segments)
    return options
