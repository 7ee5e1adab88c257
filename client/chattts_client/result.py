"""What the server sent for one context, collected (:meth:`StreamClient.collect`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chattts_client.errors import error_from_event
from chattts_client.timestamps import spoken_so_far
from chattts_client.wire import ONE_BYTE_ENCODINGS, AudioFrame, Event

__all__ = ["ContextResult", "record"]


@dataclass
class ContextResult:
    """Everything the server sent for one context, up to and including ``done``."""

    context_id: str
    started: dict[str, Any] | None = None
    segments: list[dict[str, Any]] = field(default_factory=list)
    frames: list[AudioFrame] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    done: dict[str, Any] | None = None
    #: ``timestamps`` events (contexts started with ``timestamps=True``), in order.
    timestamps: list[dict[str, Any]] = field(default_factory=list)
    #: The client's ``resumed`` events: where the context continued on another server.
    resumed: list[dict[str, Any]] = field(default_factory=list)

    def raise_for_error(self) -> None:
        """Raise the first ``error`` the server sent for this context (or for the
        connection, while collecting) as its typed exception (:class:`ContextError` for a
        failed segment, :class:`RequestError` for a refused message); nothing if none."""
        if self.errors:
            raise error_from_event(self.errors[0])

    def spoken_by(self, heard_ms: float) -> str:
        """The text the listener heard by ``heard_ms`` of this context's audio (see
        :func:`chattts_client.spoken_so_far`)."""
        return spoken_so_far(self.timestamps, heard_ms)

    @property
    def encoding(self) -> str:
        """The bytes of :attr:`pcm`, as ``started`` said (``pcm_s16le`` by default)."""
        return str((self.started or {}).get("encoding") or "pcm_s16le")

    @property
    def pcm(self) -> bytes:
        """The context's audio in its :attr:`encoding`."""
        return b"".join(f.pcm for f in self.frames)

    @property
    def samples(self) -> int:
        width = 1 if self.encoding in ONE_BYTE_ENCODINGS else 2
        return sum(len(f.pcm) for f in self.frames) // width


def record(result: ContextResult, event: Event) -> None:
    if isinstance(event, AudioFrame):
        result.frames.append(event)
        return
    kind = event.get("type")
    if kind == "started":
        result.started = event
    elif kind == "segment":
        result.segments.append(event)
    elif kind == "warning":
        result.warnings.append(event)
    elif kind == "error":
        result.errors.append(event)
    elif kind == "timestamps":
        result.timestamps.append(event)
    elif kind == "resumed":
        result.resumed.append(event)
    elif kind == "done":
        result.done = event
