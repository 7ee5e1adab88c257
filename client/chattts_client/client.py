"""The async client for ``/v1/stream``: for agents, the framework plugins and the tests.

It depends on the ``websockets`` library only (no torch, ChatTTS or server code), so
voice-bot processes install it alone (``pip install ./client``). The wire constants
below are the protocol's (``streaming/protocol.py`` on the server; a test keeps them
equal).

    async with StreamClient.connect("ws://localhost:8000/v1/stream", token="...") as tts:
        ctx = await tts.start(seed=42, timestamps=True)
        async for delta in llm_tokens():
            await tts.send_text(delta, ctx)
        await tts.end(ctx)
        result = await tts.collect(ctx)     # segments, PCM, done
        # or: async for event in tts.events(): ...   (dicts and AudioFrame objects)

One reader: ``events()`` and ``collect()`` consume the same stream of server messages;
``collect(ctx)`` keeps what belongs to other contexts for their own ``collect``.

Errors are typed (:mod:`chattts_client.errors`): ``connect`` raises :class:`AuthError`,
:class:`UnavailableError` (:class:`NotReadyError`, ``draining``,
``too_many_connections``) for a refused upgrade; ``open`` raises :class:`BusyError` once
its retries run out, :class:`RequestError` for a refused ``start``; ``recv`` raises
:class:`ProtocolError` for a message it cannot read. ``error`` events of a context are
recorded by ``collect``; :meth:`ContextResult.raise_for_error` raises them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from chattts_client.errors import (
    BusyError,
    ProtocolError,
    error_from_event,
    error_from_handshake,
)
from chattts_client.timestamps import spoken_so_far

__all__ = ["AudioFrame", "ContextResult", "Event", "StreamClient"]

# The protocol's wire constants (streaming/protocol.py).
SUBPROTOCOL = "tts.v1"
TOKEN_SUBPROTOCOL_PREFIX = "token."
DEFAULT_CONTEXT_ID = "default"
AUDIO_HEADER = struct.Struct("<III")  # stream, segment, sequence; then int16 LE PCM


@dataclass(frozen=True)
class AudioFrame:
    stream: int
    segment: int
    sequence: int
    pcm: bytes  # int16 little-endian mono

    @property
    def samples(self) -> int:
        return len(self.pcm) // 2


Event = dict[str, Any] | AudioFrame


@dataclass
class ContextResult:
    """Everything the server sent for one context, up to and including ``done``."""

    context_id: str
    started: dict[str, Any] | None = None
    segments: list[dict[str, Any]] = field(default_factory=list)
    frames: list[AudioFrame] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    done: dict[str, Any] | None = None
    #: ``timestamps`` events (contexts started with ``timestamps=True``), in order.
    timestamps: list[dict[str, Any]] = field(default_factory=list)

    def raise_for_error(self) -> None:
        """Raise the first ``error`` the server sent for this context (or for the
        connection, while collecting) as its typed exception (:class:`ContextError` for a
        failed segment, :class:`RequestError` for a refused message); nothing if none."""
        if self.errors:
            raise error_from_event(self.errors[0])

    def spoken_by(self, heard_ms: float) -> str:
        """The text the listener heard by ``heard_ms`` of this context's audio (see
        :func:`chattts_client.spoken_so_far`)."""
        return spoken_so_far(self.timestamps, heard_ms)

    @property
    def pcm(self) -> bytes:
        return b"".join(f.pcm for f in self.frames)

    @property
    def samples(self) -> int:
        return sum(f.samples for f in self.frames)


class StreamClient:
    def __init__(self, connection: ClientConnection, ready: dict[str, Any]) -> None:
        self._ws = connection
        self.ready = ready
        self._streams: dict[int, str] = {}
        self._backlog: list[Event] = []

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        url: str,
        *,
        token: str | None = None,
        via: str = "header",
        open_timeout_s: float = 30.0,
    ) -> AsyncIterator[StreamClient]:
        """Connect and wait for ``ready``. ``via``: header, subprotocol or query.

        A refused upgrade raises :class:`AuthError` (401) or :class:`UnavailableError`
        (503: :class:`NotReadyError`, ``draining``, ``too_many_connections``), with the
        server's code and message; a first message other than ``ready``,
        :class:`ProtocolError`. Nothing listening: :class:`OSError`, as ever.
        """
        headers: dict[str, str] = {}
        subprotocols = [SUBPROTOCOL]
        if token is not None:
            if via == "header":
                headers["Authorization"] = f"Bearer {token}"
            elif via == "subprotocol":
                subprotocols.append(TOKEN_SUBPROTOCOL_PREFIX + token)
            elif via == "query":
                url += ("&" if "?" in url else "?") + "token=" + token
            else:
                raise ValueError(f"unknown token transport {via!r}")
        try:
            ws = await connect(
                url,
                additional_headers=headers,
                subprotocols=subprotocols,  # type: ignore[arg-type]
                open_timeout=open_timeout_s,
                max_size=None,
            )
        except InvalidStatus as exc:
            raise error_from_handshake(exc) from exc
        async with ws:
            ready = _event(await asyncio.wait_for(ws.recv(), open_timeout_s))
            if ready.get("type") != "ready":
                raise ProtocolError("unexpected_message", f"expected ready, got {ready!r:.200}")
            yield cls(ws, ready)

    # --- sending ----------------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        """One client message (``{"type": ..., ...}``); ``None`` fields are left out."""
        body = {k: v for k, v in message.items() if v is not None}
        await self._ws.send(json.dumps(body, ensure_ascii=False))

    async def send_raw(self, data: str | bytes) -> None:
        await self._ws.send(data)

    async def start(
        self,
        context_id: str | None = None,
        *,
        voice: str | None = None,
        seed: int | None = None,
        speed: float = 1.0,
        sample_rate: int | None = None,
        timestamps: bool = False,
    ) -> str:
        """Open a context (do not wait for ``started``); returns its id."""
        context_id = context_id or uuid.uuid4().hex[:8]
        await self.send(
            {"type": "start", "context_id": context_id, "voice": voice, "seed": seed,
             "speed": speed, "sample_rate": sample_rate, "timestamps": timestamps or None}
        )  # fmt: skip
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
        attempts: int = 5,
        timeout_s: float = 30.0,
    ) -> str:
        """:meth:`start` and wait for ``started``; retry a ``busy`` refusal.

        A busy server sends ``retry_after_ms``: the next attempt waits that long, or the
        backoff (0.25 s, doubling up to 10 s) if longer, ``attempts`` times in all; then
        :class:`BusyError` (with the last ``retry_after_ms``). A start refused for another
        reason raises at once: :class:`RequestError` (``voice_not_found``,
        ``invalid_field``, ``context_exists``; :class:`LimitError` for
        ``too_many_contexts``), :class:`NotReadyError`. Returns the context id.
        """
        context_id = context_id or uuid.uuid4().hex[:8]
        backoff_s = 0.25
        for attempt in range(1, attempts + 1):
            await self.start(
                context_id,
                voice=voice,
                seed=seed,
                speed=speed,
                sample_rate=sample_rate,
                timestamps=timestamps,
            )
            answer = await self._answer_to_start(context_id, timeout_s)
            if answer["type"] == "started":
                return context_id
            refusal = error_from_event(answer)
            if not isinstance(refusal, BusyError) or attempt == attempts:
                raise refusal
            hint_s = (refusal.retry_after_ms or 0) / 1000
            await asyncio.sleep(max(hint_s, backoff_s))
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
        await self.send({"type": "text", "context_id": context_id, "text": text})

    async def flush(self, context_id: str = DEFAULT_CONTEXT_ID) -> None:
        await self.send({"type": "flush", "context_id": context_id})

    async def end(self, context_id: str = DEFAULT_CONTEXT_ID) -> None:
        await self.send({"type": "end", "context_id": context_id})

    async def cancel(self, context_id: str = DEFAULT_CONTEXT_ID) -> None:
        await self.send({"type": "cancel", "context_id": context_id})

    async def close(self) -> None:
        await self._ws.close()

    # --- receiving --------------------------------------------------------------------

    async def recv(self, timeout_s: float | None = None) -> Event:
        """The next server message: a dict for JSON events, an :class:`AudioFrame` for audio."""
        if self._backlog:
            return self._backlog.pop(0)
        raw = await asyncio.wait_for(self._ws.recv(), timeout_s)
        if isinstance(raw, bytes):
            if len(raw) < AUDIO_HEADER.size:
                raise ProtocolError("bad_audio_frame", f"a binary frame of {len(raw)} bytes")
            stream, segment, sequence = AUDIO_HEADER.unpack_from(raw)
            return AudioFrame(stream, segment, sequence, raw[AUDIO_HEADER.size :])
        event = _event(raw)
        if event.get("type") == "started":
            self._streams[event["stream"]] = event["context_id"]
        return event

    async def events(self, timeout_s: float | None = None) -> AsyncIterator[Event]:
        """Every server message until the connection closes."""
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
                        _record(result, event)  # a connection-level error or warning
                        continue
                    if owner != context_id:
                        kept.append(event)
                        continue
                    _record(result, event)
                    if _refuses_start(event, result):
                        break  # no done will come for a context that never opened
        finally:
            self._backlog = kept + pending + self._backlog
        return result


def _event(raw: str | bytes) -> dict[str, Any]:
    """A JSON event from the server, or :class:`ProtocolError`."""
    try:
        event = json.loads(raw)
    except ValueError:
        event = None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise ProtocolError("bad_event", f"not a JSON event: {raw!r:.200}")
    return event


_START_REFUSALS = frozenset(
    {"too_many_contexts", "context_exists", "invalid_field", "voice_not_found", "busy"}
)


def _answers_start(event: Event, context_id: str) -> bool:
    """``started`` for the context, or the error that refused its start."""
    if not isinstance(event, dict) or event.get("context_id") != context_id:
        return False
    kind = event.get("type")
    return kind == "started" or (kind == "error" and event.get("code") in _START_REFUSALS)


def _refuses_start(event: Event, result: ContextResult) -> bool:
    return (
        isinstance(event, dict)
        and event.get("type") == "error"
        and event.get("code") in _START_REFUSALS
        and result.started is None
        and not result.segments
    )


def _record(result: ContextResult, event: Event) -> None:
    if isinstance(event, AudioFrame):
        result.frames.append(event)
        return
    kind = event.get("type")
    if kind == "started":
        result.started = event
    elif kind == "segment":
        result.segments.append(event)
    elif kind == "warning":
        result.warnings.append(event)
    elif kind == "error":
        result.errors.append(event)
    elif kind == "timestamps":
        result.timestamps.append(event)
    elif kind == "done":
        result.done = event
