"""OpenAI's speech API: ``POST /v1/audio/speech``, ``GET /v1/models``, ``GET /v1/models/{id}``.

Any client of OpenAI's API (the ``openai`` package with ``base_url`` pointing here,
pipecat's and LiveKit's OpenAI services, chat front-ends) works unchanged:

- ``model``: ``chattts`` (or the engine actually serving, see ``/v1/models``), or one
  of OpenAI's own speech model names, which are aliases of it;
- ``voice``: a name from ``GET /v1/voices`` (OpenAI's built-in names are presets of
  every engine), a raw speaker string, or ``{"id": name}``;
- ``response_format``: mp3 (default), opus, aac, flac, wav, pcm (24 kHz s16le, as
  OpenAI's); every format is 24 kHz mono unless ``sample_rate`` (this server's
  extension) says otherwise. ``ulaw`` and ``alaw`` (also by the names of OpenAI's
  Realtime API, ``g711_ulaw`` and ``g711_alaw``), which OpenAI's speech API does not
  offer, are raw G.711 at 8 kHz for telephony;
- ``speed`` 0.25-4: the engine's own rate control over its range (ChatTTS 0.5-2), then
  a pitch-preserving time-stretch for the rest (header ``X-TTS-Speed``), as on every
  route;
- ``instructions``: accepted, not applied (ChatTTS takes no style prompt): said in the
  ``X-TTS-Instructions`` header;
- ``stream_format``: ``audio`` (the file's bytes, chunked) or ``sse`` (``data:`` lines
  with ``speech.audio.delta`` events of base64 audio, then ``speech.audio.done``).

The response starts after the first segment's first audio, whatever the format.
Errors have OpenAI's shape (as on every route of this server).
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import AsyncGenerator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, StrictStr, model_validator

from server.auth import require_bearer
from server.errors import report
from server.http import audio as http_audio
from server.http.schemas import (
    ERROR_RESPONSES,
    LEXICON_FIELD_HELP,
    SAMPLE_RATE_HELP,
    ErrorBody,
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
from streaming.errors import ClientError, NotFound, TTSError, outcome, public_message
from streaming.limiter import MAX_VOLUME, MIN_VOLUME, volume_in_body

__all__ = ["OPENAI_MODEL_ALIASES", "openai_routes"]

logger = logging.getLogger(__name__)

#: OpenAI's speech model names: aliases of the engine serving.
OPENAI_MODEL_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15")
OUTPUT_RATE_HZ = 24000  # OpenAI's, for every format (clients hard-code it for pcm)
SpeechFormat = Literal[
    "mp3", "opus", "aac", "flac", "wav", "pcm", "ulaw", "alaw", "g711_ulaw", "g711_alaw"
]
#: GPT audio tokens per second of ChatTTS audio (one token per 2 mel frames of 256
#: samples at 24 kHz): what ``usage.output_tokens`` counts.
_TOKENS_PER_SECOND = 24000 / 512


_NO_MODEL: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "no such model"}
}


class VoiceId(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: StrictStr = Field(min_length=1)


class SpeechRequest(BaseModel):
    """OpenAI's ``CreateSpeechRequest``."""

    model_config = ConfigDict(extra="forbid")

    model: StrictStr = Field(min_length=1, description="chattts, or an OpenAI speech model name")
    input: StrictStr = Field(min_length=1, description="the text to speak")
    voice: StrictStr | VoiceId = Field(description="a voice name (GET /v1/voices) or {id}")
    instructions: StrictStr | None = Field(
        None, max_length=4096, description="accepted, not applied (X-TTS-Instructions says so)"
    )
    response_format: SpeechFormat = Field(
        "mp3",
        description="OpenAI's formats, and ulaw and alaw (g711_ulaw, g711_alaw): raw G.711 "
        "µ-law and A-law bytes, no header, 8 kHz mono (this server's extension, for telephony)",
    )
    sample_rate: SampleRate | None = Field(
        None,
        description="this server's extension: " + SAMPLE_RATE_HELP.format(default="24000"),
    )
    speed: float = Field(
        1.0,
        description="0.25-4; beyond the engine's own range (ChatTTS: 0.5-2): time-stretched",
        json_schema_extra={"minimum": p.MIN_SPEED, "maximum": p.MAX_SPEED},
    )
    volume: float = Field(
        1.0,
        description="loudness factor (1: as made), 0-4 (an extension of this server); "
        "peaks are limited below full scale, never clipped",
        json_schema_extra={"minimum": MIN_VOLUME, "maximum": MAX_VOLUME},
    )
    stream_format: Literal["audio", "sse"] = "audio"
    lexicon: dict[StrictStr, StrictStr] | None = Field(
        None,
        description="this server's extension: " + LEXICON_FIELD_HELP,
    )

    @model_validator(mode="before")
    @classmethod
    def _speed(cls, data: Any) -> Any:
        # The WebSocket's checks and messages, raised as they are.
        return volume_in_body(p.speed_in_body(data))


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


def openai_routes(state: AppState) -> APIRouter:
    router = APIRouter(dependencies=[Depends(require_bearer(state))])
    created = int(time.time())

    def models() -> list[Model]:
        engine = state.worker.status.engine or state.engine_choice.name
        ids = [engine, *(alias for alias in OPENAI_MODEL_ALIASES if alias != engine)]
        return [Model(id=i, created=created, owned_by="chattts-stream") for i in ids]

    @router.get("/v1/models", response_model=ModelList, responses=ERROR_RESPONSES)
    async def list_models() -> ModelList:
        """The engine serving, and OpenAI's speech model names (its aliases)."""
        return ModelList(data=models())

    @router.get(
        "/v1/models/{model_id}",
        response_model=Model,
        responses=_NO_MODEL | ERROR_RESPONSES,
    )
    async def get_model(model_id: str) -> Model:
        for model in models():
            if model.id == model_id:
                return model
        raise NotFound(_unknown_model(model_id, models()), code="model_not_found")

    @router.post(
        "/v1/audio/speech",
        response_class=Response,
        responses=audio_responses(
            ("mp3", "opus", "aac", "flac", "wav", "pcm", "ulaw", "alaw"), sse=True
        )
        | ERROR_RESPONSES,
        summary="OpenAI's speech API: the audio, streamed from the first segment on",
    )
    async def speech(
        body: SpeechRequest,
        request: Request,
        x_tts_timestamps: Annotated[
            bool,
            Header(description="with stream_format sse: speech.audio.timestamps events too"),
        ] = False,
    ) -> Response:
        if body.model not in {model.id for model in models()}:
            raise ClientError(_unknown_model(body.model, models()), code="model_not_found",
                              param="model")  # fmt: skip
        return await _speak(state, body, request, timestamps=x_tts_timestamps)

    return router


def _unknown_model(model_id: str, models: list[Model]) -> str:
    return f"no model {model_id[:64]!r}; the models are: {', '.join(m.id for m in models)}"


async def _speak(
    state: AppState, body: SpeechRequest, request: Request, *, timestamps: bool
) -> Response:
    check_text_length(state, body.input)
    lexicon = request_lexicon(body.lexicon, state.settings.request_lexicon_limits)
    check_can_speak(state)
    fmt = encodings.FORMAT_LAWS.get(body.response_format, body.response_format)
    rate = encodings.check_rate(fmt, body.sample_rate, OUTPUT_RATE_HZ)
    http_audio.require_ffmpeg(fmt)
    name = body.voice.id if isinstance(body.voice, VoiceId) else body.voice
    speech = await start_speech(
        state,
        body.input,
        name,
        rate,
        speed=body.speed,
        volume=body.volume,
        request=request,
        lexicon=lexicon,
        timestamps=bool(timestamps) and body.stream_format == "sse",
    )
    headers = speech.headers()
    if body.instructions:
        headers["X-TTS-Instructions"] = "ignored: ChatTTS takes no style instructions"
    encoded = http_audio.encode(speech.frames(), fmt, rate, encoders=state.encoders)
    if body.stream_format == "sse":
        headers["Cache-Control"] = "no-cache"
        return await respond_streaming(
            speech, _sse(speech, encoded), "text/event-stream", headers, request
        )
    media_type = http_audio.media_type(fmt, rate)
    return await respond_streaming(speech, encoded, media_type, headers, request)


async def _sse(speech: TextRequest, audio: AsyncGenerator[bytes]) -> AsyncGenerator[bytes]:
    """OpenAI's speech events, one ``data:`` line each; a failure mid-stream is an
    ``error`` event (the status was sent with the first event). Asked for with the
    ``X-TTS-Timestamps`` header, each segment's ``speech.audio.timestamps`` comes once its
    audio is made (with a compressed format, possibly before the last of it is encoded
    and sent; times are on the response's own audio clock, a time-stretch included)."""
    sent = 0
    try:
        async for chunk in audio:
            event = {"type": "speech.audio.delta", "audio": base64.b64encode(chunk).decode()}
            yield _event(event)
            for segment in (speech.timestamps or [])[sent:]:
                sent += 1
                yield _event({"type": "speech.audio.timestamps", **segment})
    except TTSError as exc:
        report(exc, metrics=speech.state.metrics, log=logger, where="speech events")
        yield _event({"type": "error", "error": exc.to_body()["error"]})
        return
    except Exception as exc:  # reported, not shown: internals stay on the server
        code, message = public_message(exc)
        detail = {"message": message, "type": outcome(exc).error_type, "param": None, "code": code}
        yield _event({"type": "error", "error": detail})
        raise
    finally:
        await audio.aclose()
    for segment in (speech.timestamps or [])[sent:]:
        yield _event({"type": "speech.audio.timestamps", **segment})
    tokens = round(speech.samples / speech.output_rate_hz * _TOKENS_PER_SECOND)
    usage = {"input_tokens": len(speech.text), "output_tokens": tokens,
             "total_tokens": len(speech.text) + tokens}  # fmt: skip
    yield _event({"type": "speech.audio.done", "usage": usage})


def _event(body: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n".encode()
