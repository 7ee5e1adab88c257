"""A LiveKit Agents TTS plugin for a chattts-stream server (``pip install './client[livekit]'``).

    from chattts_client.livekit import TTS

    session = AgentSession(stt=..., llm=..., tts=TTS(url="ws://localhost:8000/v1/stream",
                                                     voice="nova"),
                           use_tts_aligned_transcript=True)

``TTS`` streams (``capabilities.streaming``): the agent's LLM tokens go to the server
as they come, over one WebSocket per stream, and the server cuts them into sentences
itself. Each segment of the stream (the text between two flushes; one per turn in
practice) is one context on the server. Every ``timestamps`` event becomes
``TimedString``\\ s on the audio (``aligned_transcript``), so the agent's transcript of an
interrupted turn stops at what the user heard. Closing the stream (an interruption)
cancels the context on the server. ``synthesize(text)`` is the same, for one text.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from livekit.agents import (
    DEFAULT_API_CONNECT_OPTIONS,
    APIConnectionError,
    APIConnectOptions,
    APIStatusError,
    tts,
    utils,
)
from livekit.agents.types import TimedString
from websockets.exceptions import InvalidStatus, WebSocketException

from chattts_client.client import AudioFrame, StreamClient

__all__ = ["TTS"]

_STATUS = {
    "busy": 503,
    "not_ready": 503,
    "draining": 503,
    "unauthorized": 401,
    "synthesis_failed": 500,
    "synthesis_timeout": 504,
    "internal_error": 500,
}
#: Errors after which no audio comes for the context: the stream fails with them.
_FATAL = frozenset({"busy", "not_ready", "draining", "unauthorized", "buffer_full",
                    "too_many_contexts", "context_exists", "voice_not_found", "invalid_field"})  # fmt: skip


class TTS(tts.TTS):
    """Speech from a chattts-stream server over its WebSocket (``/v1/stream``)."""

    def __init__(
        self,
        *,
        url: str = "ws://localhost:8000/v1/stream",
        token: str | None = None,
        voice: str | None = None,
        seed: int | None = None,
        speed: float = 1.0,
        sample_rate: int = 24000,
    ) -> None:
        """``voice``: a name from the server's ``GET /v1/voices`` (OpenAI's names are
        presets) or a raw speaker string; ``sample_rate``: 8000, 16000, 22050, 24000,
        44100 or 48000 (the server resamples)."""
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=True),
            sample_rate=sample_rate,
            num_channels=1,
        )
        self._url = url
        self._token = token
        self._voice = voice
        self._seed = seed
        self._speed = speed

    @property
    def model(self) -> str:
        return "chattts"

    @property
    def provider(self) -> str:
        return "chattts-stream"

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> tts.ChunkedStream:
        return self._synthesize_with_stream(text, conn_options=conn_options)

    def stream(
        self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> SynthesizeStream:
        return SynthesizeStream(tts=self, conn_options=conn_options)


class SynthesizeStream(tts.SynthesizeStream):
    _tts: TTS

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        options = self._tts
        request_id = utils.shortuuid()
        output_emitter.initialize(
            request_id=request_id,
            sample_rate=options.sample_rate,
            num_channels=1,
            mime_type="audio/pcm",
            stream=True,
        )
        try:
            async with StreamClient.connect(
                options._url, token=options._token, open_timeout_s=self._conn_options.timeout
            ) as client:
                await self._speak(client, output_emitter)
        except InvalidStatus as exc:  # refused at the upgrade: 401, 503 not_ready / full
            status = exc.response.status_code
            raise APIStatusError(
                f"chattts-stream at {options._url} refused the connection ({status})",
                status_code=status,
                retryable=status >= 500,
            ) from exc
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise APIConnectionError(f"chattts-stream at {options._url}: {exc}") from exc

    async def _speak(self, client: StreamClient, emitter: tts.AudioEmitter) -> None:
        """Each segment of the input (its text up to a flush) as one context, in order."""
        async for data in self._input_ch:
            if not isinstance(data, self._FlushSentinel):  # (a flush alone: no segment)
                await self._context(client, emitter, data)

    async def _context(self, client: StreamClient, emitter: tts.AudioEmitter, first: str) -> None:
        """One context: ``first``, then the input up to the next flush, as it comes."""
        options = self._tts
        try:
            ctx = await client.open(
                voice=options._voice,
                seed=options._seed,
                speed=options._speed,
                sample_rate=options.sample_rate,
                timestamps=True,
                timeout_s=self._conn_options.timeout,
            )
        except ConnectionRefusedError as exc:  # "code: message" from the server
            code, _, message = str(exc).partition(": ")
            raise _api_error({"code": code, "message": message}) from None
        emitter.start_segment(segment_id=ctx)
        receiving = asyncio.ensure_future(self._receive(client, emitter, ctx))
        try:
            self._mark_started()
            await client.send_text(first, ctx)
            async for data in self._input_ch:
                if receiving.done():
                    break  # the server ended the context (or the connection) early
                if isinstance(data, self._FlushSentinel):
                    break
                await client.send_text(data, ctx)
            if not receiving.done():
                await client.end(ctx)
            await receiving
        except BaseException:
            # Interrupted (the stream closed): the server drops the turn's text and audio.
            receiving.cancel()
            with contextlib.suppress(Exception):
                await asyncio.shield(client.cancel(ctx))
            raise
        emitter.end_segment()

    async def _receive(self, client: StreamClient, emitter: tts.AudioEmitter, ctx: str) -> None:
        async for event in client.events():
            if client.context_of(event) != ctx:
                continue
            if isinstance(event, AudioFrame):
                emitter.push(event.pcm)
                continue
            kind = event.get("type")
            if kind == "timestamps":
                emitter.push_timed_transcript(
                    [
                        TimedString(item["text"], start_time=item["start_ms"] / 1000,
                                    end_time=item["end_ms"] / 1000)
                        for item in event["items"]
                    ]
                )  # fmt: skip
            elif kind == "done":
                return
            elif kind == "error" and event.get("code") in _FATAL:
                raise _api_error(event)
            elif kind == "error":
                # A segment failed and the server went on with the next: the turn
                # continues (the listener hears a gap); LiveKit learns of it as an error.
                self._tts.emit("error", tts.TTSError(
                    timestamp=time.time(), label=self._tts.label, error=_api_error(event),
                    recoverable=True,
                ))  # fmt: skip
        raise APIConnectionError("the server closed the connection mid-turn")


def _api_error(event: dict[str, Any]) -> APIStatusError:
    code = str(event.get("code"))
    status = _STATUS.get(code, 400)
    return APIStatusError(
        f"chattts-stream {code}: {event.get('message')}",
        status_code=status,
        body=event,
        retryable=status >= 500,
    )
