"""The protocol's wire constants and frames, as the client reads them.

The constants are the server's (``streaming/protocol.py``; a test keeps them equal).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from chattts_client.errors import ProtocolError

__all__ = [
    "AUDIO_HEADER",
    "DEFAULT_CONTEXT_ID",
    "START_REFUSALS",
    "SUBPROTOCOL",
    "TOKEN_SUBPROTOCOL_PREFIX",
    "AudioFrame",
    "Event",
    "parse_frame",
]

SUBPROTOCOL = "tts.v1"
TOKEN_SUBPROTOCOL_PREFIX = "token."
DEFAULT_CONTEXT_ID = "default"
AUDIO_HEADER = struct.Struct("<III")  # stream, segment, sequence; then int16 LE PCM

#: Error codes that refuse a ``start``: no ``done`` comes for that context.
START_REFUSALS = frozenset(
    {
        "too_many_contexts",
        "context_exists",
        "invalid_field",
        "invalid_lexicon",
        "voice_not_found",
        "busy",
    }
)


@dataclass(frozen=True)
class AudioFrame:
    stream: int
    segment: int
    sequence: int
    pcm: bytes  # int16 little-endian mono

    @property
    def samples(self) -> int:
        return len(self.pcm) // 2


Event = dict[str, Any] | AudioFrame


def parse_frame(raw: str | bytes) -> Event:
    """One server frame: a dict for a JSON event, an :class:`AudioFrame` for audio; a
    frame this client cannot read is a :class:`ProtocolError`."""
    if isinstance(raw, bytes):
        if len(raw) < AUDIO_HEADER.size:
            raise ProtocolError("bad_audio_frame", f"a binary frame of {len(raw)} bytes")
        stream, segment, sequence = AUDIO_HEADER.unpack_from(raw)
        return AudioFrame(stream, segment, sequence, raw[AUDIO_HEADER.size :])
    return parse_event(raw)


def parse_event(raw: str | bytes) -> dict[str, Any]:
    """A JSON event from the server, or :class:`ProtocolError`."""
    try:
        event = json.loads(raw)
    except ValueError:
        event = None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise ProtocolError("bad_event", f"not a JSON event: {raw!r:.200}")
    return event
