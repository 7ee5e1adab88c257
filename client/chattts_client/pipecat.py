"""A pipecat TTS service for a chattts-stream server (``pip install './client[pipecat]'``).

    from chattts_client.pipecat import ChatTTSStreamTTSService

    tts = ChatTTSStreamTTSService(url="ws://localhost:8000/v1/stream", voice="nova")
    pipeline = Pipeline([transport.input(), stt, llm, tts, transport.output()])

One connection (a :class:`~chattts_client.StreamClient`) for the whole session; each bot
turn is one context on the server (``start`` when the turn's first text arrives, ``end``
when pipecat flushes the turn), so the server's segmenter cuts the LLM's tokens into
sentences itself: the service runs in pipecat's TOKEN aggregation mode by default, and
speaking starts at the first clause. An interruption cancels the turn's context on the
server (its queued text and audio are dropped there). Every segment's ``timestamps``
become pipecat word timestamps, so pipecat's transcript of an interrupted turn stops at
what was heard. When the server drains or goes away mid-turn, the turn continues on
another server (``resume``, the client's :class:`~chattts_client.ResumePolicy`); when
none takes it, the turn ends with a :class:`~chattts_client.ResumeError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

from loguru import logger
from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame, TTSStoppedFrame
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TextAggregationMode, TTSService
from pipecat.transcriptions.language import Language
from pipecat.utils.errors import ErrorCategory
from websockets.exceptions import ConnectionClosed

from chattts_client.client import StreamClient
from chattts_client.errors import (
    AuthError,
    BusyError,
    ContextError,
    LimitError,
    ProtocolError,
    RequestError,
    ResumeError,
    TTSClientError,
    UnavailableError,
    error_from_event,
)
from chattts_client.policy import ResumePolicy
from chattts_client.wire import START_REFUSALS, AudioFrame, Event

__all__ = ["ChatTTSStreamTTSService"]


class ChatTTSStreamTTSService(TTSService):
    """Speech from a chattts-stream server over its WebSocket (``/v1/stream``)."""

    Settings = TTSSettings
    _settings: TTSSettings

    def __init__(
        self,
        *,
        url: str | list[str] = "ws://localhost:8000/v1/stream",
        token: str | None = None,
        voice: str | None = None,
        seed: int | None = None,
        speed: float = 1.0,
        sample_rate: int | None = None,
        volume: float | None = None,
        resume: ResumePolicy | None = ResumePolicy(),  # noqa: B008 (frozen: shared safely)
        text_aggregation_mode: TextAggregationMode = TextAggregationMode.TOKEN,
        settings: TTSSettings | None = None,
        **kwargs: Any,
    ) -> None:
        """``url``: one server or a load balancer (or a list of servers, tried in turn);
        ``voice``: a name from the server's ``GET /v1/voices`` (OpenAI's names are
        presets) or a raw speaker string; ``sample_rate``: the pipeline's by default (the
        server resamples to 8, 16, 22.05, 24, 44.1 or 48 kHz); ``volume``: 0-4 (None: the
        server's 1; peaks are limited, never clipped); ``resume``: how a turn continues
        when its server drains or goes away (None: it ends there)."""
        default = TTSSettings(model="chattts", voice=voice, language=Language.ZH)
        if settings is not None:
            default.apply_update(settings)
        super().__init__(
            text_aggregation_mode=text_aggregation_mode,
            push_text_frames=False,  # TTSTextFrames come from the word timestamps
            pause_frame_processing=False,
            push_start_frame=True,
            sample_rate=sample_rate,
            settings=default,
            **kwargs,
        )
        self._url = url
        self._token = token
        self._seed = seed
        self._speed = speed
        self._volume = volume
        self._resume = resume
        self._client: StreamClient | None = None
        self._connection: contextlib.AsyncExitStack | None = None
        self._opened: set[str] = set()  # contexts started on the server
        self._refused: set[str] = set()  # turns whose start the server refused
        self._receive_task: Any = None

    def can_generate_metrics(self) -> bool:
        return True

    def language_to_service_language(self, language: Language) -> str | None:
        return str(language.value)

    def _classify_error(self, exception: Exception) -> ErrorCategory | None:
        """pipecat's category for our errors. A bad token, voice or field is permanent:
        pipecat gives the service no more work until its settings change. Busy and a
        broken limit pass; anything else the server says is its own failure."""
        if isinstance(exception, AuthError):
            return ErrorCategory.AUTHENTICATION
        if isinstance(exception, (BusyError, LimitError)):
            return ErrorCategory.RATE_LIMIT
        if isinstance(exception, RequestError):
            settings_at_fault = exception.code in ("voice_not_found", "invalid_field")
            return ErrorCategory.INVALID_REQUEST if settings_at_fault else ErrorCategory.UNKNOWN
        if isinstance(exception, (UnavailableError, ContextError)):
            return ErrorCategory.SERVER
        return None

    # --- the connection ---------------------------------------------------------------

    async def setup(self, setup: FrameProcessorSetup) -> None:  # type: ignore[override]
        await super().setup(setup)
        await self._connect()

    async def stop(self, frame: Any) -> None:
        await super().stop(frame)
        await self._disconnect()

    async def cancel(self, frame: Any) -> None:
        await super().cancel(frame)
        await self._disconnect()

    async def cleanup(self) -> None:
        await super().cleanup()
        await self._disconnect()

    async def _connect(self) -> None:
        if self._client is not None:
            return
        connection = contextlib.AsyncExitStack()
        try:
            self._client = await connection.enter_async_context(
                StreamClient.connect(self._url, token=self._token, resume=self._resume)
            )
        except Exception as exc:  # a refused upgrade is typed: AuthError, NotReadyError...
            await connection.aclose()
            await self.push_error(error_msg=f"cannot connect to {self._url}: {exc}", exception=exc)
            await self._call_event_handler("on_connection_error", f"{exc}")
            return
        self._connection = connection
        self._opened.clear()
        self._refused.clear()
        self._receive_task = self.create_task(self._receive(self._client))
        await self._call_event_handler("on_connected")

    async def _disconnect(self) -> None:
        await self.stop_all_metrics()
        if self._receive_task is not None:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        await self._close_client()

    async def _close_client(self) -> None:
        connection, self._connection, self._client = self._connection, None, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.aclose()
            await self._call_event_handler("on_disconnected")

    # --- turns ----------------------------------------------------------------------

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Send the turn's next text; its audio arrives on the receive task."""
        if context_id in self._refused:
            yield None  # the turn ended with the refusal's error: the rest goes unsaid
            return
        try:
            if self._client is None:
                await self._connect()
            if self._client is None:
                raise ConnectionError(f"not connected to {self._url}")
            if context_id not in self._opened:
                self._opened.add(context_id)
                voice = self._settings.voice if isinstance(self._settings.voice, str) else None
                await self._client.start(
                    context_id, voice=voice, seed=self._seed, speed=self._speed,
                    sample_rate=self.sample_rate, timestamps=True, volume=self._volume,
                )  # fmt: skip
                await self.start_ttfb_metrics()
            await self._client.send_text(text, context_id)
            await self.start_tts_usage_metrics(text)
        except Exception as exc:
            yield ErrorFrame(error=f"chattts-stream: {exc}")
            yield TTSStoppedFrame(context_id=context_id)
            return
        yield None

    async def flush_audio(self, context_id: str | None = None) -> None:
        """The turn's text is complete: the server speaks what it holds, then ``done``."""
        context_id = context_id or self.get_active_audio_context_id()
        if context_id in self._opened and self._client is not None:
            await self._client.end(context_id)

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        """The user spoke over the bot: drop the turn's text and audio on the server (and
        ignore whatever of it is still on its way)."""
        await self.stop_all_metrics()
        if context_id in self._opened and self._client is not None:
            self._opened.discard(context_id)
            with contextlib.suppress(TTSClientError, ConnectionClosed, OSError):
                await self._client.cancel(context_id)
        await super().on_audio_context_interrupted(context_id)

    # --- what the server sends ------------------------------------------------------

    async def _receive(self, client: StreamClient) -> None:
        while client is self._client:
            try:
                async for event in client.events():
                    await self._on_event(client, event)
            except (ResumeError, ProtocolError) as exc:  # one turn lost, or one frame
                if exc.context_id is not None:
                    await self._end_context(exc.context_id)
                await self.push_error(error_msg=f"chattts-stream {exc}", exception=exc)
                continue
            # Closed with no turn left to continue (or resume off): end the turns it
            # held; the next turn connects again.
            for context_id in list(self._opened):
                await self._end_context(context_id)
            await self._close_client()
            return

    async def _end_context(self, context_id: str) -> None:
        self._opened.discard(context_id)
        if self.audio_context_available(context_id):
            await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
            await self.remove_audio_context(context_id)

    async def _on_audio(self, context_id: str, frame: AudioFrame) -> None:
        if not self.audio_context_available(context_id):
            # pipecat closes a context that received nothing for a few seconds (a slow
            # first segment, a busy engine, a resumption); the turn goes on: reopen it.
            await self.create_audio_context(context_id)
        await self.stop_ttfb_metrics()
        audio = TTSAudioRawFrame(
            audio=frame.pcm, sample_rate=self.sample_rate, num_channels=1, context_id=context_id
        )
        await self.append_to_audio_context(context_id, audio)

    async def _on_event(self, client: StreamClient, event: Event) -> None:
        context_id = client.context_of(event)
        if isinstance(event, AudioFrame):
            if context_id in self._opened:  # else an interrupted turn: its late audio
                await self._on_audio(context_id, event)
            return
        kind = event.get("type")
        if kind == "timestamps" and context_id in self._opened:
            if not self.audio_context_available(context_id):
                await self.create_audio_context(context_id)
            words = [(item["text"], item["start_ms"] / 1000) for item in event["items"]]
            # Each unit carries its own punctuation and spaces (streaming/timestamps.py).
            await self.add_word_timestamps(words, context_id, includes_inter_frame_spaces=True)
        elif kind == "done" and context_id:
            await self._end_context(context_id)
        elif kind == "error":
            error = error_from_event(event)
            if context_id in self._refused and error.code in ("unknown_context", "context_closing"):
                return  # text sent before the refusal arrived: the refusal was reported
            if context_id in self._opened and error.code in START_REFUSALS:
                self._refused.add(context_id)
                await self._end_context(context_id)  # refused: no done will come for it
            await self.push_error(error_msg=f"chattts-stream {error}", exception=error)
        elif kind == "resumed":
            logger.info(f"{self}: turn {context_id} continues on another server ({event})")
        elif kind == "warning":
            logger.debug(f"{self}: {event.get('code')}: {event.get('message')}")
