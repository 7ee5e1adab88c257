"""A pipecat TTS service for a chattts-stream server (``pip install './client[pipecat]'``).

    from chattts_client.pipecat import ChatTTSStreamTTSService

    tts = ChatTTSStreamTTSService(url="ws://localhost:8000/v1/stream", voice="nova")
    pipeline = Pipeline([transport.input(), stt, llm, tts, transport.output()])

One WebSocket for the whole session; each bot turn is one context on the server
(``start`` when the turn's first text arrives, ``end`` when pipecat flushes the turn),
so the server's segmenter cuts the LLM's tokens into sentences itself: the service runs
in pipecat's TOKEN aggregation mode by default, and speaking starts at the first
clause. An interruption cancels the turn's context on the server (its queued text and
audio are dropped there). Every segment's ``timestamps`` become pipecat word
timestamps, so pipecat's transcript of an interrupted turn stops at what was heard.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator
from typing import Any

from loguru import logger
from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame, TTSStoppedFrame
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TextAggregationMode, WebsocketTTSService
from pipecat.transcriptions.language import Language
from pipecat.utils.errors import ErrorCategory
from websockets.exceptions import ConnectionClosed, InvalidStatus

from chattts_client.client import _START_REFUSALS, AUDIO_HEADER, SUBPROTOCOL
from chattts_client.errors import (
    AuthError,
    BusyError,
    ContextError,
    LimitError,
    RequestError,
    UnavailableError,
    error_from_event,
    error_from_handshake,
)

__all__ = ["ChatTTSStreamTTSService"]


class ChatTTSStreamTTSService(WebsocketTTSService):
    """Speech from a chattts-stream server over its WebSocket (``/v1/stream``)."""

    Settings = TTSSettings
    _settings: TTSSettings

    def __init__(
        self,
        *,
        url: str = "ws://localhost:8000/v1/stream",
        token: str | None = None,
        voice: str | None = None,
        seed: int | None = None,
        speed: float = 1.0,
        sample_rate: int | None = None,
        text_aggregation_mode: TextAggregationMode = TextAggregationMode.TOKEN,
        settings: TTSSettings | None = None,
        **kwargs: Any,
    ) -> None:
        """``voice``: a name from the server's ``GET /v1/voices`` (OpenAI's names are
        presets) or a raw speaker string; ``sample_rate``: the pipeline's by default (the
        server resamples to 8, 16, 22.05, 24, 44.1 or 48 kHz)."""
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
        self._opened: set[str] = set()  # contexts started on the server
        self._refused: set[str] = set()  # turns whose start the server refused
        self._contexts: dict[int, str] = {}  # the server's stream number -> context id
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

    async def _connect(self) -> None:
        await super()._connect()
        await self._connect_websocket()
        if self._websocket and not self._receive_task:
            self._receive_task = self.create_task(self._receive_task_handler(self._report_error))

    async def _disconnect(self) -> None:
        await super()._disconnect()
        if self._receive_task:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        await self._disconnect_websocket()

    async def _connect_websocket(self) -> None:
        if self._websocket is not None:
            return
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        try:
            self._websocket = await self._websocket_connect(
                self._url, additional_headers=headers, subprotocols=[SUBPROTOCOL], max_size=None
            )
            self._opened.clear()
            self._refused.clear()
            self._contexts.clear()
            await self._call_event_handler("on_connected")
        except Exception as exc:
            self._websocket = None
            # A refused upgrade becomes its typed error (AuthError, NotReadyError, ...).
            error = error_from_handshake(exc) if isinstance(exc, InvalidStatus) else exc
            message = f"cannot connect to {self._url}: {error}"
            await self.push_error(error_msg=message, exception=error)
            await self._call_event_handler("on_connection_error", f"{error}")

    async def _disconnect_websocket(self) -> None:
        try:
            await self.stop_all_metrics()
            if self._websocket is not None:
                await self._websocket.close()
        finally:
            self._websocket = None
            await self._call_event_handler("on_disconnected")

    async def _send(self, message: dict[str, Any]) -> None:
        if self._websocket is None:
            raise ConnectionError("not connected")
        body = {k: v for k, v in message.items() if v is not None}
        await self._websocket.send(json.dumps(body, ensure_ascii=False))

    # --- turns ----------------------------------------------------------------------

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Send the turn's next text; its audio arrives on the receive task."""
        if context_id in self._refused:
            yield None  # the turn ended with the refusal's error: the rest goes unsaid
            return
        try:
            if self._websocket is None:
                await self._connect()
            if context_id not in self._opened:
                self._opened.add(context_id)
                await self._send(
                    {"type": "start", "context_id": context_id, "voice": self._settings.voice,
                     "seed": self._seed, "speed": self._speed, "sample_rate": self.sample_rate,
                     "timestamps": True}
                )  # fmt: skip
                await self.start_ttfb_metrics()
            await self._send({"type": "text", "context_id": context_id, "text": text})
            await self.start_tts_usage_metrics(text)
        except Exception as exc:
            yield ErrorFrame(error=f"chattts-stream: {exc}")
            yield TTSStoppedFrame(context_id=context_id)
            return
        yield None

    async def flush_audio(self, context_id: str | None = None) -> None:
        """The turn's text is complete: the server speaks what it holds, then ``done``."""
        context_id = context_id or self.get_active_audio_context_id()
        if context_id in self._opened and self._websocket is not None:
            await self._send({"type": "end", "context_id": context_id})

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        """The user spoke over the bot: drop the turn's text and audio on the server (and
        ignore whatever of it is still on its way)."""
        await self.stop_all_metrics()
        if context_id in self._opened and self._websocket is not None:
            self._opened.discard(context_id)
            await self._send({"type": "cancel", "context_id": context_id})
        await super().on_audio_context_interrupted(context_id)

    # --- what the server sends ------------------------------------------------------

    async def _receive_messages(self) -> None:
        while self._websocket is not None:
            with contextlib.suppress(ConnectionClosed):  # an abnormal close ends turns too
                async for message in self._websocket:
                    if isinstance(message, bytes):
                        await self._on_audio(message)
                    else:
                        await self._on_event(json.loads(message))
            # The server closed the socket (a restart, a drain): the turns it held are
            # over; end them here, then connect again for the next ones.
            for context_id in list(self._opened):
                await self._end_context(context_id)
            self._websocket = None
            await self._connect_websocket()

    async def _end_context(self, context_id: str) -> None:
        self._opened.discard(context_id)
        self._contexts = {s: c for s, c in self._contexts.items() if c != context_id}
        if self.audio_context_available(context_id):
            await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
            await self.remove_audio_context(context_id)

    async def _on_audio(self, message: bytes) -> None:
        stream, _segment, _sequence = AUDIO_HEADER.unpack_from(message)
        context_id = self._contexts.get(stream)
        if context_id is None or context_id not in self._opened:
            return  # an interrupted turn: its late audio is ignored
        if not self.audio_context_available(context_id):
            # pipecat closes a context that received nothing for a few seconds (a slow
            # first segment, a busy engine); the turn is still speaking: reopen it.
            await self.create_audio_context(context_id)
        await self.stop_ttfb_metrics()
        frame = TTSAudioRawFrame(
            audio=message[AUDIO_HEADER.size :],
            sample_rate=self.sample_rate,
            num_channels=1,
            context_id=context_id,
        )
        await self.append_to_audio_context(context_id, frame)

    async def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        context_id = event.get("context_id")
        if kind == "started":
            self._contexts[event["stream"]] = context_id  # type: ignore[assignment]
        elif kind == "timestamps" and context_id in self._opened:
            if not self.audio_context_available(context_id):
                await self.create_audio_context(context_id)
            words = [(item["text"], item["start_ms"] / 1000) for item in event["items"]]
            # Each unit carries its own punctuation and spaces (streaming/timestamps.py).
            await self.add_word_timestamps(words, context_id, includes_inter_frame_spaces=True)
        elif kind == "done" and context_id:
            self._opened.discard(context_id)
            self._contexts = {s: c for s, c in self._contexts.items() if c != context_id}
            if self.audio_context_available(context_id):
                await self.append_to_audio_context(
                    context_id, TTSStoppedFrame(context_id=context_id)
                )
                await self.remove_audio_context(context_id)
        elif kind == "error":
            error = error_from_event(event)
            if context_id in self._refused and error.code in ("unknown_context", "context_closing"):
                return  # text sent before the refusal arrived: the refusal was reported
            if context_id in self._opened and error.code in _START_REFUSALS:
                self._refused.add(context_id)
                await self._end_context(context_id)  # refused: no done will come for it
            await self.push_error(error_msg=f"chattts-stream {error}", exception=error)
        elif kind == "warning":
            logger.debug(f"{self}: {event.get('code')}: {event.get('message')}")
