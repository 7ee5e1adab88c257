"""The modelled engine's tone: a table lookup that gives the sine it stands for."""

import numpy as np
import pytest

from server.engines.modelled import ModelledEngine


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
