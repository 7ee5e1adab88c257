"""``synthesize-start`` ... ``synthesize-stop``: one utterance, spoken as its text arrives.

Text chunks go through the WebSocket's streamed segmenter policy (the first segment may
end at a clause), so audio starts with the first sentence while the rest of the text is
still arriving; each segment is normalised as soon as it is cut and spoken in order by
one task, as one :class:`~server.runtime.utterance.Utterance` (the pipeline, the
segment synthesizer, its tally and admission slot, as on every route). A fragment
left pending is spoken after ``--idle-flush-ms`` without text (``--sentence-flush-ms``
for a complete sentence), and the rest at ``synthesize-stop``.

Limits: a chunk over ``--max-text-message-chars`` is refused; while the unspoken text
would pass ``--max-buffered-chars``, the connection is not read (the client waits, as
TCP makes it) until a segment has been spoken. A segment the engine fails on is an
``error`` event, and the utterance goes on with the next (as a WebSocket context does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from server import logs
from server.errors import report
from server.phrase_scope import utterance_scope
from server.runtime.utterance import Utterance
from server.state import AppState
from server.wyoming.audio import AudioWriter
from streaming.errors import LimitExceeded
from streaming.policy import playback_deadline
from streaming.segment import Segment
from streaming.text import PreparedText
from streaming.utterance import Frames

__all__ = ["StreamedSpeech"]


class StreamedSpeech:
    """One streamed utterance on a Wyoming connection (see the module docstring).

    Calling contract: :meth:`open` (admission and voice: raises what refuses it), then
    :meth:`push` each chunk, then :meth:`finish` (waits until everything is spoken and
    ``audio-stop`` is written); :meth:`close` at the end, however it ends (cancels what
    is left and gives the admission slot back, once)."""

    def __init__(
        self,
        state: AppState,
        voice_name: str | None,
        out: AudioWriter,
        log: logging.LoggerAdapter[logging.Logger],
    ) -> None:
        self.state = state
        self.voice_name = voice_name
        self.out = out
        self.log = log
        settings = state.settings
        self._segmenter = settings.speech.segmenter(whole_text=False)
        self._text = state.frontend.for_utterance()
        self._segments: asyncio.Queue[Segment | None] = asyncio.Queue()
        self._prepared: dict[int, asyncio.Future[PreparedText]] = {}
        self._queued_chars = 0
        self._room = asyncio.Event()
        self._idle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._admitted: bool | None = None  # None: not admitted; else on the fallback
        self.utterance: Utterance | None = None
        self._closed = False
        self.characters = 0
        self.segments = 0
        self.failures = 0
        self.outcome = "disconnected"

    async def open(self) -> None:
        """Admit the utterance and resolve its voice (raises busy, not_ready, draining,
        voice_not_found...); its speaker task starts."""
        state = self.state
        refusal = state.refusal()
        if refusal is not None:
            raise refusal
        await state.voices.confirm(self.voice_name)
        engine_speed, tempo = state.voices.speed_split(1.0)
        voice = state.voices.for_utterance(self.voice_name, seed=None, speed=engine_speed)
        fallback = state.admission.start("wyoming")
        self._admitted = fallback
        if fallback:
            engine_speed, tempo = state.voices.speed_split(1.0, fallback=True)
            voice = state.voices.for_utterance(
                self.voice_name, seed=None, speed=engine_speed, fallback=True, seed_given=False
            )
        # The phrase cache as on every route; Wyoming has no tokens: its callers share
        # one partition (the token-less one).
        phrases = utterance_scope(
            state, self.voice_name, seed_given=False, fallback=fallback, token=None
        )
        # First audio is measured by the writer (from the first text), so the utterance
        # is given no first-text time of its own.
        utterance = self.utterance = Utterance(
            state.worker, state.metrics, state.admission, state.settings.speech, voice,
            route="wyoming", output_rate_hz=self.out.rate_hz, tempo=tempo, fallback=fallback,
            phrases=phrases,
        )  # fmt: skip
        state.metrics.active_streams.inc()
        self._task = asyncio.get_running_loop().create_task(self._speak_all(utterance))
        self._task.add_done_callback(lambda _: self._room.set())  # no push waits on it then

    async def push(self, text: str) -> None:
        """One text chunk; waits while the unspoken text would pass the limit."""
        limits = self.state.settings.connection_limits
        if len(text) > limits.max_text_message_chars:
            raise LimitExceeded(
                f"text chunk of {len(text)} characters exceeds the limit of "
                f"{limits.max_text_message_chars}",
                code="text_too_long",
                limit=limits.max_text_message_chars,
            )
        while self._queued_chars and self._buffered + len(text) > limits.max_buffered_chars:
            self._room.clear()
            await self._room.wait()
            if self._task is not None and self._task.done():
                raise OSError("the stream's audio could not be sent")  # the client is gone
        if self._buffered + len(text) > limits.max_buffered_chars:
            raise LimitExceeded(
                f"{self._buffered + len(text)} unspoken characters exceed the limit of "
                f"{limits.max_buffered_chars}",
                code="buffer_full",
                limit=limits.max_buffered_chars,
            )
        if self.out.first_text_at is None and text.strip():
            self.out.first_text_at = time.perf_counter()
        self.characters += len(text)
        self._queue(self._segmenter.push(text))
        self._arm_idle_timer()

    async def finish(self) -> None:
        """The text is complete: speak the rest, then ``audio-stop``."""
        self._disarm_idle_timer()
        self._queue(self._segmenter.flush())
        self._segments.put_nowait(None)
        assert self._task is not None
        await self._task
        await self.out.stop()
        self.outcome = "done_with_errors" if self.failures else "done"

    async def close(self) -> None:
        """End it now (cancel what is left); the admission slot goes back; logged once."""
        if self._closed:
            return
        self._closed = True
        self._disarm_idle_timer()
        for future in self._prepared.values():
            future.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self.state.metrics.active_streams.dec()
        if self.utterance is not None:
            self.utterance.finish()
        elif self._admitted is False:
            self.state.admission.finish()
        self._log_summary()

    @property
    def _buffered(self) -> int:
        return len(self._segmenter.pending_text) + self._queued_chars

    def _queue(self, segments: list[Segment]) -> None:
        for segment in segments:
            self._queued_chars += len(segment.text)
            self._prepared[segment.index] = self._text.submit(segment.text)
            self._segments.put_nowait(segment)

    def _arm_idle_timer(self) -> None:
        self._disarm_idle_timer()
        segmenter = self._segmenter
        if not segmenter.pending_text.strip():
            return
        settings = self.state.settings
        delay_ms = (
            settings.sentence_flush_ms
            if segmenter.holds_complete_sentence
            else settings.idle_flush_ms
        )
        loop = asyncio.get_running_loop()
        self._idle = loop.call_later(delay_ms / 1000, self._on_idle)

    def _disarm_idle_timer(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _on_idle(self) -> None:
        self._idle = None
        self._queue(self._segmenter.flush())

    async def _speak_all(self, utterance: Utterance) -> None:
        while (segment := await self._segments.get()) is not None:
            try:
                await self._speak(utterance, segment)
            except OSError:
                raise  # the client is gone
            except Exception as exc:
                self.failures += 1
                code, message = report(
                    exc, metrics=self.state.metrics, log=self.log, where=f"segment {segment.index}"
                )
                if code == "internal_error":
                    message = "could not be spoken"
                await self.out.error(code, f"segment {segment.index}: {message}")
            finally:
                self._queued_chars -= len(segment.text)
                self._room.set()

    async def _speak(self, utterance: Utterance, segment: Segment) -> None:
        prepared = await self._prepared.pop(segment.index)
        out = self.out
        deadline = playback_deadline(
            time.monotonic(), out.playback_started_at, out.samples, out.rate_hz
        )
        timeout_s = self.state.settings.segment_timeout_s
        events = utterance.speak(segment, prepared, timeout_s=timeout_s, deadline=deadline)
        async with contextlib.aclosing(events):
            async for event in events:
                if isinstance(event, Frames):
                    await out.frames(event.frames)
        if prepared.spoken:
            self.segments += 1

    @property
    def fallback_segments(self) -> int:
        return 0 if self.utterance is None else self.utterance.tally.fallback_segments

    def _log_summary(self) -> None:
        first = self.out.first_audio_s
        logs.summary(
            "wyoming",
            f"synthesize-stream {self.outcome}",
            engine="espeak" if self._admitted else self.state.worker.status.engine,
            voice=self.voice_name,
            characters=self.characters,
            segments=self.segments,
            failed_segments=self.failures or None,
            fallback_segments=self.fallback_segments or None,
            ttfa_ms=None if first is None else round(first * 1000, 1),
            audio_s=self.out.audio_s,
            outcome=self.outcome,
        )
        self.state.metrics.wyoming_requests.labels(kind="stream", outcome=self.outcome).inc()
