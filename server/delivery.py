"""How audio frames are sent to a client (docs/settings.md, group audio)."""

from __future__ import annotations

from dataclasses import dataclass

from server.declaration import bound_problems, option

__all__ = ["DeliverySettings"]


@dataclass(frozen=True)
class DeliverySettings:
    """How a context's frames leave (streaming.utterance.UtteranceState.heard)."""

    max_frame_ms: int = option(
        1000,
        "frames ready at the same moment (the engine ahead of the listener) are sent as one, "
        "up to this long and never longer than the audio the listener already has ahead of "
        "its playback; a context's own frame_ms is never joined (0: frames as made, "
        "--frame-ms long)",
        group="audio",
        ge=0,
        zero=" (0: frames as made)",
    )

    def __post_init__(self) -> None:
        problems = bound_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
