"""WebSocket protocol v1: client messages parsed and checked, server messages serialised.

Pure and synchronous: bytes or text in, typed messages out, and back. The session in
``server/session.py`` is the only I/O around it. ``docs/protocol.md`` is the prose
version of this module; keep the two in step.

Wire trio for each direction: ``parse_client_message`` (parse + check),
``ServerMessage.to_json`` (serialise), ``pack_audio_header`` / ``unpack_audio_header``.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import asdict, dataclass, field
from typing import Any

PROTOCOL_VERSION = 1
SUBPROTOCOL = "tts.v1"
#: Browsers cannot set headers on a WebSocket: they may offer ``token.<secret>`` as a
#: second subprotocol. The server never echoes it back.
TOKEN_SUBPROTOCOL_PREFIX = "token."
DEFAULT_CONTEXT_ID = "default"
ENCODING = "pcm_s16le"

#: Binary audio frame header: stream number, segment index, sequence number (per
#: stream, counting every frame of that stream), all little-endian uint32.
AUDIO_HEADER = struct.Struct("<III")
AUDIO_HEADER_BYTES = AUDIO_HEADER.size

SUPPORTED_SAMPLE_RATES_HZ = (8000, 16000, 22050, 24000, 44100, 48000)
MIN_SPEED = 0.5
MAX_SPEED = 2.0
MAX_CONTEXT_ID_CHARS = 64
MAX_VOICE_CHARS = 4096
MAX_SEED = 2**31 - 1


class ProtocolError(Exception):
    """A client message that cannot be accepted; maps to one ``error`` event.

    ``code`` is stable and documented; ``message`` is for humans; ``context_id`` is the
    context the message concerned, when it could be read; ``limit`` is the configured
    limit a message broke, when that is the cause.
    """

    def __init__(
        self, code: str, message: str, context_id: str | None = None, *, limit: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.context_id = context_id
        self.limit = limit


# --- client -> server -----------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    context_id: str
    voice: str | None = None
    seed: int | None = None
    speed: float = 1.0
    sample_rate: int | None = None


@dataclass(frozen=True)
class Text:
    context_id: str
    text: str


@dataclass(frozen=True)
class Flush:
    context_id: str


@dataclass(frozen=True)
class End:
    context_id: str


@dataclass(frozen=True)
class Cancel:
    context_id: str


ClientMessage = Start | Text | Flush | End | Cancel

_CLIENT_TYPES: dict[str, type[ClientMessage]] = {
    "start": Start,
    "text": Text,
    "flush": Flush,
    "end": End,
    "cancel": Cancel,
}


def parse_client_message(raw: str | bytes) -> ClientMessage:
    """Parse and check one client frame; raise :class:`ProtocolError` if it is invalid.

    Binary frames are refused: the client speaks JSON text frames only.
    """
    if isinstance(raw, bytes | bytearray | memoryview):
        raise ProtocolError(
            "binary_not_supported", "binary frames are not accepted; send JSON text"
        )
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ProtocolError("bad_json", f"message is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("bad_message", "message must be a JSON object")
    context_id = _context_id(obj)
    kind = obj.get("type")
    if kind is None:
        raise ProtocolError("missing_field", "field 'type' is required", context_id)
    if not isinstance(kind, str):
        raise ProtocolError("invalid_field", "field 'type' must be a string", context_id)
    cls = _CLIENT_TYPES.get(kind)
    if cls is None:
        known = ", ".join(sorted(_CLIENT_TYPES))
        raise ProtocolError(
            "unknown_type", f"unknown message type {kind!r} (known: {known})", context_id
        )
    if cls is Text:
        if "text" not in obj:
            raise ProtocolError("missing_field", "field 'text' is required", context_id)
        text = obj["text"]
        if not isinstance(text, str):
            raise ProtocolError("invalid_field", "field 'text' must be a string", context_id)
        return Text(context_id, text)
    if cls is Start:
        return Start(
            context_id,
            voice=_optional_voice(obj, context_id),
            seed=_optional_seed(obj, context_id),
            speed=_speed(obj, context_id),
            sample_rate=_optional_sample_rate(obj, context_id),
        )
    return cls(context_id)  # type: ignore[call-arg]


def _context_id(obj: dict[str, Any]) -> str:
    value = obj.get("context_id", DEFAULT_CONTEXT_ID)
    if value is None:
        return DEFAULT_CONTEXT_ID
    if not isinstance(value, str) or not value or len(value) > MAX_CONTEXT_ID_CHARS:
        raise ProtocolError(
            "invalid_field",
            f"field 'context_id' must be a non-empty string of at most {MAX_CONTEXT_ID_CHARS} characters",
        )
    return value


def _optional_voice(obj: dict[str, Any], context_id: str) -> str | None:
    value = obj.get("voice")
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_VOICE_CHARS:
        raise ProtocolError(
            "invalid_field",
            f"field 'voice' must be a string of at most {MAX_VOICE_CHARS} characters",
            context_id,
        )
    return value


def _optional_seed(obj: dict[str, Any], context_id: str) -> int | None:
    value = obj.get("seed")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ProtocolError(
            "invalid_field", f"field 'seed' must be an integer in [0, {MAX_SEED}]", context_id
        )
    return value


def _speed(obj: dict[str, Any], context_id: str) -> float:
    value = obj.get("speed", 1.0)
    if value is None:
        return 1.0
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not MIN_SPEED <= value <= MAX_SPEED
    ):
        raise ProtocolError(
            "invalid_field",
            f"field 'speed' must be a number in [{MIN_SPEED}, {MAX_SPEED}]",
            context_id,
        )
    return float(value)


def _optional_sample_rate(obj: dict[str, Any], context_id: str) -> int | None:
    value = obj.get("sample_rate")
    if value is None:
        return None
    if isinstance(value, bool) or value not in SUPPORTED_SAMPLE_RATES_HZ:
        rates = ", ".join(map(str, SUPPORTED_SAMPLE_RATES_HZ))
        raise ProtocolError(
            "invalid_field", f"field 'sample_rate' must be one of {rates}", context_id
        )
    return int(value)


def serialize_client_message(message: ClientMessage) -> str:
    """The JSON text frame for a client message (used by the Python client and tests)."""
    kind = next(name for name, cls in _CLIENT_TYPES.items() if isinstance(message, cls))
    body = {k: v for k, v in asdict(message).items() if v is not None}
    return json.dumps({"type": kind, **body}, ensure_ascii=False)


# --- server -> client -----------------------------------------------------------------


@dataclass(frozen=True)
class ServerMessage:
    """Base of server events; ``type`` is the wire name."""

    type: str = field(init=False, default="")

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class Ready(ServerMessage):
    session_id: str
    engine: str
    sample_rate: int
    limits: dict[str, int]
    protocol: int = PROTOCOL_VERSION
    encoding: str = ENCODING
    channels: int = 1
    audio_header_bytes: int = AUDIO_HEADER_BYTES
    type: str = field(init=False, default="ready")


@dataclass(frozen=True)
class Started(ServerMessage):
    context_id: str
    stream: int
    sample_rate: int
    voice: str | None
    seed: int
    speed: float
    type: str = field(init=False, default="started")


@dataclass(frozen=True)
class SegmentEvent(ServerMessage):
    context_id: str
    stream: int
    index: int
    text: str
    spoken: str
    start_char: int
    end_char: int
    audio_start_sample: int
    audio_start_ms: float
    type: str = field(init=False, default="segment")


@dataclass(frozen=True)
class Done(ServerMessage):
    context_id: str
    stream: int
    segments: int
    audio_samples: int
    audio_ms: float
    cancelled: bool
    type: str = field(init=False, default="done")


@dataclass(frozen=True)
class WarningEvent(ServerMessage):
    context_id: str | None
    code: str
    message: str
    removed: list[dict[str, Any]] = field(default_factory=list)
    type: str = field(init=False, default="warning")


@dataclass(frozen=True)
class ErrorEvent(ServerMessage):
    context_id: str | None
    code: str
    message: str
    limit: int | None = None
    type: str = field(init=False, default="error")


def pack_audio_header(stream: int, segment: int, sequence: int) -> bytes:
    """The fixed header that starts every binary audio frame."""
    return AUDIO_HEADER.pack(stream, segment, sequence)


def unpack_audio_header(frame: bytes) -> tuple[int, int, int, bytes]:
    """Split a binary audio frame into (stream, segment, sequence, pcm bytes)."""
    if len(frame) < AUDIO_HEADER_BYTES:
        raise ValueError(f"audio frame shorter than its {AUDIO_HEADER_BYTES}-byte header")
    stream, segment, sequence = AUDIO_HEADER.unpack_from(frame)
    return stream, segment, sequence, bytes(frame[AUDIO_HEADER_BYTES:])
