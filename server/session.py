"""One WebSocket connection: its contexts, their segmenters, and the audio they stream.

Each context has a speaker task that takes its segments in order, submits them to the
engine worker one at a time, and forwards audio frames as the engine makes them. The
receive loop only parses, checks limits and feeds segmenters, so a flood of text on one
context never delays audio on another.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from server.config import Settings
from server.engines.base import SynthesisRequest, VoiceSpec
from server.errors import SynthesisError, TTSError
from server.metrics import Metrics
from server.textnorm import TextFrontend
from server.worker import EngineWorker, Job
from streaming import protocol as p
from streaming.audio import FrameChunker, Resampler, float_to_pcm16
from streaming.joins import JoinSettings, SegmentJoiner
from streaming.schedule import playback_deadline
from streaming.segment import Segment, Segmenter, SegmenterConfig
from streaming.text import PreparedText

logger = logging.getLogger(__name__)


class _Closed(Exception):
    """The client is gone; stop sending."""


class Context:
    """One utterance stream: text buffer, voice, and the task that speaks it."""

    def __init__(
        self,
        session: Session,
        context_id: str,
        stream: int,
        voice: VoiceSpec,
        sample_rate_hz: int,
    ) -> None:
        self.session = session
        self.id = context_id
        self.stream = stream
        self.voice = voice
        self.sample_rate_hz = sample_rate_hz
        settings = session.settings
        self.segmenter = Segmenter(
            SegmenterConfig(
                max_chars=settings.segment_max_chars,
                first_min_chars=settings.first_segment_min_chars,
            )
        )
        self.segments: asyncio.Queue[Segment | None] = asyncio.Queue()
        # Each segment is normalised as soon as it is cut, while earlier ones speak.
        self._prepared: dict[int, asyncio.Future[PreparedText]] = {}
        self._text = session.frontend.stream()
        self.queued_chars = 0  # cut into segments, not yet finished speaking
        self.closing = False
        self.cancelled = False
        self.job: Job | None = None
        self.samples_sent = 0
        self.sequence = 0
        self.segments_spoken = 0
        self.first_text_at: float | None = None
        # monotonic, at the first frame sent (None: no audio sent yet)
        self.playback_started_at: float | None = None
        self._idle: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None
        # Shapes the joins between this context's segments (at the engine rate).
        self.joiner: SegmentJoiner | None = None

    @property
    def buffered_chars(self) -> int:
        return len(self.segmenter.pending_text) + self.queued_chars

    def accept_text(self, text: str) -> None:
        if self.first_text_at is None and text.strip():
            self.first_text_at = time.perf_counter()
        self._enqueue(self.segmenter.push(text))
        self._arm_idle_timer()

    def flush(self) -> None:
        self._cancel_idle_timer()
        self._enqueue(self.segmenter.flush())

    def end(self) -> None:
        self.flush()
        self.closing = True
        self.segments.put_nowait(None)

    def cancel(self) -> None:
        """Drop pending text and audio now; the speaker task reports ``done``."""
        self.cancelled = True
        self.closing = True
        self._cancel_idle_timer()
        if self.job is not None:
            self.job.abandon()
        # Normalisation not started yet is dropped: it would delay other contexts.
        for future in self._prepared.values():
            future.cancel()
        self._prepared.clear()
        self.segments.put_nowait(None)

    def _enqueue(self, segments: list[Segment]) -> None:
        for segment in segments:
            self.queued_chars += len(segment.text)
            self._prepared[segment.index] = self._text.submit(segment.text)
            self.segments.put_nowait(segment)

    def _arm_idle_timer(self) -> None:
        self._cancel_idle_timer()
        if self.segmenter.pending_text.strip():
            settings = self.session.settings
            # When the input pauses (an LLM thinking) after a complete sentence, speak it
            # soon rather than after the full idle time.
            complete = self.segmenter.holds_complete_sentence
            delay_ms = settings.sentence_flush_ms if complete else settings.idle_flush_ms
            self._idle = asyncio.get_running_loop().call_later(delay_ms / 1000, self._on_idle)

    def _cancel_idle_timer(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _on_idle(self) -> None:
        self._idle = None
        if not self.closing:
            self._enqueue(self.segmenter.flush())

    # --- speaker task -----------------------------------------------------------------

    async def speak(self) -> None:
        session = self.session
        metrics = session.metrics
        metrics.active_streams.inc()
        try:
            while not self.cancelled:
                segment = await self.segments.get()
                if segment is None or self.cancelled:
                    break
                try:
                    await self._speak_segment(segment)
                except _Closed:
                    raise
                except Exception:
                    # A bug must not end the context silently: report it, go on.
                    logger.exception(
                        "[%s] context %r: segment %d failed", session.id, self.id, segment.index
                    )
                    metrics.errors.labels(kind="internal_error").inc()
                    await session.send_error(
                        "internal_error", f"segment {segment.index} could not be spoken", self.id
                    )
                finally:
                    self.queued_chars -= len(segment.text)
            await session.send_json(
                p.Done(
                    context_id=self.id,
                    stream=self.stream,
                    segments=self.segments_spoken,
                    audio_samples=self.samples_sent,
                    audio_ms=round(self.samples_sent * 1000 / self.sample_rate_hz, 1),
                    cancelled=self.cancelled,
                )
            )
        except _Closed:
            pass
        finally:
            self._cancel_idle_timer()
            metrics.active_streams.dec()
            session.forget(self)

    async def _speak_segment(self, segment: Segment) -> None:
        session = self.session
        metrics = session.metrics
        # Normalisation costs milliseconds: it runs on the text front-end's thread.
        future = self._prepared.pop(segment.index, None)
        prepared = await (future or self._text.submit(segment.text))
        if self.cancelled:
            return
        if prepared.removed:
            removed = [
                {"start": segment.start + r.start, "chars": r.chars, "reason": r.reason}
                for r in prepared.removed
            ]
            chars = "".join(r.chars for r in prepared.removed)
            metrics.removed_characters.inc(len(chars))
            await session.send_json(
                p.WarningEvent(
                    context_id=self.id,
                    code="unspeakable_characters",
                    message=f"{len(chars)} character(s) cannot be spoken and were skipped: {chars}",
                    removed=removed,
                )
            )
        await session.send_json(
            p.SegmentEvent(
                context_id=self.id,
                stream=self.stream,
                index=segment.index,
                text=segment.text,
                spoken=prepared.spoken,
                start_char=segment.start,
                end_char=segment.end,
                audio_start_sample=self.samples_sent,
                audio_start_ms=round(self.samples_sent * 1000 / self.sample_rate_hz, 1),
            )
        )
        self.segments_spoken += 1
        if not prepared.spoken:
            return
        engine_rate = session.worker.sample_rate_hz
        resampler = (
            Resampler(engine_rate, self.sample_rate_hz)
            if engine_rate != self.sample_rate_hz
            else None
        )
        settings = session.settings
        chunker = FrameChunker(
            self.sample_rate_hz * settings.frame_ms // 1000,
            first_frame_samples=self.sample_rate_hz * settings.first_frame_ms // 1000,
        )
        if self.cancelled:
            return
        try:
            job = session.worker.submit(
                SynthesisRequest(prepared.spoken, self.voice), deadline=self._playback_deadline()
            )
        except TTSError as exc:
            await session.send_error(exc.code, exc.message, self.id)
            return
        self.job = job
        produced = 0
        joiner = self._joiner(engine_rate)
        if joiner is not None:
            joiner.begin(segment.text)
        try:
            async for chunk in job.chunks(settings.segment_timeout_s):
                if self.cancelled:
                    return
                if job.fell_back and not produced:
                    await session.send_json(
                        p.WarningEvent(
                            context_id=self.id,
                            code="fallback_voice",
                            message=f"segment {segment.index}: the main engine failed on it; "
                            "it is spoken with the fallback voice",
                        )
                    )
                produced += chunk.size
                if joiner is not None:
                    chunk = joiner.process(chunk)
                samples = resampler.process(chunk) if resampler is not None else chunk
                await self._send_frames(segment.index, chunker.push(samples))
            if self.cancelled:
                return
            # The joiner's held tail, its fade to zero and the pause after the segment.
            rest = joiner.finish() if joiner is not None else np.zeros(0, np.float32)
            if resampler is not None:
                rest = np.concatenate((resampler.process(rest), resampler.flush()))
            await self._send_frames(segment.index, [*chunker.push(rest), *chunker.flush()])
        except SynthesisError as exc:
            metrics.errors.labels(kind=exc.code).inc()
            await session.send_error(exc.code, f"segment {segment.index}: {exc.message}", self.id)
            return
        finally:
            # Leaving early (cancel, disconnect, timeout, error) must not leave the engine
            # synthesising for nobody; after a complete segment this is a no-op.
            job.cancel()
            self.job = None
            if joiner is not None:
                joiner.abandon()  # no-op after finish(); drops held audio otherwise
        metrics.observe_segment(
            engine_seconds=job.engine_seconds,
            audio_seconds=produced / engine_rate,
            characters=len(prepared.spoken),
        )

    def _joiner(self, engine_rate_hz: int) -> SegmentJoiner | None:
        settings = self.session.settings
        if not settings.shape_joins:
            return None
        if self.joiner is None or self.joiner.sample_rate_hz != engine_rate_hz:
            self.joiner = SegmentJoiner(
                engine_rate_hz, JoinSettings(pause_scale=settings.pause_scale)
            )
        return self.joiner

    def _playback_deadline(self) -> float:
        return playback_deadline(
            time.monotonic(), self.playback_started_at, self.samples_sent, self.sample_rate_hz
        )

    async def _send_frames(self, segment_index: int, frames: list[np.ndarray]) -> None:
        for frame in frames:
            if self.cancelled or not frame.size:
                continue
            header = p.pack_audio_header(self.stream, segment_index, self.sequence)
            await self.session.send_bytes(header + float_to_pcm16(frame))
            self.sequence += 1
            self.samples_sent += int(frame.size)
            if self.playback_started_at is None:
                self.playback_started_at = time.monotonic()
                if self.first_text_at is not None:
                    self.session.metrics.ttfa.labels(route="ws").observe(
                        time.perf_counter() - self.first_text_at
                    )


class Session:
    """Runs one accepted WebSocket until the client leaves."""

    def __init__(
        self,
        websocket: WebSocket,
        settings: Settings,
        worker: EngineWorker,
        metrics: Metrics,
        session_id: str,
        frontend: TextFrontend,
    ) -> None:
        self.websocket = websocket
        self.settings = settings
        self.worker = worker
        self.metrics = metrics
        self.id = session_id
        self.frontend = frontend
        self.contexts: dict[str, Context] = {}
        self._next_stream = 1
        self._closed = False

    @property
    def limits(self) -> dict[str, int]:
        s = self.settings
        return {
            "max_message_bytes": s.max_message_bytes,
            "max_text_message_chars": s.max_text_message_chars,
            "max_buffered_chars": s.max_buffered_chars,
            "max_contexts": s.max_contexts,
        }

    async def run(self) -> None:
        await self.send_json(
            p.Ready(
                session_id=self.id,
                engine=self.worker.engine.name if self.worker.engine else "none",
                sample_rate=self.worker.sample_rate_hz,
                limits=self.limits,
            )
        )
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                await self._on_frame(message)
        except (WebSocketDisconnect, _Closed):
            pass
        finally:
            self._closed = True
            tasks = [c.task for c in self.contexts.values() if c.task is not None]
            for context in list(self.contexts.values()):
                context.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _on_frame(self, message: Mapping[str, Any]) -> None:
        raw: str | bytes | None = message.get("text")
        if raw is None:
            raw = message.get("bytes") or b""
        size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8", "surrogatepass"))
        limit = self.settings.max_message_bytes
        try:
            if size > limit:
                raise p.ProtocolError(
                    "message_too_large",
                    f"message of {size} bytes exceeds the limit of {limit} bytes",
                    limit=limit,
                )
            replies = self._dispatch(p.parse_client_message(raw))
        except p.ProtocolError as exc:
            self.metrics.errors.labels(kind=exc.code).inc()
            await self.send_error(exc.code, exc.message, exc.context_id, limit=exc.limit)
            return
        for reply in replies:
            await self.send_json(reply)

    def _dispatch(self, message: p.ClientMessage) -> list[p.ServerMessage]:
        """Apply one message synchronously and return the replies to send."""
        if isinstance(message, p.Start):
            return [self._start(message)]
        replies: list[p.ServerMessage] = []
        context = self.contexts.get(message.context_id)
        if context is None:
            if message.context_id == p.DEFAULT_CONTEXT_ID and isinstance(message, p.Text):
                replies.append(self._start(p.Start(p.DEFAULT_CONTEXT_ID)))
                context = self.contexts[p.DEFAULT_CONTEXT_ID]
            elif isinstance(message, p.Cancel):
                return []  # cancelling what already finished is not an error
            else:
                raise p.ProtocolError(
                    "unknown_context",
                    f"context {message.context_id!r} is not open",
                    message.context_id,
                )
        if isinstance(message, p.Cancel):
            context.cancel()
            return replies
        if context.closing:
            raise p.ProtocolError(
                "context_closing",
                f"context {context.id!r} has ended; start a new one (or wait for its done)",
                context.id,
            )
        if isinstance(message, p.Text):
            self._accept_text(context, message.text)
        elif isinstance(message, p.Flush):
            context.flush()
        elif isinstance(message, p.End):
            context.end()
        return replies

    def _accept_text(self, context: Context, text: str) -> None:
        s = self.settings
        if len(text) > s.max_text_message_chars:
            raise p.ProtocolError(
                "text_too_long",
                f"text delta of {len(text)} characters exceeds the limit of {s.max_text_message_chars}",
                context.id,
                limit=s.max_text_message_chars,
            )
        if context.buffered_chars + len(text) > s.max_buffered_chars:
            raise p.ProtocolError(
                "buffer_full",
                f"context {context.id!r} holds {context.buffered_chars} unspoken characters; "
                f"{len(text)} more would exceed the limit of {s.max_buffered_chars} (delta refused, resend later)",
                context.id,
                limit=s.max_buffered_chars,
            )
        context.accept_text(text)

    def _start(self, message: p.Start) -> p.Started:
        if message.context_id in self.contexts:
            raise p.ProtocolError(
                "context_exists",
                f"context {message.context_id!r} is already open",
                message.context_id,
            )
        if len(self.contexts) >= self.settings.max_contexts:
            raise p.ProtocolError(
                "too_many_contexts",
                f"this connection already has {len(self.contexts)} open contexts (limit {self.settings.max_contexts})",
                message.context_id,
                limit=self.settings.max_contexts,
            )
        if message.voice is not None:
            try:
                self.worker.check_voice(message.voice)
            except ValueError as exc:
                raise p.ProtocolError(
                    "invalid_field", f"field 'voice': {exc}", message.context_id
                ) from None
        seed = message.seed
        if seed is None:
            seed = random.randrange(p.MAX_SEED)
        voice = VoiceSpec(voice=message.voice, seed=seed, speed=message.speed)
        rate = message.sample_rate or self.worker.sample_rate_hz
        context = Context(self, message.context_id, self._next_stream, voice, rate)
        self._next_stream += 1
        self.contexts[context.id] = context
        context.task = asyncio.get_running_loop().create_task(
            context.speak(), name=f"speak-{self.id}-{context.id}"
        )
        return p.Started(
            context_id=context.id,
            stream=context.stream,
            sample_rate=rate,
            voice=voice.voice,
            seed=voice.seed,
            speed=voice.speed,
        )

    def forget(self, context: Context) -> None:
        if self.contexts.get(context.id) is context:
            del self.contexts[context.id]

    # --- sending ----------------------------------------------------------------------

    async def send_json(self, message: p.ServerMessage) -> None:
        await self._send({"type": "websocket.send", "text": message.to_json()})

    async def send_bytes(self, data: bytes) -> None:
        await self._send({"type": "websocket.send", "bytes": data})

    async def send_error(
        self, code: str, message: str, context_id: str | None, *, limit: int | None = None
    ) -> None:
        await self.send_json(
            p.ErrorEvent(context_id=context_id, code=code, message=message, limit=limit)
        )

    async def _send(self, message: dict[str, Any]) -> None:
        if self._closed or self.websocket.application_state != WebSocketState.CONNECTED:
            raise _Closed
        try:
            await self.websocket.send(message)
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            raise _Closed from exc
