"""How often the server's threads hand each other the GIL.

The event loop and the engine thread share one interpreter lock. A thread that lets go
of it (the engine thread in every NumPy or PyTorch call on more than a few hundred
values, in every wait for the device or for its engine process) must take it back
afterwards, and a thread busy in Python (the event loop while streams open) gives it up
only when it has held it for the switch interval: Python's default is 5 ms. Each such
call in the engine thread then costs up to 5 ms beside a busy loop (a 5 us ``torch.add``
4.9-5.3 ms, bench/gil_convoy.py), its steps run late and first audio with them.

The server sets the interval to ``gil_switch_interval_ms`` (1 ms) before it serves.
Measured against Python's 5 ms in the same runs (docs/performance.md): the near-free
engine model carried 320-512 real-time streams against 256-320, the `gpu` preset the
same; 1,000 streams opening at once cost 0.99-1.07x the CPU, first audio's p50 1-13 ms
later (the loop gives the engine thread its turn more often). 0.5 ms carried less than
1 ms, 2 ms about the same.

The interval is the process's: an app whose lifespan runs in another program's process
(a test's ``TestClient``) sets it there too; harness.live's in-process servers leave it.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

from server.declaration import bound_problems, option

__all__ = ["GilSettings", "set_switch_interval"]

logger = logging.getLogger(__name__)

#: The shortest interval the server sets (ms); 0 leaves Python's.
MIN_INTERVAL_MS = 0.1


@dataclass(frozen=True)
class GilSettings:
    """How the server's threads share the interpreter lock."""

    gil_switch_interval_ms: float = option(
        1.0,
        "a thread busy in Python hands the interpreter lock to one waiting for it after this "
        "many ms (Python's default: 5): the engine thread waits for it after each NumPy or "
        "PyTorch call while the event loop is busy (0: Python's default left as it is; "
        "else 0.1 to 100)",
        group="server",
        ge=0,
        le=100,
    )

    def __post_init__(self) -> None:
        problems = bound_problems(self)
        if 0 < self.gil_switch_interval_ms < MIN_INTERVAL_MS:
            # Python rounds what it is given to whole microseconds: 0.0001 ms would be
            # 0, a switch asked at every chance.
            problems.append(
                f"gil_switch_interval_ms must be 0 (Python's default) or at least "
                f"{MIN_INTERVAL_MS:g}"
            )
        if problems:
            raise ValueError("; ".join(problems))


def set_switch_interval(settings: GilSettings) -> bool:
    """Set the process's switch interval (``sys.setswitchinterval``) from ``settings``;
    False (nothing done) when ``gil_switch_interval_ms`` is 0."""
    if not settings.gil_switch_interval_ms:
        return False
    sys.setswitchinterval(settings.gil_switch_interval_ms / 1000)
    logger.info(
        "threads hand over the interpreter lock every %g ms (Python's default: 5)",
        settings.gil_switch_interval_ms,
    )
    return True
