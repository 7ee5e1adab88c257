"""The phrase cache: a segment spoken before is served from memory, not synthesised.

Where an engine's audio is a function of its inputs, a segment said again (a bot's
greeting, "好的，请稍等。") need not take the engine at all. The cache keeps the engine's
own chunks of a finished segment, keyed by everything that decides them
(:func:`phrase_key`): the engine and its model (the engine's ``identity``: for ChatTTS
the checkpoint's file hashes, its options, device and library versions; an engine
without one is never cached), the synthesis request (the spoken text after the text
front-end and the lexicon, and the whole :class:`~server.engines.base.VoiceSpec`: the
voice's record — its speaker string, reference clip, sampling settings — not its name,
and the seed and engine speed), whether the fallback voice speaks it, and the caller's
partition (below). What comes after the engine (time-stretch, joins, resampling, volume,
framing) runs on a hit as on a miss, so one entry serves every rate, format, volume and
stretch, and a hit's frames, events and timestamps are those of a synthesis.

Only an utterance whose seed was fixed (the caller's, or its named voice's own) is
cached or served: a context left to a random seed is meant to sound new each time.

A hit can be seen in its timing, so with tokens configured each token has its own
entries (``--phrase-cache-shared`` shares them between tokens). Memory is bounded:
least recently used entries go first beyond ``--phrase-cache-mb``, and a segment
longer than ``--phrase-cache-entry-kb`` is not kept. With ``--voices-store`` set, entries
are also written to that Redis (:mod:`server.runtime.phrase_store`), so a fleet shares
them; Redis being slow or down only makes a miss.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from server.declaration import bound_problems, option
from server.engines.base import SynthesisRequest
from server.metrics import Metrics
from server.runtime.phrase_store import CachedPhrase
from streaming.audio import join_frames

if TYPE_CHECKING:
    from server.runtime.phrase_store import SharedPhrases

__all__ = ["CachedJob", "CachedPhrase", "PhraseCache", "PhraseCacheSettings", "PhraseScope"]

logger = logging.getLogger(__name__)

#: Bumped when what a key covers, or an entry's encoding, changes.
_KEY_VERSION = 1


@dataclass(frozen=True)
class PhraseCacheSettings:
    """The phrase cache's settings (docs/settings.md, group cache)."""

    phrase_cache_mb: float = option(
        64.0,
        "memory for the phrase cache: segments spoken before with a fixed seed are served "
        "from it, least recently used dropped first (0: off); 64 MB holds about 11 minutes "
        "of 24 kHz audio",
        group="cache",
        ge=0,
        zero=" (0: off)",
    )
    phrase_cache_entry_kb: int = option(
        1536,
        "longest segment kept, in KB of float32 audio (1536 KB: 16 s at 24 kHz)",
        group="cache",
        gt=0,
    )
    phrase_cache_shared: bool = option(
        False,
        "with tokens configured, let every token hit every other token's entries (a hit is "
        "fast, so a caller could tell what another one had said); off: one cache per token",
        group="cache",
    )
    phrase_cache_store: bool = option(
        True,
        "also keep entries in --voices-store's Redis, shared by a fleet (needs --voices-store)",
        group="cache",
    )
    phrase_cache_ttl_s: float = option(
        86400.0, "how long an entry lives in Redis", group="cache", ge=1
    )
    phrase_cache_store_timeout_ms: float = option(
        50.0,
        "how long a look-up in Redis may take before it counts as a miss; after a failure "
        "Redis is left alone for a few seconds",
        group="cache",
        gt=0,
    )

    def __post_init__(self) -> None:
        problems = bound_problems(self)
        if problems:
            raise ValueError("; ".join(problems))


def _frozen(chunk: np.ndarray) -> np.ndarray:
    copy = np.array(chunk, dtype=np.float32, copy=True)
    copy.setflags(write=False)
    return copy


def phrase_key(identity: str, partition: str, request: SynthesisRequest) -> str:
    """The cache key of ``request`` spoken by the engine ``identity`` for ``partition``:
    a hash of every field of the request (its text, fallback flag and whole voice)."""
    fields = {"v": _KEY_VERSION, "engine": identity, "partition": partition,
              "request": asdict(request)}  # fmt: skip
    encoded = json.dumps(fields, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()


class CachedJob:
    """A hit, as :class:`~server.runtime.synthesizer.SegmentSynthesizer` sees a job: its chunks
    at once, no engine time, no batch row."""

    engine_seconds = 0.0
    fell_back = False

    def __init__(self, phrase: CachedPhrase) -> None:
        self.phrase = phrase
        self.marks = phrase.marks
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        self._cancelled = True

    def abandon(self) -> None:
        self._cancelled = True

    async def chunks(self, timeout_s: float, *, join_samples: int = 0) -> AsyncIterator[np.ndarray]:
        """The kept chunks, joined while they stay within ``join_samples`` (0: never
        joined; these are all ready, where :meth:`Job.chunks` joins those handed over
        together and may pass the bound by its last chunk)."""
        for chunk in join_frames(list(self.phrase.chunks), join_samples):
            if self._cancelled:
                return
            yield chunk


class PhraseCache:
    """The server's phrase cache (see the module docstring); on the event loop only."""

    def __init__(
        self,
        settings: PhraseCacheSettings,
        metrics: Metrics,
        shared: SharedPhrases | None = None,
    ) -> None:
        self.settings = settings
        self.capacity_bytes = int(settings.phrase_cache_mb * 1024 * 1024)
        self.entry_bytes = settings.phrase_cache_entry_kb * 1024
        self.shared = shared
        self._entries: OrderedDict[str, CachedPhrase] = OrderedDict()
        self.bytes = 0
        self.metrics = metrics
        self.hits = metrics.phrase_hits
        self.misses = metrics.phrase_misses
        self.evictions = metrics.phrase_evictions

    @property
    def enabled(self) -> bool:
        return self.capacity_bytes > 0

    def __len__(self) -> int:
        return len(self._entries)

    async def find(self, key: str) -> CachedPhrase | None:
        """The entry for ``key`` (this process's, else the fleet's), counted as a hit or
        a miss."""
        phrase = self._entries.get(key)
        if phrase is not None:
            self._entries.move_to_end(key)
            self.hits.labels(tier="local").inc()
            return phrase
        if self.shared is not None:
            phrase = await self.shared.get(key)
            if phrase is not None:
                self._insert(key, phrase)
                self.hits.labels(tier="shared").inc()
                return phrase
        self.misses.inc()
        return None

    def keep(self, key: str, phrase: CachedPhrase) -> None:
        """Keep a finished segment (too long for an entry: not kept); its chunks are
        copied and made read-only, so no consumer can change an entry."""
        if phrase.nbytes > self.entry_bytes or not phrase.chunks:
            return
        phrase = CachedPhrase(tuple(_frozen(chunk) for chunk in phrase.chunks), phrase.marks)
        self._insert(key, phrase)
        if self.shared is not None:
            self.shared.put(key, phrase)

    def _insert(self, key: str, phrase: CachedPhrase) -> None:
        if phrase.nbytes > min(self.entry_bytes, self.capacity_bytes):
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old.nbytes
        self._entries[key] = phrase
        self.bytes += phrase.nbytes
        while self.bytes > self.capacity_bytes:
            _, dropped = self._entries.popitem(last=False)
            self.bytes -= dropped.nbytes
            self.evictions.inc()
        self.metrics.phrase_bytes.set(self.bytes)
        self.metrics.phrase_entries.set(len(self._entries))

    async def close(self) -> None:
        if self.shared is not None:
            await self.shared.close()


@dataclass(frozen=True)
class PhraseScope:
    """The cache as one utterance may use it: the speaking engine's ``identity`` and the
    caller's ``partition`` (a hash of its token, or '' when shared)."""

    cache: PhraseCache
    identity: str
    partition: str

    def key(self, request: SynthesisRequest) -> str:
        return phrase_key(self.identity, self.partition, request)


def partition_for(token: str | None, *, tokens_on: bool, shared: bool) -> str:
    """The partition of a caller presenting ``token``: its own unless the cache is
    shared or the server has no tokens (then every caller is the same one)."""
    if shared or not tokens_on or token is None:
        return ""
    return hashlib.sha256(b"chattts-stream phrase partition\0" + token.encode()).hexdigest()


def build_phrase_cache(
    settings: PhraseCacheSettings, metrics: Metrics, store_url: str | None
) -> PhraseCache:
    """The cache the settings ask for: in this process, and in ``store_url``'s Redis
    (the voices store) when there is one and ``phrase_cache_store`` is on."""
    shared = None
    if store_url and settings.phrase_cache_store and settings.phrase_cache_mb > 0:
        from server.runtime.phrase_store import SharedPhrases

        shared = SharedPhrases(
            store_url,
            metrics,
            ttl_s=settings.phrase_cache_ttl_s,
            timeout_s=settings.phrase_cache_store_timeout_ms / 1000,
        )
    return PhraseCache(settings, metrics, shared)


def scope_for(
    cache: PhraseCache,
    engine: object,
    *,
    fallback: bool,
    seed_fixed: bool,
    token: str | None,
    tokens_on: bool,
) -> PhraseScope | None:
    """How one utterance may use ``cache``: not at all when the cache is off, its seed was
    not fixed, or the speaking engine (``engine``, or the fallback voice) has no identity
    (its audio is not known to be a function of its inputs)."""
    identity = getattr(engine, "identity", None)
    if not cache.enabled or not seed_fixed or not isinstance(identity, str):
        return None
    if fallback and getattr(engine, "name", None) != "espeak":
        from server.engines import espeak

        identity = f"fallback/{espeak.identity()}"
    shared = cache.settings.phrase_cache_shared
    return PhraseScope(cache, identity, partition_for(token, tokens_on=tokens_on, shared=shared))
