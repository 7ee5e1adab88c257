"""ChatTTSEngine on the tiny random-weight checkpoint: the real ChatTTS code path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from server.engines.base import Cancelled, Engine, SynthesisRequest, VoiceSpec
from server.engines.chattts.checkpoint import load_chat
from server.engines.chattts.engine import ChatTTSEngine, resolve_device, speed_prompt
from server.engines.chattts.settings import ChatTTSSettings

TEXT = "今天天气很好，我们一起去公园散步吧。"
#: Samples per GPT step: 2 mel frames of hop 256 at 24 kHz.
SAMPLES_PER_STEP = 512


def _never() -> bool:
    return False


def _run(
    engine: ChatTTSEngine, voice: VoiceSpec, should_stop: Callable[[], bool] = _never
) -> np.ndarray:
    chunks = list(engine.synthesize(SynthesisRequest(TEXT, voice), should_stop))
    return np.concatenate(chunks)


class _StopAfterCalls:
    """A should_stop that turns true on its n-th call, counting calls."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls >= self.n


def test_is_an_engine(chattts_engine: ChatTTSEngine) -> None:
    """The engine satisfies the Engine protocol: name chattts, 24 kHz."""
    engine: Engine = chattts_engine
    assert engine.name == "chattts"
    assert engine.sample_rate_hz == 24_000


def test_yields_float32_mono_finite_chunks(chattts_engine: ChatTTSEngine) -> None:
    """Every chunk is non-empty finite float32 1-D audio; a fixed-length run has its length."""
    chunks = list(chattts_engine.synthesize(SynthesisRequest(TEXT, VoiceSpec(seed=1)), _never))
    assert len(chunks) >= 2
    for chunk in chunks:
        assert chunk.dtype == np.float32
        assert chunk.ndim == 1
        assert chunk.size > 0
        assert np.isfinite(chunk).all()
    total = sum(chunk.size for chunk in chunks)
    expected = chattts_engine.max_new_token * SAMPLES_PER_STEP
    assert expected - SAMPLES_PER_STEP <= total <= expected
    assert np.abs(np.concatenate(chunks)).max() > 0


def test_first_chunk_comes_after_one_stream_batch(tiny_checkpoint: Path) -> None:
    """ChatTTS's own stream, pass_first_n_batches 0: the first chunk holds ~stream_batch steps."""
    engine = ChatTTSEngine(
        tiny_checkpoint, ChatTTSSettings(device="cpu", decoder="chattts", max_new_token=72)
    )
    try:
        first = next(iter(engine.synthesize(SynthesisRequest(TEXT, VoiceSpec()), _never)))
    finally:
        engine.close()
    steps = engine.options.stream_batch
    assert (steps - 1) * SAMPLES_PER_STEP <= first.size <= steps * SAMPLES_PER_STEP


def test_first_chunk_comes_after_first_chunk_steps(chattts_engine: ChatTTSEngine) -> None:
    """Our decoder (the default) sends its first chunk after first_chunk_steps, not 24."""
    first = next(iter(chattts_engine.synthesize(SynthesisRequest(TEXT, VoiceSpec()), _never)))
    assert chattts_engine.options.decoder == "ours"
    assert 0 < first.size <= 12 * SAMPLES_PER_STEP


def test_same_seed_gives_identical_audio(chattts_engine: ChatTTSEngine) -> None:
    """The same seed gives bit-identical audio, whatever ran (and the global RNG) before."""
    first = _run(chattts_engine, VoiceSpec(seed=7))
    _run(chattts_engine, VoiceSpec(seed=8))
    torch.manual_seed(12345)
    assert np.array_equal(first, _run(chattts_engine, VoiceSpec(seed=7)))


def test_different_seed_gives_different_speaker(chattts_engine: ChatTTSEngine) -> None:
    """Different seeds sample different speakers, and a seed always samples the same one."""
    speaker_1 = chattts_engine.speaker(VoiceSpec(seed=1))
    assert speaker_1 != chattts_engine.speaker(VoiceSpec(seed=2))
    chattts_engine._speakers.clear()  # force a fresh sample, not a cache hit
    torch.manual_seed(999)
    assert chattts_engine.speaker(VoiceSpec(seed=1)) == speaker_1
    assert not np.array_equal(
        _run(chattts_engine, VoiceSpec(seed=1)), _run(chattts_engine, VoiceSpec(seed=2))
    )


def test_seed_speaker_is_what_synthesis_uses(chattts_engine: ChatTTSEngine) -> None:
    """A seed's speaker passed back as a voice string gives the very same audio."""
    speaker = chattts_engine.speaker(VoiceSpec(seed=3))
    assert np.array_equal(
        _run(chattts_engine, VoiceSpec(seed=3)),
        _run(chattts_engine, VoiceSpec(voice=speaker, seed=3)),
    )


def test_voice_string_is_honoured(chattts_engine: ChatTTSEngine, tiny_checkpoint: Path) -> None:
    """A sample_random_speaker() string is used as is and changes the audio."""
    voice = load_chat(tiny_checkpoint, device="cpu").sample_random_speaker()
    assert chattts_engine.speaker(VoiceSpec(voice=voice, seed=1)) == voice
    with_voice = _run(chattts_engine, VoiceSpec(voice=voice, seed=1))
    assert np.array_equal(with_voice, _run(chattts_engine, VoiceSpec(voice=voice, seed=1)))
    assert not np.array_equal(with_voice, _run(chattts_engine, VoiceSpec(seed=1)))


@pytest.mark.parametrize("voice", ["not a speaker", ""])
def test_foreign_voice_string_is_rejected(chattts_engine: ChatTTSEngine, voice: str) -> None:
    """A speaker string this model cannot use raises ValueError before any GPT work."""
    with pytest.raises(ValueError):
        _run(chattts_engine, VoiceSpec(voice=voice))


def test_should_stop_between_chunks_stops_early(chattts_engine: ChatTTSEngine) -> None:
    """Stopping after the first chunk raises Cancelled with less audio than a full run."""
    full = _run(chattts_engine, VoiceSpec(seed=1)).size
    received: list[np.ndarray] = []
    with pytest.raises(Cancelled):
        for chunk in chattts_engine.synthesize(
            SynthesisRequest(TEXT, VoiceSpec(seed=1)), lambda: bool(received)
        ):
            received.append(chunk)
    assert len(received) == 1
    assert 0 < received[0].size < full


def test_should_stop_reaches_the_gpt_loop(chattts_engine: ChatTTSEngine) -> None:
    """should_stop is polled at every GPT step, so a stop lands before the first chunk."""
    should_stop = _StopAfterCalls(5)
    chunks: list[np.ndarray] = []
    with pytest.raises(Cancelled):
        chunks.extend(
            chattts_engine.synthesize(SynthesisRequest(TEXT, VoiceSpec(seed=1)), should_stop)
        )
    assert chunks == []
    assert should_stop.calls == 5


def test_engine_is_reusable_after_stop_and_close(chattts_engine: ChatTTSEngine) -> None:
    """After a cancelled run and a caller-closed one, the next run equals a clean run."""
    clean = _run(chattts_engine, VoiceSpec(seed=4))
    with pytest.raises(Cancelled):
        _run(chattts_engine, VoiceSpec(seed=4), _StopAfterCalls(3))
    generator = chattts_engine.synthesize(SynthesisRequest(TEXT, VoiceSpec(seed=4)), _never)
    next(generator)
    generator.close()
    assert np.array_equal(clean, _run(chattts_engine, VoiceSpec(seed=4)))


@pytest.mark.parametrize(
    ("speed", "prompt"),
    [
        (1.0, "[speed_5]"),
        (1.2, "[speed_6]"),
        (0.8, "[speed_4]"),
        (0.5, "[speed_3]"),  # half rounds up
        (0.0, "[speed_0]"),
        (-1.0, "[speed_0]"),
        (1.7, "[speed_9]"),
        (3.0, "[speed_9]"),
    ],
)
def test_speed_maps_to_prompt(speed: float, prompt: str) -> None:
    """Speed factor s maps to [speed_N], N = clamp(round_half_up(5 s), 0, 9)."""
    assert speed_prompt(speed) == prompt


@pytest.mark.parametrize("speed", [float("nan"), float("inf")])
def test_non_finite_speed_is_rejected(speed: float) -> None:
    """A NaN or infinite speed raises ValueError rather than picking a level."""
    with pytest.raises(ValueError):
        speed_prompt(speed)


def test_speed_reaches_the_model(chattts_engine: ChatTTSEngine) -> None:
    """A different speed changes the prompt the GPT sees, hence the audio."""
    assert not np.array_equal(
        _run(chattts_engine, VoiceSpec(seed=1, speed=1.0)),
        _run(chattts_engine, VoiceSpec(seed=1, speed=2.0)),
    )


def test_close_makes_engine_unusable(tiny_checkpoint: Path) -> None:
    """After close() synthesis raises RuntimeError; closing twice is harmless."""
    engine = ChatTTSEngine(tiny_checkpoint, ChatTTSSettings(device="cpu", max_new_token=24))
    engine.close()
    engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        _run(engine, VoiceSpec())


def test_auto_device_is_cuda_only_when_available() -> None:
    """device="auto" resolves to cuda when torch sees a GPU, else cpu; others pass through."""
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cuda:1") == "cuda:1"
