"""An engine that does not batch, stepped in time slices (``--interleave-slice-ms``):
audio an engine has ready goes over in one step, a chunk that costs more than the slice
still takes a step of its own, and what the listener gets is the same either way."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from harness.bench_server import sample_value
from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from server.engines.base import SynthesisRequest, VoiceSpec
from server.engines.espeak import EspeakEngine
from server.engines.interleave import Interleaver
from server.runtime.phrase_cache import PhraseCacheSettings
from server.scheduling import SchedulingSettings
from tests.scripted_engine import ScriptedEngine

TEXT = "你好，欢迎使用流式语音合成。今天的天气很好，我们出去走走吧。"


def steps_to_end(interleaver: Interleaver, request: SynthesisRequest) -> tuple[int, int]:
    """(steps, audio samples) until the row is done."""
    row = interleaver.open(request)
    interleaver.prefill(row)
    steps = samples = 0
    while not row.done:
        assert row.error is None
        interleaver.step([row])
        steps += 1
        samples += sum(chunk.size for chunk in row.chunks if hasattr(chunk, "size"))
        row.chunks.clear()
    interleaver.close(row)
    return steps, samples


def test_espeak_hands_a_segment_over_in_two_steps_not_one_per_chunk() -> None:
    """espeak makes the segment whole at its first chunk: with a slice, the rest of it
    follows in one step; without, each 100 ms chunk is a step of its own."""
    engine = EspeakEngine()
    try:
        request = SynthesisRequest("欢迎使用流式语音合成，今天的天气很好。", VoiceSpec(seed=3))
        sliced, audio = steps_to_end(Interleaver(engine, slice_s=0.05), request)
        one_by_one, same_audio = steps_to_end(Interleaver(engine), request)
    finally:
        engine.close()
    chunks = -(-audio // engine.chunk_samples)
    assert chunks >= 15  # seconds of audio, in 100 ms chunks
    assert same_audio == audio
    assert sliced <= 3  # the synthesis, the rest (and the generator's end, if on its own)
    assert one_by_one >= chunks


def test_a_chunk_dearer_than_the_slice_takes_a_step_of_its_own() -> None:
    """A generator whose every chunk costs 5 ms gives one chunk a step with a 1 ms slice,
    so the rows beside it keep their turns; chunks made at once all come in one step."""
    slow = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.005, ms_per_char=100)
    request = SynthesisRequest("一二三四五六", VoiceSpec(seed=1))  # 600 ms: 6 chunks
    steps, samples = steps_to_end(Interleaver(slow, slice_s=0.001), request)
    assert samples == 24000 * 6 // 10
    assert steps >= 6
    free = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.0, ms_per_char=100)
    # A slice no stall of a loaded machine uses up: the free chunks all come in one step.
    assert steps_to_end(Interleaver(free, slice_s=10.0), request) == (1, samples)


def test_a_step_stops_at_a_cancel_even_when_the_engine_does_not_look() -> None:
    """The step itself asks ``should_stop`` between chunks: a cancelled row gets no more
    of its segment in that step, whatever its generator does."""

    class Heedless(ScriptedEngine):
        def synthesize(self, request, should_stop):  # type: ignore[no-untyped-def]
            return super().synthesize(request, lambda: False)

    interleaver = Interleaver(Heedless(chunk_delay_s=0.0), slice_s=10.0)
    row = interleaver.open(SynthesisRequest("一二三四五六七八", VoiceSpec(seed=1)))
    stop = False
    row.should_stop = lambda: stop
    interleaver.prefill(row)
    interleaver.step([row])
    assert len(row.chunks) == 8  # all of it, at once, while nobody cancels
    row = interleaver.open(SynthesisRequest("一二三四五六七八", VoiceSpec(seed=1)))
    row.should_stop = lambda: stop
    interleaver.prefill(row)
    stop = True
    interleaver.step([row])
    assert len(row.chunks) == 1


def test_a_negative_slice_is_refused() -> None:
    with pytest.raises(ValueError, match="slice_s"):
        Interleaver(ScriptedEngine(), slice_s=-0.001)


# -- through a real server -------------------------------------------------------------


def _serve(**changes: object) -> Iterator[LiveServer]:
    settings = Settings(
        engine="espeak", phrase_cache=PhraseCacheSettings(phrase_cache_mb=0), **changes
    )  # type: ignore[arg-type]
    with run_live_server(settings) as server:
        yield server


@pytest.fixture(scope="module")
def sliced() -> Iterator[LiveServer]:
    # The most the setting allows, so that no stall of a loaded machine (the server shares
    # this process's interpreter lock) splits a segment's ready audio over more steps.
    yield from _serve(scheduling=SchedulingSettings(interleave_slice_ms=100))


@pytest.fixture(scope="module")
def one_chunk_a_step() -> Iterator[LiveServer]:
    yield from _serve(scheduling=SchedulingSettings(interleave_slice_ms=0))


def engine_steps(server: LiveServer) -> float:
    page = httpx.get(server.base_url + "/metrics", timeout=TIMEOUT_S).text
    return sample_value(page, "tts_engine_steps_total")


def speak(server: LiveServer) -> tuple[bytes, float]:
    """A whole text's PCM from ``POST /v1/tts``, and the engine steps it took."""
    before = engine_steps(server)
    answer = httpx.post(
        server.base_url + "/v1/tts",
        json={"text": TEXT, "format": "pcm", "seed": 7},
        timeout=TIMEOUT_S * 4,
    )
    assert answer.status_code == 200, answer.text
    return answer.content, engine_steps(server) - before


@pytest.mark.live
def test_the_listener_hears_the_same_with_fewer_steps(
    sliced: LiveServer, one_chunk_a_step: LiveServer
) -> None:
    """A slice and none: the same PCM, sample for sample; with the slice each segment is a
    few steps (its synthesis, the rest of its audio), without it one step a 100 ms chunk."""
    audio, steps = speak(sliced)
    same, more_steps = speak(one_chunk_a_step)
    assert audio == same
    chunks = len(audio) // 2 / 2400  # 100 ms chunks at 24 kHz (pauses included: fewer)
    assert chunks > 40
    segments = len(Settings().speech.segments(TEXT))
    assert segments >= 2
    assert steps <= 3 * segments
    assert more_steps >= chunks * 0.7
