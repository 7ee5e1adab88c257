"""Audio as HTTP bodies: each format's media type, and encoders that stream.

An encoder takes float32 mono frames as they are made and gives the bytes of the file
as soon as there are any, so a response can start after the first segment:

- ``pcm``: 16-bit little-endian samples, no header (``audio/pcm``; ``audio/L16`` would
  mean big-endian, RFC 2586).
- ``ulaw``, ``alaw``: G.711 µ-law and A-law, one byte a sample at 8 kHz, no header
  (``audio/PCMU``, ``audio/PCMA``: RFC 4856's names; :mod:`streaming.g711`).
- ``wav``: a RIFF header whose sizes say "unknown length" (0xFFFFFFFF, as streamed WAV
  from ffmpeg and most TTS servers carries; decoders read to the end), then the PCM.
  Whole (not streamed) WAV files get the exact sizes.
- ``mp3``, ``opus`` (Ogg), ``ogg`` (Opus in Ogg, this server's older name), ``aac``
  (ADTS), ``flac``: an ``ffmpeg`` process reading PCM on stdin and writing the format on
  stdout, read as it comes (:mod:`server.encoding`: the command for each format, and
  the processes started ahead of need). Decoded, each gives every sample of the PCM,
  after only the codec's own priming (MP3 1,105 samples, AAC 1,024, Opus and FLAC none).
  Written to a pipe, FLAC's header cannot carry its length (STREAMINFO says 0,
  unknown, as a streamed WAV's sizes do); whole files get it (:func:`fill_flac_length`).

Speeds beyond the engine's own rate control are time-stretched before the audio gets
here (:mod:`streaming.stretch`, in the speech pipeline), so PCM and WAV never need
ffmpeg; without it the compressed formats get a 503 ``format_unavailable`` before any
work starts (:func:`require_ffmpeg`).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import struct
from collections.abc import AsyncGenerator, AsyncIterator

import numpy as np

from server.child_process import ChildProcess, spawn
from server.encoding import Encoders, ffmpeg_args
from streaming import encodings
from streaming.audio import float_to_pcm16
from streaming.errors import Unavailable

__all__ = [
    "MEDIA_TYPES",
    "encode",
    "fill_flac_length",
    "fill_wav_sizes",
    "media_type",
    "needs_ffmpeg",
    "require_ffmpeg",
    "streaming_wav_header",
]

MEDIA_TYPES = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",
    "ogg": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "ulaw": "audio/PCMU",
    "alaw": "audio/PCMA",
}
_READ_BYTES = 16 * 1024


def media_type(fmt: str, rate_hz: int) -> str:
    """The Content-Type of ``fmt`` at ``rate_hz`` (raw PCM says its rate and layout)."""
    if fmt == "pcm":
        return f"audio/pcm; rate={rate_hz}; channels=1; encoding=s16le"
    if fmt in ("ulaw", "alaw"):
        return f"{MEDIA_TYPES[fmt]}; rate={rate_hz}; channels=1"
    return MEDIA_TYPES[fmt]


def needs_ffmpeg(fmt: str) -> bool:
    return fmt not in ("pcm", "wav", "ulaw", "alaw")


def require_ffmpeg(fmt: str) -> None:
    """Refuse, before any synthesis, a request this machine cannot encode."""
    if needs_ffmpeg(fmt) and shutil.which("ffmpeg") is None:
        raise Unavailable(
            f"format {fmt} needs ffmpeg, which is not installed", code="format_unavailable"
        )


def streaming_wav_header(rate_hz: int, data_bytes: int | None = None) -> bytes:
    """A 44-byte PCM WAV header; ``data_bytes`` None: a stream of unknown length."""
    data = 0xFFFFFFFF if data_bytes is None else data_bytes
    riff = 0xFFFFFFFF if data_bytes is None else 36 + data_bytes
    return (
        b"RIFF"
        + struct.pack("<I", riff)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate_hz, rate_hz * 2, 2, 16)
        + b"data"
        + struct.pack("<I", data)
    )


async def encode(
    frames: AsyncGenerator[np.ndarray],
    fmt: str,
    rate_hz: int,
    *,
    encoders: Encoders | None = None,
) -> AsyncGenerator[bytes]:
    """The bytes of ``fmt`` for ``frames`` (float32 mono at ``rate_hz``), as they come.
    Closing it closes ``frames`` (which stops their synthesis). ``encoders`` supplies
    ffmpeg processes started ahead (default: one started now)."""
    async with contextlib.aclosing(frames):
        if fmt == "wav":
            yield streaming_wav_header(rate_hz)
        if not needs_ffmpeg(fmt):
            to_bytes = encodings.encoder(fmt)
            async for frame in frames:
                if frame.size:
                    yield to_bytes(frame)
            return
        if encoders is not None:
            process = await encoders.process(fmt, rate_hz)
        else:
            process = await spawn(ffmpeg_args(fmt, rate_hz))
        try:
            # aclosing: leaving early must end ffmpeg now (async for does not close what
            # it iterates; the generator would linger until garbage collection).
            async with contextlib.aclosing(_ffmpeg(frames, fmt, process)) as encoded:
                async for chunk in encoded:
                    yield chunk
        finally:  # done, failed, or the client left: ffmpeg ends and is reaped, always
            await process.aclose()


def fill_wav_sizes(wav: bytes) -> bytes:
    """A whole streamed WAV (header of unknown length) with its exact sizes."""
    return streaming_wav_header(int.from_bytes(wav[24:28], "little"), len(wav) - 44) + wav[44:]


def fill_flac_length(flac: bytes, samples: int) -> bytes:
    """A whole FLAC that ffmpeg wrote to a pipe (it cannot seek back: its STREAMINFO says
    0, "unknown", for the total samples) with ``samples`` written there, so players show
    its duration. Anything but a FLAC starting with its STREAMINFO comes back as is."""
    # "fLaC", a 4-byte block header (type 0 = STREAMINFO, length 34), then STREAMINFO:
    # the total samples are its 36 bits from byte 13's low nibble to byte 17.
    if len(flac) < 42 or flac[:4] != b"fLaC" or flac[4] & 0x7F != 0 or not 0 <= samples < 2**36:
        return flac
    info = bytearray(flac[8:42])
    info[13] = (info[13] & 0xF0) | (samples >> 32)
    info[14:18] = (samples & 0xFFFFFFFF).to_bytes(4, "big")
    return flac[:8] + bytes(info) + flac[42:]


async def _ffmpeg(
    frames: AsyncIterator[np.ndarray], fmt: str, process: ChildProcess
) -> AsyncGenerator[bytes]:
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    async def feed() -> None:
        try:
            async for frame in frames:
                if frame.size:
                    stdin.write(float_to_pcm16(frame))
                    await stdin.drain()
        finally:
            with contextlib.suppress(ConnectionError):
                stdin.close()

    feeder = asyncio.get_running_loop().create_task(feed(), name=f"encode-{fmt}")
    try:
        while chunk := await stdout.read(_READ_BYTES):
            yield chunk
        await feeder  # raises what the frames raised (a synthesis error, a timeout)
        if (status := await process.wait()) != 0:
            raise RuntimeError(f"ffmpeg failed encoding {fmt} (exit status {status})")
    finally:
        if not feeder.done():
            feeder.cancel()
            with contextlib.suppress(BaseException):
                await feeder
