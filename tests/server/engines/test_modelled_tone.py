"""The modelled engine's tone: a table lookup that gives the sine it stands for."""

import numpy as np
import pytest

from server.engines.modelled import ModelledEngine


def _lookup(first_step: int, steps: int, seed: int) -> np.ndarray:
    """The lookup a row as the model made it before its rows were looked up together."""
    freq_hz = 200 + seed % 300
    start = first_step * 512 * freq_hz
    phase = np.arange(start, start + steps * 512 * freq_hz, freq_hz, dtype=np.int64)
    np.remainder(phase, 24_000, out=phase)
    return ModelledEngine._cycle.take(phase)


def _sine(first_step: int, steps: int, seed: int) -> np.ndarray:
    n = np.arange(first_step * 512, (first_step + steps) * 512)
    return 0.3 * np.sin(2 * np.pi * (200 + seed % 300) * n / 24_000)


@pytest.mark.parametrize("seed", [0, 1, 147, 299, 1234])
@pytest.mark.parametrize(("first_step", "steps"), [(0, 1), (3, 12), (999, 96), (0, 322)])
def test_tone_is_the_seeds_sine(seed: int, first_step: int, steps: int) -> None:
    engine = ModelledEngine(step_a_s=0.001, step_b_s=0.0)
    tone = engine._tone(first_step, steps, seed)
    assert tone.dtype == np.float32
    np.testing.assert_allclose(tone, _sine(first_step, steps, seed), atol=1e-6)


def test_chunks_of_a_tone_join_into_the_whole() -> None:
    engine = ModelledEngine(step_a_s=0.001, step_b_s=0.0)
    chunks = [engine._tone(first, size, 7) for first, size in ((0, 12), (12, 24), (36, 48))]
    np.testing.assert_array_equal(np.concatenate(chunks), engine._tone(0, 84, 7))


def test_a_steps_chunks_made_together_are_each_rows_own_tone() -> None:
    """The rows due in one step get their chunks from one lookup (_tones): each is the
    tone that row alone would get, whatever the others' seeds, places and sizes."""
    engine = ModelledEngine(step_a_s=0.001, step_b_s=0.0)
    asked = [(0, 12, 3), (12, 24, 3), (999, 96, 1234), (5, 1, 0), (40, 48, 77)]
    together = engine._tones(asked)
    assert [chunk.size for chunk in together] == [steps * 512 for _, steps, _ in asked]
    for chunk, (first, steps, seed) in zip(together, asked, strict=True):
        np.testing.assert_array_equal(chunk, _lookup(first, steps, seed))  # to the bit
        np.testing.assert_allclose(chunk, _sine(first, steps, seed), atol=1e-6)
    assert engine._tones([]) == []


def test_chunks_anywhere_in_a_tone_are_its_lookup_to_the_bit() -> None:
    """Chunks are slices of each frequency's tone (made once): wherever a chunk starts
    in its tone's period, however long up to the schedule's longest chunk, and past it
    (worked out instead), its samples are the per-row lookup's, to the bit; a step's
    chunks are views of one array (one copy out, as a device's to the host)."""
    rng = np.random.default_rng(5)
    engine = ModelledEngine(step_a_s=0.001, step_b_s=0.0)
    longest = engine.schedule.max_steps
    asked = [
        (int(rng.integers(0, 20_000)), int(rng.integers(1, longest + 1)), int(rng.integers(0, 900)))
        for _ in range(60)
    ] + [(7, longest, 499), (0, longest + 1, 13), (123, 400, 77)]
    together = engine._tones(asked)
    for chunk, (first, steps, seed) in zip(together, asked, strict=True):
        np.testing.assert_array_equal(chunk, _lookup(first, steps, seed))
    base = together[0].base
    assert base is not None and all(chunk.base is base for chunk in together)
    assert len(engine._banks) <= 300
    assert all(bank.size <= 24_000 + longest * 512 for bank in engine._banks.values())
