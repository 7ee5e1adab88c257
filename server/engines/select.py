"""Which engine to run, decided from the settings, with the fallback voice as degradation."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from server.config import Settings
from server.engines.base import Engine

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
            from server.engines.chattts import ChatTTSEngine

            assert settings.model_dir is not None
            return (
                ChatTTSEngine(settings.model_dir, **chattts_options(settings)),
                False,
                None,
            )
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


def chattts_options(settings: Settings) -> dict[str, Any]:
    """The ChatTTSEngine keyword arguments the settings fix."""
    names = (
        "device",
        "compile",
        "temperature",
        "top_p",
        "top_k",
        "max_new_token",
        "decoder",
        "first_chunk_steps",
        "chunk_growth",
        "max_chunk_steps",
        "left_context_frames",
        "lookahead_frames",
        "overlap_samples",
        "gpt_dtype",
        "decoder_dtype",
        "compile_vocoder",
        "vocoder_backend",
        "gpt_cache",
        "gpt_cache_tokens",
        "cuda_graphs",
    )
    options = {name: getattr(settings, name) for name in names}
    # 0: one slot per segment the worker may interleave.
    options["gpt_cache_slots"] = settings.gpt_cache_slots or settings.max_active_segments
    return options
