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
    "ONE_BYTE_ENCODINGS",
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
AUDIO_HEADER = struct.Struct("<III")  # stream, segment, sequence; then the audio
#: The context encodings whose frames hold one byte a sample (G.711).
ONE_BYTE_ENCODINGS = frozenset({"pcm_mulaw", "pcm_alaw"})

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
    #: The audio in its context's encoding: int16 little-endian mono by default, G.711
    #: codes (one byte a sample) for a context started with pcm_mulaw or pcm_alaw.
    pcm: bytes

    @property
    def samples(self) -> int:
        """Samples of a 16-bit frame (a G.711 frame has ``len(pcm)``)."""
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
