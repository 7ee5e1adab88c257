"""Where created voices are kept: the interface, the directory store, and the choice.

Two stores implement :class:`VoiceStore`: :class:`DirectoryStore` (JSON files under
``--voices-dir``, the embedded default for one replica) and
:class:`~server.voices.redis_store.RedisStore` (``--voices-store redis://...``, shared
by every replica of a fleet). Both answer reads of the speech path from memory (a
WebSocket ``start`` resolves its voice synchronously), after :meth:`VoiceStore.confirm`
has made the copy of that one name agree with the store (nothing to do for the
directory, whose only writer is this process; one round trip for Redis). Each write is
atomic: a voice is stored whole or not at all, so a crash mid-write leaves nothing that
stops a start. Presets are not stored: they are code (:func:`server.voices.voice.presets`).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from server.voices.voice import Voice, default_voices_dir, voice_from_record, voice_record
from streaming.errors import Conflict, LimitExceeded

__all__ = ["DirectoryStore", "VoiceStore", "taken", "too_many"]

logger = logging.getLogger(__name__)


class VoiceStore(Protocol):
    """Created voices, by engine and name (see the module docstring)."""

    #: Where the voices are kept, for messages (never with a password).
    location: str

    @property
    def current(self) -> bool:
        """False while changes made elsewhere may not reach :meth:`cached` (the shared
        store is unreachable): a name missing there may exist."""

    async def open(self) -> None:
        """Connect and load; :class:`~streaming.errors.Unavailable` when the store cannot
        be reached within its timeout."""

    async def close(self) -> None: ...

    def cached(self, engine: str) -> Mapping[str, Voice]:
        """``engine``'s voices as this process last saw them (no I/O: the speech path)."""

    async def confirm(self, engine: str, name: str) -> None:
        """Make :meth:`cached`'s voice ``name`` (or its absence) what the store holds now,
        before the speech path resolves it; while the store cannot answer, leave it as
        last seen and :attr:`current` False. Never raises."""

    async def fetch(self, engine: str) -> dict[str, Voice]:
        """``engine``'s voices read from the store itself (the voice routes)."""

    async def create(self, voice: Voice, *, limit: int | None) -> None:
        """Keep a new voice, atomically: :class:`Conflict` when its name is taken,
        :class:`LimitExceeded` when ``engine`` already has ``limit`` voices."""

    async def delete(self, engine: str, name: str) -> bool:
        """Forget a voice; False when there was none of that name."""


def too_many(engine: str, limit: int) -> LimitExceeded:
    return LimitExceeded(
        f"the {engine} engine already has {limit} created voices (--max-voices)",
        code="too_many_voices",
        limit=limit,
    )


def taken(name: str) -> Conflict:
    return Conflict(f"voice {name!r} exists", code="voice_exists", param="name")


class DirectoryStore:
    """Voices as JSON files, ``<directory>/<engine>/<name>.json``, all read at start.

    One process owns the directory: it is the only writer, so its memory is the truth.
    A write goes to a temporary file, is flushed to disk and renamed over the voice's
    file (whole, or not at all); a crash leaves at most a temporary file, removed at the
    next start.
    """

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or default_voices_dir()
        self.location = str(self.directory)
        self._voices: dict[str, dict[str, Voice]] = {}
        # Read now: a broken file is reported in the log at start, not at first use.
        if self.directory.is_dir():
            for folder in sorted(self.directory.iterdir()):
                if folder.is_dir():
                    self._voices[folder.name] = self._read(folder)

    @property
    def current(self) -> bool:
        return True

    async def open(self) -> None:
        return None  # read in the constructor: nothing to connect to

    async def close(self) -> None:
        return None

    def _read(self, folder: Path) -> dict[str, Voice]:
        found: dict[str, Voice] = {}
        for path in sorted(folder.iterdir()):
            if path.name.startswith(".") and not path.name.endswith(".json"):
                path.unlink(missing_ok=True)  # a write a crash interrupted: never a voice
                continue
            if path.suffix != ".json":
                continue
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                voice = voice_from_record(data, engine=folder.name, name=path.stem)
            except Exception as exc:  # one bad file must not take the others down
                logger.warning("voice file %s is not a voice (%s): skipped", path, exc)
                continue
            found[voice.name] = voice
        return found

    def cached(self, engine: str) -> Mapping[str, Voice]:
        return self._voices.get(engine, {})

    async def confirm(self, engine: str, name: str) -> None:
        return None  # this process is the directory's only writer: its memory is the truth

    async def fetch(self, engine: str) -> dict[str, Voice]:
        return dict(self.cached(engine))

    async def create(self, voice: Voice, *, limit: int | None) -> None:
        voices = self._voices.setdefault(voice.engine, {})
        if voice.name in voices:
            raise taken(voice.name)
        if limit is not None and len(voices) >= limit:
            raise too_many(voice.engine, limit)
        self._write(voice)
        voices[voice.name] = voice

    async def delete(self, engine: str, name: str) -> bool:
        if self._voices.get(engine, {}).pop(name, None) is None:
            return False
        (self.directory / engine / f"{name}.json").unlink(missing_ok=True)
        _sync_directory(self.directory / engine)
        return True

    def _write(self, voice: Voice) -> None:
        folder = self.directory / voice.engine
        folder.mkdir(parents=True, exist_ok=True)
        handle, staging = tempfile.mkstemp(prefix=f".{voice.name}.", dir=folder)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(voice_record(voice), out, ensure_ascii=False, indent=1)
            out.flush()
            os.fsync(out.fileno())  # on disk before the rename makes it the voice
        os.replace(staging, folder / f"{voice.name}.json")
        _sync_directory(folder)  # the rename itself survives a power cut


def _sync_directory(folder: Path) -> None:
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
