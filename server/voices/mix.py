"""Voices mixed from others: ``POST /v1/voices`` with ``mix``, a weighted list of voices.

ChatTTS speakers are vectors (``spk_emb``, stored as a compressed string): a mix is
their weighted blend (:meth:`ChatTTSEngine.mix_speakers`), kept as an ordinary voice
with that speaker string, in the same store as any other (Redis in a fleet). Each part
is a named voice (a preset, a created voice, another mix) or a raw speaker string; a
voice made from a clip cannot take part (ChatTTS keeps it as the clip's audio codes,
not as a speaker vector), and an engine without speaker vectors (the fallback voice,
espeak-ng) cannot mix at all: both are refused with a message that says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from server.engines.base import VoiceSpec
from server.voices.voice import FALLBACK_ENGINE
from streaming.errors import ClientError

if TYPE_CHECKING:
    from server.runtime.worker import EngineWorker
    from server.voices.registry import Voices

__all__ = ["MIX_MAX_VOICES", "mix_description", "mixed_speaker"]

#: Voices one mix may name at most.
MIX_MAX_VOICES = 8


def _refused(message: str, param: str = "mix") -> ClientError:
    return ClientError(message, code="invalid_voice", param=param)


async def mixed_speaker(
    voices: Voices, worker: EngineWorker, engine: str, parts: Sequence[tuple[str, float]]
) -> str:
    """The speaker string of ``parts`` (voice name, weight) blended on ``engine`` by the
    engine ``worker`` runs."""
    if engine == FALLBACK_ENGINE or voices.engine() != engine:
        raise _refused(
            f"the {engine} voice cannot mix voices: its voices are variants, not speaker "
            "vectors (ChatTTS's voices can be mixed)"
        )
    specs: list[tuple[VoiceSpec, float]] = []
    for index, (name, weight) in enumerate(parts):
        await voices.confirm(name)
        voice = voices.resolve(name)  # unknown: 400 voice_not_found, listing them
        if voice.reference is not None:
            raise _refused(
                f"mix[{index}]: voice {name[:64]!r} is made from a clip, which ChatTTS keeps "
                "as the clip's audio codes, not as a speaker vector: it cannot be mixed"
            )
        specs.append((voice.spec(seed=None, speed=1.0), weight))

    def blend(running: Any) -> str:
        mix = getattr(running, "mix_speakers", None)
        if mix is None:
            raise ValueError(f"the {running.name} engine cannot mix voices")
        result: str = mix(specs)
        return result

    try:
        return await worker.call(blend)
    except ValueError as exc:
        raise _refused(f"mix: {exc}") from None


def mix_description(parts: Sequence[tuple[str, float]]) -> str:
    """What a mix is made of, for its description: ``mix: a 0.7, b 0.3``."""
    total = sum(weight for _, weight in parts)
    shown = ", ".join(f"{name[:64]} {weight / total:.3g}" for name, weight in parts)
    return f"mix: {shown}"[:500]
