"""Chunk-size schedule: small first chunk, geometric growth, a cap, exact coverage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.chunking import ChunkSchedule


@pytest.mark.parametrize(
    ("schedule", "sizes"),
    [
        (ChunkSchedule(12, 2.0, 96), [12, 24, 48, 96, 96, 96]),
        (ChunkSchedule(8, 1.5, 40), [8, 12, 18, 27, 40, 40]),
        (ChunkSchedule(16, 1.0, 16), [16, 16, 16, 16, 16, 16]),
        (ChunkSchedule(1, 1.1, 4), [1, 2, 3, 4, 4, 4]),  # always grows by at least one
    ],
)
def test_sizes(schedule: ChunkSchedule, sizes: list[int]) -> None:
    """Chunk i has min(max, first * growth^i) steps, growing by at least one step."""
    assert [schedule.size(i) for i in range(len(sizes))] == sizes


def test_boundaries_table() -> None:
    """Boundaries are cumulative chunk ends, the last clipped to the utterance length."""
    schedule = ChunkSchedule(12, 2.0, 96)
    assert schedule.boundaries(0) == []
    assert schedule.boundaries(5) == [5]
    assert schedule.boundaries(72) == [12, 36, 72]
    assert schedule.boundaries(300) == [12, 36, 84, 180, 276, 300]


@given(
    first=st.integers(1, 50),
    growth=st.floats(1.0, 4.0),
    extra=st.integers(0, 200),
    total=st.integers(0, 3000),
)
def test_boundaries_cover_every_step_once(
    first: int, growth: float, extra: int, total: int
) -> None:
    """Boundaries strictly increase, end at total, and no chunk exceeds max_steps."""
    schedule = ChunkSchedule(first, growth, first + extra)
    ends = schedule.boundaries(total)
    assert ends == sorted(set(ends))
    assert (ends[-1] if ends else 0) == total
    sizes = [b - a for a, b in zip([0, *ends], ends, strict=False)]
    assert all(0 < s <= schedule.max_steps for s in sizes)


@pytest.mark.parametrize(
    "kwargs", [{"first_steps": 0}, {"growth": 0.5}, {"first_steps": 10, "max_steps": 5}]
)
def test_bad_schedules_are_rejected(kwargs: dict[str, float]) -> None:
    """A zero first chunk, shrinking growth or a cap below the first chunk raise ValueError."""
    with pytest.raises(ValueError):
        ChunkSchedule(**kwargs)  # type: ignore[arg-type]
