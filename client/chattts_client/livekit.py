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
When the server drains or goes away mid-turn, the turn continues on another server
(``resume``, the client's :class:`~chattts_client.ResumePolicy`); when none takes it,
the stream fails with an ``APIStatusError`` 503 caused by a
:class:`~chattts_client.ResumeError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from livekit.agents import (
    DEFAULT_API_CONNECT_OPTIONS,
    APIConnectionError,
    APIConnectOptions,
    APIError,
    APIStatusError,
    tts,
    utils,
)
from livekit.agents.types import TimedString
from websockets.exceptions import WebSocketException

from chattts_client.client import AudioFrame, StreamClient
from chattts_client.errors import AuthError, TTSClientError, UnavailableError, error_from_event
from chattts_client.policy import ResumePolicy

__all__ = ["TTS"]

logger = logging.getLogger(__name__)

#: Refused messages after which no audio comes for the context: the stream fails with
#: them, as with auth and unavailable errors (a failed segment only leaves a gap).
_FATAL = frozenset({"buffer_full", "too_many_contexts", "context_exists", "voice_not_found",
                    "invalid_field"})  # fmt: skip


class TTS(tts.TTS):
    """Speech from a chattts-stream server over its WebSocket (``/v1/stream``)."""

    def __init__(
        self,
        *,
        url: str | list[str] = "ws://localhost:8000/v1/stream",
        token: str | None = None,
        voice: str | None = None,
        seed: int | None = None,
        speed: float = 1.0,
        sample_rate: int = 24000,
        volume: float | None = None,
        resume: ResumePolicy | None = ResumePolicy(),  # noqa: B008 (frozen: shared safely)
    ) -> None:
        """``url``: one server or a load balancer (or a list of servers, tried in turn);
        ``voice``: a name from the server's ``GET /v1/voices`` (OpenAI's names are
        presets) or a raw speaker string; ``sample_rate``: 8000, 16000, 22050, 24000,
        44100 or 48000 (the server resamples); ``volume``: 0-4 (None: the server's 1;
        peaks are limited, never clipped); ``resume``: how a turn continues when its
        server drains or goes away (None: the stream fails there)."""
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
        self._volume = volume
        self._resume = resume

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
                options._url,
                token=options._token,
                open_timeout_s=self._conn_options.timeout,
                resume=options._resume,
            ) as client:
                await self._speak(client, output_emitter)
        except TTSClientError as exc:  # refused: at the upgrade (401, 503) or a start
            raise _api_error(exc, options._url) from exc
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
        # A refused start raises its TTSClientError (busy once open's retries run out).
        ctx = await client.open(
            voice=options._voice,
            seed=options._seed,
            speed=options._speed,
            sample_rate=options.sample_rate,
            timestamps=True,
            volume=options._volume,
            timeout_s=self._conn_options.timeout,
        )
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
            elif kind == "resumed":
                logger.info("turn %s continues on another server: %s", ctx, event)
            elif kind == "error":
                error = error_from_event(event)
                if isinstance(error, (AuthError, UnavailableError)) or error.code in _FATAL:
                    raise error  # no audio comes for the context: the stream fails
                # A segment failed (or a delta was refused) and the server went on: the
                # turn continues (the listener hears a gap); LiveKit learns of it as an error.
                self._tts.emit("error", tts.TTSError(
                    timestamp=time.time(), label=self._tts.label, error=_api_error(error, self._tts._url),
                    recoverable=True,
                ))  # fmt: skip
        raise APIConnectionError("the server closed the connection mid-turn")


def _api_error(error: TTSClientError, url: str | list[str]) -> APIError:
    """LiveKit's error for ours: the HTTP status the server gives it (401, 503 busy or
    not ready, 400 ...); 5xx are retried, 4xx not."""
    message = f"chattts-stream at {url}: {error}"
    if error.status_code is None:  # the server sent what the client cannot read
        return APIError(message, body=error.body, retryable=False)
    return APIStatusError(
        message,
        status_code=error.status_code,
        body=error.body,
        retryable=error.status_code >= 500,
    )
