"""Named voices: a name for how a context sounds, kept on disk, usable from every route.

A voice belongs to one engine (``chattts`` or ``espeak``, the fallback voice) and fixes
its speaker: for ChatTTS a speaker string, the speaker a seed samples, or a reference
clip's encoding with its transcript; for espeak one of its variants. It may also fix
the sampling seed and ChatTTS's sampling settings. Each engine ships the same preset
names, OpenAI's own (``alloy``, ``echo``, ...), so clients that only know those names
work unchanged; presets cannot be changed or deleted.

Voices a user creates are JSON files in ``<voices dir>/<engine>/<name>.json``, written
atomically and read back at start. A ``voice`` field anywhere (WebSocket ``start``,
``/v1/tts``, ``/v1/audio/speech``) is first looked up by name, then taken as the
engine's raw voice (a speaker string, a variant); an unknown one gets an error listing
the names there are.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.engines.base import VoiceSpec
from streaming.errors import ClientError, Conflict, LimitExceeded, NotFound, Unavailable

if TYPE_CHECKING:
    from server.runtime.worker import EngineWorker

__all__ = [
    "FALLBACK_ENGINE",
    "PRESET_NAMES",
    "Voice",
    "VoiceRegistry",
    "Voices",
    "default_voices_dir",
]

logger = logging.getLogger(__name__)

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
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def default_voices_dir() -> Path:
    """Where created voices are kept unless ``--voices-dir`` says otherwise."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "chattts-stream" / "voices"


@dataclass(frozen=True)
class Voice:
    """One named voice; see the module docstring."""

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


def _voice_from_file(path: Path, engine: str) -> Voice:
    """The voice a file holds; ValueError when it holds none for ``engine``."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    values = {k: v for k, v in data.items() if k in _FIELD_TYPES}
    voice = Voice(**values)
    for key, allowed in _FIELD_TYPES.items():
        value = getattr(voice, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, allowed)):
            raise ValueError(f"{key} is {type(value).__name__}")
    if voice.name != path.stem or not _NAME.fullmatch(voice.name):
        raise ValueError(f"its name {voice.name!r} is not its file's")
    if voice.engine != engine:
        raise ValueError(f"engine {voice.engine!r} in the {engine} folder")
    return voice


class VoiceRegistry:
    """The named voices of every engine: presets, and those created, on disk."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory or default_voices_dir()
        self._lock = threading.Lock()
        self._voices: dict[str, dict[str, Voice]] = {}
        # Read at start: a broken file is reported in the log now, not at first use.
        if self.directory.is_dir():
            for folder in sorted(self.directory.iterdir()):
                if folder.is_dir():
                    self._engine(folder.name)

    def _engine(self, engine: str) -> dict[str, Voice]:
        voices = self._voices.get(engine)
        if voices is None:
            voices = {voice.name: voice for voice in presets(engine)}
            voices.update(self._read(engine))
            self._voices[engine] = voices
        return voices

    def _read(self, engine: str) -> dict[str, Voice]:
        found: dict[str, Voice] = {}
        folder = self.directory / engine
        if not folder.is_dir():
            return found
        for path in sorted(folder.glob("*.json")):
            try:
                voice = _voice_from_file(path, engine)
            except Exception as exc:  # one bad file must not take the others down
                logger.warning("voice file %s is not a voice (%s): skipped", path, exc)
                continue
            found[voice.name] = voice
        return found

    def names(self, engine: str) -> list[str]:
        with self._lock:
            return sorted(self._engine(engine))

    def list(self, engine: str) -> list[Voice]:
        with self._lock:
            return sorted(self._engine(engine).values(), key=lambda v: (not v.preset, v.name))

    def get(self, engine: str, name: str) -> Voice | None:
        with self._lock:
            return self._engine(engine).get(name)

    def resolve(self, engine: str, name: str, check_raw: Callable[[str], None]) -> Voice:
        """The voice ``name`` means on ``engine``: a named voice, else the engine's raw voice
        (``check_raw`` raises ValueError when it is not one either: then a NotFound that
        lists the names, and says why it is not a raw voice)."""
        voice = self.get(engine, name)
        if voice is not None:
            return voice
        try:
            check_raw(name)
        except ValueError as exc:
            # A field naming nothing is a bad request (400), not a missing resource (404).
            raise ClientError(
                f"no voice {name[:64]!r}; the {engine} voices are: "
                f"{', '.join(self.names(engine))} (and it is not a raw voice either: {exc})",
                code="voice_not_found",
                param="voice",
            ) from None
        return Voice(name, engine, speaker=name, description="a raw speaker string")

    def require(self, engine: str, name: str) -> Voice:
        voice = self.get(engine, name)
        if voice is None:
            raise NotFound(
                f"no voice {name[:64]!r}; the {engine} voices are: {', '.join(self.names(engine))}",
                code="voice_not_found",
            )
        return voice

    def check_room(self, engine: str, name: str, limit: int | None = None) -> None:
        """Refuse a name that cannot be added (bad, taken, or no room left)."""
        if not _NAME.fullmatch(name):
            raise ClientError(
                "a voice name is 1-64 letters, digits, '.', '_' or '-', starting with a "
                "letter or digit",
                code="invalid_field",
                param="name",
            )
        with self._lock:
            voices = self._engine(engine)
            if name in voices:
                raise Conflict(f"voice {name!r} exists", code="voice_exists", param="name")
            created = sum(not v.preset for v in voices.values())
        if limit is not None and created >= limit:
            raise LimitExceeded(
                f"the {engine} engine already has {created} created voices (--max-voices)",
                code="too_many_voices",
                limit=limit,
            )

    def add(self, voice: Voice, *, limit: int | None = None) -> Voice:
        """Keep a new voice (written to disk first); an existing name is refused."""
        self.check_room(voice.engine, voice.name, limit)
        with self._lock:
            voices = self._engine(voice.engine)
            if voice.name in voices:  # taken while this one was being made
                raise Conflict(f"voice {voice.name!r} exists", code="voice_exists", param="name")
            self._write(voice)
            voices[voice.name] = voice
        return voice

    def delete(self, engine: str, name: str) -> None:
        with self._lock:
            voice = self._engine(engine).get(name)
            if voice is None:
                raise NotFound(f"no voice {name[:64]!r}", code="voice_not_found")
            if voice.preset:
                raise Conflict(f"{name!r} is a preset: it cannot be deleted", code="voice_preset")
            (self.directory / engine / f"{name}.json").unlink(missing_ok=True)
            del self._engine(engine)[name]

    def _write(self, voice: Voice) -> None:
        folder = self.directory / voice.engine
        folder.mkdir(parents=True, exist_ok=True)
        body = {k: v for k, v in asdict(voice).items() if k != "preset" and v is not None}
        handle, staging = tempfile.mkstemp(prefix=f".{voice.name}.", dir=folder)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(body, out, ensure_ascii=False, indent=1)
        os.replace(staging, folder / f"{voice.name}.json")  # whole, or not at all


class Voices:
    """The registry bound to the running engines: what a voice name means right now.

    Names resolve on the main engine; a context the server moved to the fallback voice
    (busy) resolves its name among the fallback voice's own voices, and speaks that
    engine's default for its seed when the name is not one of them.
    """

    def __init__(self, registry: VoiceRegistry, worker: EngineWorker) -> None:
        self.registry = registry
        self._worker = worker

    def engine(self, *, fallback: bool = False) -> str:
        """The name of the engine voices resolve on (Unavailable before it has loaded)."""
        if fallback:
            return FALLBACK_ENGINE
        engine = self._worker.engine
        if engine is None:
            raise Unavailable(f"the engine is {self._worker.status.state}", code="not_ready")
        return engine.name

    def resolve(self, name: str | None, *, fallback: bool = False) -> Voice:
        """The voice ``name`` means (None: the engine's default); NotFound lists the names."""
        engine = self.engine(fallback=fallback)
        if name is None:
            return Voice("", engine)
        if fallback:
            return self.registry.get(engine, name) or Voice("", engine)
        return self.registry.resolve(engine, name, self._worker.check_voice)

    def own_seed(self, name: str) -> int | None:
        """The seed voice ``name`` fixes (None: none); NotFound when there is no such voice."""
        return self.resolve(name).seed

    def spec(
        self, name: str | None, *, seed: int | None, speed: float, fallback: bool = False
    ) -> VoiceSpec:
        """What the engine is given to speak in voice ``name`` with ``seed`` and ``speed``."""
        return self.resolve(name, fallback=fallback).spec(seed=seed, speed=speed)

    def for_stream(
        self,
        name: str | None,
        *,
        seed: int | None,
        speed: float,
        fallback: bool = False,
        seed_given: bool = True,
    ) -> VoiceSpec:
        """The voice a stream (a context, an HTTP text) speaks in; ``fallback``: it was
        admitted on the fallback voice (busy), where a named voice's own seed wins over
        a seed the client did not give."""
        own = fallback and not seed_given and name is not None
        return self.spec(name, seed=None if own else seed, speed=speed, fallback=fallback)
