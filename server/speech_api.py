"""The HTTP speech routes: ``POST /v1/tts`` (a whole text, one file) and ``POST /v1/preview``.

Both speak through the same pipeline as the WebSocket (:mod:`streaming.speech`), with
the whole-text segmenter policy.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from server.engines.base import SynthesisRequest, VoiceSpec
from streaming import protocol as p
from streaming.audio import float_to_pcm16, wav_bytes
from streaming.errors import ClientError, LimitExceeded, Unavailable
from streaming.speech import SpeechPipeline

if TYPE_CHECKING:
    from server.app import AppState

SampleRate = Literal[8000, 16000, 22050, 24000, 44100, 48000]  # = p.SUPPORTED_SAMPLE_RATES_HZ
#: Removed runs listed in the X-TTS-Removed header (X-TTS-Removed-Count has the total).
_MAX_REMOVED_IN_HEADER = 32
AudioFormat = Literal["wav", "pcm", "json", "mp3", "ogg", "flac"]
_MEDIA_TYPES = {
    "wav": "audio/wav",
    "pcm": "audio/L16",
    "mp3": "audio/mpeg",
    "ogg": "audio/ogg",
    "flac": "audio/flac",
}


class TTSRequest(BaseModel):
    """Body of POST /v1/tts (the seed article's fields, plus format and voice controls)."""

    text: str = Field(..., min_length=1, description="text to speak")
    speaker: str | None = Field(
        None, description="engine speaker string (ChatTTS: sample_random_speaker())"
    )
    seed: int | None = Field(None, ge=0, le=p.MAX_SEED, description="voice/sampling seed")
    speed: float = Field(1.0, ge=p.MIN_SPEED, le=p.MAX_SPEED, description="speed factor")
    format: AudioFormat | None = Field(None, description="wav (default), pcm, json, mp3, ogg, flac")
    sample_rate: SampleRate | None = Field(
        None, description="output rate in Hz; default the engine's"
    )


class PreviewRequest(BaseModel):
    """Body of POST /v1/preview."""

    text: str = Field(..., min_length=1, description="text to segment and normalise")
    mode: Literal["stream", "http"] = Field(
        "stream",
        description="stream: as one WebSocket text message then flush; http: as POST /v1/tts",
    )


def speech_routes(state: AppState) -> APIRouter:
    """The routes, bound to the app's shared state."""
    router = APIRouter()
    settings = state.settings

    @router.post("/v1/tts", response_model=None)
    async def tts(body: TTSRequest, request: Request) -> Response:
        state.require_token(request)
        return await synthesize_http(state, body, request.headers.get("accept", ""))

    @router.post("/v1/preview")
    async def preview(body: PreviewRequest, request: Request) -> dict[str, Any]:
        """The segments of a text exactly as the server would speak them; no audio."""
        state.require_token(request)
        _check_text_length(state, body.text)
        segments = await state.frontend.preview_async(
            body.text, settings.speech.segmenter_config(whole_text=body.mode == "http")
        )
        return {"mode": body.mode, "segments": [segment.to_json() for segment in segments]}

    return router


def _check_text_length(state: AppState, text: str) -> None:
    limit = state.settings.max_http_text_chars
    if len(text) > limit:
        raise LimitExceeded(
            f"text of {len(text)} characters exceeds the limit of {limit}",
            code="text_too_long",
            limit=limit,
        )


@dataclass
class _Synthesis:
    """A whole text spoken through the speech pipeline, ready to encode."""

    audio: np.ndarray
    sample_rate_hz: int
    spoken: list[str] = field(default_factory=list)
    removed: list[dict[str, object]] = field(default_factory=list)
    fallback_segments: int = 0


async def synthesize_http(state: AppState, body: TTSRequest, accept: str) -> Response:
    """POST /v1/tts: the whole text, segmented like a stream, returned as one file."""
    started = time.perf_counter()
    _check_http_request(state, body)
    fmt: str = body.format or ("json" if "application/json" in accept else "wav")
    fallback = state.admission.start("http")
    try:
        result = await _synthesize_whole(state, body, started, fallback=fallback)
    finally:
        if not fallback:
            state.admission.finish()
    elapsed_s = time.perf_counter() - started
    state.metrics.http_latency.observe(elapsed_s)
    removed = result.removed
    headers = {
        "X-TTS-Inference-Ms": f"{elapsed_s * 1000:.1f}",
        "X-TTS-Engine": state.worker.status.engine or "",
        # JSON with \u escapes: header values must be ASCII. Capped: proxies refuse
        # responses with headers beyond a few KB; the json format has the full list.
        "X-TTS-Removed": json.dumps(removed[:_MAX_REMOVED_IN_HEADER]) if removed else "",
        "X-TTS-Removed-Count": str(len(removed)) if removed else "",
        "X-TTS-Fallback-Segments": str(result.fallback_segments or ""),
        "X-TTS-Degraded": "busy" if fallback else "",
    }
    headers = {k: v for k, v in headers.items() if v}
    rate = result.sample_rate_hz
    if fmt == "json":
        return JSONResponse(
            {
                "audio_data": np.clip(result.audio, -1.0, 1.0).round(5).tolist(),
                "sample_rate": rate,
                "inference_time_ms": round(elapsed_s * 1000, 1),
                "spoken": " ".join(result.spoken),
                "removed": removed,
            },
            headers=headers,
        )
    pcm = float_to_pcm16(result.audio)
    if fmt == "wav":
        return Response(wav_bytes(pcm, rate), media_type=_MEDIA_TYPES["wav"], headers=headers)
    if fmt == "pcm":
        headers["X-TTS-Sample-Rate"] = str(rate)
        return Response(
            pcm, media_type=f"{_MEDIA_TYPES['pcm']};rate={rate};channels=1", headers=headers
        )
    encoded = await asyncio.to_thread(_encode_compressed, pcm, rate, fmt)
    return Response(encoded, media_type=_MEDIA_TYPES[fmt], headers=headers)


def _check_http_request(state: AppState, body: TTSRequest) -> None:
    """Refuse what cannot be served before any work starts."""
    _check_text_length(state, body.text)
    if state.draining:
        raise Unavailable("the server is shutting down", code="draining")
    if body.speaker:
        try:
            state.worker.check_voice(body.speaker)
        except ValueError as exc:
            raise ClientError(f"speaker: {exc}", code="invalid_voice") from None
    if not state.worker.ready:
        raise Unavailable(f"the engine is {state.worker.status.state}", code="not_ready")


async def _synthesize_whole(
    state: AppState, body: TTSRequest, started: float, *, fallback: bool
) -> _Synthesis:
    settings = state.settings
    worker = state.worker
    engine_rate = worker.sample_rate_hz
    result = _Synthesis(np.zeros(0, np.float32), body.sample_rate or engine_rate)
    pipeline = SpeechPipeline(settings.speech, engine_rate, result.sample_rate_hz, whole_text=True)
    voice = VoiceSpec(
        voice=body.speaker, seed=body.seed if body.seed is not None else 0, speed=body.speed
    )
    deadline = started + settings.http_timeout_s
    frames: list[np.ndarray] = []
    first_audio_seen = False
    text_stream = state.frontend.stream()
    for segment in settings.speech.segments(body.text):
        prepared = await text_stream.submit(segment.text)
        start = pipeline.begin(segment, prepared)
        result.removed += [asdict(r) for r in start.removed]
        if not start.speaks:
            continue
        result.spoken.append(prepared.spoken)
        job = worker.submit(SynthesisRequest(prepared.spoken, voice, fallback=fallback))
        produced = 0
        try:
            async for chunk in job.chunks(max(deadline - time.perf_counter(), 0.001)):
                result.fallback_segments += job.fell_back and produced == 0
                if not first_audio_seen:
                    first_audio_seen = True
                    state.metrics.ttfa.labels(route="http").observe(time.perf_counter() - started)
                frames += pipeline.push(chunk)
                produced += chunk.size
            frames += pipeline.finish()
        finally:
            job.cancel()  # a no-op when complete; stops the engine if the request died
            pipeline.abandon()
        state.metrics.observe_segment(
            engine_seconds=job.engine_seconds,
            audio_seconds=produced / engine_rate,
            characters=len(prepared.spoken),
        )
    if result.removed:
        state.metrics.removed_characters.inc(sum(len(str(r["chars"])) for r in result.removed))
    if not result.spoken:
        raise ClientError("the text contains nothing that can be spoken", code="nothing_to_speak")
    if frames:
        result.audio = np.concatenate(frames)
    return result


def _encode_compressed(pcm: bytes, rate: int, fmt: str) -> bytes:
    """mp3/ogg/flac through pydub (ffmpeg); a clear 501 when ffmpeg is missing."""
    import shutil

    from pydub import AudioSegment

    if shutil.which("ffmpeg") is None:
        raise Unavailable(
            f"format {fmt} needs ffmpeg, which is not installed", code="format_unavailable"
        )
    segment = AudioSegment(data=pcm, sample_width=2, frame_rate=rate, channels=1)
    out = io.BytesIO()
    codec = {"ogg": "libopus", "mp3": "libmp3lame", "flac": "flac"}[fmt]
    segment.export(out, format=fmt, codec=codec)
    return out.getvalue()
