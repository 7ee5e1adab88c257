"""What /openapi.json declares that FastAPI cannot infer: the error body every route
shares, the statuses each route can answer, and audio bodies by media type."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, Field

from server.http.audio import MEDIA_TYPES

__all__ = [
    "ERROR_RESPONSES",
    "LEXICON_FIELD_HELP",
    "SAMPLE_RATE_HELP",
    "VOICE_ERROR_RESPONSES",
    "ErrorBody",
    "SampleRate",
    "audio_responses",
]

#: The ``lexicon`` field of the speaking routes and the preview (docs/text.md).
LEXICON_FIELD_HELP = (
    "pronunciation lexicon entries for this request, written form to spoken form "
    '({"行长": "航长"}), applied before numbers are read; they win over the server\'s '
    "--lexicon file (limits: --max-request-lexicon-entries and the entry lengths)"
)

#: The output rates of the speaking routes (= streaming.protocol.SUPPORTED_SAMPLE_RATES_HZ).
SampleRate = Literal[8000, 16000, 22050, 24000, 44100, 48000]
SAMPLE_RATE_HELP = (
    "output rate in Hz; default {default}, and 8000 for ulaw and alaw (G.711 carries "
    "8000 Hz only: any other rate with them is refused)"
)


class ErrorDetail(BaseModel):
    """OpenAI's error object, plus this server's limit and retry hint where they apply."""

    message: str
    type: str = Field(description="invalid_request_error, authentication_error, ...")
    param: str | None = Field(description="the request field at fault, if one is")
    code: str | None = Field(description="this server's error code (docs/protocol.md)")
    limit: int | None = Field(None, description="the limit a 413 or 503 ran into")
    retry_after_ms: int | None = Field(None, description="busy: when to try again")


class ErrorBody(BaseModel):
    """Every error response of every route."""

    error: ErrorDetail


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


#: The errors any speaking route can answer.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _error("a request that cannot be spoken as sent (unknown voice, nothing to speak)"),
    401: _error("missing or invalid bearer token"),
    413: _error("the text exceeds --max-http-text-chars, or the body --max-http-body-bytes"),
    422: _error("a body that does not decode or does not match the schema"),
    503: _error(
        "not ready, draining, busy (Retry-After), a format without ffmpeg, or a voice name "
        "not seen while the voices store is unreachable"
    ),
    504: _error("not spoken within --http-timeout-s"),
}
#: The errors of the voice routes.
VOICE_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _error("a voice that cannot be made as asked"),
    401: _error("missing or invalid bearer token"),
    404: _error("no such voice"),
    409: _error("the name is taken, or names a preset"),
    413: _error(
        "a clip over --max-voice-clip-seconds, a body over --max-http-body-bytes, "
        "or no room for another voice (--max-voices)"
    ),
    422: _error("a body that does not decode or does not match the schema"),
    503: _error("the engine is not ready, or the voices store is unreachable (voices_unavailable)"),
}


def audio_responses(
    formats: Iterable[str], *, json_model: type[BaseModel] | None = None, sse: bool = False
) -> dict[int | str, dict[str, Any]]:
    """A 200 whose body is audio in one of ``formats`` (binary), chosen by the request."""
    binary = {"schema": {"type": "string", "format": "binary"}}
    content: dict[str, Any] = {MEDIA_TYPES[fmt].split(";")[0]: binary for fmt in formats}
    if sse:
        content["text/event-stream"] = {"schema": {"type": "string"}}
    response: dict[str, Any] = {"description": "the audio, in the format asked for"}
    if json_model is not None:
        response["model"] = json_model
    response["content"] = content
    return {200: response}


class Health(BaseModel):
    status: str


class TextFrontendStatus(BaseModel):
    loaded: bool
    normalizer: bool
    load_seconds: float | None


class Readiness(BaseModel):
    ready: bool
    state: str = Field(description="loading, ready, failed, stopped or draining")
    text_frontend: TextFrontendStatus
    engine: str | None
    degraded: bool = Field(
        description="the fallback voice serves because the named model failed to load"
    )
    random_weights: bool = Field(
        description="the model is a generated random-weight checkpoint: it speaks noise"
    )
    detail: str | None
    load_seconds: float | None
    sample_rate: int | None
