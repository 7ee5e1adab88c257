"""The stall clock of the engine thread: has it moved while work waited for it?

The engine thread marks :meth:`Watchdog.progress` after every round, step, prefill and
call; the event loop asks :meth:`Watchdog.verdict` every second or so. A thread that made
no progress for ``limit_s`` while work was in flight is stalled (stuck in a native
library, deadlocked); it has recovered once it marks progress again, whatever became of
the work it held.
"""

from __future__ import annotations

import time

__all__ = ["Watchdog"]


class Watchdog:
    """See the module docstring; ``limit_s`` 0 turns it off."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self._progress_at = time.monotonic()
        self._stalled_at: float | None = None  # the last progress mark when it stalled

    def progress(self) -> None:
        """The engine thread moved (engine thread; a float store, no lock needed)."""
        self._progress_at = time.monotonic()

    def work_arrived(self) -> None:
        """Work came to an idle engine: the clock starts now, not at its last round."""
        if self._stalled_at is None:
            self._progress_at = time.monotonic()

    @property
    def stalled(self) -> bool:
        return self._stalled_at is not None

    def silent_s(self) -> float:
        """Seconds since the engine thread last moved."""
        return time.monotonic() - self._progress_at

    def verdict(self, *, busy: bool) -> str | None:
        """ "stalled" when the thread just crossed the limit with work in flight,
        "recovered" when a stalled thread moved again, else None."""
        if self.limit_s <= 0:
            return None
        if self._stalled_at is not None:
            if self._progress_at != self._stalled_at:
                self._stalled_at = None
                return "recovered"
            return None
        if busy and self.silent_s() >= self.limit_s:
            self._stalled_at = self._progress_at
            return "stalled"
        return None
