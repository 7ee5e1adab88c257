"""The async client for ``/v1/stream``: for agents, the framework plugins and the tests.

It depends on the ``websockets`` library only (no torch, ChatTTS or server code), so
voice-bot processes install it alone (``pip install ./client``).

    async with StreamClient.connect("ws://localhost:8000/v1/stream", token="...") as tts:
        ctx = await tts.start(seed=42, timestamps=True)
        async for delta in llm_tokens():
            await tts.send_text(delta, ctx)
        await tts.end(ctx)
        result = await tts.collect(ctx)     # segments, PCM, done
        # or: async for event in tts.events(): ...   (dicts and AudioFrame objects)

One reader: ``events()`` and ``collect()`` consume the same stream of server messages;
``collect(ctx)`` keeps what belongs to other contexts for their own ``collect``.

Contexts outlive their server (``resume``, on by default): when a server drains
(a rolling update) or its connection is lost (a crash), every open context continues
on another one, reached through the same URL (a load balancer) or the next of a list
of URLs, with the same voice, seed and speed, from the text not yet heard; a
``resumed`` event says where. Numbers stay those of one stream (see
:mod:`chattts_client.ledger`); :class:`ResumeError` when no server takes it back
(:class:`~chattts_client.policy.ResumePolicy`). ``resume=None`` turns this off.

Errors are typed (:mod:`chattts_client.errors`): ``connect`` raises :class:`AuthError`,
:class:`UnavailableError` (:class:`NotReadyError`, ``draining``,
``too_many_connections``) for a refused upgrade; ``open`` raises :class:`BusyError` once
its retries run out, :class:`RequestError` for a refused ``start``; ``recv`` raises
:class:`ProtocolError` for a message it cannot read and :class:`ResumeError`. ``error``
events of a context are recorded by ``collect``; :meth:`ContextResult.raise_for_error`
raises them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from websockets.exceptions import ConnectionClosed

from chattts_client.dial import Dialer
from chattts_client.errors import BusyError, ProtocolError, error_from_event
from chattts_client.events import EventQueue
from chattts_client.link import Link
from chattts_client.policy import BusyBackoff, ResumePolicy
from chattts_client.result import ContextResult
from chattts_client.resume import Resumer
from chattts_client.wire import (
    AUDIO_HEADER,
    DEFAULT_CONTEXT_ID,
    SUBPROTOCOL,
    TOKEN_SUBPROTOCOL_PREFIX,
    AudioFrame,
    Event,
)

# The wire constants stay importable from here, as they always were.
__all__ = [
    "AUDIO_HEADER",
    "DEFAULT_CONTEXT_ID",
    "SUBPROTOCOL",
    "TOKEN_SUBPROTOCOL_PREFIX",
    "AudioFrame",
    "ContextResult",
    "Event",
    "StreamClient",
]

logger = logging.getLogger(__name__)


class StreamClient:
    """A connection to the service (see the module docstring); made by :meth:`connect`.

    Its parts: a :class:`~chattts_client.dial.Dialer` (which server new contexts go
    to), an :class:`~chattts_client.events.EventQueue` (what the servers said, read
    once) and, with ``resume``, a :class:`~chattts_client.resume.Resumer` (contexts
    across servers).
    """

    def __init__(
        self,
        link: Link,
        urls: Sequence[str],
        *,
        token: str | None = None,
        via: str = "header",
        open_timeout_s: float = 30.0,
        keepalive_s: float | None = 5.0,
        resume: ResumePolicy | None = None,
    ) -> None:
        if resume is not None:
            # A server that accepts but never answers costs one try, not the whole policy.
            open_timeout_s = min(open_timeout_s, resume.try_timeout_s)
        options = {
            "token": token, "via": via, "open_timeout_s": open_timeout_s,
            "keepalive_s": keepalive_s,
        }  # fmt: skip
        self._events = EventQueue()
        self._dialer = Dialer(
            link, urls, options, lambda new: new.listen(self._on_event, self._on_close),
            redial=resume is not None,
        )  # fmt: skip
        self._resumer = Resumer(resume, self._events.put, self._dialer.usable) if resume else None

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        url: str | Sequence[str],
        *,
        token: str | None = None,
        via: str = "header",
        open_timeout_s: float = 30.0,
        keepalive_s: float | None = 5.0,
        resume: ResumePolicy | None = ResumePolicy(),  # noqa: B008 (frozen: shared safely)
    ) -> AsyncIterator[StreamClient]:
        """Connect and wait for ``ready``. ``via``: header, subprotocol or query.

        ``url``: one URL (a single server, or a load balancer in front of several), or a
        list of servers tried in turn. A refused upgrade raises :class:`AuthError` (401)
        or :class:`UnavailableError` (503: :class:`NotReadyError`, ``draining``,
        ``too_many_connections``), with the server's code and message (with a list: the
        last URL's, once each was tried); a first message other than ``ready``,
        :class:`ProtocolError`. Nothing listening: :class:`OSError`, as ever.
        ``keepalive_s``: a ping this often; a connection whose pong does not come within
        as long is lost (closed 1011, after waiting as long again for a close handshake),
        so a server that stopped, or a network cut with no close, is noticed within three
        times this and its contexts resume elsewhere (None: no pings, and such a loss may
        go unnoticed for as long as TCP takes; 0 is None).
        ``resume``: how contexts continue when their server goes away (None: they end
        with the connection, which ``recv`` then raises as ``ConnectionClosed``); with it,
        each connection after the first waits at most ``resume.try_timeout_s`` for its
        handshake and ``ready`` (when shorter than ``open_timeout_s``), as a try does.
        """
        urls = [url] if isinstance(url, str) else list(url)
        if not urls:
            raise ValueError("connect needs at least one URL")
        options = {
            "token": token, "via": via, "open_timeout_s": open_timeout_s,
            "keepalive_s": keepalive_s,
        }  # fmt: skip
        link = await Dialer.first(urls, options)
        client = cls(link, urls, token=token, via=via, open_timeout_s=open_timeout_s,
                     keepalive_s=keepalive_s, resume=resume)  # fmt: skip
        try:
            yield client
        finally:
            await client.close()

    @property
    def ready(self) -> dict[str, Any]:
        """The ``ready`` of the server new contexts go to (the latest one connected)."""
        return self._dialer.link.ready

    @property
    def url(self) -> str:
        """The URL of the server new contexts go to."""
        return self._dialer.link.url

    async def _on_event(self, link: Link, event: Event | ProtocolError) -> None:
        if self._resumer is None or isinstance(event, ProtocolError):
            self._events.put(event)
        else:
            await self._resumer.on_event(link, event)

    async def _on_close(self, link: Link, closed: ConnectionClosed) -> None:
        if self._dialer.closing:
            return
        if self._resumer is None:
            self._events.end(closed)
            return
        self._dialer.forget(link)
        speaking = await self._resumer.on_close(link, closed)
        if link is self._dialer.link and not speaking and not link.draining:
            self._events.put(closed)  # nothing to continue: the caller learns of it

    # --- sending ----------------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        """One client message (``{"type": ..., ...}``) as it is; ``None`` fields are left
        out. It bypasses resumption: use the methods below for contexts to resume."""
        await (await self._dialer.usable()).send(message)

    async def send_raw(self, data: str | bytes) -> None:
        await (await self._dialer.usable()).send_raw(data)

    async def start(
        self,
        context_id: str | None = None,
        *,
        voice: str | None = None,
        seed: int | None = None,
        speed: float = 1.0,
        sample_rate: int | None = None,
        timestamps: bool = False,
        lexicon: Mapping[str, str] | None = None,
        volume: float | None = None,
        encoding: str | None = None,
        frame_ms: int | None = None,
    ) -> str:
        """Open a context (do not wait for ``started``); returns its id.

        ``encoding``: its frames' bytes, ``pcm_s16le`` (the default), ``pcm_mulaw`` or
        ``pcm_alaw`` (G.711 at 8 kHz: ``sample_rate`` 8000 or left out); ``frame_ms``:
        every frame exactly that long (20 for telephony), else the server's frames.

        ``lexicon``: pronunciation entries for this context, written form to spoken form
        (``{"行长": "航长"}``), applied before the server's own rules and its lexicon file.
        ``volume``: a loudness factor, 0-4 (None: the server's 1), peaks limited below
        full scale.
        """
        context_id = context_id or uuid.uuid4().hex[:8]
        params = {"voice": voice, "seed": seed, "speed": speed, "sample_rate": sample_rate,
                  "timestamps": timestamps or None,
                  "lexicon": dict(lexicon) if lexicon else None, "volume": volume,
                  "encoding": encoding, "frame_ms": frame_ms}  # fmt: skip
        if self._resumer is not None:
            await self._resumer.start(await self._dialer.usable(), context_id, params)
        else:
            await self.send({"type": "start", "context_id": context_id, **params})
        return context_id

    async def open(
        self,
        context_id: str | None = None,
        *,
        voice: str | None = None,
        seed: int | None = None,
        speed: float = 1.0,
        sample_rate: int | None = None,
        timestamps: bool = False,
        lexicon: Mapping[str, str] | None = None,
        volume: float | None = None,
        encoding: str | None = None,
        frame_ms: int | None = None,
        attempts: int = 5,
        busy_within_s: float = 10.0,
        timeout_s: float = 30.0,
    ) -> str:
        """:meth:`start` and wait for ``started``; retry a ``busy`` refusal.

        A busy server sends ``retry_after_ms`` (2000 by default, ``--busy-retry-after-ms``):
        the next try waits that long, or the backoff (0.25 s, doubling up to 10 s) if
        longer. ``attempts`` tries in all (1: fail fast, the first ``busy`` raises), and
        no wait that would end more than ``busy_within_s`` after the first refusal; then
        :class:`BusyError` (with the last ``retry_after_ms``). Each retry is logged (logger
        ``chattts_client``, WARNING) with the server's hint and the wait. A start refused
        for another reason raises at once: :class:`RequestError` (``voice_not_found``,
        ``invalid_field``, ``invalid_lexicon``,
        ``context_exists``; :class:`LimitError` for
        ``too_many_contexts``), :class:`NotReadyError`. ``timeout_s`` bounds the wait
        for each answer. Returns the context id.
        """
        backoff = BusyBackoff(attempts, busy_within_s)
        context_id = context_id or uuid.uuid4().hex[:8]
        for attempt in range(1, attempts + 1):
            await self.start(context_id, voice=voice, seed=seed, speed=speed,
                             sample_rate=sample_rate, timestamps=timestamps, lexicon=lexicon,
                             volume=volume, encoding=encoding, frame_ms=frame_ms)  # fmt: skip
            answer = await self._events.answer_to_start(context_id, timeout_s)
            if answer["type"] == "started":
                return context_id
            refusal = error_from_event(answer)
            if not isinstance(refusal, BusyError):
                raise refusal
            wait_s = backoff.wait_s(refusal, attempt, asyncio.get_running_loop().time())
            if wait_s is None:
                raise refusal
            logger.warning(
                "context %r: the server is busy (retry_after_ms=%s); try %d of %d in %.2f s "
                "(giving up %.1f s after the first refusal)",
                context_id, refusal.retry_after_ms, attempt + 1, attempts, wait_s, busy_within_s,
            )  # fmt: skip
            await asyncio.sleep(wait_s)
        raise AssertionError("unreachable")

    async def send_text(self, text: str, context_id: str = DEFAULT_CONTEXT_ID) -> None:
        if self._resumer is not None:
            await self._resumer.text(context_id, text)
        else:
            await self.send({"type": "text", "context_id": context_id, "text": text})

    async def flush(self, context_id: str = DEFAULT_CONTEXT_ID) -> None:
        if self._resumer is not None:
            await self._resumer.flush(context_id)
        else:
            await self.send({"type": "flush", "context_id": context_id})

    async def end(self, context_id: str = DEFAULT_CONTEXT_ID) -> None:
        if self._resumer is not None:
            await self._resumer.end(context_id)
        else:
            await self.send({"type": "end", "context_id": context_id})

    async def cancel(self, context_id: str = DEFAULT_CONTEXT_ID) -> None:
        if self._resumer is not None:
            await self._resumer.cancel(context_id)
        else:
            await self.send({"type": "cancel", "context_id": context_id})

    async def close(self) -> None:
        self._dialer.closing = True
        if self._resumer is not None:
            await self._resumer.close()
        await self._dialer.close()

    # --- receiving --------------------------------------------------------------------

    async def recv(self, timeout_s: float | None = None) -> Event:
        """The next server message: a dict for JSON events, an :class:`AudioFrame` for
        audio (with ``resume``, the client's own ``resumed`` events too)."""
        return await self._events.recv(timeout_s)

    async def events(self, timeout_s: float | None = None) -> AsyncIterator[Event]:
        """Every server message until the connection closes (with ``resume``: until it
        closes with no context open)."""
        while True:
            try:
                yield await self.recv(timeout_s)
            except ConnectionClosed:
                return

    def context_of(self, event: Event) -> str | None:
        return self._events.context_of(event)

    async def collect(
        self,
        context_id: str = DEFAULT_CONTEXT_ID,
        timeout_s: float = 60.0,
        *,
        total_timeout_s: float | None = None,
    ) -> ContextResult:
        """Read until ``done`` for ``context_id`` (or the refusal of its ``start``).

        ``timeout_s`` is an idle timeout: TimeoutError when no message at all arrives
        for that long (a long utterance keeps arriving, so it never trips);
        ``total_timeout_s``, when given, bounds the whole collection. Other contexts'
        events are kept for their own ``collect``; connection-level errors and warnings
        (no context) are recorded in this result.
        """
        return await self._events.collect(context_id, timeout_s, total_timeout_s)
