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

#: GPT steps per segment for a random-weight model when --max-new-token was left at its
#: default: about 5 s of audio.
RANDOM_WEIGHTS_MAX_NEW_TOKEN = 240


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
            engine = ChatTTSEngine(settings.model_dir, chattts_options(settings))
        except Exception as exc:
            if not settings.fallback_on_load_failure:
                raise
            detail = f"ChatTTS failed to load ({type(exc).__name__}: {exc}); serving the espeak fallback voice"
            logger.error("%s", detail)
            logger.debug("ChatTTS load failure", exc_info=True)
            return EspeakEngine(), True, detail
        if has_random_weights(settings):
            logger.warning(
                "the model in %s has random weights (a generated checkpoint): it speaks "
                "noise; it is for tests and benchmarks",
                settings.model_dir,
            )
        return engine, False, None

    return build


def fallback_factory(settings: Settings) -> Callable[[], Engine] | None:
    """The engine that speaks segments the main engine failed on, if enabled."""
    if not settings.fallback_on_synthesis_failure or settings.resolved_engine() == "espeak":
        return None

    def build() -> Engine:
        from server.engines.espeak import EspeakEngine

        return EspeakEngine()

    return build


def has_random_weights(settings: Settings) -> bool:
    """The ChatTTS model named by the settings is a generated, random-weight checkpoint
    (its manifest says so); False for real weights or no model."""
    if settings.resolved_engine() != "chattts" or settings.model_dir is None:
        return False
    from server.engines.chattts.checkpoint import read_manifest

    try:
        manifest = read_manifest(settings.model_dir)
    except Exception:
        return False  # the load reports what is wrong with it
    return bool(manifest and manifest.get("random_weights"))


def chattts_options(settings: Settings) -> ChatTTSOptions:
    """The ChatTTS options the settings fix, with what depends on the server resolved.

    A random-weight model ends a segment at a random step, so left at the default
    ``max_new_token`` a smoke run could speak noise for 44 s a segment: it gets
    :data:`RANDOM_WEIGHTS_MAX_NEW_TOKEN` unless the setting was changed."""
    options = settings.chattts
    if options.gpt_cache_slots == 0:  # 0: one slot per segment the worker may interleave
        options = dataclasses.replace(options, gpt_cache_slots=settings.max_active_segments)
    default = ChatTTSOptions().max_new_token
    if options.max_new_token == default and has_random_weights(settings):
        options = dataclasses.replace(
            options,
            max_new_token=RANDOM_WEIGHTS_MAX_NEW_TOKEN,
            min_new_token=min(options.min_new_token, RANDOM_WEIGHTS_MAX_NEW_TOKEN),
        )
    return options
