"""The named voices over HTTP: ``GET/POST /v1/voices``, ``GET/DELETE /v1/voices/{name}``.

A voice is made from a seed (the speaker ChatTTS samples from it), from a speaker
string a user already has (``Chat.sample_random_speaker()``), from a short reference
clip with its transcript (ChatTTS's ``sample_audio_speaker``, run on the engine thread),
or as a weighted mix of other voices (:mod:`server.voices.mix`); for the fallback
voice, from one of its variants. See :mod:`server.voices`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import random
import shutil
import subprocess
from typing import Any

import numpy as np
from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from server.auth import require_bearer
from server.engines import espeak
from server.http.schemas import VOICE_ERROR_RESPONSES
from server.state import AppState
from server.voices import FALLBACK_ENGINE, Voice
from server.voices.mix import MIX_MAX_VOICES, mix_description, mixed_speaker
from streaming import protocol as p
from streaming.audio import sounding_seconds
from streaming.errors import ClientError, LimitExceeded, Unavailable

__all__ = ["voice_routes"]

logger = logging.getLogger(__name__)

_CLIP_RATE_HZ = 24000
_DECODE_TIMEOUT_S = 30
_ONE_CLIP_AT_A_TIME = asyncio.Semaphore(1)


class MixPart(BaseModel):
    """One voice of a mix and its weight."""

    model_config = ConfigDict(extra="forbid")

    voice: StrictStr = Field(min_length=1, max_length=p.MAX_VOICE_CHARS,
                             description="a voice name (or a raw speaker string)")  # fmt: skip
    weight: float = Field(gt=0, le=1000, description="its share (weights are normalised)")


class VoiceCreate(BaseModel):
    """Body of POST /v1/voices: a name, and at most one of speaker, speaker_seed, clip, mix."""

    model_config = ConfigDict(extra="forbid")

    name: StrictStr = Field(
        min_length=1,
        max_length=200,
        description="letters or digits of any script, '.', '_' or '-', starting with a letter "
        "or digit; 1-64 characters, at most 200 bytes as UTF-8",
    )
    engine: StrictStr | None = Field(
        None, description="the engine it belongs to: the main engine (default) or espeak"
    )
    description: StrictStr = Field("", max_length=500)
    speaker: StrictStr | None = Field(
        None,
        min_length=1,
        max_length=16384,
        description="ChatTTS: a speaker string; espeak: a variant",
    )
    speaker_seed: StrictInt | None = Field(
        None, ge=0, le=p.MAX_SEED, description="ChatTTS: the speaker this seed samples"
    )
    clip: StrictStr | None = Field(
        None, description="ChatTTS: a reference recording (WAV, FLAC, MP3, ...), base64"
    )
    transcript: StrictStr | None = Field(
        None, min_length=1, max_length=500, description="what the clip says (with clip)"
    )
    mix: list[MixPart] | None = Field(
        None,
        min_length=1,
        max_length=MIX_MAX_VOICES,
        description="ChatTTS: a voice blended from these voices' speakers, by weight",
    )
    seed: StrictInt | None = Field(None, ge=0, le=p.MAX_SEED, description="its sampling seed")
    temperature: float | None = Field(None, gt=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: StrictInt | None = Field(None, ge=1, le=1000)


class VoiceOut(BaseModel):
    name: str
    engine: str
    source: str = Field(description="seed, speaker or clip")
    speaker: str | None = Field(description="the speaker string (long ones shortened)")
    speaker_seed: int | None
    seed: int | None
    transcript: str | None
    temperature: float | None
    top_p: float | None
    top_k: int | None
    description: str
    preset: bool


class VoiceList(BaseModel):
    object: str = "list"
    engine: str
    data: list[VoiceOut]


def voice_routes(state: AppState) -> APIRouter:
    router = APIRouter(dependencies=[Depends(require_bearer(state))])
    registry = state.voices.registry

    def engine_of(name: str | None) -> str:
        main = state.voices.engine()
        if name is None or name == main:
            return main
        if name == FALLBACK_ENGINE:
            return name
        raise ClientError(
            f"no engine {name[:64]!r}: this server's are {main} and {FALLBACK_ENGINE}",
            code="invalid_field",
            param="engine",
        )

    @router.get("/v1/voices", response_model=VoiceList, responses=VOICE_ERROR_RESPONSES)
    async def list_voices(engine: str | None = Query(None)) -> dict[str, Any]:
        """The voices of the main engine (or of ``engine``): presets first."""
        chosen = engine_of(engine)
        voices = await registry.fetch_list(chosen)
        return {"engine": chosen, "data": [v.public() for v in voices]}

    @router.get("/v1/voices/{name}", response_model=VoiceOut, responses=VOICE_ERROR_RESPONSES)
    async def get_voice(name: str, engine: str | None = Query(None)) -> dict[str, Any]:
        return (await registry.fetch(engine_of(engine), name)).public()

    @router.post(
        "/v1/voices", response_model=VoiceOut, status_code=201, responses=VOICE_ERROR_RESPONSES
    )
    async def create_voice(body: VoiceCreate) -> dict[str, Any]:
        engine = engine_of(body.engine)
        registry.check_room(engine, body.name, state.settings.max_voices)  # before any work
        voice = await _make_voice(state, body, engine)
        return (await registry.add(voice, limit=state.settings.max_voices)).public()

    @router.delete(
        "/v1/voices/{name}", status_code=204, response_class=Response,
        responses=VOICE_ERROR_RESPONSES,
    )  # fmt: skip
    async def delete_voice(name: str, engine: str | None = Query(None)) -> Response:
        await registry.delete(engine_of(engine), name)
        return Response(status_code=204)

    return router


async def _make_voice(state: AppState, body: VoiceCreate, engine: str) -> Voice:
    kinds = ("speaker", "speaker_seed", "clip", "mix")
    given = [k for k in kinds if getattr(body, k) is not None]
    if len(given) > 1:
        raise ClientError(f"give one of speaker, speaker_seed, clip and mix, not "
                          f"{' and '.join(given)}", code="invalid_field", param=given[1])  # fmt: skip
    if (body.clip is None) != (body.transcript is None):
        raise ClientError("a clip comes with its transcript, and a transcript with its clip",
                          code="invalid_field", param="transcript")  # fmt: skip
    fields: dict[str, Any] = {
        "seed": body.seed,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "top_k": body.top_k,
        "description": body.description,
    }
    if engine == FALLBACK_ENGINE and state.voices.engine() != FALLBACK_ENGINE:
        check = espeak.check_voice
    else:
        check = state.worker.check_voice
    if body.mix is not None:
        parts = [(part.voice, part.weight) for part in body.mix]
        speaker = await mixed_speaker(state.voices, state.worker, engine, parts)
        fields["description"] = body.description or mix_description(parts)
        return Voice(body.name, engine, speaker=speaker, **fields)
    if body.speaker is not None:
        try:
            check(body.speaker)
        except ValueError as exc:
            raise ClientError(f"speaker: {exc}", code="invalid_voice", param="speaker") from None
        return Voice(body.name, engine, speaker=body.speaker, **fields)
    if engine == FALLBACK_ENGINE:
        if body.speaker_seed is not None or body.clip is not None:
            raise ClientError(_not_on_fallback(given[0], body.name, state.voices.engine()),
                              code="invalid_field", param=given[0])  # fmt: skip
        return Voice(body.name, engine, **fields)
    if body.clip is not None:
        reference = await _voice_from_clip(state, body.clip)
        return Voice(body.name, engine, reference=reference, transcript=body.transcript, **fields)
    seed = body.speaker_seed if body.speaker_seed is not None else random.randrange(p.MAX_SEED)
    return Voice(body.name, engine, speaker_seed=seed, **fields)


def _not_on_fallback(field: str, name: str, main: str) -> str:
    """Why ``field`` (speaker_seed, clip) makes no voice of the fallback voice, what does,
    and, when the fallback voice is all this server has, how to get ChatTTS."""
    what = "picks one of ChatTTS's speakers" if field == "speaker_seed" else "is ChatTTS's"
    example = json.dumps({"name": name[:64], "speaker": "f3", "seed": 7}, ensure_ascii=False)
    told = (
        f"{field} {what}; the fallback voice (espeak-ng) makes its voices from a variant "
        f"(speaker: {', '.join(espeak.VOICES)}) and a seed (its pitch), e.g. {example}"
    )
    if main == FALLBACK_ENGINE:  # the quickstart's server: no model
        told += (
            ". This server has no ChatTTS model: get one with `chattts-stream "
            "download-weights models/chattts` and serve with --model-dir models/chattts "
            "(README, Quickstart)"
        )
    return told


async def _voice_from_clip(state: AppState, clip: str) -> str:
    try:
        data = base64.b64decode(clip, validate=True)
    except (binascii.Error, ValueError):
        raise ClientError("clip is not base64", code="invalid_field", param="clip") from None
    limit = state.settings.max_voice_clip_seconds
    # Decoded no further than just past the limit: a small compressed file can hold hours.
    audio = await asyncio.to_thread(_decode_audio, data, limit + 1)
    seconds = audio.size / _CLIP_RATE_HZ
    if seconds > limit:
        raise LimitExceeded(f"a clip longer than {limit:g} s (--max-voice-clip-seconds)",
                            code="clip_too_long", param="clip", limit=round(limit))  # fmt: skip
    if seconds < 0.5:
        raise ClientError(f"a clip of {seconds:.2f} s is too short to take a voice from",
                          code="invalid_field", param="clip")  # fmt: skip
    least = state.settings.min_voice_clip_sound_s
    sound = sounding_seconds(audio, _CLIP_RATE_HZ)
    if sound < least:
        heard = "silence" if sound == 0 else f"only {sound:.2f} s of sound, the rest silence"
        raise ClientError(
            f"clip is {heard} (or too quiet: quieter than -45 dBFS): a voice needs at least "
            f"{least:g} s of speech (--min-voice-clip-sound-s); record it closer or louder",
            code="invalid_field",
            param="clip",
        )
    try:
        async with _ONE_CLIP_AT_A_TIME:  # each pauses synthesis on the engine thread
            return await state.worker.call(
                lambda engine: engine.voice_from_clip(audio, _CLIP_RATE_HZ)
            )
    except ValueError as exc:
        logger.info("a clip of %.2f s made no voice: %s: %s", seconds, type(exc).__name__, exc)
        raise ClientError(
            "clip: the engine could not take a voice from it", code="invalid_voice", param="clip"
        ) from None


def _decode_audio(data: bytes, max_seconds: float) -> np.ndarray:
    """Any audio file ffmpeg reads, as float32 mono at 24 kHz, up to ``max_seconds``."""
    if shutil.which("ffmpeg") is None:
        raise Unavailable("a voice from a clip needs ffmpeg, which is not installed",
                          code="format_unavailable")  # fmt: skip
    try:
        result = subprocess.run(
            ["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-i", "pipe:0",
             "-t", f"{max_seconds:g}", "-f", "f32le", "-ac", "1", "-ar", str(_CLIP_RATE_HZ),
             "pipe:1"],
            input=data, capture_output=True, timeout=_DECODE_TIMEOUT_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ClientError(f"clip: not decoded within {_DECODE_TIMEOUT_S} s",
                          code="invalid_field", param="clip") from None  # fmt: skip
    if result.returncode != 0:
        said = result.stderr.decode(errors="replace").strip()
        logger.info("ffmpeg could not decode a clip: %s", said[-500:])
        raise ClientError(_clip_problem(said), code="invalid_field", param="clip")
    return np.frombuffer(result.stdout, np.float32).copy()


#: What ffmpeg says of a file that is not audio, and what the caller is told instead.
_FFMPEG_PROBLEMS = (
    (
        ("does not contain any stream", "matches no streams", "no audio stream"),
        "clip has no sound track (a picture, a video without sound, or an empty file)",
    ),
    (
        ("Invalid data found", "could not find codec", "Invalid argument", "EOF"),
        "clip is not an audio file: send WAV, FLAC, MP3, OGG/Opus, M4A/AAC or any format "
        "ffmpeg reads, base64-encoded",
    ),
)


def _clip_problem(ffmpeg_said: str) -> str:
    """What to tell a caller whose clip ffmpeg could not decode (never ffmpeg's words)."""
    for needles, told in _FFMPEG_PROBLEMS:
        if any(needle.lower() in ffmpeg_said.lower() for needle in needles):
            return told
    return "clip could not be decoded as audio: send WAV, FLAC, MP3, OGG/Opus or M4A/AAC"
