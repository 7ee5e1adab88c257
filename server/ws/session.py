"""One WebSocket connection: the socket, the clock and the engine around its core.

What to do with each client frame is decided by :class:`streaming.connection.Connection`
(the sans-I/O core); how a segment's audio is shaped and framed, by
:class:`streaming.speech.SpeechPipeline`. This module only does the I/O: it reads
frames, sends events and audio, arms idle timers, hands each context's segments to the
text front-end and the engine worker, and reports failures.

Each context has a speaker task that takes its segments in order, submits them to the
engine worker one at a time, and forwards audio frames as the engine makes them. The
receive loop only feeds the core, so a flood of text on one context never delays audio
on another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict
from typing import Any

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect

from server import logs
from server.errors import report
from server.runtime.phrase_cache import context_scope
from server.runtime.speaker import (
    FellBack,
    Frames,
    Retried,
    SegmentSpeaker,
    Started,
    Timed,
    WithoutAudio,
)
from server.state import AppState
from server.transport import SCOPE_KEY, drain_then_abort, unblock_writes
from server.ws.wire import WireClosed, open_wire
from streaming import connection as c
from streaming import encodings
from streaming import protocol as p
from streaming.errors import CLOSE_GOING_AWAY
from streaming.schedule import playback_deadline
from streaming.segment import Segment
from streaming.speech import SegmentStart, SpeechPipeline
from streaming.text import PreparedText

logger = logging.getLogger(__name__)

#: How long the close frame of an idle session may take to reach its client.
_IDLE_CLOSE_GRACE_S = 1.0


class _Closed(Exception):
    """The client is gone; stop sending."""


class Context:
    """The I/O half of one context: its segments' preparation, its speaker task, its audio."""

    def __init__(self, session: Session, state: c.ContextState) -> None:
        self.session = session
        self.state = state
        self.id = state.id
        voice = state.voice
        self.sample_rate_hz = voice.sample_rate_hz
        # The engine's own rate control as far as it goes, a time-stretch beyond.
        engine_speed, tempo = session.voices.speed_split(voice.speed, fallback=voice.fallback)
        self.speaker = SegmentSpeaker(
            session.worker,
            session.metrics,
            SpeechPipeline(
                session.settings.speech,
                session.worker.sample_rate_hz,
                voice.sample_rate_hz,
                tempo=tempo,
                volume=voice.volume,
                frame_ms=voice.frame_ms,
            ),
            session.voices.for_stream(
                voice.voice,
                seed=voice.seed,
                speed=engine_speed,
                fallback=voice.fallback,
                seed_given=voice.seed_given,
            ),
            output_rate_hz=voice.sample_rate_hz,
            on_fallback=voice.fallback,
            timestamps=state.timestamps,
            phrases=context_scope(session.app_state, voice, session.websocket),
        )
        self._encode = encodings.encoder(voice.encoding)
        self.segments: asyncio.Queue[Segment | None] = asyncio.Queue()
        # Each segment is normalised as soon as it is cut, while earlier ones speak.
        self._prepared: dict[int, asyncio.Future[PreparedText]] = {}
        self._text = session.frontend.stream(state.lexicon)
        self.samples_sent = 0
        self.sequence = 0
        self.segments_spoken = 0
        self.chars_in = 0  # characters of text cut into segments
        self.removed_chars = 0
        self.failures = 0  # segments that failed (reported as errors)
        self.segments_retried = 0  # made again: their first try made too little audio
        self.segments_without_audio = 0  # ended with too little audio (reported)
        self.outcome = "disconnected"  # until done is sent
        self.first_audio_s: float | None = None  # first text -> first frame sent
        self.first_text_at: float | None = None
        # monotonic, at the first frame sent (None: no audio sent yet)
        self.playback_started_at: float | None = None
        self._idle: asyncio.TimerHandle | None = None
        self.task = asyncio.get_running_loop().create_task(
            self.speak(), name=f"speak-{session.id}-{self.id}"
        )

    @property
    def cancelled(self) -> bool:
        return self.state.cancelled

    def queue(self, segments: tuple[Segment, ...]) -> None:
        for segment in segments:
            self.chars_in += len(segment.text)
            self._prepared[segment.index] = self._text.submit(segment.text)
            self.segments.put_nowait(segment)

    def end(self) -> None:
        self.segments.put_nowait(None)

    def cancel(self) -> None:
        """Drop pending text and audio now; the speaker task reports ``done``."""
        self.speaker.abandon()
        # Normalisation not started yet is dropped: it would delay other contexts.
        for future in self._prepared.values():
            future.cancel()
        self._prepared.clear()
        self.segments.put_nowait(None)

    def arm_idle_timer(self, delay_s: float | None) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if delay_s is not None:
            loop = asyncio.get_running_loop()
            self._idle = loop.call_later(delay_s, self.session.on_idle, self.id)

    # --- speaker task -----------------------------------------------------------------

    async def speak(self) -> None:
        session = self.session
        session.metrics.active_streams.inc()
        try:
            while not self.cancelled:
                segment = await self.segments.get()
                if segment is None or self.cancelled:
                    break
                try:
                    await self._speak_segment(segment)
                except _Closed:
                    raise
                except Exception as exc:
                    # A failure must not end the context silently: report it, go on.
                    self.failures += 1
                    await session.send_failure(exc, self.id, f"segment {segment.index}")
                finally:
                    session.core.spoken(self.id, segment)
            await session.send_json(
                p.Done(
                    context_id=self.id,
                    stream=self.state.stream,
                    segments=self.segments_spoken,
                    audio_samples=self.samples_sent,
                    audio_ms=round(self.samples_sent * 1000 / self.sample_rate_hz, 1),
                    cancelled=self.cancelled,
                )
            )
            self.outcome = "cancelled" if self.cancelled else "done"
            if self.failures and not self.cancelled:
                self.outcome = "done_with_errors"
        except _Closed:
            pass
        finally:
            self.arm_idle_timer(None)
            session.metrics.active_streams.dec()
            session.forget(self)
            self._log_summary()

    def _log_summary(self) -> None:
        """The context's one summary line (server.logs)."""
        first_audio = None if self.first_audio_s is None else round(self.first_audio_s * 1000, 1)
        voice = self.state.voice
        logs.summary(
            "context",
            f"{self.id} {self.outcome}",
            context_id=self.id,
            engine="espeak" if voice.fallback else self.session.worker.status.engine,
            voice=voice.voice,
            seed=voice.seed,
            characters=self.chars_in,
            removed=self.removed_chars,
            segments=self.segments_spoken,
            failed_segments=self.failures or None,
            retried_segments=self.segments_retried or None,
            segments_without_audio=self.segments_without_audio or None,
            ttfa_ms=first_audio,
            audio_s=round(self.samples_sent / self.sample_rate_hz, 3),
            outcome=self.outcome,
        )

    async def _speak_segment(self, segment: Segment) -> None:
        # Normalisation costs milliseconds: it runs on the text front-end's thread.
        future = self._prepared.pop(segment.index, None)
        prepared = await (future or self._text.submit(segment.text))
        if self.cancelled:
            return
        events = self.speaker.speak(
            segment,
            prepared,
            timeout_s=self.session.settings.segment_timeout_s,
            deadline=self._playback_deadline(),
        )
        async with contextlib.aclosing(events):
            async for event in events:
                await self._send_event(segment, prepared, event)
                if self.cancelled:
                    return  # before the speaker goes on to the engine

    async def _send_event(self, segment: Segment, prepared: PreparedText, event: object) -> None:
        """What the client hears of one speaker event."""
        session = self.session
        if isinstance(event, Frames):
            await self._send_frames(segment.index, event.frames)
        elif isinstance(event, Started):
            await self._send_start(segment, prepared, event.start)
        elif isinstance(event, FellBack):
            await session.send_json(
                p.WarningEvent(
                    context_id=self.id,
                    code="fallback_voice",
                    message=f"segment {segment.index}: the main engine failed on it; "
                    "it is spoken with the fallback voice",
                )
            )
        elif isinstance(event, Timed):
            await session.send_json(
                p.TimestampsEvent(context_id=self.id, stream=self.state.stream, **asdict(event))
            )
        elif isinstance(event, Retried | WithoutAudio):
            if isinstance(event, Retried):
                self.segments_retried += 1
                code = "segment_retried"
            else:
                self.segments_without_audio += 1
                code = "segment_without_audio"
            await session.send_json(
                p.SegmentWarningEvent(
                    context_id=self.id, code=code, message=event.describe(), segment=event.index
                )
            )

    async def _send_start(
        self, segment: Segment, prepared: PreparedText, start: SegmentStart
    ) -> None:
        session = self.session
        if start.removed:
            removed = sum(len(r.chars) for r in start.removed)
            self.removed_chars += removed
            session.metrics.removed_characters.inc(removed)
            await session.send_json(p.removed_warning(self.id, start.removed))
        await session.send_json(
            p.SegmentEvent(
                context_id=self.id,
                stream=self.state.stream,
                index=segment.index,
                text=segment.text,
                spoken=prepared.spoken,
                start_char=segment.start,
                end_char=segment.end,
                audio_start_sample=start.audio_start_sample,
                audio_start_ms=round(start.audio_start_sample * 1000 / self.sample_rate_hz, 1),
            )
        )
        self.segments_spoken += 1

    def _playback_deadline(self) -> float:
        return playback_deadline(
            time.monotonic(), self.playback_started_at, self.samples_sent, self.sample_rate_hz
        )

    async def _send_frames(self, segment_index: int, frames: list[np.ndarray]) -> None:
        for frame in frames:
            if self.cancelled or not frame.size:
                continue
            header = p.pack_audio_header(self.state.stream, segment_index, self.sequence)
            await self.session.send_audio(header, self._encode(frame))
            self.sequence += 1
            self.samples_sent += int(frame.size)
            if self.playback_started_at is None:
                self.playback_started_at = time.monotonic()
                if self.first_text_at is not None:
                    self.first_audio_s = time.perf_counter() - self.first_text_at
                    self.session.metrics.ttfa.labels(route="ws").observe(self.first_audio_s)


class Session:
    """Runs one accepted WebSocket until the client leaves."""

    def __init__(self, websocket: WebSocket, state: AppState, session_id: str) -> None:
        self.websocket = websocket
        self.app_state = state
        self.admission = admission = state.admission
        self.voices = voices = state.voices
        #: The connection's asyncio transport, when the server exposes it (server.transport).
        self.transport: asyncio.WriteTransport | None = websocket.scope.get(SCOPE_KEY)
        self.settings = settings = state.settings
        self.wire = open_wire(websocket, direct=settings.ws_direct_send)  # server.ws.wire
        self.worker = worker = state.worker
        self.metrics = state.metrics
        self.id = session_id
        self.frontend = state.frontend
        self.log = logging.LoggerAdapter(logger, {"session": session_id})
        self.core = c.Connection(
            settings.connection_limits,
            settings.speech,
            engine_rate_hz=worker.sample_rate_hz,
            idle_flush_ms=settings.idle_flush_ms,
            sentence_flush_ms=settings.sentence_flush_ms,
            check_voice=voices.own_seed,
            choose_seed=lambda: random.randrange(p.MAX_SEED),
            admit=lambda context_id: admission.start("ws", context_id),
            lexicon_limits=settings.request_lexicon_limits,
        )
        self.contexts: dict[str, Context] = {}
        self._closed = False
        # While run() reads: closes the session after --ws-idle-timeout-s with no open
        # context and no message (rescheduled as contexts open and end).
        self._idle: asyncio.Timeout | None = None

    @property
    def holds_unspoken_text(self) -> bool:
        return self.core.holds_unspoken_text

    async def run(self) -> None:
        await self.send_json(
            p.Ready(
                session_id=self.id,
                engine=self.worker.engine.name if self.worker.engine else "none",
                sample_rate=self.worker.sample_rate_hz,
                limits=self.core.limits.as_dict(),
            )
        )
        if self.app_state.drain_deadline is not None:  # accepted as the drain began
            await self.drain(self.app_state.drain_deadline)
        try:
            if not await self._read():
                await self._close_idle()
        except (WebSocketDisconnect, _Closed):
            pass
        finally:
            self._closed = True
            tasks = [context.task for context in self.contexts.values()]
            for event in self.core.cancel_all():
                self._perform(event)
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _read(self) -> bool:
        """Feed client frames to the core until the client leaves (True) or the session
        has been idle too long (False)."""
        idle = asyncio.timeout(None)
        try:
            async with idle:
                self._idle = idle
                while True:
                    self._rearm_idle()
                    message = await self.websocket.receive()
                    if message["type"] == "websocket.disconnect":
                        return True
                    read = self.core.read(_frame_payload(message))
                    if isinstance(read, c.Refused):
                        await self._apply([read])
                        continue
                    if isinstance(read, p.Start):
                        # The store's truth of the name, not a copy a change has not
                        # reached yet; applied with no await between (a Start's voice is
                        # resolved synchronously, and again by the Context it opens).
                        await self.voices.confirm(read.voice)
                    await self._apply(self.core.apply(read))
        except TimeoutError:
            if not idle.expired():
                raise
            return False
        finally:
            self._idle = None

    def _rearm_idle(self) -> None:
        """The idle clock restarts at each message and runs only while no context is open."""
        timeout_s = self.settings.ws_idle_timeout_s
        if self._idle is None or self._idle.expired() or timeout_s <= 0:
            return
        deadline = None if self.contexts else asyncio.get_running_loop().time() + timeout_s
        self._idle.reschedule(deadline)

    async def _close_idle(self) -> None:
        timeout_s = self.settings.ws_idle_timeout_s
        self.log.info("closing: no open context and no message for %g s", timeout_s)
        self.metrics.connections_closed.labels(reason="idle_session").inc()
        reason = f"idle: no open context and no message for {timeout_s:g} s"
        await self.go_away(_IDLE_CLOSE_GRACE_S, reason)

    async def _apply(self, events: list[c.Event]) -> None:
        for event in events:
            message = self._perform(event)
            if message is not None:
                await self.send_json(message)

    def _perform(self, event: c.Event) -> p.ServerMessage | None:
        """Act on one core event; return the message to send, if it is one."""
        if isinstance(event, c.Reply):
            return event.message
        if isinstance(event, c.Refused):
            report(event.error, metrics=self.metrics, log=self.log, where=f"[{self.id}] refused")
            return p.error_event(event.error)
        if isinstance(event, c.Opened):
            self.contexts[event.context.id] = Context(self, event.context)
            return None
        context = self.contexts.get(event.context_id)
        if context is None:
            return None
        if isinstance(event, c.FirstText):
            context.first_text_at = time.perf_counter()
        elif isinstance(event, c.Segments):
            context.queue(event.segments)
        elif isinstance(event, c.Ended):
            context.end()
        elif isinstance(event, c.Cancelled):
            context.cancel()
        elif isinstance(event, c.IdleTimer):
            context.arm_idle_timer(event.delay_s)
        return None

    async def drain(self, deadline: float) -> None:
        """The server began to drain (``deadline``: time.monotonic() by which it closes
        connections): tell the client first (``draining``), then end every open context
        after the text it accepted (streaming.connection.Connection.drain)."""
        deadline_ms = max(0, round((deadline - time.monotonic()) * 1000))
        events = self.core.drain(deadline_ms)
        if events:
            self.log.info("draining: %d open context(s) end here", len(self.contexts))
        with contextlib.suppress(_Closed):
            await self._apply(events)

    def on_idle(self, context_id: str) -> None:
        """A context's idle timer fired (on the loop): its pending fragment speaks now."""
        for event in self.core.idle(context_id):
            self._perform(event)

    async def go_away(self, grace_s: float, reason: str = "server shutting down") -> None:
        """Shutdown while sends are blocked on a client that stopped reading (or an idle
        session): drop every context's audio, queue a close frame (1001, going away,
        ``reason``), give it ``grace_s`` to reach the client, then drop the connection."""
        self._closed = True  # no speaker sends another frame
        for event in self.core.cancel_all():
            self._perform(event)
        for context in list(self.contexts.values()):
            context.task.cancel()
        unblock_writes(self.transport)
        self.wire.flush()  # what was sent goes before the close frame
        with contextlib.suppress(Exception):
            async with asyncio.timeout(grace_s):
                await self.websocket.close(CLOSE_GOING_AWAY, reason)
        await drain_then_abort(self.transport, grace_s)

    def forget(self, context: Context) -> None:
        if self.contexts.get(context.id) is context:
            del self.contexts[context.id]
            self.core.forget(context.id)
            if not context.state.voice.fallback:
                self.admission.finish()
            self._rearm_idle()

    # --- sending ----------------------------------------------------------------------

    async def send_json(self, message: p.ServerMessage) -> None:
        await self._send(self.wire.send_event, message)

    async def send_audio(self, header: bytes, pcm: bytes) -> None:
        await self._send(self.wire.send_audio, header, pcm)

    async def send_failure(self, exc: BaseException, context_id: str, what: str) -> None:
        """Report a failure of ``what`` (a segment) and tell the client; the context goes on."""
        code, message = report(exc, metrics=self.metrics, log=self.log, where=f"[{self.id}] {what}")
        message = (
            f"{what} could not be spoken" if code == "internal_error" else f"{what}: {message}"
        )
        await self.send_json(p.ErrorEvent(context_id=context_id, code=code, message=message))

    async def _send(self, send: Callable[..., Awaitable[None]], *message: Any) -> None:
        if self._closed:
            raise _Closed
        try:
            await send(*message)
        except WireClosed as exc:
            raise _Closed from exc


def _frame_payload(message: Mapping[str, Any]) -> str | bytes:
    text: str | None = message.get("text")
    if text is not None:
        return text
    data: bytes = message.get("bytes") or b""
    return data
