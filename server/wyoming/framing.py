"""Wyoming events on a byte stream, read within bounds and written with a stall limit.

An event is one JSON header line (``type``, ``data``, ``data_length``,
``payload_length``), then ``data_length`` bytes of JSON merged into ``data``, then
``payload_length`` bytes of payload. The ``wyoming`` package's own reader trusts both
lengths; this one refuses an event over ``max_bytes`` before reading it (a client that
announces a gigabyte gets an error, not an allocation), and a header that is not a JSON
object with a string ``type``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection
from typing import Any

from wyoming.error import Error
from wyoming.event import Event, async_write_event

from streaming.errors import ClientError, LimitExceeded

__all__ = ["read_event", "write_error", "write_event"]


async def read_event(
    reader: asyncio.StreamReader, max_bytes: int, skip: Collection[str] = ()
) -> Event | None:
    """The next event, or None at the end of the stream (a header line cut short by the
    end counts as the end). Raises :class:`LimitExceeded` (``message_too_large``) for an
    event over ``max_bytes`` and :class:`ClientError` (``bad_message``) for one that does
    not parse; the stream is unusable after either. An event whose type is in ``skip``
    (one the caller will ignore) is read past, whatever its size, and comes back with no
    data: Home Assistant repeats a streamed reply whole in a ``synthesize``."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError:
        raise _too_large("a header line", max_bytes) from None
    header = _header(line)
    data_length = _length(header, "data_length")
    payload_length = _length(header, "payload_length")
    if header["type"] in skip:
        return await _skipped(reader, header["type"], data_length + payload_length)
    if len(line) + data_length + payload_length > max_bytes:
        raise _too_large(f"an event of {len(line) + data_length + payload_length} bytes", max_bytes)
    data = header.get("data") or {}
    if not isinstance(data, dict):
        raise ClientError("a Wyoming event's data must be a JSON object", code="bad_message")
    try:
        if data_length:
            extra = json.loads(await reader.readexactly(data_length))
            if not isinstance(extra, dict):
                raise ClientError(
                    "a Wyoming event's data must be a JSON object", code="bad_message"
                )
            data.update(extra)
        payload = await reader.readexactly(payload_length) if payload_length else None
    except asyncio.IncompleteReadError:
        return None
    except (ValueError, RecursionError):
        raise ClientError("a Wyoming event's data is not JSON", code="bad_message") from None
    return Event(type=header["type"], data=data, payload=payload)


async def _skipped(reader: asyncio.StreamReader, kind: str, length: int) -> Event | None:
    while length:
        piece = await reader.read(min(length, 1 << 16))
        if not piece:
            return None
        length -= len(piece)
    return Event(type=kind)


def _header(line: bytes) -> dict[str, Any]:
    try:
        header = json.loads(line)
    except (ValueError, RecursionError):
        raise ClientError("a Wyoming event header is not JSON", code="bad_message") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise ClientError(
            "a Wyoming event header must be a JSON object with a string type", code="bad_message"
        )
    return header


def _length(header: dict[str, Any], name: str) -> int:
    value = header.get(name) or 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ClientError(f"{name} must be a non-negative integer", code="bad_message")
    return value


def _too_large(what: str, max_bytes: int) -> LimitExceeded:
    return LimitExceeded(
        f"{what} exceeds the limit of {max_bytes} bytes (--max-message-bytes)",
        code="message_too_large",
        limit=max_bytes,
    )


async def write_event(event: Event, writer: asyncio.StreamWriter, stall_s: float) -> None:
    """Send ``event``; a client that reads nothing for ``stall_s`` is cut (OSError)."""
    try:
        async with asyncio.timeout(stall_s):
            await async_write_event(event, writer)
    except TimeoutError:
        writer.transport.abort()
        raise OSError(f"the client read nothing for {stall_s:g} s") from None


async def write_error(
    writer: asyncio.StreamWriter, code: str, message: str, stall_s: float
) -> None:
    """An ``error`` event: ``code`` as on every route, ``message`` (its ``text``) says why."""
    await write_event(Error(text=message, code=code).event(), writer, stall_s)
