"""The registry: every engine's presets and the created voices of a store, by name; and
:class:`Voices`, the registry bound to the running engines.

Reads on the speech path (:meth:`VoiceRegistry.resolve`, :meth:`VoiceRegistry.get`) come
from memory, without I/O, once :meth:`Voices.confirm` has made the copy of the name asked
for agree with the store (server.voices.store): a voice is spoken as soon as its write
returned, on any replica, and never after its delete returned. The voice routes read
the store itself (:meth:`VoiceRegistry.fetch_list`) and write through it
(:meth:`VoiceRegistry.add`, :meth:`VoiceRegistry.delete`).
"""

from __future__ import annotations

import builtins
import logging
import unicodedata
from collections.abc import Callable
from typing import TYPE_CHECKING

from server.engines.base import VoiceSpec, native_speed_range
from server.engines.espeak import SPEED_RANGE as FALLBACK_SPEED_RANGE
from server.voices.store import VoiceStore, taken, too_many
from server.voices.voice import FALLBACK_ENGINE, NAME_RULES, Voice, is_voice_name, presets
from streaming.errors import ClientError, Conflict, NotFound, Unavailable
from streaming.stretch import split_speed

if TYPE_CHECKING:
    from server.runtime.worker import EngineWorker

__all__ = ["VoiceRegistry", "Voices"]

logger = logging.getLogger(__name__)


class VoiceRegistry:
    """The named voices of every engine: its presets, and those created, in ``store``."""

    def __init__(self, store: VoiceStore) -> None:
        self.store = store
        self._presets: dict[str, dict[str, Voice]] = {}

    async def open(self) -> None:
        await self.store.open()

    async def close(self) -> None:
        await self.store.close()

    def _preset(self, engine: str) -> dict[str, Voice]:
        found = self._presets.get(engine)
        if found is None:
            found = self._presets[engine] = {v.name: v for v in presets(engine)}
        return found

    def _listed(self, engine: str, created: dict[str, Voice] | None = None) -> list[Voice]:
        """Presets first, then the created voices, each by name."""
        mine = self.store.cached(engine) if created is None else created
        return [*sorted(self._preset(engine).values(), key=lambda v: v.name),
                *sorted(mine.values(), key=lambda v: v.name)]  # fmt: skip

    def names(self, engine: str) -> list[str]:
        return sorted(v.name for v in self._listed(engine))

    def list(self, engine: str) -> list[Voice]:
        """``engine``'s voices as last seen (no I/O)."""
        return self._listed(engine)

    def get(self, engine: str, name: str) -> Voice | None:
        return self._preset(engine).get(name) or self.store.cached(engine).get(name)

    async def confirm(self, engine: str, name: str) -> None:
        """Bring the copy of ``name`` in line with the store before it is resolved (a
        preset, or a name no voice can have, needs no look)."""
        if name not in self._preset(engine) and is_voice_name(name):
            await self.store.confirm(engine, name)

    def resolve(self, engine: str, name: str, check_raw: Callable[[str], None]) -> Voice:
        """The voice ``name`` means on ``engine``: a named voice, else the engine's raw voice
        (``check_raw`` raises ValueError when it is not one either: then a ClientError
        that lists the names and says why it is not a raw voice, or, while the shared
        store is out of reach, Unavailable: the name may be there)."""
        voice = self.get(engine, name)
        if voice is not None:
            return voice
        try:
            check_raw(name)
        except ValueError as exc:
            if not self.store.current:
                raise Unavailable(
                    f"no voice {name[:64]!r} among those last seen, and the voices store is "
                    "unreachable: try again shortly",
                    code="voices_unavailable",
                ) from None
            # A field naming nothing is a bad request (400), not a missing resource (404).
            raise ClientError(
                f"no voice {name[:64]!r}; the {engine} voices are: "
                f"{', '.join(self.names(engine))} (and it is not a raw voice either: {exc})",
                code="voice_not_found",
                param="voice",
            ) from None
        return Voice(name, engine, speaker=name, description="a raw speaker string")

    async def fetch_list(self, engine: str) -> builtins.list[Voice]:
        """``engine``'s voices read from the store itself."""
        return self._listed(engine, await self.store.fetch(engine))

    async def fetch(self, engine: str, name: str) -> Voice:
        """Voice ``name`` of ``engine`` read from the store itself; NotFound if none."""
        voice = self._preset(engine).get(name)
        if voice is None:
            created = await self.store.fetch(engine)
            voice = created.get(name)
            if voice is None:
                raise NotFound(
                    f"no voice {name[:64]!r}; the {engine} voices are: "
                    f"{', '.join(sorted([*self._preset(engine), *created]))}",
                    code="voice_not_found",
                )
        return voice

    def check_room(self, engine: str, name: str, limit: int | None = None) -> None:
        """Refuse early a name that cannot be added (bad, taken, or no room left, as last
        seen): before the work of making a voice. :meth:`add` decides."""
        if not is_voice_name(name):
            reason = "" if unicodedata.is_normalized("NFC", name) else " (in Unicode NFC)"
            raise ClientError(NAME_RULES + reason, code="invalid_field", param="name")
        if self.get(engine, name) is not None:
            raise taken(name)
        if limit is not None and len(self.store.cached(engine)) >= limit:
            raise too_many(engine, limit)

    async def add(self, voice: Voice, *, limit: int | None = None) -> Voice:
        """Keep a new voice in the store; a taken name (a preset's too) is refused."""
        self.check_room(voice.engine, voice.name)
        await self.store.create(voice, limit=limit)
        return voice

    async def delete(self, engine: str, name: str) -> None:
        if name in self._preset(engine):
            raise Conflict(f"{name!r} is a preset: it cannot be deleted", code="voice_preset")
        if not await self.store.delete(engine, name):
            raise NotFound(f"no voice {name[:64]!r}", code="voice_not_found")


class Voices:
    """The registry bound to the running engines: what a voice name means right now.

    Names resolve on the main engine; a context the server moved to the fallback voice
    (busy) resolves its name among the fallback voice's own voices, and speaks that
    engine's default for its seed when the name is not one of them.
    """

    def __init__(self, registry: VoiceRegistry, worker: EngineWorker) -> None:
        self.registry = registry
        self._worker = worker

    def speed_split(self, speed: float, *, fallback: bool = False) -> tuple[float, float]:
        """``(engine speed, tempo)`` for a stream at ``speed``: the speaking engine's own
        rate control over its range, a time-stretch of ``tempo`` for the rest."""
        engine = FALLBACK_SPEED_RANGE if fallback else native_speed_range(self._worker.engine)
        return split_speed(speed, engine)

    def engine(self, *, fallback: bool = False) -> str:
        """The name of the engine voices resolve on (Unavailable before it has loaded)."""
        if fallback:
            return FALLBACK_ENGINE
        engine = self._worker.engine
        if engine is None:
            raise Unavailable(f"the engine is {self._worker.status.state}", code="not_ready")
        return engine.name

    async def confirm(self, name: str | None) -> None:
        """Make the name about to be resolved on the main engine what the store holds now
        (call it right before the synchronous :meth:`resolve`, :meth:`own_seed` or
        :meth:`for_utterance`, with no ``await`` between)."""
        if name is not None and self._worker.engine is not None:
            await self.registry.confirm(self._worker.engine.name, name)

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

    def for_utterance(
        self,
        name: str | None,
        *,
        seed: int | None,
        speed: float,
        fallback: bool = False,
        seed_given: bool = True,
    ) -> VoiceSpec:
        """The voice an utterance (a context, an HTTP text) speaks in; ``fallback``: it was
        admitted on the fallback voice (busy), where a named voice's own seed wins over
        a seed the client did not give."""
        own = fallback and not seed_given and name is not None
        return self.spec(name, seed=None if own else seed, speed=speed, fallback=fallback)
