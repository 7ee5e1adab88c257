"""The phrase cache's fleet tier: entries in the voices store's Redis.

Each entry is one Redis string, ``chattts-stream:phrases:<key>`` (outside the voices'
keys), written with ``SET ... EX --phrase-cache-ttl-s``, so Redis forgets it by itself;
an entry is at most ``--phrase-cache-entry-kb``. Give that Redis a ``maxmemory`` and
``maxmemory-policy volatile-lru``: only keys with a time to live (these) are evicted,
never the voices (docs/scaling.md).

Redis is never in the way of speech: a look-up waits at most
``--phrase-cache-store-timeout-ms`` and then counts as a miss; a write is sent in the
background (a bounded number at once, the rest skipped); after any failure Redis is left
alone for :data:`_REST_S` seconds, so a store that is down costs one timeout per rest,
not one per segment. Failures are counted (``tts_phrase_cache_store_errors_total``) and
logged once per outage.

Encoding: ``PC1``, the length of a JSON header (4 bytes, big-endian), the header (each
chunk's length in samples, the word marks), then the float32 little-endian samples.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import struct
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from server.engines.base import WordMarks
from server.metrics import Metrics

__all__ = ["CachedPhrase", "SharedPhrases", "decode_phrase", "encode_phrase"]


@dataclass(frozen=True)
class CachedPhrase:
    """A finished segment's engine audio, as its chunks came, and its word marks."""

    chunks: tuple[np.ndarray, ...]
    marks: WordMarks | None = None

    @property
    def nbytes(self) -> int:
        return sum(int(chunk.nbytes) for chunk in self.chunks)


logger = logging.getLogger(__name__)

_PREFIX = "chattts-stream:phrases:"
_MAGIC = b"PC1"
#: Seconds Redis is left alone after a failure.
_REST_S = 5.0
#: Writes in flight at most; more are skipped (the entry stays local).
_MAX_WRITES = 16


def encode_phrase(phrase: CachedPhrase) -> bytes:
    header = {
        "chunks": [int(chunk.size) for chunk in phrase.chunks],
        "marks": [list(mark) for mark in phrase.marks.marks] if phrase.marks else None,
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    body = b"".join(np.ascontiguousarray(c, dtype="<f4").tobytes() for c in phrase.chunks)
    return _MAGIC + struct.pack(">I", len(head)) + head + body


def decode_phrase(data: bytes) -> CachedPhrase:
    """The entry ``data`` holds; ValueError when it holds none."""
    if data[:3] != _MAGIC or len(data) < 7:
        raise ValueError("not a phrase-cache entry")
    (size,) = struct.unpack(">I", data[3:7])
    header = json.loads(data[7 : 7 + size])
    samples = np.frombuffer(data[7 + size :], dtype="<f4").astype(np.float32)
    samples.setflags(write=False)
    lengths = [int(n) for n in header["chunks"]]
    if sum(lengths) != samples.size or min(lengths, default=1) < 0:
        raise ValueError("its chunks do not add up to its samples")
    bounds = np.cumsum([0, *lengths])
    chunks = tuple(samples[a:b] for a, b in itertools.pairwise(bounds))
    marks = header.get("marks")
    found = WordMarks(tuple((int(o), int(s)) for o, s in marks)) if marks else None
    return CachedPhrase(chunks, found)


class SharedPhrases:
    """Phrase-cache entries in Redis (see the module docstring); on the event loop."""

    def __init__(
        self,
        url: str,
        metrics: Metrics,
        *,
        ttl_s: float,
        timeout_s: float,
    ) -> None:
        self._client: Any = aioredis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
        self._ttl_s = max(1, round(ttl_s))
        self._timeout_s = timeout_s
        self._resting_until = 0.0
        self._down = False
        self._writes: set[asyncio.Task[None]] = set()
        self.errors = metrics.phrase_store_errors

    @property
    def resting(self) -> bool:
        return time.monotonic() < self._resting_until

    async def get(self, key: str) -> CachedPhrase | None:
        """The fleet's entry for ``key``; None when there is none or Redis cannot say now."""
        if self.resting:
            return None
        try:
            async with asyncio.timeout(self._timeout_s):
                data = await self._client.get(_PREFIX + key)
        except (RedisError, OSError, TimeoutError) as exc:
            self._failed(exc)
            return None
        self._answered()
        if data is None:
            return None
        try:
            return decode_phrase(bytes(data))
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("a damaged phrase-cache entry in Redis is ignored: %s", exc)
            return None

    def put(self, key: str, phrase: CachedPhrase) -> None:
        """Write the entry in the background (skipped while resting or when busy)."""
        if self.resting or len(self._writes) >= _MAX_WRITES:
            return
        task = asyncio.get_running_loop().create_task(self._write(key, encode_phrase(phrase)))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, key: str, data: bytes) -> None:
        try:
            async with asyncio.timeout(max(self._timeout_s, 1.0)):
                await self._client.set(_PREFIX + key, data, ex=self._ttl_s)
        except (RedisError, OSError, TimeoutError) as exc:
            self._failed(exc)
        else:
            self._answered()

    def _answered(self) -> None:
        if self._down:
            self._down = False
            logger.warning("phrase cache: Redis answers again; sharing entries with the fleet")

    def _failed(self, exc: BaseException) -> None:
        self.errors.inc()
        if not self._down:
            self._down = True
            logger.warning(
                "phrase cache: Redis did not answer (%s: %s); serving from this process's "
                "cache, trying Redis again in %.0f s",
                type(exc).__name__,
                exc or "timed out",
                _REST_S,
            )
        self._resting_until = time.monotonic() + _REST_S

    async def close(self) -> None:
        for task in list(self._writes):
            task.cancel()
        await self._client.aclose()
