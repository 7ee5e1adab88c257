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

from chattts_client.errors import (
    AuthError,
    BusyError,
    ProtocolError,
    error_from_event,
)
from chattts_client.link import Link
from chattts_client.policy import ResumePolicy
from chattts_client.result import ContextResult, record
from chattts_client.resume import Resumer
from chattts_client.wire import (
    AUDIO_HEADER,
    DEFAULT_CONTEXT_ID,
    START_REFUSALS,
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
    """A connection to the service (see the module docstring); made by :meth:`connect`."""

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
        self._urls = list(urls)
        # The URL tried last: each new connection tries the next, so one server that is
        # down is passed over, not tried again and again.
        self._turn = self._urls.index(link.url) if link.url in self._urls else 0
        if resume is not None:
            # A server that accepts but never answers costs one try, not the whole policy.
            open_timeout_s = min(open_timeout_s, resume.try_timeout_s)
        self._connect_options = {
            "token": token, "via": via, "open_timeout_s": open_timeout_s,
            "keepalive_s": keepalive_s,
        }  # fmt: skip
        self._link = link  # where new contexts go: the latest connected
        self._links: list[Link] = []  # every link still open
        self._out: asyncio.Queue[Event | BaseException] = asyncio.Queue()
        self._streams: dict[int, str] = {}
        self._backlog: list[Event] = []
        self._ended: ConnectionClosed | None = None  # without resume: the close, for good
        self._closing = False
        self._connecting: asyncio.Task[Link] | None = None
        self._resumer = Resumer(resume, self._out.put_nowait, self._usable_link) if resume else None
        self._listen(link)

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
        link: Link | None = None
        for i, candidate in enumerate(urls):
            try:
                link = await Link.open(candidate, **options)  # type: ignore[arg-type]
                break
            except (AuthError, ProtocolError, ValueError):
                raise  # the same everywhere
            except Exception:
                if i == len(urls) - 1:
                    raise
        assert link is not None
        client = cls(link, urls, token=token, via=via, open_timeout_s=open_timeout_s,
                     keepalive_s=keepalive_s, resume=resume)  # fmt: skip
        try:
            yield client
        finally:
            await client.close()

    @property
    def ready(self) -> dict[str, Any]:
        """The ``ready`` of the server new contexts go to (the latest one connected)."""
        return self._link.ready

    @property
    def url(self) -> str:
        """The URL of the server new contexts go to."""
        return self._link.url

    def _listen(self, link: Link) -> None:
        self._links.append(link)
        link.listen(self._on_event, self._on_close)

    async def _usable_link(self) -> Link:
        """The link new contexts go to; connected again (the next URL) when that server
        drains or went away. Callers at the same moment share one connection attempt."""
        link = self._link
        if not (link.closed or link.draining or link.unresponsive):
            return link
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.get_running_loop().create_task(self._connect_next())
            # Its failure is each waiter's; one that timed out first may leave none.
            self._connecting.add_done_callback(lambda t: t.cancelled() or t.exception())
        return await asyncio.shield(self._connecting)

    async def _connect_next(self) -> Link:
        self._turn = (self._turn + 1) % len(self._urls)
        url = self._urls[self._turn]
        link = await Link.open(url, **self._connect_options)  # type: ignore[arg-type]
        if self._closing:
            await link.close()
            raise ConnectionAbortedError("the client is closing")
        if self._link.closed and self._link in self._links:  # else let go of at its close
            self._links.remove(self._link)
        self._link = link
        self._listen(link)
        return link

    async def _on_event(self, link: Link, event: Event | ProtocolError) -> None:
        if self._resumer is None or isinstance(event, ProtocolError):
            self._out.put_nowait(event)
        else:
            await self._resumer.on_event(link, event)

    async def _on_close(self, link: Link, closed: ConnectionClosed) -> None:
        if self._closing:
            return
        if self._resumer is None:
            self._ended = closed
            self._out.put_nowait(closed)
            return
        if link is not self._link and link in self._links:
            self._links.remove(link)
        speaking = await self._resumer.on_close(link, closed)
        if link is self._link and not speaking and not link.draining:
            self._out.put_nowait(closed)  # nothing to continue: the caller learns of it

    # --- sending ----------------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        """One client message (``{"type": ..., ...}``) as it is; ``None`` fields are left
        out. It bypasses resumption: use the methods below for contexts to resume."""
        await (await self._current()).send(message)

    async def send_raw(self, data: str | bytes) -> None:
        await (await self._current()).send_raw(data)

    async def _current(self) -> Link:
        if self._resumer is not None:
            return await self._usable_link()
        return self._link

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
    ) -> str:
        """Open a context (do not wait for ``started``); returns its id.

        ``lexicon``: pronunciation entries for this context, written form to spoken form
        (``{"行长": "航长"}``), applied before the server's own rules and its lexicon file.
        ``volume``: a loudness factor, 0-4 (None: the server's 1), peaks limited below
        full scale.
        """
        context_id = context_id or uuid.uuid4().hex[:8]
        params = {"voice": voice, "seed": seed, "speed": speed, "sample_rate": sample_rate,
                  "timestamps": timestamps or None,
                  "lexicon": dict(lexicon) if lexicon else None, "volume": volume}  # fmt: skip
        if self._resumer is not None:
            await self._resumer.start(await self._usable_link(), context_id, params)
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
        if attempts < 1 or busy_within_s < 0:
            raise ValueError("open needs attempts >= 1 and busy_within_s >= 0")
        context_id = context_id or uuid.uuid4().hex[:8]
        loop = asyncio.get_running_loop()
        backoff_s = 0.25
        first_refused_at: float | None = None
        for attempt in range(1, attempts + 1):
            await self.start(
                context_id,
                voice=voice,
                seed=seed,
                speed=speed,
                sample_rate=sample_rate,
                timestamps=timestamps,
                lexicon=lexicon,
                volume=volume,
            )
            answer = await self._answer_to_start(context_id, timeout_s)
            if answer["type"] == "started":
                return context_id
            refusal = error_from_event(answer)
            if not isinstance(refusal, BusyError):
                raise refusal
            now = loop.time()
            first_refused_at = now if first_refused_at is None else first_refused_at
            wait_s = max((refusal.retry_after_ms or 0) / 1000, backoff_s)
            if attempt == attempts or now + wait_s - first_refused_at > busy_within_s:
                raise refusal
            logger.warning(
                "context %r: the server is busy (retry_after_ms=%s); try %d of %d in %.2f s "
                "(giving up %.1f s after the first refusal)",
                context_id, refusal.retry_after_ms, attempt + 1, attempts, wait_s, busy_within_s,
            )  # fmt: skip
            await asyncio.sleep(wait_s)
            backoff_s = min(2 * backoff_s, 10.0)
        raise AssertionError("unreachable")

    async def _answer_to_start(self, context_id: str, timeout_s: float) -> dict[str, Any]:
        """The ``started`` or refusal for ``context_id``; other events are kept for later."""
        kept: list[Event] = []
        pending = self._backlog
        self._backlog = []
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    event = pending.pop(0) if pending else await self.recv()
                    if _answers_start(event, context_id):
                        assert isinstance(event, dict)
                        return event
                    kept.append(event)
        finally:
            self._backlog = kept + pending + self._backlog

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
        self._closing = True
        if self._resumer is not None:
            await self._resumer.close()
        if self._connecting is not None:
            self._connecting.cancel()
        for link in self._links:
            await link.close()

    # --- receiving --------------------------------------------------------------------

    async def recv(self, timeout_s: float | None = None) -> Event:
        """The next server message: a dict for JSON events, an :class:`AudioFrame` for
        audio (with ``resume``, the client's own ``resumed`` events too)."""
        if self._backlog:
            return self._backlog.pop(0)
        if self._ended is not None and self._out.empty():
            raise self._ended
        item = await asyncio.wait_for(self._out.get(), timeout_s)
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, dict) and item.get("type") == "started":
            self._streams[item["stream"]] = item["context_id"]
        return item

    async def events(self, timeout_s: float | None = None) -> AsyncIterator[Event]:
        """Every server message until the connection closes (with ``resume``: until it
        closes with no context open)."""
        while True:
            try:
                yield await self.recv(timeout_s)
            except ConnectionClosed:
                return

    def context_of(self, event: Event) -> str | None:
        if isinstance(event, AudioFrame):
            return self._streams.get(event.stream)
        return event.get("context_id")

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
        result = ContextResult(context_id)
        kept: list[Event] = []
        pending = self._backlog
        self._backlog = []
        try:
            async with asyncio.timeout(total_timeout_s):
                while result.done is None:
                    event = pending.pop(0) if pending else await self.recv(timeout_s)
                    owner = self.context_of(event)
                    if owner is None and isinstance(event, dict):
                        record(result, event)  # a connection-level error or warning
                        continue
                    if owner != context_id:
                        kept.append(event)
                        continue
                    record(result, event)
                    if _refuses_start(event, result):
                        break  # no done will come for a context that never opened
        finally:
            self._backlog = kept + pending + self._backlog
        return result


def _answers_start(event: Event, context_id: str) -> bool:
    """``started`` for the context, or the error that refused its start."""
    if not isinstance(event, dict) or event.get("context_id") != context_id:
        return False
    kind = event.get("type")
    return kind == "started" or (kind == "error" and event.get("code") in START_REFUSALS)


def _refuses_start(event: Event, result: ContextResult) -> bool:
    return (
        isinstance(event, dict)
        and event.get("type") == "error"
        and event.get("code") in START_REFUSALS
        and result.started is None
        and not result.segments
    )
