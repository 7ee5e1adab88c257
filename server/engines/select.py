"""Which engine runs: decided once at start-up from plain values (:func:`choose_engine`),
then built on the engine thread (:func:`engine_factory`), with the fallback voice as
degradation. The composition root (:mod:`server.state`) reads the settings and calls
these; nothing here knows the settings object.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from server.engines.base import Engine
from server.engines.chattts.manifest import ModelDirectory
from server.engines.chattts.settings import ChatTTSSettings

__all__ = [
    "RANDOM_WEIGHTS_MAX_NEW_TOKEN",
    "EngineChoice",
    "EngineFactory",
    "build_engine",
    "choose_engine",
    "engine_factory",
    "fallback_factory",
]

logger = logging.getLogger(__name__)

EngineFactory = Callable[[], tuple[Engine, bool, "str | None"]]

#: GPT steps per segment for a random-weight model when --max-new-token was left at its
#: default: about 5 s of audio.
RANDOM_WEIGHTS_MAX_NEW_TOKEN = 240


@dataclass(frozen=True)
class EngineChoice:
    """The engine start-up decided on, with everything its load needs, finished."""

    #: chattts or espeak.
    name: str
    #: The ChatTTS model directory with its manifest, read once (None: espeak).
    model: ModelDirectory | None = None
    #: The ChatTTS settings with what depends on the server resolved.
    chattts: ChatTTSSettings = field(default_factory=ChatTTSSettings)
    #: espeak because no model was configured (auto), not because it was asked for.
    implied: bool = False
    #: Serve the fallback voice (degraded) when ChatTTS fails to load, instead of failing.
    fallback_on_load_failure: bool = False

    @property
    def random_weights(self) -> bool:
        """The model is a generated, random-weight checkpoint (its manifest says so)."""
        return self.model is not None and self.model.random_weights


def choose_engine(
    engine: str,
    model_dir: Path | None,
    chattts: ChatTTSSettings,
    *,
    max_active_segments: int,
    fallback_on_load_failure: bool = False,
) -> EngineChoice:
    """Decide the engine: ``engine`` is auto, chattts or espeak. A ChatTTS model's
    manifest is read here, once (a manifest that cannot be read fails the load later)."""
    if engine == "auto":
        engine = "chattts" if model_dir is not None else "espeak"
        implied = engine == "espeak"
    else:
        implied = False
    model = None
    if engine == "chattts" and model_dir is not None:
        model = ModelDirectory.read(model_dir)
    random_weights = model is not None and model.random_weights
    return EngineChoice(
        engine,
        model,
        _resolved(chattts, max_active_segments, random_weights=random_weights),
        implied=implied,
        fallback_on_load_failure=fallback_on_load_failure,
    )


def _resolved(
    options: ChatTTSSettings, max_active_segments: int, *, random_weights: bool
) -> ChatTTSSettings:
    """The ChatTTS settings with what depends on the server resolved.

    A random-weight model ends a segment at a random step, so left at the default
    ``max_new_token`` a smoke run could speak noise for 44 s a segment: it gets
    :data:`RANDOM_WEIGHTS_MAX_NEW_TOKEN` unless the setting was changed."""
    if options.gpt_cache_slots == 0:  # 0: one slot per segment the worker may interleave
        options = dataclasses.replace(options, gpt_cache_slots=max_active_segments)
    default = ChatTTSSettings().max_new_token
    if options.max_new_token == default and random_weights:
        options = dataclasses.replace(
            options,
            max_new_token=RANDOM_WEIGHTS_MAX_NEW_TOKEN,
            min_new_token=min(options.min_new_token, RANDOM_WEIGHTS_MAX_NEW_TOKEN),
        )
    return options


def engine_factory(choice: EngineChoice) -> EngineFactory:
    """A callable that builds the chosen engine on the engine thread (:func:`build_engine`);
    it pickles, so the engine may be built in a process of its own (``--engine-process``)."""
    return functools.partial(build_engine, choice)


def build_engine(choice: EngineChoice) -> tuple[Engine, bool, str | None]:
    """The chosen engine: (engine, degraded, detail).

    With ``engine=auto`` and no model directory the fallback voice is the intended
    engine, not a degradation. When ChatTTS was asked for and fails to load, the fallback
    voice serves instead if ``choice.fallback_on_load_failure``, and /ready says so.
    """
    from server.engines.espeak import EspeakEngine

    if choice.name == "espeak":
        detail = None
        if choice.implied:
            detail = "no ChatTTS model configured (--model-dir): using the espeak fallback voice"
            logger.warning(detail)
        return EspeakEngine(), False, detail
    try:
        from server.engines.chattts.engine import ChatTTSEngine

        assert choice.model is not None
        engine = ChatTTSEngine(choice.model, choice.chattts)
    except Exception as exc:
        if not choice.fallback_on_load_failure:
            raise
        detail = f"ChatTTS failed to load ({type(exc).__name__}: {exc}); serving the espeak fallback voice"
        logger.error("%s", detail)
        logger.debug("ChatTTS load failure", exc_info=True)
        return EspeakEngine(), True, detail
    if choice.random_weights:
        assert choice.model is not None
        logger.warning(
            "the model in %s has random weights (a generated checkpoint): it speaks "
            "noise; it is for tests and benchmarks",
            choice.model.path,
        )
    return engine, False, None


def fallback_factory(choice: EngineChoice, *, enabled: bool) -> Callable[[], Engine] | None:
    """The engine that speaks segments the main engine failed on, if ``enabled`` (and the
    main engine is not the fallback voice itself)."""
    if not enabled or choice.name == "espeak":
        return None

    def build() -> Engine:
        from server.engines.espeak import EspeakEngine

        return EspeakEngine()

    return build
