"""What the servers said, read once: events in order, each handed to whoever waits for
its context, the rest kept for later readers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from websockets.exceptions import ConnectionClosed

from chattts_client.result import ContextResult, record
from chattts_client.wire import START_REFUSALS, AudioFrame, Event

__all__ = ["EventQueue"]


class EventQueue:
    """The one stream of server messages a client reads (``recv``, ``events``,
    ``collect``). A reader that waits for one context keeps the others' events in
    :attr:`backlog`, which the next reader is given first, in their order."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Event | BaseException] = asyncio.Queue()
        self.backlog: list[Event] = []
        self._streams: dict[int, str] = {}  # server stream number -> context id
        self._ended: ConnectionClosed | None = None  # without resume: the close, for good

    def put(self, item: Event | BaseException) -> None:
        """An event, or an exception the next ``recv`` raises."""
        self._queue.put_nowait(item)

    def end(self, closed: ConnectionClosed) -> None:
        """The connection is gone for good: ``recv`` raises ``closed`` once all is read."""
        self._ended = closed
        self._queue.put_nowait(closed)

    async def recv(self, timeout_s: float | None = None) -> Event:
        if self.backlog:
            return self.backlog.pop(0)
        if self._ended is not None and self._queue.empty():
            raise self._ended
        item = await asyncio.wait_for(self._queue.get(), timeout_s)
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, dict) and item.get("type") == "started":
            self._streams[item["stream"]] = item["context_id"]
        return item

    def context_of(self, event: Event) -> str | None:
        if isinstance(event, AudioFrame):
            return self._streams.get(event.stream)
        return event.get("context_id")

    @contextlib.contextmanager
    def _reading(self) -> Iterator[tuple[list[Event], list[Event]]]:
        """(kept, pending): a reader takes the backlog as pending and puts what it does not
        want in kept; both go back to the backlog, in order, however it stops."""
        kept: list[Event] = []
        pending, self.backlog = self.backlog, []
        try:
            yield kept, pending
        finally:
            self.backlog = kept + pending + self.backlog

    async def answer_to_start(self, context_id: str, timeout_s: float) -> dict[str, Any]:
        """The ``started`` or refusal for ``context_id``; other events are kept for later."""
        with self._reading() as (kept, pending):
            async with asyncio.timeout(timeout_s):
                while True:
                    event = pending.pop(0) if pending else await self.recv()
                    if _answers_start(event, context_id):
                        assert isinstance(event, dict)
                        return event
                    kept.append(event)

    async def collect(
        self, context_id: str, timeout_s: float, total_timeout_s: float | None
    ) -> ContextResult:
        """See :meth:`StreamClient.collect <chattts_client.client.StreamClient.collect>`."""
        result = ContextResult(context_id)
        with self._reading() as (kept, pending):
            async with asyncio.timeout(total_timeout_s):
                while result.done is None:
                    event = pending.pop(0) if pending else await self.recv(timeout_s)
                    owner = self.context_of(event)
                    if owner is None and isinstance(event, dict):
                        record(result, event)  # a connection-level error or warning
                        continue
                    if owner != context_id:
                        kept.append(event)
                        continue
                    record(result, event)
                    if _refuses_start(event, result):
                        break  # no done will come for a context that never opened
        return result


def _answers_start(event: Event, context_id: str) -> bool:
    """``started`` for the context, or the error that refused its start."""
    if not isinstance(event, dict) or event.get("context_id") != context_id:
        return False
    kind = event.get("type")
    return kind == "started" or (kind == "error" and event.get("code") in START_REFUSALS)


def _refuses_start(event: Event, result: ContextResult) -> bool:
    return (
        isinstance(event, dict)
        and event.get("type") == "error"
        and event.get("code") in START_REFUSALS
        and result.started is None
        and not result.segments
    )
