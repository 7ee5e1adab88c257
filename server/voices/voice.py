"""One named voice: what it fixes, the presets every engine ships, and its stored form.

A stored voice is one JSON object (:func:`voice_record`), the same in a file of the
directory store and in a Redis hash field; :func:`voice_from_record` checks one field by
field, so a damaged record is skipped with a warning, never loaded half right.
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from server.engines.base import VoiceSpec

__all__ = [
    "FALLBACK_ENGINE",
    "NAME_RULES",
    "PRESET_NAMES",
    "Voice",
    "default_voices_dir",
    "is_voice_name",
    "presets",
    "voice_from_record",
    "voice_record",
]

#: OpenAI's built-in voice names: every engine has a preset of each.
PRESET_NAMES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx",
    "nova", "sage", "shimmer", "verse", "marin", "cedar",
)  # fmt: skip
# The fallback voice's variant for each preset (espeak-ng's Mandarin voice variants).
_ESPEAK_PRESETS = ("f1", "m1", "m2", "f2", "m3", "f3", "m4", "f4", "m6", "f1", "m2", "f2", "m1")
_PRESET_SEED_BASE = 1000
#: The engine of the fallback voice (server.engines.select builds no other).
FALLBACK_ENGINE = "espeak"
# A created voice's name: letters and digits of any script, '.', '_' and '-', starting
# with a letter or digit (so never '.', '..' or a hidden file), in Unicode NFC (one
# spelling per name). It is also a file name (<name>.json, and a temporary
# .<name>.XXXXXXXX beside it: within the usual 255-byte limit) and a Redis hash field.
_NAME = re.compile(r"[^\W_][\w.-]*")
_NAME_MAX_CHARS, _NAME_MAX_BYTES = 64, 200
#: The rules, as error messages and docs/http-api.md state them.
NAME_RULES = (
    f"a voice name is 1-{_NAME_MAX_CHARS} letters or digits of any script (Chinese "
    f"included), '.', '_' or '-', starting with a letter or digit, at most "
    f"{_NAME_MAX_BYTES} bytes as UTF-8"
)


def is_voice_name(name: str) -> bool:
    """Whether ``name`` may name a created voice (see :data:`NAME_RULES`)."""
    return (
        len(name) <= _NAME_MAX_CHARS
        and _NAME.fullmatch(name) is not None
        and len(name.encode("utf-8")) <= _NAME_MAX_BYTES
        and unicodedata.is_normalized("NFC", name)
    )


def default_voices_dir() -> Path:
    """Where created voices are kept unless ``--voices-dir`` says otherwise."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "chattts-stream" / "voices"


@dataclass(frozen=True)
class Voice:
    """One named voice (see :mod:`server.voices`)."""

    name: str
    engine: str
    speaker: str | None = None
    speaker_seed: int | None = None
    seed: int | None = None
    reference: str | None = None
    transcript: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    description: str = ""
    preset: bool = False

    @property
    def source(self) -> str:
        """How its speaker is given: a clip, a speaker string, or a seed."""
        if self.reference is not None:
            return "clip"
        if self.speaker is not None:
            return "speaker"
        return "seed"

    def spec(self, *, seed: int | None, speed: float) -> VoiceSpec:
        """What the engine is given for a context in this voice (``seed``: the client's)."""
        chosen = seed if seed is not None else self.seed
        return VoiceSpec(
            voice=self.speaker,
            seed=chosen if chosen is not None else 0,
            speed=speed,
            speaker_seed=self.speaker_seed,
            reference=self.reference,
            transcript=self.transcript,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
        )

    def public(self) -> dict[str, Any]:
        """The voice as the API shows it (long encodings left out)."""
        body = asdict(self)
        body["source"] = self.source
        body.pop("reference")
        if self.speaker is not None and len(self.speaker) > 64:
            body["speaker"] = self.speaker[:32] + "…"
        return body


def presets(engine: str) -> list[Voice]:
    """The preset voices of ``engine``: OpenAI's names, each a fixed speaker."""
    voices = []
    for i, name in enumerate(PRESET_NAMES):
        if engine == "espeak":
            variant = _ESPEAK_PRESETS[i]
            voices.append(
                Voice(name, engine, speaker=variant, seed=10 * i, preset=True,
                      description=f"preset: espeak-ng Mandarin, variant {variant}")
            )  # fmt: skip
        else:
            seed = _PRESET_SEED_BASE + i
            voices.append(
                Voice(name, engine, speaker_seed=seed, seed=seed, preset=True,
                      description=f"preset: the speaker ChatTTS samples from seed {seed}")
            )  # fmt: skip
    return voices


_TEXT, _INT, _NUMBER = (str,), (int,), (int, float)
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "name": _TEXT, "engine": _TEXT, "speaker": _TEXT, "reference": _TEXT,
    "transcript": _TEXT, "description": _TEXT, "speaker_seed": _INT, "seed": _INT,
    "top_k": _INT, "temperature": _NUMBER, "top_p": _NUMBER,
}  # fmt: skip


def voice_record(voice: Voice) -> dict[str, Any]:
    """The voice as it is stored: its set fields (a reference clip's encoding included)."""
    return {k: v for k, v in asdict(voice).items() if k != "preset" and v is not None}


def voice_from_record(data: object, *, engine: str, name: str) -> Voice:
    """The voice a stored record holds, kept as ``name`` of ``engine``; ValueError when it
    holds none (not an object, a field of the wrong type, another name or engine)."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    values = {k: v for k, v in data.items() if k in _FIELD_TYPES}
    voice = Voice(**values)
    for key, allowed in _FIELD_TYPES.items():
        value = getattr(voice, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, allowed)):
            raise ValueError(f"{key} is {type(value).__name__}")
    if voice.name != name or not is_voice_name(voice.name):
        raise ValueError(f"its name {voice.name!r} is not the name it is kept under")
    if voice.engine != engine:
        raise ValueError(f"engine {voice.engine!r} among the {engine} voices")
    return voice
