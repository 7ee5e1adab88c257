"""How many GPT steps each streamed chunk holds: small first, then growing.

The first chunk is short so audio starts early; later chunks grow geometrically up to
a cap, because each chunk costs a fixed amount of re-decoded context (see
:mod:`streaming.crossfade`), and bigger chunks spread it over more audio.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ChunkSchedule"]


@dataclass(frozen=True)
class ChunkSchedule:
    """Chunk ``i`` holds ``min(max_steps, round(first_steps * growth ** i))`` GPT steps."""

    first_steps: int = 12
    growth: float = 2.0
    max_steps: int = 96

    def __post_init__(self) -> None:
        if self.first_steps < 1:
            raise ValueError(f"first_steps must be >= 1, not {self.first_steps}")
        if self.growth < 1.0:
            raise ValueError(f"growth must be >= 1, not {self.growth}")
        if self.max_steps < self.first_steps:
            raise ValueError("max_steps must be >= first_steps")

    def size(self, index: int) -> int:
        """Steps in chunk ``index`` (0-based)."""
        if index < 0:
            raise ValueError(f"index must be >= 0, not {index}")
        size = self.first_steps
        for _ in range(index):
            if size >= self.max_steps or self.growth == 1.0:
                break
            size = self._grow(size)
        return size

    def _grow(self, size: int) -> int:
        if self.growth == 1.0:
            return size
        # At least one step more, so a growth just above 1 still grows.
        return min(self.max_steps, max(size + 1, round(size * self.growth)))

    def boundaries(self, total_steps: int) -> list[int]:
        """Cumulative step counts at which chunks end, for an utterance of ``total_steps``.

        The last boundary is ``total_steps`` itself (the last chunk may be short).
        """
        if total_steps < 0:
            raise ValueError(f"total_steps must be >= 0, not {total_steps}")
        ends: list[int] = []
        end = 0
        size = self.first_steps
        while end < total_steps:
            end = min(total_steps, end + size)
            ends.append(end)
            size = self._grow(size)
        return ends
