"""How audio leaves the server as bytes: 16-bit PCM, or G.711 for telephone lines.

The WebSocket names them as Cartesia and ffmpeg do (``start.encoding``): ``pcm_s16le``
(the default), ``pcm_mulaw`` and ``pcm_alaw``; the HTTP routes' formats ``ulaw`` and
``alaw`` are the same bytes with no header. G.711 is sent at 8 kHz only
(:data:`streaming.g711.G711_RATE_HZ`); a rate it cannot carry is refused, not changed.
Pure and synchronous.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from streaming import g711
from streaming.audio import float_to_pcm16
from streaming.errors import ClientError

__all__ = [
    "DEFAULT_ENCODING",
    "ENCODINGS",
    "FORMAT_LAWS",
    "MAX_FRAME_MS",
    "MIN_FRAME_MS",
    "bytes_per_sample",
    "check_rate",
    "encoder",
    "encoding_field",
    "frame_ms_field",
    "law_of",
]

DEFAULT_ENCODING = "pcm_s16le"
ENCODINGS = ("pcm_s16le", "pcm_mulaw", "pcm_alaw")
#: G.711 by the name of each interface: WebSocket encodings and HTTP formats (OpenAI's
#: Realtime API calls them g711_ulaw and g711_alaw: accepted as aliases).
_LAWS = {
    "pcm_mulaw": "ulaw",
    "pcm_alaw": "alaw",
    "ulaw": "ulaw",
    "alaw": "alaw",
    "g711_ulaw": "ulaw",
    "g711_alaw": "alaw",
}
#: The frame durations a WebSocket context may ask for (``start.frame_ms``): below 10 ms
#: the cost of each frame (a header, a send) outweighs its audio; a second is long already.
MIN_FRAME_MS = 10
MAX_FRAME_MS = 1000
#: The HTTP formats that are G.711.
FORMAT_LAWS = {name: law for name, law in _LAWS.items() if not name.startswith("pcm_")}


def law_of(name: str) -> str | None:
    """The G.711 law (``ulaw``, ``alaw``) a WebSocket encoding or HTTP format names, or
    None for anything that is not G.711."""
    return _LAWS.get(name)


def bytes_per_sample(name: str) -> int:
    return 1 if law_of(name) else 2


def encoder(name: str, *, in_range: bool = False) -> Callable[[np.ndarray], bytes]:
    """The function that turns float32 samples into the bytes of ``name`` (an encoding
    of :data:`ENCODINGS` or a G.711 format name); ``in_range``: for samples known to be
    finite and inside 16-bit PCM once scaled (:func:`streaming.audio.float_to_pcm16`)."""
    law = law_of(name)
    if law is None:
        return functools.partial(float_to_pcm16, in_range=True) if in_range else float_to_pcm16

    def encode(samples: np.ndarray) -> bytes:
        pcm = np.frombuffer(float_to_pcm16(samples, in_range=in_range), "<i2")
        return g711.encode(pcm, law)

    return encode


def check_rate(
    name: str, rate_hz: int | None, default_hz: int, *, context_id: str | None = None
) -> int:
    """The output rate for ``name`` (an encoding or a format): ``rate_hz`` when given,
    else ``default_hz``, else 8,000 for G.711; a G.711 rate other than 8,000 is refused
    (400 ``invalid_field``, ``param`` ``sample_rate``)."""
    if law_of(name) is None:
        return rate_hz or default_hz
    if rate_hz is None or rate_hz == g711.G711_RATE_HZ:
        return g711.G711_RATE_HZ
    raise ClientError(
        f"field 'sample_rate': {name} is G.711, which carries {g711.G711_RATE_HZ} Hz only "
        f"(got {rate_hz}); leave sample_rate out or send {g711.G711_RATE_HZ}",
        code="invalid_field",
        context_id=context_id,
        param="sample_rate",
    )


def encoding_field(obj: dict[str, Any], context_id: str) -> str | None:
    """``start.encoding``: one of :data:`ENCODINGS`, or None when not given."""
    value = obj.get("encoding")
    if value is None:
        return None
    if not isinstance(value, str) or value not in ENCODINGS:
        raise ClientError(
            f"field 'encoding' must be one of {', '.join(ENCODINGS)}",
            code="invalid_field",
            context_id=context_id,
        )
    return value


def frame_ms_field(obj: dict[str, Any], context_id: str) -> int | None:
    """``start.frame_ms``: an integer in [MIN_FRAME_MS, MAX_FRAME_MS], or None."""
    value = obj.get("frame_ms")
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not (MIN_FRAME_MS <= value <= MAX_FRAME_MS)
    ):
        raise ClientError(
            f"field 'frame_ms' must be an integer in [{MIN_FRAME_MS}, {MAX_FRAME_MS}]",
            code="invalid_field",
            context_id=context_id,
        )
    return value
