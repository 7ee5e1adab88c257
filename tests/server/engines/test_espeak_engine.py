from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from server.engines.base import SynthesisRequest, VoiceSpec, audio_only
from server.engines.espeak import EspeakEngine, EspeakError, rate_for_speed, voice_for_seed

# 22 Hanzi and two punctuation marks.
SENTENCE = "今天天气很好，我们一起去公园散步吧。"
OTHER_SENTENCE = "明天可能会下雨，出门记得带伞。"


def never() -> bool:
    return False


def speak(
    engine: EspeakEngine,
    text: str = SENTENCE,
    *,
    seed: int = 0,
    speed: float = 1.0,
    should_stop: Callable[[], bool] = never,
) -> np.ndarray:
    request = SynthesisRequest(text, VoiceSpec(seed=seed, speed=speed))
    chunks = list(audio_only(engine.synthesize(request, should_stop)))
    return np.concatenate(chunks) if chunks else np.zeros(0, np.float32)


@pytest.fixture(scope="module")
def engine() -> EspeakEngine:
    engine = EspeakEngine()
    engine.warm_up()
    return engine


def test_available() -> None:
    """The libespeak-ng shipped by espeakng-loader loads and initialises."""
    assert EspeakEngine.available()


def test_chunks_are_float32_100ms_at_24khz(engine: EspeakEngine) -> None:
    """Chunks are 1-D float32 at 24 kHz, 100 ms each but the last."""
    assert (engine.name, engine.sample_rate_hz) == ("espeak", 24_000)
    chunks = list(audio_only(engine.synthesize(SynthesisRequest(SENTENCE, VoiceSpec()), never)))
    assert len(chunks) > 1
    assert all(c.dtype == np.float32 and c.ndim == 1 for c in chunks)
    assert all(len(c) == 2_400 for c in chunks[:-1])
    assert 0 < len(chunks[-1]) <= 2_400


def test_duration_is_plausible_for_text_length(engine: EspeakEngine) -> None:
    """Mandarin at the normal rate: 0.15-0.45 s per character (spelling Hanzi out is ~1 s)."""
    seconds = len(speak(engine)) / engine.sample_rate_hz
    assert 0.15 * len(SENTENCE) <= seconds <= 0.45 * len(SENTENCE)


def test_audio_is_not_silent(engine: EspeakEngine) -> None:
    """Speech has real energy, and stays within full scale (allowing filter overshoot)."""
    audio = speak(engine)
    assert float(np.sqrt(np.mean(audio**2))) > 0.03
    assert float(np.max(np.abs(audio))) < 1.05


def test_different_text_gives_different_audio(engine: EspeakEngine) -> None:
    """Two sentences do not come out as the same samples."""
    first, second = speak(engine, SENTENCE), speak(engine, OTHER_SENTENCE)
    shortest = min(len(first), len(second))
    assert not np.allclose(first[:shortest], second[:shortest], atol=1e-3)


def test_speed_two_is_clearly_shorter(engine: EspeakEngine) -> None:
    """Speed 2.0 speaks the same text in well under two thirds of the time of speed 1.0."""
    assert len(speak(engine, speed=2.0)) < 0.65 * len(speak(engine, speed=1.0))


def voice_distance_db(first: np.ndarray, second: np.ndarray) -> float:
    """RMS difference of the long-term average log spectra below 9.4 kHz, in dB."""

    def profile(audio: np.ndarray) -> np.ndarray:
        frames = np.lib.stride_tricks.sliding_window_view(audio, 1024)[::512] * np.hanning(1024)
        power = np.mean(np.abs(np.fft.rfft(frames, axis=1)) ** 2, axis=0)[:400]
        return 10 * np.log10(power + 1e-12)

    return float(np.sqrt(np.mean((profile(first) - profile(second)) ** 2)))


def assert_same_voice(audio: np.ndarray, reference: np.ndarray) -> None:
    # A repeat is bit-exact (see EspeakEngine); a voice is still compared by its spectrum.
    assert len(audio) == pytest.approx(len(reference), rel=0.01)
    assert voice_distance_db(audio, reference) < 1.5


def test_same_seed_gives_same_samples_whatever_ran_before(engine: EspeakEngine) -> None:
    """A fixed seed is deterministic: the same samples on alternate calls, with other
    voices, speeds and texts in between (libespeak-ng's carried-over state was why
    repeats used to differ)."""
    first = speak(engine, seed=7)
    speak(engine, seed=3, speed=1.5)
    second = speak(engine, seed=7)
    speak(engine, seed=7)
    third = speak(engine, seed=7)
    assert np.array_equal(first, second) and np.array_equal(second, third)


def test_different_seeds_give_different_voices(engine: EspeakEngine) -> None:
    """Seeds that pick another variant change the spectral envelope (measured 2.6-4.9 dB)."""
    reference = speak(engine, seed=0)
    for seed in (1, 6, 7):
        assert voice_distance_db(speak(engine, seed=seed), reference) > 2.0


def test_should_stop_ends_synthesis_between_chunks(engine: EspeakEngine) -> None:
    """Once should_stop turns true, no further chunk is yielded."""
    stop = threading.Event()
    chunks = []
    for chunk in audio_only(
        engine.synthesize(SynthesisRequest(SENTENCE, VoiceSpec()), stop.is_set)
    ):
        chunks.append(chunk)
        stop.set()
    assert len(chunks) == 1


def test_should_stop_before_start_yields_nothing(engine: EspeakEngine) -> None:
    """A request cancelled before it starts yields no audio."""
    assert len(speak(engine, should_stop=lambda: True)) == 0


@pytest.mark.parametrize("text", ["", " \n"])
def test_empty_text_yields_no_audio(engine: EspeakEngine, text: str) -> None:
    """Blank text is not an error and produces no samples."""
    assert len(speak(engine, text)) == 0


def test_works_from_threads_one_after_another(engine: EspeakEngine) -> None:
    """Engines on other threads, one after another, speak like one on this thread."""
    reference = speak(engine, seed=4)
    results: list[np.ndarray] = []
    for _ in range(2):
        thread = threading.Thread(target=lambda: results.append(speak(EspeakEngine(), seed=4)))
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive()
    assert len(results) == 2
    for result in results:
        assert_same_voice(result, reference)


def test_concurrent_engines_are_serialised(engine: EspeakEngine) -> None:
    """Engines on four threads at once each get their own whole utterances, uncorrupted."""
    seeds = (0, 1, 6, 7)
    expected = {seed: speak(engine, OTHER_SENTENCE, seed=seed) for seed in seeds}
    results: dict[int, list[np.ndarray]] = {}
    start = threading.Barrier(len(seeds))

    def worker(seed: int) -> None:
        own = EspeakEngine()
        start.wait(timeout=30)
        results[seed] = [speak(own, OTHER_SENTENCE, seed=seed) for _ in range(3)]

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in seeds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(results) == sorted(seeds)
    for seed, utterances in results.items():
        for audio in utterances:
            assert_same_voice(audio, expected[seed])


def test_closed_engine_refuses_requests() -> None:
    """After close() the engine raises instead of speaking."""
    engine = EspeakEngine()
    engine.close()
    with pytest.raises(EspeakError, match="closed"):
        speak(engine)


@pytest.mark.parametrize(
    ("seed", "voice"),
    [
        (0, ("cmn", 50)),
        (1, ("cmn+m1", 50)),
        (6, ("cmn+f1", 50)),
        (10, ("cmn", 40)),
        (23, ("cmn+m3", 60)),
        (50, ("cmn", 50)),
        (-1, ("cmn+f4", 70)),
    ],
)
def test_voice_for_seed(seed: int, voice: tuple[str, int]) -> None:
    """seed % 10 picks the variant, (seed // 10) % 5 the pitch offset."""
    assert voice_for_seed(seed) == voice


@pytest.mark.parametrize(
    ("speed", "rate_wpm"), [(1.0, 175), (2.0, 350), (0.8, 140), (10.0, 450), (0.1, 80)]
)
def test_rate_for_speed(speed: float, rate_wpm: int) -> None:
    """Speed scales espeak's 175 wpm, clamped to its 80-450 wpm range."""
    assert rate_for_speed(speed) == rate_wpm


@pytest.mark.parametrize("speed", [0.0, -1.0, float("nan"), float("inf")])
def test_rate_for_speed_rejects_nonsense(speed: float) -> None:
    """A speed that is not a positive finite number is an error."""
    with pytest.raises(ValueError, match="speed"):
        rate_for_speed(speed)


def test_control_tags_are_not_read_aloud() -> None:
    """ChatTTS control tags are stripped: the tagged text sounds exactly like the bare text."""
    engine = EspeakEngine()
    voice = VoiceSpec(seed=0)
    tagged = b"".join(
        c.tobytes()
        for c in audio_only(
            engine.synthesize(SynthesisRequest("你好[uv_break]世界[laugh]。", voice), lambda: False)
        )
    )
    bare = b"".join(
        c.tobytes()
        for c in audio_only(engine.synthesize(SynthesisRequest("你好世界。", voice), lambda: False))
    )
    assert abs(len(tagged) - len(bare)) < 0.05 * len(bare)


def test_the_library_helper_does_not_grow_with_each_synthesis(engine: EspeakEngine) -> None:
    """Each synthesis runs in a fork of the helper, which itself never synthesises: its
    memory stays flat (loading and unloading the library per synthesis leaked 15-180 KB
    a time)."""
    from server.engines import espeak

    speak(engine, seed=1)
    helper = espeak._helper
    assert helper is not None and helper.alive

    def rss_kb() -> int:
        status = Path(f"/proc/{helper._process.pid}/status").read_text()
        return int(
            next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS"))
        )

    before = rss_kb()
    for _ in range(60):
        speak(engine, seed=5)
    assert rss_kb() - before < 1024
