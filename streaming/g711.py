"""ITU-T G.711 companding: µ-law and A-law, 16-bit PCM to 8-bit codes and back.

Pure numpy, table driven: each law's encoder is a 65,536-entry table indexed by the
16-bit sample (built once, on first use, from the segment rule of G.711 as in the
reference C code that ``audioop`` also follows), and its decoder a 256-entry table.
µ-law works on the sample's top 14 bits, A-law on its top 13: the low bits are the
ones G.711 drops.

G.711 is defined at 8,000 samples a second (64 kbit/s): a telephone line's rate. The
companding itself does not depend on the rate; this server sends G.711 at 8 kHz only
(:data:`G711_RATE_HZ`), so that what it calls ``ulaw`` is what every peer expects.
"""

from __future__ import annotations

from functools import cache

import numpy as np

__all__ = [
    "G711_RATE_HZ",
    "LAWS",
    "alaw_to_pcm16",
    "decode",
    "encode",
    "pcm16_to_alaw",
    "pcm16_to_ulaw",
    "ulaw_to_pcm16",
]

G711_RATE_HZ = 8000
#: The two laws by the names this server gives them.
LAWS = ("ulaw", "alaw")

# µ-law: 14-bit magnitude plus a bias of 33 (0x84 >> 2), clipped at 8,159 (G.711's
# largest µ-law magnitude in 14-bit units); segment ends of the biased value.
_ULAW_BIAS = 0x84
_ULAW_CLIP = 8159
_ULAW_SEGMENT_ENDS = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])
# A-law: 13-bit magnitude; its even bits are inverted on the line (0x55).
_ALAW_SEGMENT_ENDS = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])


def _all_pcm16() -> np.ndarray:
    """Every 16-bit sample, in the order of its bits read as unsigned (the table index)."""
    return np.arange(65536, dtype=np.uint16).view(np.int16).astype(np.int32)


@cache
def _ulaw_table() -> np.ndarray:
    pcm = _all_pcm16() >> 2
    mask = np.where(pcm < 0, 0x7F, 0xFF)
    magnitude = np.minimum(np.abs(pcm), _ULAW_CLIP) + (_ULAW_BIAS >> 2)
    segment = np.searchsorted(_ULAW_SEGMENT_ENDS, magnitude)  # first end >= magnitude
    code = (np.minimum(segment, 7) << 4) | ((magnitude >> (segment + 1)) & 0x0F)
    code = np.where(segment >= 8, 0x7F, code)  # beyond the last segment: the largest code
    return (code ^ mask).astype(np.uint8)


@cache
def _alaw_table() -> np.ndarray:
    pcm = _all_pcm16() >> 3
    negative = pcm < 0
    mask = np.where(negative, 0x55, 0xD5)
    magnitude = np.where(negative, -pcm - 1, pcm)
    segment = np.searchsorted(_ALAW_SEGMENT_ENDS, magnitude)
    mantissa = np.where(segment < 2, magnitude >> 1, magnitude >> np.maximum(segment, 1))
    code = np.where(segment >= 8, 0x7F, (np.minimum(segment, 7) << 4) | (mantissa & 0x0F))
    return (code ^ mask).astype(np.uint8)


@cache
def _ulaw_decode_table() -> np.ndarray:
    code = ~np.arange(256, dtype=np.int32) & 0xFF
    magnitude = (((code & 0x0F) << 3) + _ULAW_BIAS) << ((code & 0x70) >> 4)
    return np.where(code & 0x80, _ULAW_BIAS - magnitude, magnitude - _ULAW_BIAS).astype("<i2")


@cache
def _alaw_decode_table() -> np.ndarray:
    code = np.arange(256, dtype=np.int32) ^ 0x55
    segment = (code & 0x70) >> 4
    magnitude = (code & 0x0F) << 4
    magnitude = np.where(
        segment == 0, magnitude + 8, (magnitude + 0x108) << np.maximum(segment - 1, 0)
    )
    return np.where(code & 0x80, magnitude, -magnitude).astype("<i2")


def _as_index(pcm16: bytes | np.ndarray) -> np.ndarray:
    if isinstance(pcm16, bytes | bytearray | memoryview):
        if len(pcm16) % 2:
            raise ValueError(f"PCM16 data must have an even length, got {len(pcm16)} bytes")
        return np.frombuffer(pcm16, dtype="<u2")
    return np.asarray(pcm16, dtype=np.int16).view(np.uint16)


def pcm16_to_ulaw(pcm16: bytes | np.ndarray) -> bytes:
    """µ-law codes (one byte a sample) of 16-bit PCM (little-endian bytes, or int16)."""
    return _ulaw_table()[_as_index(pcm16)].tobytes()


def pcm16_to_alaw(pcm16: bytes | np.ndarray) -> bytes:
    """A-law codes (one byte a sample) of 16-bit PCM (little-endian bytes, or int16)."""
    return _alaw_table()[_as_index(pcm16)].tobytes()


def ulaw_to_pcm16(codes: bytes) -> bytes:
    """16-bit little-endian PCM of µ-law codes."""
    return _ulaw_decode_table()[np.frombuffer(codes, dtype=np.uint8)].tobytes()


def alaw_to_pcm16(codes: bytes) -> bytes:
    """16-bit little-endian PCM of A-law codes."""
    return _alaw_decode_table()[np.frombuffer(codes, dtype=np.uint8)].tobytes()


def encode(pcm16: bytes | np.ndarray, law: str) -> bytes:
    """16-bit PCM as ``law`` (``ulaw`` or ``alaw``) codes."""
    if law == "ulaw":
        return pcm16_to_ulaw(pcm16)
    if law == "alaw":
        return pcm16_to_alaw(pcm16)
    raise ValueError(f"unknown G.711 law {law!r} (known: {', '.join(LAWS)})")


def decode(codes: bytes, law: str) -> bytes:
    """``law`` codes as 16-bit little-endian PCM."""
    if law == "ulaw":
        return ulaw_to_pcm16(codes)
    if law == "alaw":
        return alaw_to_pcm16(codes)
    raise ValueError(f"unknown G.711 law {law!r} (known: {', '.join(LAWS)})")
