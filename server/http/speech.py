"""A whole text spoken for an HTTP route, as a stream of frames: the routes' one core.

``POST /v1/tts`` and ``POST /v1/audio/speech`` both speak through :class:`TextRequest`,
which runs the WebSocket's pipeline (:mod:`streaming.speech`) with the whole-text
segmenter policy:

1. :meth:`TextRequest.prepare` cuts and normalises every segment before any audio, so
   what is removed from the text is known (and reported in headers) from the start and
   a text with nothing to speak is refused before synthesis;
2. :meth:`TextRequest.frames` speaks the segments in order, yielding frames as the
   engine makes them, within the request's time limit (``--http-timeout-s``, counted
   from the request's arrival);
3. :func:`respond_streaming` waits for the first frame (so a failure of the first
   segment still gets its HTTP status), then answers with the rest as a chunked body.
   A failure after that can only end the body early: the connection is closed without
   the final chunk, which every HTTP client reports as an incomplete body.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive, Scope, Send

from server.auth import bearer_token
from server.engines.base import VoiceSpec
from server.errors import report
from server.http.middleware import SUMMARY_KEY
from server.phrase_scope import utterance_scope
from server.runtime.phrase_cache import PhraseScope
from server.runtime.utterance import Utterance
from server.state import AppState
from server.transport import SCOPE_KEY
from streaming.errors import ClientError, LimitExceeded, SynthesisError, SynthesisTimeout
from streaming.segment import Segment
from streaming.speech import removals_in_utterance
from streaming.text import Lexicon, PreparedText
from streaming.utterance import Frames, Timed

__all__ = [
    "EXPOSED_HEADERS",
    "TextRequest",
    "check_can_speak",
    "check_text_length",
    "respond_streaming",
    "start_speech",
]

logger = logging.getLogger(__name__)

#: The headers the speech routes may send (what CORS exposes to pages on other origins).
EXPOSED_HEADERS = (
    "X-TTS-Engine", "X-TTS-Removed", "X-TTS-Removed-Count", "X-TTS-Degraded",
    "X-TTS-Sample-Rate", "X-TTS-First-Audio-Ms", "X-TTS-Inference-Ms",
    "X-TTS-Fallback-Segments", "X-TTS-Speed", "X-TTS-Instructions",
    "X-TTS-Retried-Segments", "X-TTS-Segments-Without-Audio",
)  # fmt: skip
#: The X-TTS-Removed header lists removed runs up to this many bytes (each run's
#: characters cut to _MAX_RUN_CHARS); X-TTS-Removed-Count has the total. Proxies and
#: HTTP libraries refuse headers beyond a few KB (h11: 16 KiB for all of them).
_MAX_REMOVED_HEADER_BYTES = 4096
_MAX_RUN_CHARS = 32


def check_text_length(state: AppState, text: str) -> None:
    limit = state.settings.max_http_text_chars
    if len(text) > limit:
        raise LimitExceeded(
            f"text of {len(text)} characters exceeds the limit of {limit}",
            code="text_too_long",
            limit=limit,
        )


def check_can_speak(state: AppState) -> None:
    """Refuse, before any work, a request the server cannot serve now."""
    refusal = state.refusal()
    if refusal is not None:
        raise refusal


@dataclass
class _Part:
    segment: Segment
    prepared: PreparedText


class TextRequest:
    """One HTTP request's whole text, spoken by one :class:`Utterance`; see the module
    docstring. ``fallback``: admitted on the fallback voice (the engine was busy); the
    admission slot, when it holds one, is given back by :meth:`close`."""

    def __init__(
        self,
        state: AppState,
        text: str,
        voice: VoiceSpec,
        output_rate_hz: int,
        fallback: bool,
        tempo: float = 1.0,
        *,
        timestamps: bool = False,
        volume: float = 1.0,
        phrases: PhraseScope | None = None,
        route: str = "http",
    ) -> None:
        self.state = state
        #: The metrics' route label: http, or wyoming (server.wyoming speaks through here).
        self.route = route
        self.text = text
        self.output_rate_hz = output_rate_hz
        self.fallback = fallback
        #: The time-stretch beyond the engine's own rate (``voice.speed``): 1 for none.
        self.tempo = tempo
        #: Loudness factor (streaming.limiter).
        self.volume = volume
        self.started = time.perf_counter()
        self.utterance = Utterance(
            state.worker,
            state.metrics,
            state.admission,
            state.settings.speech,
            voice,
            route=route,
            output_rate_hz=output_rate_hz,
            tempo=tempo,
            fallback=fallback,
            whole_text=True,
            timestamps=timestamps,
            removals_counted=True,
            volume=volume,
            phrases=phrases,
        )
        self.utterance.first_text_at = self.started
        self.tally = self.utterance.tally
        self.removed: list[dict[str, object]] = []
        self.spoken: list[str] = []
        #: Each finished segment's ``timestamps`` (as the WebSocket event's fields) when
        #: asked for (a list), else None.
        self.timestamps: list[dict[str, object]] | None = [] if timestamps else None
        #: The request's summary line's fields (server.logs), filled at close.
        self.summary: dict[str, object] | None = None
        self.voice_name: str | None = None
        #: The request's own lexicon entries (over the server's file).
        self.lexicon: Lexicon | None = None
        self._parts: list[_Part] = []
        self._waited_s = 0.0
        self._completed = False
        self._closed = False
        self._ended: float | None = None

    @property
    def voice(self) -> VoiceSpec:
        return self.utterance.voice

    @property
    def first_audio_s(self) -> float | None:
        return self.utterance.first_audio_s

    @property
    def samples(self) -> int:
        """Output samples yielded so far."""
        return self.tally.samples

    @property
    def fallback_segments(self) -> int:
        return self.tally.fallback_segments

    def _budget_s(self) -> float:
        """What is left of the time limit: it counts the time spent preparing and waiting
        for the engine, not the time the client takes to read (a slow reader is not slow
        synthesis)."""
        return self.state.settings.http_timeout_s - self._waited_s

    async def prepare(self) -> None:
        """Cut and normalise every segment (on the front-end thread, all queued at once)."""
        stream = self.state.frontend.for_utterance(self.lexicon)
        segments = self.state.settings.speech.segments(self.text)
        futures = [stream.submit(segment.text) for segment in segments]
        try:
            prepared = await asyncio.wait_for(asyncio.gather(*futures), self._budget_s())
        except TimeoutError:
            raise self._timeout() from None
        finally:
            self._waited_s += time.perf_counter() - self.started
        self._parts = [_Part(s, p) for s, p in zip(segments, prepared, strict=True)]
        for part in self._parts:
            self.removed += [asdict(r) for r in removals_in_utterance(part.segment, part.prepared)]
            if part.prepared.spoken:
                self.spoken.append(part.prepared.spoken)
        self.tally.characters = len(self.text)
        self.utterance.count_removed(sum(len(str(r["chars"])) for r in self.removed))
        if not self.spoken:
            raise ClientError(
                "the text contains nothing that can be spoken", code="nothing_to_speak"
            )

    def _timeout(self) -> SynthesisTimeout:
        limit = self.state.settings.http_timeout_s
        return SynthesisTimeout(
            f"the request was not spoken within the limit of {limit:g} s (--http-timeout-s)",
            code="timeout",
        )

    async def frames(self) -> AsyncGenerator[np.ndarray]:
        """The utterance's frames at ``output_rate_hz``, as the engine makes them."""
        utterance = self.utterance
        prepare_s = self._waited_s
        try:
            for part in self._parts:
                if self._budget_s() <= 0:
                    raise self._timeout()
                events = utterance.speak(part.segment, part.prepared, timeout_s=self._budget_s())
                try:
                    async with contextlib.aclosing(events):
                        async for event in events:
                            if isinstance(event, Frames):
                                for frame in event.frames:
                                    self.tally.samples += int(frame.size)
                                    yield frame
                            elif isinstance(event, Timed) and self.timestamps is not None:
                                self.timestamps.append(asdict(event))
                except SynthesisTimeout:
                    raise self._timeout() from None
                finally:
                    self._waited_s = prepare_s + utterance.waited_s
            self._completed = True
        finally:
            self.close()

    @property
    def elapsed_s(self) -> float:
        """From the request's arrival to its end (to now while it runs)."""
        return (self._ended or time.perf_counter()) - self.started

    def close(self) -> None:
        """Give the admission slot back (once), observe the request's latency."""
        if self._closed:
            return
        self._closed = True
        self._ended = time.perf_counter()
        if self.summary is not None:
            self.summary.update(
                self.utterance.summary(
                    "complete" if self._completed else "incomplete",
                    segments=len(self.spoken),
                    after={"degraded": "busy" if self.fallback else None},
                    engine=self.state.worker.status.engine,
                    voice=self.voice_name,
                    characters=self.tally.characters,
                )
            )
        self.utterance.finish()
        if self.route == "http":
            self.state.metrics.http_latency.observe(self._ended - self.started)

    def headers(self) -> dict[str, str]:
        """What the response says of the text and the engine (known before the audio)."""
        removed = self.removed
        headers = {
            "X-TTS-Engine": self.state.worker.status.engine or "",
            "X-TTS-Removed": removed_header(removed),
            "X-TTS-Removed-Count": str(len(removed)) if removed else "",
            "X-TTS-Degraded": "busy" if self.fallback else "",
            "X-TTS-Speed": f"engine={self.voice.speed:g}; stretch={self.tempo:g}",
        }
        return {k: v for k, v in headers.items() if v}

    def audio_headers(self) -> dict[str, str]:
        """What the audio made so far says of itself: the segments made again with a
        derived seed (``index:seed``) and those that ended with too little audio."""
        headers = {
            "X-TTS-Retried-Segments": ", ".join(f"{i}:{seed}" for i, seed in self.tally.retried),
            "X-TTS-Segments-Without-Audio": ", ".join(str(i) for i in self.tally.without_audio),
        }
        return {k: v for k, v in headers.items() if v}


def removed_header(removed: list[dict[str, object]]) -> str:
    """JSON with \\u escapes (header values must be ASCII) of the first removed runs that
    fit in the byte cap; the json format and X-TTS-Removed-Count have them all."""
    shown: list[dict[str, object]] = []
    size = 2
    for run in removed:
        short = run | {"chars": str(run["chars"])[:_MAX_RUN_CHARS]}
        size += len(json.dumps(short)) + 2
        if size > _MAX_REMOVED_HEADER_BYTES:
            break
        shown.append(short)
    return json.dumps(shown) if removed else ""


async def start_speech(
    state: AppState,
    text: str,
    voice: str | None,
    output_rate_hz: int,
    *,
    seed: int | None = None,
    speed: float = 1.0,
    request: Request | None = None,
    lexicon: Lexicon | None = None,
    timestamps: bool = False,
    volume: float = 1.0,
    route: str = "http",
) -> TextRequest:
    """Admit and prepare a text (errors here are the request's HTTP status).

    ``voice`` is resolved before admission (an unknown name is a 400 whatever the load),
    then again on the fallback voice when the request is admitted there (busy): its own
    voice of that name, as for a WebSocket context. ``speed`` (0.25-4) is the engine's
    own as far as its rate control goes, a time-stretch beyond (``TextRequest.tempo``).
    ``timestamps``: collect each segment's timestamps (``TextRequest.timestamps``)."""
    await state.voices.confirm(voice)  # the store's truth of the name, read after write
    engine_speed, tempo = state.voices.speed_split(speed)
    spec = state.voices.for_utterance(voice, seed=seed, speed=engine_speed)
    fallback = state.admission.start(route)
    speech: TextRequest | None = None
    try:
        if fallback:
            engine_speed, tempo = state.voices.speed_split(speed, fallback=True)
            spec = state.voices.for_utterance(
                voice, seed=seed, speed=engine_speed, fallback=True, seed_given=seed is not None
            )
        token = bearer_token(request.headers) if request is not None else None
        phrases = utterance_scope(
            state, voice, seed_given=seed is not None, fallback=fallback, token=token
        )
        speech = TextRequest(state, text, spec, output_rate_hz, fallback, tempo,
                             timestamps=timestamps, volume=volume, phrases=phrases,
                             route=route)  # fmt: skip
        speech.voice_name = voice
        speech.lexicon = lexicon
        if request is not None:
            speech.summary = request.scope.get(SUMMARY_KEY)
        await speech.prepare()
    except BaseException:
        if speech is None:  # refused on the fallback voice: the request still ends here
            speech = TextRequest(state, text, spec, output_rate_hz, fallback, tempo, route=route)
            speech.voice_name = voice
            if request is not None:
                speech.summary = request.scope.get(SUMMARY_KEY)
        speech.close()
        raise
    return speech


class _Streamed(StreamingResponse):
    """A streamed body that is closed when the response ends, however it ends (Starlette
    leaves it suspended when the client disconnects mid-send), and cut when the client
    reads nothing for ``stall_s``: either way its engine work stops and its slot frees."""

    def __init__(
        self, body: AsyncGenerator[bytes], *, stall_s: float, transport: Any, **kwargs: Any
    ) -> None:
        super().__init__(body, **kwargs)
        self._body = body
        self._stall_s = stall_s
        self._transport = transport

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def bounded(message: Message) -> None:
            try:
                async with asyncio.timeout(self._stall_s):
                    await send(message)
            except TimeoutError:
                logger.info("a client read nothing for %.0f s: its response is cut", self._stall_s)
                if self._transport is not None:
                    self._transport.abort()
                raise OSError("client stalled") from None

        try:
            await super().__call__(scope, receive, bounded)
        except (OSError, ClientDisconnect):
            if self._transport is None:
                raise
        finally:
            await self._body.aclose()


async def _primed(
    first: bytes, rest: AsyncGenerator[bytes], speech: TextRequest, transport: Any
) -> AsyncGenerator[bytes]:
    try:
        yield first
        async for chunk in rest:
            yield chunk
    except Exception as exc:
        # The status has gone out: all that is left is to end the body unfinished (no
        # final chunk), which the client's HTTP library reports as an incomplete read.
        report(exc, metrics=speech.state.metrics, log=logger, where="streamed response")
        if transport is None:
            raise  # no transport to abort: the server's own error path ends the body
        transport.abort()
    finally:
        await rest.aclose()  # now, not at garbage collection: it stops the engine


async def respond_streaming(
    speech: TextRequest,
    body: AsyncGenerator[bytes],
    media_type: str,
    headers: dict[str, str],
    request: Request,
) -> StreamingResponse:
    """Wait for the body's first bytes after the first audio, then stream the rest.

    Raises what the first segment raised (the caller's error handler gives its status)."""
    try:
        first = b""
        async for chunk in body:
            first += chunk
            if speech.first_audio_s is not None and first:
                break
        else:
            if speech.tally.without_audio:  # the engine's failure, not the caller's text
                raise SynthesisError(
                    "the engine made no audio for this text (each segment was tried again "
                    "with another seed)",
                    code="synthesis_failed",
                )
            raise ClientError("the text gave no audio", code="nothing_to_speak")
    except BaseException:
        await body.aclose()
        speech.close()
        raise
    headers = (
        headers
        | {"X-TTS-First-Audio-Ms": f"{(speech.first_audio_s or 0) * 1000:.1f}"}
        | speech.audio_headers()
    )
    transport = request.scope.get(SCOPE_KEY)
    return _Streamed(
        _primed(first, body, speech, transport),
        stall_s=speech.state.settings.http_stall_timeout_s,
        transport=transport,
        media_type=media_type,
        headers=headers,
    )
