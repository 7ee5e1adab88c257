"""``describe`` -> ``info``: this server as one Wyoming TTS program and its voices.

Every voice of the engine serving (its presets, then the voices created through
``POST /v1/voices``, read from the store at each ``describe``, so a fleet sharing Redis
lists the same ones) is a :class:`wyoming.info.TtsVoice` named as on every other route,
speaking ``zh`` and ``en`` (ChatTTS reads Chinese and English text). Home Assistant
groups voices by language, shows each by its ``description`` (so that is the name
too: a preset's own description reads "preset: the speaker ChatTTS samples from seed
1000") and asks for one by name (``synthesize.voice.name``).
"""

from __future__ import annotations

from wyoming.info import Attribution, Info, TtsProgram, TtsVoice

from server import __version__
from server.state import AppState

__all__ = ["LANGUAGES", "PROGRAM_NAME", "describe"]

LANGUAGES = ["zh", "en"]
PROGRAM_NAME = "chattts-stream"
_ATTRIBUTION = Attribution(name="2noise/ChatTTS", url="https://github.com/2noise/ChatTTS")


async def describe(state: AppState) -> Info:
    """The ``info`` answer now (the store read again: voices created since are listed)."""
    engine = state.voices.engine()
    voices = await state.voices.registry.fetch_list(engine)
    return Info(
        tts=[
            TtsProgram(
                name=PROGRAM_NAME,
                description=f"streaming Chinese and English speech ({engine})",
                attribution=_ATTRIBUTION,
                installed=True,
                version=__version__,
                voices=[
                    TtsVoice(
                        name=voice.name,
                        description=voice.name,  # Home Assistant shows it as the name
                        attribution=_ATTRIBUTION,
                        installed=True,
                        version=None,
                        languages=list(LANGUAGES),
                    )
                    for voice in voices
                ],
                supports_synthesize_streaming=True,
            )
        ]
    )
