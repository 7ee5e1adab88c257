"""A caller's context and the server contexts that speak it, one after another.

A :class:`Track` is one context as the caller opened it: its text lives in a
:class:`~chattts_client.ledger.ContextLedger`. Each :class:`ServerContext` is one
context on one server (a "leg") speaking that text from some character on; the first of
a track's is the one heard now, a later one waits (its events held) until the first's
``done``. Text goes to the newest leg as its server can hold it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from websockets.exceptions import ConnectionClosed

from chattts_client.ledger import ContextLedger, Part
from chattts_client.link import Link
from chattts_client.wire import Event

__all__ = ["ServerContext", "Track"]

# The server's defaults, for a ready without limits.
_MAX_DELTA_CHARS = 4000
_MAX_MESSAGE_BYTES = 64 * 1024
_MAX_BUFFERED_CHARS = 20000
#: How long a dropped context's ``cancel`` may wait on a full socket.
_CANCEL_SEND_S = 1.0


@dataclass(eq=False)
class ServerContext:
    """One context on one server, speaking the track's text from ``part.base_char`` on."""

    track: Track
    link: Link
    server_id: str
    part: Part
    #: Its ``started`` once it came; ``answer``: that, or the error that refused it.
    started: dict[str, Any] | None = None
    answer: asyncio.Future[dict[str, Any]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    #: Opened by the caller's own ``start`` (or first text): its refusal is the caller's.
    by_caller: bool = False
    end_sent: bool = False
    #: ``end_char`` of ``draining`` (characters it speaks), and whether ``end`` had come.
    drained_at: int | None = None
    drained_ended: bool = False
    dropped: bool = False
    held: list[Event] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return not (self.dropped or self.link.closed)

    @property
    def final(self) -> bool:
        """Its ``done`` ends the caller's context: cancelled, or it had the ``end``."""
        if self.track.cancelled:
            return True
        if self.drained_at is not None:
            return self.drained_ended
        return self.end_sent

    def answered(self, answer: dict[str, Any] | BaseException) -> None:
        """Its start was answered (``started``, a refusal) or can no longer be."""
        if self.answer.done():
            return
        if isinstance(answer, BaseException):
            self.answer.set_exception(answer)
            self.answer.exception()  # retrieved: nobody may be waiting for it
        else:
            self.answer.set_result(answer)

    async def send(self, message: dict[str, Any]) -> None:
        """Send on its link; a lost link is the link's reader's to report."""
        with contextlib.suppress(ConnectionClosed, OSError):
            await self.link.send({**message, "context_id": self.server_id})

    async def drop(self) -> None:
        """It will not be heard: forget it, and its server stops speaking it."""
        if self in self.track.legs:
            self.track.legs.remove(self)
        alive = self.alive
        self.dropped = True
        self.answered(ConnectionAbortedError("dropped"))
        if alive:  # bounded: a server that stopped reading must not hold the caller
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_CANCEL_SEND_S):
                    await self.send({"type": "cancel"})


@dataclass(eq=False)
class Track:
    """One of the caller's contexts and the server contexts that speak it (the one
    heard now first)."""

    ledger: ContextLedger
    params: dict[str, Any]
    legs: list[ServerContext] = field(default_factory=list)
    announced: bool = False  # the caller got its ``started``
    cancelled: bool = False
    flush_pending: bool = False
    placing: asyncio.Task[None] | None = None
    #: Why, and after how many tries, its newest server context was opened.
    reason: str = "closed"
    attempts: int = 0

    @property
    def id(self) -> str:
        return self.ledger.context_id

    @property
    def target(self) -> ServerContext | None:
        """The server context new text goes to: the newest, unless a drain ended it."""
        leg = self.legs[-1] if self.legs else None
        if leg is None or not leg.alive or leg.drained_at is not None:
            return None
        return leg

    async def pump(self) -> None:
        """Give the target the text it has not had, as far as its server can hold it
        (``max_buffered_chars``, each delta within ``max_text_message_chars`` and
        ``max_message_bytes``): no delta is ever refused, so the ledger knows exactly what
        each server accepted. Then ``flush`` and ``end``, once all of it went out."""
        target = self.target
        if target is None:
            return
        limits = target.link.limits
        max_delta = limits.get("max_text_message_chars", _MAX_DELTA_CHARS)
        max_bytes = limits.get("max_message_bytes", _MAX_MESSAGE_BYTES)
        max_held = limits.get("max_buffered_chars", _MAX_BUFFERED_CHARS)
        text, part = self.ledger.text, target.part
        while (offset := part.base_char + part.sent_chars) < len(text):
            room = max(0, min(max_held - part.unfinished_chars, max_delta))
            piece = _piece(text[offset : offset + room], max_bytes, target.server_id)
            if not piece:
                return  # the next segment event makes room
            # Counted before the send: a pump running meanwhile sends what follows.
            part.sent_chars += len(piece)
            await target.send({"type": "text", "text": piece})
        if self.flush_pending:
            self.flush_pending = False
            await target.send({"type": "flush"})
        if self.ledger.ended and not target.end_sent:
            target.end_sent = True
            await target.send({"type": "end"})


def _piece(text: str, max_bytes: int, context_id: str) -> str:
    """The longest head of ``text`` (halving) whose ``text`` message fits ``max_bytes``."""
    overhead = len(json.dumps({"type": "text", "context_id": context_id, "text": ""}))
    while text and len(json.dumps(text, ensure_ascii=False).encode()) + overhead > max_bytes:
        text = text[: len(text) // 2]
    return text
