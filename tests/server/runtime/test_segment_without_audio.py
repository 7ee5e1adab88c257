"""A segment that makes no audio, or implausibly little for its text, never passes unseen:
made again once with a derived seed while none of it was sent, otherwise reported (a
warning on the WebSocket, a log line, a metric, and on HTTP a response header).

The cases are real: ChatTTS on the tiny random-weight checkpoint, where the sampling seed
decides when a segment ends (the seeds below were found by trying them). Sampling seed 1
ends "你好。" at once, and so does the seed derived from it; seed 17 ends it at once and
its derived seed does not; seed 5 ends a 25-character sentence after about 42 GPT
steps (0.89 s), past its first chunk (sent at 12 steps) and short of the 1.0 s its characters
need at 40 ms each.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from chattts_client import ContextResult, StreamClient

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from server.engines.base import VoiceSpec, derived_seed
from server.engines.chattts.settings import ChatTTSSettings
from server.engines.select import EngineFactory
from streaming.speech import SpeechSettings

#: Each run ends where ChatTTS samples its end, or at this many GPT steps (2 s).
MAX_STEPS = 96
SHORT = "你好。"
LONG = "今天天气很好我们一起去公园散步吧然后再去图书馆看书。"  # 25 sounding characters
SILENT_TWICE, SILENT_ONCE, CUT_SHORT = 1, 17, 5


def ending_chattts(checkpoint: Path) -> EngineFactory:
    """ChatTTS on CPU, each segment as long as it samples (no minimum), at most MAX_STEPS."""

    def factory() -> tuple[object, bool, None]:
        from server.engines.chattts.engine import ChatTTSEngine

        options = ChatTTSSettings(device="cpu", max_new_token=MAX_STEPS, min_new_token=0)
        return ChatTTSEngine(checkpoint, options), False, None

    return factory  # type: ignore[return-value]


@pytest.fixture(scope="module")
def server(tiny_checkpoint: Path) -> Iterator[LiveServer]:
    settings = Settings(engine="chattts", model_dir=tiny_checkpoint)
    with run_live_server(settings, engine=ending_chattts(tiny_checkpoint)) as live:
        yield live


def counted(live: LiveServer, outcome: str) -> float:
    text = httpx.get(live.base_url + "/metrics", timeout=TIMEOUT_S).text
    found = re.search(
        rf'^tts_segments_without_audio_total{{outcome="{outcome}"}} (\S+)$', text, re.M
    )
    assert found, text[-2000:]
    return float(found.group(1))


async def spoken(live: LiveServer, text: str, seed: int) -> ContextResult:
    async with StreamClient.connect(live.ws_url) as tts:
        context = await tts.open(seed=seed)
        await tts.send_text(text, context)
        await tts.end(context)
        return await tts.collect(context, timeout_s=TIMEOUT_S)


def codes(result: ContextResult) -> list[str]:
    return [w["code"] for w in result.warnings if w["code"].startswith("segment_")]


def test_least_audio_counts_sounding_characters_at_the_speed() -> None:
    """40 ms per letter or digit of any script at speed 1, half at speed 2; punctuation
    and spaces count nothing; no audio is too little for any sounding text."""
    settings = SpeechSettings()
    assert settings.least_audio_s("你好，world 42。", 1.0) == pytest.approx(9 * 0.04)
    assert settings.least_audio_s("你好。", 2.0) == pytest.approx(0.04)
    assert settings.too_little_audio("你好。", 1.0, 0.079)
    assert not settings.too_little_audio("你好。", 1.0, 0.08)
    assert not settings.too_little_audio("……", 1.0, 0.0)
    only_empty = SpeechSettings(min_audio_ms_per_char=0)
    assert only_empty.too_little_audio("你好。", 1.0, 0.0)
    assert not only_empty.too_little_audio("你好。", 1.0, 0.001)


def test_a_retry_keeps_the_speaker_and_derives_its_seed() -> None:
    """The retry's sampling seed is a fixed function of the seed, never the seed itself,
    within the seed range; the speaker the first seed picked stays (speaker_seed)."""
    voice = VoiceSpec(seed=SILENT_ONCE, speed=1.5)
    again = voice.retry()
    assert again.seed == derived_seed(SILENT_ONCE) == VoiceSpec(seed=SILENT_ONCE).retry().seed
    assert again.seed != SILENT_ONCE and 0 <= again.seed < 2**31 - 1
    assert (again.speaker_key, again.speed) == (SILENT_ONCE, 1.5)
    assert again.retry().speaker_key == SILENT_ONCE  # a retried voice keeps it too
    assert len({derived_seed(s) for s in range(1000)}) == 1000


@pytest.mark.live
async def test_a_silent_first_try_is_made_again_and_said_so(server: LiveServer) -> None:
    """WebSocket, seed 17: the segment's first try makes no audio; it is made again with
    the seed derived from 17, a segment_retried warning names both seeds and the segment,
    and the context's audio is the retry's."""
    before = counted(server, "retried")
    result = await spoken(server, SHORT, SILENT_ONCE)
    assert result.errors == [] and result.done is not None
    (warning,) = [w for w in result.warnings if w["code"] == "segment_retried"]
    assert warning["segment"] == 0 and warning["context_id"] == result.context_id
    assert f"seed {SILENT_ONCE}" in warning["message"]
    assert f"seed {derived_seed(SILENT_ONCE)}" in warning["message"]
    assert "segment_without_audio" not in codes(result)
    assert len(result.pcm) // 2 > 0.5 * 24000  # the retry spoke
    assert counted(server, "retried") == before + 1


@pytest.mark.live
async def test_a_segment_silent_twice_is_reported(server: LiveServer) -> None:
    """WebSocket, seed 1: the first try and the retry both make no audio: segment_retried
    then segment_without_audio, both for segment 0, and the retry counted and reported."""
    retried, reported = counted(server, "retried"), counted(server, "reported")
    result = await spoken(server, SHORT, SILENT_TWICE)
    assert codes(result) == ["segment_retried", "segment_without_audio"]
    report = result.warnings[-1]
    assert (report["segment"], report["context_id"]) == (0, result.context_id)
    assert {"type", "context_id", "code", "message", "segment"} <= set(report)
    assert "no audio" in report["message"] and "retry" in report["message"]
    assert result.pcm == b"" and result.done is not None and result.errors == []
    assert (counted(server, "retried"), counted(server, "reported")) == (retried + 1, reported + 1)


@pytest.mark.live
async def test_a_segment_cut_short_once_audible_is_reported_not_retried(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    """WebSocket, seed 5, a 25-character sentence: it ends near 0.9 s after its first audio
    went out, short of 1.0 s: reported as segment_without_audio with both figures, not
    made again, and logged at WARNING."""
    before = counted(server, "reported")
    with caplog.at_level(logging.WARNING, logger="server.runtime.synthesizer"):
        result = await spoken(server, LONG, CUT_SHORT)
    assert codes(result) == ["segment_without_audio"]
    message = result.warnings[-1]["message"]
    assert re.search(r"only 0\.8\d s of audio \(at least 1\.00 s expected", message), message
    assert "not made again" in message
    assert len(result.pcm) // 2 > 0.8 * 24000  # what was made, sent (and its pause)
    assert counted(server, "reported") == before + 1
    assert any(r.getMessage() == message for r in caplog.records)


@pytest.mark.live
def test_http_says_which_segments_were_retried_or_came_out_empty(server: LiveServer) -> None:
    """/v1/tts, whole file: seed 17 answers 200 with its retried segment and seed in
    X-TTS-Retried-Segments and the retry's audio; seed 1 answers 200 with the segment in
    X-TTS-Segments-Without-Audio too, and no audio; streamed, seed 1 is 500
    synthesis_failed (nothing to send, the engine's fault); a plausible seed has neither
    header."""
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT_S) as http:
        once = http.post("/v1/tts", json={"text": SHORT, "seed": SILENT_ONCE, "format": "pcm"})
        assert once.status_code == 200, once.text
        assert once.headers["X-TTS-Retried-Segments"] == f"0:{derived_seed(SILENT_ONCE)}"
        assert "X-TTS-Segments-Without-Audio" not in once.headers
        assert len(once.content) // 2 > 0.5 * 24000
        twice = http.post("/v1/tts", json={"text": SHORT, "seed": SILENT_TWICE, "format": "pcm"})
        assert twice.status_code == 200, twice.text
        assert twice.headers["X-TTS-Retried-Segments"] == f"0:{derived_seed(SILENT_TWICE)}"
        assert twice.headers["X-TTS-Segments-Without-Audio"] == "0"
        assert twice.content == b""
        body = {"text": SHORT, "seed": SILENT_TWICE, "format": "pcm", "stream": True}
        streamed = http.post("/v1/tts", json=body)
        assert streamed.status_code == 500, streamed.text
        assert streamed.json()["error"]["code"] == "synthesis_failed"
        fine = http.post("/v1/tts", json={"text": SHORT, "seed": 3, "format": "pcm"})
        assert fine.status_code == 200 and fine.content
        assert not {"X-TTS-Retried-Segments", "X-TTS-Segments-Without-Audio"} & set(fine.headers)


@pytest.mark.live
def test_openai_speech_sends_the_retry_in_its_headers(server: LiveServer) -> None:
    """/v1/audio/speech in a voice whose own seed is 17 (streamed: the headers go with the
    first audio, after the retry): X-TTS-Retried-Segments names segment 0 and the derived
    seed, and the audio is the retry's."""
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT_S) as http:
        made = http.post("/v1/voices", json={"name": "quiet17", "speaker_seed": 4,
                                             "seed": SILENT_ONCE})  # fmt: skip
        assert made.status_code == 201, made.text
        body = {"model": "tts-1", "input": SHORT, "voice": "quiet17", "response_format": "pcm"}
        answer = http.post("/v1/audio/speech", json=body)
        assert answer.status_code == 200, answer.text
        assert answer.headers["X-TTS-Retried-Segments"] == f"0:{derived_seed(SILENT_ONCE)}"
        samples = np.frombuffer(answer.content, "<i2")
        assert samples.size > 0.5 * 24000 and np.abs(samples).max() > 0
