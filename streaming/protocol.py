"""WebSocket protocol v1: client messages parsed and checked, server messages serialised.

Pure and synchronous: bytes or text in, typed messages out, and back. The session in
``server/ws/session.py`` is the only I/O around it. ``docs/protocol.md`` is the prose
version of this module; keep the two in step.

Wire trio for each direction: ``parse_client_message`` (parse + check),
``ServerMessage.to_json`` (serialise), ``pack_audio_header`` / ``unpack_audio_header``.
"""

from __future__ import annotations

import json
import math
import re
import struct
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from streaming import limiter
from streaming.encodings import DEFAULT_ENCODING, ENCODINGS, encoding_field, frame_ms_field
from streaming.errors import ClientError, TTSError, public_message
from streaming.text import Removal

PROTOCOL_VERSION = 1
SUBPROTOCOL = "tts.v1"
#: Browsers cannot set headers on a WebSocket: they may offer ``token.<secret>`` as a
#: second subprotocol. The server never echoes it back.
TOKEN_SUBPROTOCOL_PREFIX = "token."
DEFAULT_CONTEXT_ID = "default"
ENCODING = DEFAULT_ENCODING

#: Binary audio frame header: stream number, segment index, sequence number (per
#: stream, counting every frame of that stream), all little-endian uint32.
AUDIO_HEADER = struct.Struct("<III")
AUDIO_HEADER_BYTES = AUDIO_HEADER.size

SUPPORTED_SAMPLE_RATES_HZ = (8000, 16000, 22050, 24000, 44100, 48000)
#: The speed factors every route takes (1: the engine's normal rate); beyond an engine's
#: own rate control the audio is time-stretched (streaming.stretch).
MIN_SPEED = 0.25
MAX_SPEED = 4.0
MAX_CONTEXT_ID_CHARS = 64
MAX_VOICE_CHARS = 4096
MAX_SEED = 2**31 - 1
#: A UTF-16 surrogate alone (JSON "\ud800"): not a character, cannot be encoded as UTF-8.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


# --- client -> server -----------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    context_id: str
    voice: str | None = None
    seed: int | None = None
    speed: float = 1.0
    sample_rate: int | None = None
    #: Send a ``timestamps`` event after each segment's audio.
    timestamps: bool = False
    #: Pronunciation lexicon entries (written, spoken) for this context (docs/text.md).
    lexicon: tuple[tuple[str, str], ...] | None = None
    #: Loudness factor (1: as the engine made it), peaks limited below full scale.
    volume: float = 1.0
    #: The bytes of its audio frames: pcm_s16le (None: the default), pcm_mulaw, pcm_alaw.
    encoding: str | None = None
    #: Every audio frame exactly this long (None: the server's frames, shorter first).
    frame_ms: int | None = None


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
    """Parse and check one client frame; raise :class:`ClientError` if it is invalid.

    Binary frames are refused: the client speaks JSON text frames only.
    """
    obj = _json_object(raw)
    context_id = _context_id(obj)
    kind = obj.get("type")
    if kind is None:
        raise ClientError("field 'type' is required", code="missing_field", context_id=context_id)
    if not isinstance(kind, str):
        raise ClientError(
            "field 'type' must be a string", code="invalid_field", context_id=context_id
        )
    cls = _CLIENT_TYPES.get(kind)
    if cls is None:
        known = ", ".join(sorted(_CLIENT_TYPES))
        raise ClientError(
            f"unknown message type {kind[:40]!r} (known: {known})",
            code="unknown_type",
            context_id=context_id,
        )
    if cls is Text:
        return _text(obj, context_id)
    if cls is Start:
        return Start(
            context_id,
            voice=_optional_voice(obj, context_id),
            seed=_optional_seed(obj, context_id),
            speed=_speed(obj, context_id),
            sample_rate=_optional_sample_rate(obj, context_id),
            timestamps=_optional_bool(obj, "timestamps", context_id),
            lexicon=_optional_lexicon(obj, context_id),
            volume=_volume(obj, context_id),
            encoding=encoding_field(obj, context_id),
            frame_ms=frame_ms_field(obj, context_id),
        )
    return cls(context_id)  # type: ignore[call-arg]


def _json_object(raw: str | bytes) -> dict[str, Any]:
    if isinstance(raw, bytes | bytearray | memoryview):
        raise ClientError(
            "binary frames are not accepted; send JSON text", code="binary_not_supported"
        )
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ClientError(f"message is not valid JSON: {exc}", code="bad_json") from None
    except ValueError:
        # Python refuses to parse an integer of more than sys.get_int_max_str_digits()
        # digits (4,300 by default), with a plain ValueError.
        digits = sys.get_int_max_str_digits()
        raise ClientError(
            f"message not accepted: a JSON number has more than {digits} digits", code="bad_json"
        ) from None
    if not isinstance(obj, dict):
        raise ClientError("message must be a JSON object", code="bad_message")
    return obj


def _text(obj: dict[str, Any], context_id: str) -> Text:
    if "text" not in obj:
        raise ClientError("field 'text' is required", code="missing_field", context_id=context_id)
    text = obj["text"]
    if not isinstance(text, str):
        raise ClientError(
            "field 'text' must be a string", code="invalid_field", context_id=context_id
        )
    # U+FFFD takes the place of a lone surrogate: the text around it is kept and
    # spoken, and the replacement is reported with the segment's removed characters.
    return Text(context_id, _LONE_SURROGATE.sub("\ufffd", text))


def _optional_bool(obj: dict[str, Any], name: str, context_id: str) -> bool:
    value = obj.get(name, False)
    if not isinstance(value, bool):
        raise ClientError(
            f"field {name!r} must be true or false", code="invalid_field", context_id=context_id
        )
    return value


def _optional_lexicon(obj: dict[str, Any], context_id: str) -> tuple[tuple[str, str], ...] | None:
    """``lexicon``: an object of written forms to spoken forms (its limits are checked
    where the context opens)."""
    value = obj.get("lexicon")
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ClientError(
            "field 'lexicon' must be an object of written forms to spoken forms (strings)",
            code="invalid_lexicon",
            context_id=context_id,
        )
    return tuple(value.items())


def _context_id(obj: dict[str, Any]) -> str:
    value = obj.get("context_id", DEFAULT_CONTEXT_ID)
    if value is None:
        return DEFAULT_CONTEXT_ID
    if (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_CONTEXT_ID_CHARS
        or _LONE_SURROGATE.search(value)
    ):
        raise ClientError(
            "field 'context_id' must be a non-empty string of at most "
            f"{MAX_CONTEXT_ID_CHARS} characters (no lone UTF-16 surrogates)",
            code="invalid_field",
        )
    return value


def _optional_voice(obj: dict[str, Any], context_id: str) -> str | None:
    value = obj.get("voice")
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_VOICE_CHARS or _LONE_SURROGATE.search(value):
        raise ClientError(
            f"field 'voice' must be a string of at most {MAX_VOICE_CHARS} characters "
            "(no lone UTF-16 surrogates)",
            code="invalid_field",
            context_id=context_id,
        )
    return value


def _optional_seed(obj: dict[str, Any], context_id: str) -> int | None:
    value = obj.get("seed")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ClientError(
            f"field 'seed' must be an integer in [0, {MAX_SEED}]",
            code="invalid_field",
            context_id=context_id,
        )
    return value


def _speed(obj: dict[str, Any], context_id: str) -> float:
    value = obj.get("speed", 1.0)
    return 1.0 if value is None else check_speed(value, context_id=context_id)


def _volume(obj: dict[str, Any], context_id: str) -> float:
    value = obj.get("volume", 1.0)
    return 1.0 if value is None else limiter.check_volume(value, context_id=context_id)


def speed_in_body(data: Any) -> Any:
    """An HTTP body (a dict, before its schema) with its ``speed`` checked as the
    WebSocket's is: null means the default, anything else is refused by
    :func:`check_speed` (raised as is: the same 400 on every route)."""
    if isinstance(data, dict) and "speed" in data:
        speed = data["speed"]
        data = {**data, "speed": 1.0 if speed is None else check_speed(speed)}
    return data


def check_speed(value: object, *, context_id: str | None = None) -> float:
    """``value`` as a speed factor, or the one refusal every route gives (400
    ``invalid_field``, the same message on the WebSocket and over HTTP)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not MIN_SPEED <= value <= MAX_SPEED
    ):
        raise ClientError(
            f"field 'speed' must be a number in [{MIN_SPEED}, {MAX_SPEED}]",
            code="invalid_field",
            context_id=context_id,
            param="speed",
        )
    return float(value)


def _optional_sample_rate(obj: dict[str, Any], context_id: str) -> int | None:
    value = obj.get("sample_rate")
    if value is None:
        return None
    if isinstance(value, bool) or value not in SUPPORTED_SAMPLE_RATES_HZ:
        rates = ", ".join(map(str, SUPPORTED_SAMPLE_RATES_HZ))
        raise ClientError(
            f"field 'sample_rate' must be one of {rates}",
            code="invalid_field",
            context_id=context_id,
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
        """The JSON text frame; always valid UTF-8 (a lone surrogate is \\u-escaped)."""
        body = asdict(self)
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        if not text.isascii() and _LONE_SURROGATE.search(text):
            text = json.dumps(body, separators=(",", ":"))
        return text


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
    #: What ``start.encoding`` may ask for.
    encodings: list[str] = field(default_factory=lambda: list(ENCODINGS))
    type: str = field(init=False, default="ready")


@dataclass(frozen=True)
class Started(ServerMessage):
    context_id: str
    stream: int
    sample_rate: int
    voice: str | None
    seed: int
    speed: float
    volume: float = 1.0
    encoding: str = ENCODING
    #: The context's own frame duration (None: the server's frames).
    frame_ms: int | None = None
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
class TimestampsEvent(ServerMessage):
    """When each character (Latin: word) of a segment is heard, on the context's audio
    clock (ms from its first sample); sent after the segment's last audio frame, for
    contexts started with ``timestamps: true``. See :mod:`streaming.timestamps`."""

    context_id: str
    stream: int
    index: int
    #: The segment's own audio span (its pause excluded).
    start_ms: float
    end_ms: float
    #: True when the times are shared out by rule (ChatTTS); False when the engine
    #: reported where its words start (the fallback voice).
    estimated: bool
    items: list[dict[str, object]]
    type: str = field(init=False, default="timestamps")


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
class DrainedContext:
    """One context open at a drain (an entry of :class:`Draining`)."""

    context_id: str
    stream: int
    #: Characters of its text it accepted; it speaks them all, then sends ``done``.
    end_char: int
    #: Its client had sent ``end``: nothing of it is left to continue elsewhere.
    ended: bool


@dataclass(frozen=True)
class Draining(ServerMessage):
    """The server is shutting down (SIGTERM): sent once to every connection, at once.

    From now on ``start`` is refused with ``draining``. Each context open at the drain is
    ended here as if by ``end``: it speaks all the text it accepted (its ``end_char``
    characters) and then sends ``done``; further ``text``, ``flush`` or ``end`` for it is
    refused with ``draining``. A client continues each context elsewhere from
    ``end_char`` (see docs/scaling.md). The connection closes (1012) once the audio in
    progress is sent, ``deadline_ms`` from now at the latest.
    """

    deadline_ms: int
    contexts: list[DrainedContext]
    type: str = field(init=False, default="draining")


@dataclass(frozen=True)
class WarningEvent(ServerMessage):
    context_id: str | None
    code: str
    message: str
    removed: list[dict[str, Any]] = field(default_factory=list)
    type: str = field(init=False, default="warning")


@dataclass(frozen=True)
class SegmentWarningEvent(ServerMessage):
    """A warning about one segment's audio (``segment``: its index, as in ``segment``
    events and audio frame headers): ``segment_retried``, ``segment_without_audio``."""

    context_id: str
    code: str
    message: str
    segment: int
    type: str = field(init=False, default="warning")


@dataclass(frozen=True)
class ErrorEvent(ServerMessage):
    context_id: str | None
    code: str
    message: str
    limit: int | None = None
    #: With ``busy``: how long to wait before trying again, in milliseconds.
    retry_after_ms: int | None = None
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


def error_event(exc: BaseException, context_id: str | None = None) -> ErrorEvent:
    """The ``error`` event that reports ``exc`` (internals never leave the server)."""
    code, message = public_message(exc)
    if isinstance(exc, TTSError):
        context_id = exc.context_id if context_id is None else context_id
        return ErrorEvent(
            context_id=context_id,
            code=code,
            message=message,
            limit=exc.limit,
            retry_after_ms=exc.retry_after_ms,
        )
    return ErrorEvent(context_id=context_id, code=code, message=message)


def removed_warning(context_id: str, removed: Sequence[Removal]) -> WarningEvent:
    """The ``unspeakable_characters`` warning listing what a segment does not say as written."""
    chars = "".join(r.chars for r in removed)
    return WarningEvent(
        context_id=context_id,
        code="unspeakable_characters",
        message=f"{len(chars)} character(s) not spoken as written: {chars}",
        removed=[asdict(r) for r in removed],
    )
