"""Voices in Redis, shared by every replica of a fleet (``--voices-store redis://...``).

Layout: one hash per engine, ``chattts-stream:voices:<engine>``, a field per voice
holding its whole JSON record (a reference clip's encoding included). Each write is one
Lua script, so it is atomic in Redis: it checks the name and the limit, sets (or
deletes) the field and publishes the change on ``chattts-stream:voices:changes``, all or
nothing. With the append-only file on and ``appendfsync always`` (deploy/ sets both),
Redis answers a write only once it is on disk: an acknowledged voice survives a restart
of the store, and a crash of either side mid-write leaves the old record or the new one.

Reads: the voice routes read the hash itself. The speech path (a WebSocket ``start``,
``/v1/tts``, ``/v1/audio/speech``) reads it too, cheaply: each write also sets the voice's
version (a counter every write increments, ``chattts-stream:voice-versions:<engine>``),
and before a created voice's name is resolved, one script (:meth:`RedisStore.confirm`,
one round trip) answers whether it exists now and, only when the version differs from
the copy in memory, its record. So a voice is spoken on every replica as soon as its
write returns, and never after its delete returned. The copy in memory is kept current
by a task that subscribes to the change channel, then reloads every hash, then applies
each change as it is published: it serves the listings' names and the records the
check finds current. While the store cannot be reached (the subscription down, or a
check failing or taking longer than ``--voices-store-check-timeout-ms``), the copy is
marked not current and the speech path serves the voices last seen without asking;
a name not among them is an error (``voices_unavailable``, 503), not
``voice_not_found``. The subscription, back, reloads and marks the copy current again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from server.voices.store import taken, too_many
from server.voices.voice import Voice, voice_from_record, voice_record
from streaming.errors import Unavailable

__all__ = ["RedisStore"]

logger = logging.getLogger(__name__)

_PREFIX = "chattts-stream:voices"
_CHANNEL = f"{_PREFIX}:changes"
# Outside _PREFIX's keys: a reload scans those for the engines' hashes.
_VERSIONS = "chattts-stream:voice-versions"
_COUNTER = "chattts-stream:voice-version"

# Every script's KEYS: the engine's hash, its versions hash, the version counter. A
# change is published as the JSON object the caller gives, less its closing brace, with
# the write's version added (replicas of earlier releases read engine, name and record).
# ARGV: name, record, limit (0: none), channel, change. Answers {version} when done, 0
# when the name is taken, -1 at the limit. The same record already there is this very
# write, retried after its answer was lost.
_CREATE = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current then
  if current == ARGV[2] then return {redis.call('HGET', KEYS[2], ARGV[1]) or ''} end
  return 0
end
local limit = tonumber(ARGV[3])
if limit > 0 and redis.call('HLEN', KEYS[1]) >= limit then return -1 end
local version = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], version)
redis.call('PUBLISH', ARGV[4], ARGV[5] .. ', "version": "' .. version .. '"}')
return {tostring(version)}
"""
# ARGV: name, channel, change.
_DELETE = """
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
local version = redis.call('INCR', KEYS[3])
redis.call('PUBLISH', ARGV[2], ARGV[3] .. ', "version": "' .. version .. '"}')
return 1
"""
# ARGV: name, the version the caller holds ('' for none). Answers false (no such voice),
# {version} (the caller's copy is current) or {version, record}. A voice written by an
# earlier release has no version yet: it gets one here.
_CONFIRM = """
local version = redis.call('HGET', KEYS[2], ARGV[1])
local record = nil
if not version then
  record = redis.call('HGET', KEYS[1], ARGV[1])
  if not record then return false end
  version = tostring(redis.call('INCR', KEYS[3]))
  redis.call('HSET', KEYS[2], ARGV[1], version)
  return {version, record}
end
if version == ARGV[2] then return {version} end
record = redis.call('HGET', KEYS[1], ARGV[1])
if not record then return false end
return {version, record}
"""
_RETRY_FIRST_S, _RETRY_MAX_S = 0.1, 2.0


def _key(engine: str) -> str:
    return f"{_PREFIX}:{engine}"


def _keys(engine: str) -> list[str]:
    """A script's KEYS for ``engine``."""
    return [_key(engine), f"{_VERSIONS}:{engine}", _COUNTER]


def _change(engine: str, name: str, record: str | None) -> str:
    """A change as the scripts publish it: a JSON object they close (adding the version)."""
    return json.dumps({"engine": engine, "name": name, "record": record})[:-1]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _location(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


class RedisStore:
    """Voices in Redis (see the module docstring)."""

    def __init__(self, url: str, *, timeout_s: float, check_timeout_s: float = 1.0) -> None:
        self.location = _location(url)
        self._timeout_s = timeout_s
        self._check_timeout_s = check_timeout_s
        common: dict[str, Any] = {
            "decode_responses": True,
            "socket_timeout": timeout_s,
            "socket_connect_timeout": timeout_s,
        }
        # Commands: one immediate retry on a broken connection (a pooled one the store's
        # restart closed); a write retried after its answer was lost is recognised.
        retry = Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
        self._client = aioredis.Redis.from_url(url, retry=retry, **common)
        # The subscription: no silent reconnect, or changes made meanwhile would be
        # missed; :meth:`_follow` reconnects itself and reloads.
        self._listener = aioredis.Redis.from_url(
            url, retry=Retry(NoBackoff(), 0), health_check_interval=timeout_s, **common
        )
        self._create = self._client.register_script(_CREATE)
        self._delete = self._client.register_script(_DELETE)
        self._confirm = self._client.register_script(_CONFIRM)
        self._voices: dict[str, dict[str, Voice]] = {}
        # The version of each voice in _voices, where known ('' where not).
        self._versions: dict[str, dict[str, str]] = {}
        self._current = asyncio.Event()
        self._follower: asyncio.Task[None] | None = None

    @property
    def current(self) -> bool:
        return self._current.is_set()

    def unavailable(self, exc: BaseException) -> Unavailable:
        """The error a caller gets: the store's address and the client library's words
        stay in the log."""
        logger.warning("voices store %s unreachable (%s)", self.location, _describe(exc))
        return Unavailable(
            "the voices store is unreachable: try again shortly", code="voices_unavailable"
        )

    async def open(self) -> None:
        """Reach the store within the timeout, then follow its changes."""
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        while True:
            try:
                await self._client.ping()
                break
            except (RedisError, OSError) as exc:
                if asyncio.get_running_loop().time() >= deadline:
                    # For the operator (start-up's one critical line), not a caller.
                    raise Unavailable(
                        f"the voices store {self.location} is unreachable ({_describe(exc)})",
                        code="voices_unavailable",
                    ) from None
                await asyncio.sleep(_RETRY_FIRST_S)
        self._follower = asyncio.create_task(self._follow(), name="voices-store")
        try:
            await asyncio.wait_for(self._current.wait(), self._timeout_s)
        except TimeoutError:
            await self.close()
            raise Unavailable(
                f"the voices store {self.location} answered but its voices could not be "
                f"loaded within {self._timeout_s:g} s",
                code="voices_unavailable",
            ) from None

    async def close(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
            self._follower = None
        await self._client.aclose()
        await self._listener.aclose()

    def cached(self, engine: str) -> Mapping[str, Voice]:
        return self._voices.get(engine, {})

    async def confirm(self, engine: str, name: str) -> None:
        """Make the copy of voice ``name`` what the store holds now (one round trip; its
        record only when the copy's version differs). While the store cannot answer,
        the copy stays as last seen and is marked not current (see the module
        docstring)."""
        if not self.current:
            return
        known = self._versions.get(engine, {}).get(name, "")
        try:
            async with asyncio.timeout(self._check_timeout_s):
                answer = await self._confirm(keys=_keys(engine), args=[name, known])
        except (RedisError, OSError, TimeoutError) as exc:
            if self._current.is_set():
                logger.warning(
                    "voices store %s did not confirm a voice (%s): serving the voices last "
                    "seen until it answers again", self.location, _describe(exc),
                )  # fmt: skip
                self._current.clear()
            return
        voices = self._voices.setdefault(engine, {})
        versions = self._versions.setdefault(engine, {})
        if not answer:
            voices.pop(name, None)
            versions.pop(name, None)
        elif len(answer) > 1:
            voice = self._parse(engine, {name: answer[1]}).get(name)
            if voice is None:
                voices.pop(name, None)
                versions.pop(name, None)
            else:
                voices[name], versions[name] = voice, str(answer[0])

    async def fetch(self, engine: str) -> dict[str, Voice]:
        try:
            records = await self._client.hgetall(_key(engine))
        except (RedisError, OSError) as exc:
            raise self.unavailable(exc) from None
        return self._parse(engine, records)

    async def create(self, voice: Voice, *, limit: int | None) -> None:
        record = json.dumps(voice_record(voice), ensure_ascii=False, sort_keys=True)
        change = _change(voice.engine, voice.name, record)
        args: list[str | int] = [voice.name, record, limit or 0, _CHANNEL, change]
        try:
            done = await self._create(keys=_keys(voice.engine), args=args)
        except (RedisError, OSError) as exc:
            raise self.unavailable(exc) from None
        if done == 0:
            raise taken(voice.name)
        if done == -1:
            raise too_many(voice.engine, limit or 0)
        self._voices.setdefault(voice.engine, {})[voice.name] = voice
        self._versions.setdefault(voice.engine, {})[voice.name] = str(done[0])

    async def delete(self, engine: str, name: str) -> bool:
        change = _change(engine, name, None)
        try:
            done = await self._delete(keys=_keys(engine), args=[name, _CHANNEL, change])
        except (RedisError, OSError) as exc:
            raise self.unavailable(exc) from None
        self._voices.get(engine, {}).pop(name, None)
        self._versions.get(engine, {}).pop(name, None)
        return bool(done)

    def _parse(self, engine: str, records: Mapping[Any, Any]) -> dict[str, Voice]:
        voices: dict[str, Voice] = {}
        for name, record in records.items():
            try:
                voices[name] = voice_from_record(json.loads(record), engine=engine, name=name)
            except Exception as exc:  # one bad record must not take the others down
                logger.warning("voice %s/%s in %s is not a voice (%s): skipped",
                               engine, name[:64], self.location, exc)  # fmt: skip
        return voices

    async def _follow(self) -> None:
        """Keep the copy in memory current, reconnecting for as long as the server runs."""
        wait_s = _RETRY_FIRST_S
        while True:
            pubsub = self._listener.pubsub()
            try:
                await self._subscribe(pubsub)
                await self._reload()
                if wait_s > _RETRY_FIRST_S:
                    logger.info("voices store %s reached again: voices reloaded", self.location)
                self._current.set()
                wait_s = _RETRY_FIRST_S
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
                    if message is not None:
                        self._apply(message["data"])
                    elif not self._current.is_set():
                        # A check failed while the subscription held: once the store
                        # answers again, reload (changes since are still followed).
                        await self._reload()
                        logger.info("voices store %s answers again: voices reloaded",
                                    self.location)  # fmt: skip
                        self._current.set()
            except (RedisError, OSError) as exc:
                if self._current.is_set() or wait_s == _RETRY_FIRST_S:
                    logger.warning(
                        "voices store %s unreachable (%s: %s): serving the voices last seen, "
                        "retrying", self.location, type(exc).__name__, exc,
                    )  # fmt: skip
                self._current.clear()
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(wait_s)
            wait_s = min(2 * wait_s, _RETRY_MAX_S)

    async def _subscribe(self, pubsub: Any) -> None:
        """Subscribe, and wait for Redis to confirm it: only changes after that are seen,
        so the reload must come after it."""
        await pubsub.subscribe(_CHANNEL)
        async with asyncio.timeout(self._timeout_s):
            while True:
                message = await pubsub.get_message(timeout=self._timeout_s)
                if message is not None and message["type"] == "subscribe":
                    return

    async def _reload(self) -> None:
        voices: dict[str, dict[str, Voice]] = {}
        versions: dict[str, dict[str, str]] = {}
        async for key in self._client.scan_iter(match=f"{_PREFIX}:*", _type="hash"):
            engine = key.removeprefix(f"{_PREFIX}:")
            # Versions first: a record written between the two reads is checked again.
            known = await self._client.hgetall(f"{_VERSIONS}:{engine}")
            voices[engine] = self._parse(engine, await self._client.hgetall(key))
            versions[engine] = {name: str(known.get(name, "")) for name in voices[engine]}
        self._voices, self._versions = voices, versions

    def _apply(self, data: str) -> None:
        """One published change: a voice set (its record) or deleted (no record)."""
        try:
            change = json.loads(data)
            engine, name, record = change["engine"], change["name"], change["record"]
            voices = self._voices.setdefault(engine, {})
            versions = self._versions.setdefault(engine, {})
            if record is None:
                voices.pop(name, None)
                versions.pop(name, None)
            else:
                voices[name] = voice_from_record(json.loads(record), engine=engine, name=name)
                versions[name] = str(change.get("version") or "")
        except Exception as exc:
            logger.warning("a change on %s is not a voice change (%s): ignored", _CHANNEL, exc)
