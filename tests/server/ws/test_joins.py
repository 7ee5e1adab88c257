"""Segment joins on the real server: trimmed engine silence, punctuation pauses, joins
that start and end at zero, one loudness per context (espeak and the ChatTTS path)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from chattts_client import ContextResult

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from server.engines.base import SynthesisRequest, WordMarks
from server.engines.espeak import EspeakEngine
from streaming.audio import pcm16_to_float
from streaming.joins import JoinSettings, pause_ms_for
from tests.conftest import fixed_length_chattts
from tests.server.ws.test_stream import assert_complete, speak

pytestmark = pytest.mark.live

RATE = 24000
MS = RATE // 1000
TEXT = "今天天气很好。我们去公园散步吧？好的，那就走吧！路上小心；早点回来。"
# Per-segment level changes, standing in for ChatTTS's level drift between sentences
# (espeak itself speaks every sentence at one level).
GAINS = {"我们去公园散步吧": 0.35, "路上小心": 0.5, "早点回来": 1.5}


class DriftingEspeak(EspeakEngine):
    """The espeak voice with a fixed gain per sentence (see ``GAINS``)."""

    def synthesize(
        self, request: SynthesisRequest, should_stop: Callable[[], bool]
    ) -> Iterator[np.ndarray | WordMarks]:
        gain = next((g for key, g in GAINS.items() if key in request.text), 1.0)
        for chunk in super().synthesize(request, should_stop):
            yield chunk if isinstance(chunk, WordMarks) else (chunk * gain).astype(np.float32)


def _server(shape_joins: bool) -> Iterator[LiveServer]:
    settings = Settings(engine="espeak", shape_joins=shape_joins)
    with run_live_server(settings, engine=lambda: (DriftingEspeak(), False, None)) as server:
        yield server


@pytest.fixture(scope="module")
def shaped() -> Iterator[LiveServer]:
    yield from _server(True)


@pytest.fixture(scope="module")
def unshaped() -> Iterator[LiveServer]:
    yield from _server(False)


def per_segment(result: ContextResult) -> list[np.ndarray]:
    """Float audio of each segment, in segment order."""
    pieces: dict[int, list[bytes]] = {}
    for frame in result.frames:
        pieces.setdefault(frame.segment, []).append(frame.pcm)
    return [pcm16_to_float(b"".join(pieces.get(s["index"], []))) for s in result.segments]


def trailing_zeros(x: np.ndarray) -> int:
    nonzero = np.flatnonzero(x)
    return int(x.size - (nonzero[-1] + 1)) if nonzero.size else int(x.size)


def quiet_run_ms(x: np.ndarray, *, from_end: bool, threshold: float = 0.01) -> float:
    """Milliseconds before the first (or after the last) sample above ``threshold``."""
    loud = np.flatnonzero(np.abs(x) > threshold)
    if not loud.size:
        return x.size / MS
    return (x.size - 1 - loud[-1] if from_end else loud[0]) / MS


def assert_smooth_edges(body: np.ndarray) -> None:
    """Starts and ends at exactly zero; no step near either end larger than inside."""
    assert body.size > 0 and body[0] == 0.0 and body[-1] == 0.0
    edges = np.concatenate([body[: 3 * MS], body[-3 * MS :]])
    inside = body[3 * MS : -3 * MS]
    assert np.max(np.abs(np.diff(edges))) <= np.max(np.abs(np.diff(inside)))


def voiced_level_db(x: np.ndarray) -> float:
    """RMS in dBFS over the 10 ms blocks above -40 dBFS."""
    blocks = x[: x.size // 240 * 240].reshape(-1, 240).astype(np.float64)
    power = np.mean(blocks**2, axis=1)
    voiced = power[power > 1e-4]
    return float(10 * np.log10(np.mean(voiced)))


async def test_joins_trim_silence_pause_by_punctuation_and_start_at_zero(
    shaped: LiveServer, unshaped: LiveServer
) -> None:
    """Engine silence shrinks to a few ms, each segment is followed by its table pause of
    digital silence, and each starts and ends at zero with no step (espeak)."""
    result = await speak(shaped, TEXT, size=3)
    raw = await speak(unshaped, TEXT, size=3)
    assert_complete(result, TEXT)
    assert_complete(raw, TEXT)
    texts = [s["text"] for s in result.segments]
    assert texts == [
        "今天天气很好。",
        "我们去公园散步吧？",
        "好的，那就走吧！",
        "路上小心；",
        "早点回来。",
    ]
    s = JoinSettings()
    for text, audio, original in zip(texts, per_segment(result), per_segment(raw), strict=True):
        pause = round(pause_ms_for(text) * MS)
        # The pause, then at most the kept tail of engine silence that rounds to zero.
        assert pause <= trailing_zeros(audio) <= pause + (s.tail_keep_ms + s.block_ms) * MS, text
        body = audio[: audio.size - pause]
        assert_smooth_edges(body)
        # espeak's ~150 ms of trailing silence is gone; the lead keeps lead_keep_ms.
        assert quiet_run_ms(original, from_end=True) > 100
        assert quiet_run_ms(body, from_end=True) <= s.tail_keep_ms + 10
        assert quiet_run_ms(body, from_end=False) <= s.lead_keep_ms + 15


async def test_loudness_is_consistent_across_segments(
    shaped: LiveServer, unshaped: LiveServer
) -> None:
    """Segments made louder or softer by the engine come out within ~2 dB of each other,
    where the unshaped run spreads over ~12 dB (espeak with per-sentence gains)."""
    shaped_levels = [voiced_level_db(a) for a in per_segment(await speak(shaped, TEXT))]
    raw_levels = [voiced_level_db(a) for a in per_segment(await speak(unshaped, TEXT))]
    raw_spread = max(raw_levels) - min(raw_levels)
    spread = max(shaped_levels) - min(shaped_levels)
    assert raw_spread > 10
    assert spread < 3, shaped_levels


def test_http_has_pauses_between_segments_but_none_at_the_end(shaped: LiveServer) -> None:
    """POST /v1/tts joins its segments like the stream, without a pause after the last."""
    response = httpx.post(
        shaped.base_url + "/v1/tts",
        json={"text": "你好。再见。", "format": "pcm"},
        timeout=TIMEOUT_S,
    )
    assert response.status_code == 200
    audio = pcm16_to_float(response.content)
    s = JoinSettings()
    assert trailing_zeros(audio) <= (s.tail_keep_ms + s.block_ms) * MS
    zero = np.concatenate([[False], audio == 0.0, [False]]).astype(np.int8)
    starts, ends = np.flatnonzero(np.diff(zero) == 1), np.flatnonzero(np.diff(zero) == -1)
    assert max(ends - starts) >= round(pause_ms_for("你好。") * MS)


# --- the real ChatTTS code path on the generated tiny checkpoint ----------------------


@pytest.fixture(scope="module")
def chattts_server(tiny_checkpoint: Path) -> Iterator[LiveServer]:
    factory = fixed_length_chattts(tiny_checkpoint)
    settings = Settings(engine="chattts", model_dir=tiny_checkpoint, warm_up=False)
    with run_live_server(settings, engine=factory) as server:
        yield server


async def test_chattts_segments_join_at_zero_with_pauses(chattts_server: LiveServer) -> None:
    """On the ChatTTS path each segment starts and ends at zero and is followed by its pause."""
    text = "你好，世界。再见！"
    result = await speak(chattts_server, text, size=len(text))
    assert_complete(result, text)
    for segment, audio in zip(result.segments, per_segment(result), strict=True):
        pause = round(pause_ms_for(segment["text"]) * MS)
        assert trailing_zeros(audio) >= pause
        assert_smooth_edges(audio[: audio.size - pause])
