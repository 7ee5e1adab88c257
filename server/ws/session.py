"""One WebSocket connection: the socket, the clock and the engine around its core.

What to do with each client frame is decided by :class:`streaming.connection.Connection`
(the sans-I/O core), and what the client is sent of each utterance's speech by its
:class:`streaming.utterance.UtteranceState`; how a segment's audio is made, by the
utterance's :class:`server.runtime.utterance.Utterance`. This module only does the I/O:
it reads frames, sends what the core gives, arms idle timers, hands each utterance's
segments to the text front-end and its Utterance, and reports failures.

Each utterance (a *context*, on the wire) has a task that takes its segments in order
and speaks them one at a time, sending audio frames as the engine makes them. The
receive loop only feeds the core, so a flood of text for one utterance never delays
audio of another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from server import logs
from server.errors import report
from server.phrase_scope import context_scope
from server.runtime.utterance import Utterance
from server.state import AppState
from server.transport import SCOPE_KEY, drain_then_abort, unblock_writes
from server.ws.wire import WireClosed, open_wire
from streaming import connection as c
from streaming import protocol as p
from streaming.errors import CLOSE_GOING_AWAY
from streaming.segment import Segment
from streaming.text import PreparedText
from streaming.utterance import AudioOut, Frames, UtteranceState

logger = logging.getLogger(__name__)

#: How long the close frame of an idle session may take to reach its client.
_IDLE_CLOSE_GRACE_S = 1.0
# An idle timer that fires this close to its deadline is on time (the loop's clock).
_IDLE_SLACK_S = 0.001


class _Closed(Exception):
    """The client is gone; stop sending."""


class UtteranceTask:
    """The I/O of one utterance on the connection (a context, on the wire): its
    segments' preparation, the task that speaks them in order, their sending."""

    def __init__(self, session: Session, state: UtteranceState) -> None:
        self.session = session
        self.state = state
        self.id = state.id
        voice = state.voice
        # The engine's own rate control as far as it goes, a time-stretch beyond.
        engine_speed, tempo = session.voices.speed_split(voice.speed, fallback=voice.fallback)
        self.utterance = Utterance(
            session.worker,
            session.metrics,
            session.admission,
            session.settings.speech,
            session.voices.for_utterance(
                voice.voice,
                seed=voice.seed,
                speed=engine_speed,
                fallback=voice.fallback,
                seed_given=voice.seed_given,
            ),
            route="ws",
            output_rate_hz=voice.sample_rate_hz,
            tempo=tempo,
            fallback=voice.fallback,
            timestamps=state.timestamps,
            tally=state.tally,
            volume=voice.volume,
            frame_ms=voice.frame_ms,
            phrases=context_scope(session.app_state, voice, session.websocket),
        )
        self.segments: asyncio.Queue[Segment | None] = asyncio.Queue()
        # Each segment is normalised as soon as it is cut, while earlier ones speak.
        self._prepared: dict[int, asyncio.Future[PreparedText]] = {}
        self._text = session.frontend.for_utterance(state.lexicon)
        self._idle: asyncio.TimerHandle | None = None
        self._idle_at: float | None = None  # loop time the idle timer is for
        self.task = asyncio.get_running_loop().create_task(
            self.speak(), name=f"speak-{session.id}-{self.id}"
        )

    @property
    def cancelled(self) -> bool:
        return self.state.cancelled

    def queue(self, segments: tuple[Segment, ...]) -> None:
        for segment in segments:
            self._prepared[segment.index] = self._text.submit(segment.text)
            self.segments.put_nowait(segment)

    def first_text(self) -> None:
        """Its first words arrived: time to first audio counts from now."""
        self.utterance.first_text_at = time.perf_counter()

    def end(self) -> None:
        self.segments.put_nowait(None)

    def cancel(self) -> None:
        """Drop pending text and audio now; the task reports ``done``."""
        self.utterance.abandon()
        # Normalisation not started yet is dropped: it would delay other utterances.
        for future in self._prepared.values():
            future.cancel()
        self._prepared.clear()
        self.segments.put_nowait(None)

    def arm_idle_timer(self, delay_s: float | None) -> None:
        """Call the session's ``on_idle`` ``delay_s`` from now (None: not at all).

        Re-armed at every text message, so one timer is kept and only its deadline
        moves: when it fires early it sets itself for the rest (a timer a message, made
        and cancelled, cost more than the message's segmenting)."""
        loop = asyncio.get_running_loop()
        self._idle_at = None if delay_s is None else loop.time() + delay_s
        if self._idle is not None and (self._idle_at is None or self._idle.when() > self._idle_at):
            self._idle.cancel()
            self._idle = None
        if self._idle is None and self._idle_at is not None:
            self._idle = loop.call_at(self._idle_at, self._idle_due)

    def _idle_due(self) -> None:
        self._idle = None
        if self._idle_at is None:
            return
        loop = asyncio.get_running_loop()
        if self._idle_at - loop.time() > _IDLE_SLACK_S:  # moved on since it was set
            self._idle = loop.call_at(self._idle_at, self._idle_due)
            return
        self._idle_at = None
        self.session.on_idle(self.id)

    # --- the task ---------------------------------------------------------------------

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
                    # A failure must not end the utterance silently: report it, go on.
                    code, message = report(
                        exc, metrics=session.metrics, log=session.log,
                        where=f"[{session.id}] segment {segment.index}",
                    )  # fmt: skip
                    await session.send(self.state.failed(segment, code, message))
                finally:
                    session.core.spoken(self.id, segment)
            await session.send(self.state.done())
        except _Closed:
            pass
        finally:
            self.arm_idle_timer(None)
            session.metrics.active_streams.dec()
            session.forget(self)
            self._log_summary()

    def _log_summary(self) -> None:
        """The utterance's one summary line (server.logs)."""
        state = self.state
        voice, tally = state.voice, state.tally
        fields = self.utterance.summary(
            state.outcome,
            segments=tally.segments,
            failures=True,
            voice=voice.voice,
            seed=voice.seed,
            characters=tally.characters,
        )
        logs.summary("context", f"{self.id} {state.outcome}", context_id=self.id, **fields)

    async def _speak_segment(self, segment: Segment) -> None:
        # Normalisation costs milliseconds: it runs on the text front-end's thread.
        future = self._prepared.pop(segment.index, None)
        prepared = await (future or self._text.submit(segment.text))
        if self.cancelled:
            return
        utterance, send = self.utterance, self.session.send
        events = utterance.speak(
            segment,
            prepared,
            timeout_s=self.session.settings.segment_timeout_s,
            deadline=utterance.playback_deadline(),
        )
        async with contextlib.aclosing(events):
            async for event in events:
                lead_s = utterance.lead_s() if isinstance(event, Frames) else 0.0
                heard = self.state.heard(segment, prepared.spoken, event, lead_s=lead_s)
                for message in heard:
                    await send(message)
                if self.cancelled:
                    return  # before the synthesizer goes on to the engine


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
        self.utterances: dict[str, UtteranceTask] = {}
        self._closed = False
        # While run() reads: closes the session after --ws-idle-timeout-s with no open
        # context and no message (rescheduled as contexts open and end).
        self._idle: asyncio.Timeout | None = None

    @property
    def holds_unspoken_text(self) -> bool:
        return self.core.holds_unspoken_text

    async def run(self) -> None:
        await self.send(
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
            tasks = [utterance.task for utterance in self.utterances.values()]
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
        deadline = None if self.utterances else asyncio.get_running_loop().time() + timeout_s
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
                await self.send(message)

    def _perform(self, event: c.Event) -> p.ServerMessage | None:
        """Act on one core event; return the message to send, if it is one."""
        if isinstance(event, c.Reply):
            return event.message
        if isinstance(event, c.Refused):
            report(event.error, metrics=self.metrics, log=self.log, where=f"[{self.id}] refused")
            return p.error_event(event.error)
        if isinstance(event, c.Opened):
            self.utterances[event.context.id] = UtteranceTask(self, event.context)
            return None
        utterance = self.utterances.get(event.context_id)
        if utterance is None:
            return None
        if isinstance(event, c.FirstText):
            utterance.first_text()
        elif isinstance(event, c.Segments):
            utterance.queue(event.segments)
        elif isinstance(event, c.Ended):
            utterance.end()
        elif isinstance(event, c.Cancelled):
            utterance.cancel()
        elif isinstance(event, c.IdleTimer):
            utterance.arm_idle_timer(event.delay_s)
        return None

    async def drain(self, deadline: float) -> None:
        """The server began to drain (``deadline``: time.monotonic() by which it closes
        connections): tell the client first (``draining``), then end every open context
        after the text it accepted (streaming.connection.Connection.drain)."""
        deadline_ms = max(0, round((deadline - time.monotonic()) * 1000))
        events = self.core.drain(deadline_ms)
        if events:
            self.log.info("draining: %d open context(s) end here", len(self.utterances))
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
        self._closed = True  # no utterance sends another frame
        for event in self.core.cancel_all():
            self._perform(event)
        for utterance in list(self.utterances.values()):
            utterance.task.cancel()
        unblock_writes(self.transport)
        self.wire.flush()  # what was sent goes before the close frame
        with contextlib.suppress(Exception):
            async with asyncio.timeout(grace_s):
                await self.websocket.close(CLOSE_GOING_AWAY, reason)
        await drain_then_abort(self.transport, grace_s)

    def forget(self, task: UtteranceTask) -> None:
        if self.utterances.get(task.id) is task:
            del self.utterances[task.id]
            self.core.forget(task.id)
            task.utterance.finish()
            self._rearm_idle()

    # --- sending ----------------------------------------------------------------------

    async def send(self, message: p.ServerMessage | AudioOut) -> None:
        """Send a message, or an audio frame (its header and its PCM)."""
        if isinstance(message, tuple):
            await self._send(self.wire.send_audio, *message)
        else:
            await self._send(self.wire.send_event, message)

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
