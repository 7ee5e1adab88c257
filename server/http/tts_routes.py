"""The HTTP speech routes of this server: ``POST /v1/tts`` and ``POST /v1/preview``.

``/v1/tts`` speaks through :mod:`server.http.speech` (the WebSocket's pipeline, the
whole-text segmenter policy). By default it answers with the whole file once the text
is spoken; with ``"stream": true`` it answers after the first segment's first audio and
sends the rest as it is made (chunked; every format but ``json``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import numpy as np
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from server.auth import require_bearer
from server.http import audio as http_audio
from server.http.schemas import (
    ERROR_RESPONSES,
    LEXICON_FIELD_HELP,
    SAMPLE_RATE_HELP,
    SampleRate,
    audio_responses,
)
from server.http.speech import (
    TextRequest,
    check_can_speak,
    check_text_length,
    respond_streaming,
    start_speech,
)
from server.lexicon import request_lexicon
from server.state import AppState
from streaming import encodings
from streaming import protocol as p
from streaming.audio import float32_json_array
from streaming.errors import ClientError
from streaming.limiter import MAX_VOLUME, MIN_VOLUME, volume_in_body

AudioFormat = Literal["wav", "pcm", "json", "mp3", "ogg", "opus", "aac", "flac", "ulaw", "alaw"]


class TTSRequest(BaseModel):
    """Body of POST /v1/tts (the seed article's fields, plus format and voice controls)."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(..., min_length=1, description="text to speak")
    voice: str | None = Field(
        None,
        description="a named voice (GET /v1/voices) or the engine's raw voice (ChatTTS: a "
        "speaker string from sample_random_speaker(); the fallback voice: a variant)",
    )
    speaker: str | None = Field(None, description="the former name of `voice` (still accepted)")
    seed: StrictInt | None = Field(None, ge=0, le=p.MAX_SEED, description="sampling seed")
    speed: float = Field(
        1.0,
        description="speed factor (1: normal), 0.25-4; beyond the engine's own range "
        "(ChatTTS: 0.5-2) the audio is time-stretched at the same pitch",
        json_schema_extra={"minimum": p.MIN_SPEED, "maximum": p.MAX_SPEED},
    )
    volume: float = Field(
        1.0,
        description="loudness factor (1: as made), 0-4 (an extension of this server); "
        "peaks are limited below full scale, never clipped",
        json_schema_extra={"minimum": MIN_VOLUME, "maximum": MAX_VOLUME},
    )
    format: AudioFormat | None = Field(
        None,
        description="wav (default; json when Accept asks for application/json), pcm (s16le), "
        "json, mp3, ogg and opus (Opus in Ogg), aac (ADTS), flac, ulaw and alaw (raw G.711 "
        "µ-law and A-law at 8 kHz, no header: telephony)",
    )
    sample_rate: SampleRate | None = Field(
        None, description=SAMPLE_RATE_HELP.format(default="the engine's")
    )
    stream: StrictBool = Field(
        False, description="answer after the first audio and send the rest as it is made"
    )
    lexicon: dict[StrictStr, StrictStr] | None = Field(None, description=LEXICON_FIELD_HELP)

    @model_validator(mode="before")
    @classmethod
    def _speed(cls, data: Any) -> Any:
        # The WebSocket's checks and messages, raised as they are.
        return volume_in_body(p.speed_in_body(data))

    @property
    def voice_name(self) -> str | None:
        """The voice asked for (400 for an empty name, or two different ones)."""
        for field in ("voice", "speaker"):
            if getattr(self, field) == "":
                raise ClientError(f"{field}: a voice name cannot be empty (leave it out for "
                                  "the default voice)", code="invalid_voice", param=field)  # fmt: skip
        if self.voice is not None and self.speaker is not None and self.voice != self.speaker:
            raise ClientError("give `voice` or its former name `speaker`, not both",
                              code="invalid_field", param="speaker")  # fmt: skip
        return self.voice if self.voice is not None else self.speaker


class PreviewRequest(BaseModel):
    """Body of POST /v1/preview."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(..., min_length=1, description="text to segment and normalise")
    mode: Literal["stream", "http"] = Field(
        "stream",
        description="stream: as one WebSocket text message then flush; http: as POST /v1/tts",
    )
    lexicon: dict[StrictStr, StrictStr] | None = Field(None, description=LEXICON_FIELD_HELP)


class RemovedRun(BaseModel):
    start: int = Field(description="offset of the run in the request's text")
    chars: str
    reason: str


class TTSJson(BaseModel):
    """format json: the samples as numbers."""

    audio_data: list[float]
    sample_rate: int
    inference_time_ms: float
    spoken: str
    removed: list[RemovedRun]


class PreviewResponse(BaseModel):
    mode: str
    segments: list[dict[str, Any]]


_TTS_FORMATS = ("wav", "pcm", "mp3", "ogg", "opus", "aac", "flac", "ulaw", "alaw")


def speech_routes(state: AppState) -> APIRouter:
    """The routes, bound to the app's shared state."""
    router = APIRouter(dependencies=[Depends(require_bearer(state))])
    settings = state.settings

    @router.post(
        "/v1/tts",
        response_class=Response,
        responses=audio_responses(_TTS_FORMATS, json_model=TTSJson) | ERROR_RESPONSES,
        summary="Speak a text: one file, or streamed with stream=true",
    )
    async def tts(body: TTSRequest, request: Request) -> Response:
        return await synthesize_http(state, body, request)

    @router.post(
        "/v1/preview",
        response_model=PreviewResponse,
        responses=ERROR_RESPONSES,
        summary="The segments of a text as the server would speak them; no audio",
    )
    async def preview(body: PreviewRequest) -> dict[str, Any]:
        check_text_length(state, body.text)
        lexicon = request_lexicon(body.lexicon, settings.request_lexicon_limits)
        segments = await state.frontend.preview_async(
            body.text, settings.speech.segmenter_settings(whole_text=body.mode == "http"), lexicon
        )
        return {"mode": body.mode, "segments": [segment.to_json() for segment in segments]}

    return router


async def synthesize_http(state: AppState, body: TTSRequest, request: Request) -> Response:
    """POST /v1/tts: the whole text, segmented like a stream, as one file or streamed."""
    check_text_length(state, body.text)
    lexicon = request_lexicon(body.lexicon, state.settings.request_lexicon_limits)
    check_can_speak(state)
    accept = request.headers.get("accept", "")
    fmt: str = body.format or ("json" if "application/json" in accept else "wav")
    if body.stream and fmt == "json":
        raise ClientError("format json cannot be streamed: use wav, pcm, mp3, ...",
                          code="invalid_field")  # fmt: skip
    http_audio.require_ffmpeg(fmt if fmt != "json" else "pcm")
    rate = encodings.check_rate(fmt, body.sample_rate, state.worker.sample_rate_hz)
    speech = await start_speech(
        state,
        body.text,
        body.voice_name,
        rate,
        seed=body.seed,
        speed=body.speed,
        volume=body.volume,
        request=request,
        lexicon=lexicon,
    )
    headers = speech.headers()
    if fmt in ("pcm", "ulaw", "alaw"):
        headers["X-TTS-Sample-Rate"] = str(rate)
    if body.stream:
        encoded = http_audio.encode(speech.frames(), fmt, rate, encoders=state.encoders)
        media_type = http_audio.media_type(fmt, rate)
        return await respond_streaming(speech, encoded, media_type, headers, request)
    if fmt == "json":
        return await _json_response(speech, headers)
    data = b"".join(
        [
            chunk
            async for chunk in http_audio.encode(
                speech.frames(), fmt, rate, encoders=state.encoders
            )
        ]
    )
    if fmt == "wav":
        data = http_audio.fill_wav_sizes(data)
    elif fmt == "flac":
        data = http_audio.fill_flac_length(data, speech.samples)
    headers |= _done_headers(speech)
    return Response(data, media_type=http_audio.media_type(fmt, rate), headers=headers)


def _done_headers(speech: TextRequest) -> dict[str, str]:
    headers = {"X-TTS-Inference-Ms": f"{speech.elapsed_s * 1000:.1f}"}
    if speech.fallback_segments:
        headers["X-TTS-Fallback-Segments"] = str(speech.fallback_segments)
    return headers | speech.audio_headers()


async def _json_response(speech: TextRequest, headers: dict[str, str]) -> Response:
    frames = [frame async for frame in speech.frames()]
    audio = np.concatenate(frames) if frames else np.zeros(0, np.float32)
    # The samples as the float32 values they are (shortest decimals), spliced in as text:
    # through Python floats each would print as its float64 expansion.
    samples = await asyncio.to_thread(float32_json_array, np.clip(audio, -1.0, 1.0))
    rest = {
        "sample_rate": speech.output_rate_hz,
        "inference_time_ms": round(speech.elapsed_s * 1000, 1),
        "spoken": " ".join(speech.spoken),
        "removed": speech.removed,
    }
    body = '{"audio_data":' + samples + "," + json.dumps(rest, ensure_ascii=False)[1:]
    return Response(
        body.encode("utf-8"),
        media_type="application/json",
        headers=headers | _done_headers(speech),
    )
