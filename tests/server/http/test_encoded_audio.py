"""Every compressed format decodes to the samples of the pcm answer for the same request,
on every HTTP route, streamed and whole: nothing lost, nothing shifted beyond the codec's
own priming, nothing added beyond its frame padding."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings

pytestmark = pytest.mark.live

RATE_HZ = 24000
TEXT = "今天天气很好，我们去公园散步吧。傍晚我们再回家做饭。"

# Samples a decoder puts before the first sample of the input (at 24 kHz), per format:
# FLAC none; MP3 none when the stream has a LAME tag the decoder reads, else the
# encoder's 576 and the decoder's 529 (a stream written to a pipe has no tag: ffmpeg
# writes it only to seekable output); AAC in ADTS carries no priming information, so
# the encoder's 1024 show (2112 with a decoder that adds its own delay); Opus's pre-skip
# (312 at 48 kHz) is in its header and honoured.
PRIMING_SAMPLES = {"flac": (0,), "mp3": (0, 576 + 529), "aac": (1024, 2112), "opus": (0,)}
# How far the best lag may sit from those (a lossy codec's phase can move the peak).
LAG_TOLERANCE_SAMPLES = 2
# Samples a decoder may add after the last one: the rest of the codec's last frame (an MP3
# frame at 24 kHz is 576 samples, the LAME tag's padding count cannot be written back
# into a stream; an AAC frame 1024; Ogg's last granule position trims Opus exactly).
PADDING_SAMPLES = {"flac": 0, "mp3": 2 * 576, "aac": 1024, "opus": 0}
# Lowest correlation with the pcm answer at the best lag (the lossy codecs at the server's
# bit rates keep the waveform of speech closely; FLAC is exact and checked as such).
MIN_CORRELATION = {"mp3": 0.95, "aac": 0.95, "opus": 0.95}


def decode(data: bytes) -> np.ndarray:
    """The audio of ``data`` (any format ffmpeg reads) as float32 at 24 kHz."""
    pcm = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", "pipe:0", "-f", "f32le", "-ac", "1",
         "-ar", str(RATE_HZ), "pipe:1"],
        input=data, capture_output=True, check=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    return np.frombuffer(pcm.stdout, np.float32)


def best_lag(decoded: np.ndarray, reference: np.ndarray, max_lag: int) -> tuple[int, float]:
    """The lag (``decoded[t + lag]`` ~ ``reference[t]``) within ±``max_lag`` with the
    highest cross-correlation, and the normalised correlation of the overlap there."""
    size = 1 << (decoded.size + reference.size).bit_length()
    spectrum = np.fft.rfft(decoded, size) * np.conj(np.fft.rfft(reference, size))
    products = np.fft.irfft(spectrum, size)
    lags = np.arange(-max_lag, max_lag + 1)
    lag = int(lags[np.argmax(products[lags])])
    a = decoded[max(lag, 0) :]
    b = reference[max(-lag, 0) :]
    n = min(a.size, b.size)
    a, b = a[:n].astype(np.float64), b[:n].astype(np.float64)
    return lag, float(a @ b / np.sqrt((a @ a) * (b @ b)))


def _speech(live: LiveServer, fmt: str, *, sse: bool) -> bytes:
    body = {"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": fmt}
    if sse:
        body["stream_format"] = "sse"
    answer = httpx.post(f"{live.base_url}/v1/audio/speech", json=body, timeout=TIMEOUT_S)
    assert answer.status_code == 200, answer.text
    if not sse:
        return answer.content
    events = [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")]
    return b"".join(
        base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta"
    )


def _tts(live: LiveServer, fmt: str, *, stream: bool) -> bytes:
    body = {"text": TEXT, "format": fmt, "stream": stream, "seed": 7}
    with httpx.stream("POST", f"{live.base_url}/v1/tts", json=body, timeout=TIMEOUT_S) as answer:
        assert answer.status_code == 200, answer.read()
        return b"".join(answer.iter_bytes())


ROUTES = {
    "speech": lambda live, fmt: _speech(live, fmt, sse=False),
    "speech-sse": lambda live, fmt: _speech(live, fmt, sse=True),
    "tts-whole": lambda live, fmt: _tts(live, fmt, stream=False),
    "tts-stream": lambda live, fmt: _tts(live, fmt, stream=True),
}


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    """The fallback voice: bit-exact across repeats, so each answer is one same audio."""
    with run_live_server(Settings(engine="espeak")) as live:
        yield live


@pytest.fixture(scope="module")
def pcm_answers(server: LiveServer) -> dict[str, np.ndarray]:
    answers = {}
    for route, ask in ROUTES.items():
        answers[route] = np.frombuffer(ask(server, "pcm"), "<i2").astype(np.float32) / 32768
        assert answers[route].size > RATE_HZ  # two sentences of speech
    return answers


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("fmt", ["flac", "mp3", "aac", "opus"])
def test_a_compressed_answer_decodes_to_the_pcm_answer(
    server: LiveServer, pcm_answers: dict[str, np.ndarray], route: str, fmt: str
) -> None:
    """The decoded audio lines up with the pcm answer within the codec's priming, is as
    long within its frame padding, and matches it (FLAC: exactly)."""
    reference = pcm_answers[route]
    decoded = decode(ROUTES[route](server, fmt))
    lag, correlation = best_lag(decoded, reference, max_lag=4000)
    priming = min(PRIMING_SAMPLES[fmt], key=lambda samples: abs(samples - lag))
    assert abs(lag - priming) <= LAG_TOLERANCE_SAMPLES, f"{lag - priming:+d} samples off"
    extra = decoded.size - lag - reference.size
    assert 0 <= extra <= PADDING_SAMPLES[fmt], f"{extra} samples more than the pcm answer"
    if fmt == "flac":
        assert np.array_equal(np.round(decoded * 32768), np.round(reference * 32768))
    else:
        assert correlation > MIN_CORRELATION[fmt]
