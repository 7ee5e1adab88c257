"""The offline Mandarin voice: libespeak-ng (from PyPI ``espeakng-loader``) through ctypes.

It needs no downloaded weights and no GPU, so it is the default voice when no ChatTTS
model is configured and the path the server degrades to. Robotic but intelligible: it
reads Chinese characters and digits in Mandarin, and Latin-script words as English.

Voice choice: libespeak-ng 1.52 reads Hanzi correctly with both ``cmn`` and
``cmn-latn-pinyin`` (they share the ``cmn`` dictionary and give the same phonemes for
Chinese text; Debian's 1.51 ``cmn`` did not). ``cmn`` is used because it reads Latin
words (``Python``, ``AI``) as English, which suits mixed Chinese-English text better
than reading them as pinyin.
"""

from __future__ import annotations

import _ctypes
import contextlib
import ctypes
import logging
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from server.engines.base import SynthesisRequest, VoiceSpec, WordMarks
from streaming.audio import Resampler
from streaming.errors import TTSError
from streaming.text import strip_tags

__all__ = ["EspeakEngine", "EspeakError"]

logger = logging.getLogger(__name__)

VOICE_NAME = "cmn"

# Voice variants (files in espeak-ng-data/voices/!v) picked by seed, plain voice first.
# Left out: m5 (swaps the intonation rules), m7, m8, f5 (heavy voicing and breath
# changes) and the novelty voices (whisper, croak, ...).
_VARIANTS = ("", "m1", "m2", "m3", "m4", "m6", "f1", "f2", "f3", "f4")
# Offsets to espeak's base pitch parameter (0-100, default 50), picked by seed.
_PITCH_OFFSETS = (0, -10, 10, -20, 20)
_DEFAULT_PITCH = 50

# espeak's own rate limits, in words per minute; 175 is its normal rate (speed 1.0).
_NORMAL_RATE_WPM = 175
_MIN_RATE_WPM = 80
_MAX_RATE_WPM = 450

# From speak_lib.h.
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_DONT_EXIT = 0x8000  # report a bad data path instead of calling exit()
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_ENDPAUSE = 0x1000  # keep the pause espeak puts after a clause-final punctuation mark
_RATE = 1
_PITCH = 3
_EE_OK = 0


class _Event(ctypes.Structure):
    """speak_lib.h's espeak_EVENT (the union at its end is 8 bytes: a pointer or char[8])."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),  # 1-based, in characters (espeakCHARS_UTF8)
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),  # milliseconds into the utterance's audio
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),
    ]


_EVENT_LIST_TERMINATED = 0
_EVENT_WORD = 1
_SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event)
)


class EspeakError(TTSError):
    """libespeak-ng could not be loaded or initialised, or refused a call."""

    code = "engine_failed"


#: The voices a client may name: ``default`` (espeak's plain Mandarin voice) and its
#: variants, by espeak's variant names.
VOICES: tuple[str, ...] = tuple(variant or "default" for variant in _VARIANTS)


def voice_for_seed(seed: int, voice: str | None = None) -> tuple[str, int]:
    """Return the espeak voice name and base pitch (0-100) for ``voice`` and ``seed``.

    ``voice`` (one of :data:`VOICES`) names the variant; without it ``seed % 10`` picks
    one (0 is the plain ``cmn`` voice). ``(seed // 10) % 5`` picks a pitch offset, so 50
    distinct voices repeat with period 50, and seed 0 is espeak's default Mandarin voice
    at its default pitch. A ``voice`` that is not one of :data:`VOICES` (the main
    engine's speaker string, when this voice speaks a segment in its place) is ignored.
    """
    if voice in VOICES:
        variant = _VARIANTS[VOICES.index(voice)]
    else:
        variant = _VARIANTS[seed % len(_VARIANTS)]
    offset = _PITCH_OFFSETS[(seed // len(_VARIANTS)) % len(_PITCH_OFFSETS)]
    name = f"{VOICE_NAME}+{variant}" if variant else VOICE_NAME
    return name, _DEFAULT_PITCH + offset


def check_voice(voice: str) -> None:
    """Raise ValueError unless ``voice`` is one of :data:`VOICES`, listing them."""
    if voice not in VOICES:
        raise ValueError(
            f"the fallback voice has no voice {voice[:40]!r}; it accepts: {', '.join(VOICES)}"
        )


def rate_for_speed(speed: float) -> int:
    """Return espeak's rate in words per minute for a speed factor (1.0 = normal).

    Clamped to espeak's range of 80-450 wpm, i.e. speed factors of about 0.46-2.57.
    Raises :class:`ValueError` for a speed that is not a positive finite number.
    """
    if not math.isfinite(speed) or speed <= 0:
        raise ValueError(f"speed must be a positive number, got {speed!r}")
    return min(max(round(_NORMAL_RATE_WPM * speed), _MIN_RATE_WPM), _MAX_RATE_WPM)


class _Library:
    """The process's one libespeak-ng synthesiser. Use only while holding ``_lock``."""

    def __init__(self) -> None:
        import espeakng_loader

        try:
            # RTLD_LOCAL, and no other handle on it anywhere: close() must really unload it.
            lib = ctypes.CDLL(espeakng_loader.get_library_path(), mode=ctypes.RTLD_LOCAL)
            data_path = espeakng_loader.get_data_path()
        except (OSError, RuntimeError) as exc:
            raise EspeakError(f"cannot load libespeak-ng: {exc}") from exc
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetSynthCallback.argtypes = [_SynthCallback]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        lib.espeak_Synth.restype = ctypes.c_int
        # buflength 0: the library's default 200 ms callback buffer.
        sample_rate_hz = lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, 0, data_path.encode(), _INITIALIZE_DONT_EXIT
        )
        if sample_rate_hz <= 0:
            raise EspeakError(f"espeak_Initialize failed ({sample_rate_hz}) with data {data_path}")
        self.sample_rate_hz: int = sample_rate_hz
        lib.espeak_Terminate.restype = ctypes.c_int
        self._lib: Any = lib
        self._pieces: list[bytes] = []
        self._words: list[tuple[int, int]] = []  # (0-based character, ms) per word event
        # Kept on self: the C library holds only a raw pointer to the thunk.
        self._callback = _SynthCallback(self._collect)
        lib.espeak_SetSynthCallback(self._callback)

    def _collect(self, wav: Any, num_samples: int, events: Any) -> int:
        if num_samples > 0 and wav:
            self._pieces.append(ctypes.string_at(wav, num_samples * 2))
        if events:
            k = 0
            while (event := events[k]).type != _EVENT_LIST_TERMINATED:
                if event.type == _EVENT_WORD:
                    self._words.append((event.text_position - 1, event.audio_position))
                k += 1
        return 0  # 0: continue synthesis

    def synthesize(
        self, text: str, voice_name: str, rate_wpm: int, pitch: int
    ) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """The whole utterance as int16 samples at ``sample_rate_hz``, and where its words
        start: (0-based character in ``text``, milliseconds)."""
        # The voice first, so rate and pitch apply to the voice just loaded.
        self._check("espeak_SetVoiceByName", self._lib.espeak_SetVoiceByName(voice_name.encode()))
        self._check("espeak_SetParameter", self._lib.espeak_SetParameter(_RATE, rate_wpm, 0))
        self._check("espeak_SetParameter", self._lib.espeak_SetParameter(_PITCH, pitch, 0))
        # NUL would end the C string early; no espeakSSML flag, so markup is read as text.
        data = text.replace("\0", "").encode("utf-8")
        self._pieces = []
        self._words = []
        try:
            status = self._lib.espeak_Synth(
                data, len(data) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8 | _ENDPAUSE, None, None
            )
            self._check("espeak_Synth", status)
            return np.frombuffer(b"".join(self._pieces), dtype=np.int16), self._words
        finally:
            self._pieces = []
            self._words = []

    @staticmethod
    def _check(call: str, status: int) -> None:
        if status != _EE_OK:
            raise EspeakError(f"{call} failed with status {status}")

    def close(self) -> None:
        """Terminate and unload the library, so the next load starts from its initial state."""
        lib, self._lib = self._lib, None
        if lib is None:
            return
        lib.espeak_Terminate()
        _ctypes.dlclose(lib._handle)


# libespeak-ng keeps its synthesiser in C globals (voice, parameters, output callback,
# and state that carries from one utterance into the next: its pitch-flutter phase and
# more, which made repeats of one request differ). It is not reentrant, so every use
# holds this lock; and every synthesis loads the library afresh and unloads it after
# (~6 ms here), so the same request gives the same samples, whatever ran before.
_lock = threading.Lock()
_native_rate_hz: int | None = None


@contextlib.contextmanager
def _fresh_library() -> Iterator[_Library]:
    """libespeak-ng in its initial state, unloaded on exit. Hold ``_lock``."""
    global _native_rate_hz
    library = _Library()
    try:
        _native_rate_hz = library.sample_rate_hz
        yield library
    finally:
        library.close()


def _native_rate() -> int:
    """libespeak-ng's output rate (loading it once to ask). Hold ``_lock``."""
    if _native_rate_hz is None:
        with _fresh_library():
            pass
    assert _native_rate_hz is not None
    return _native_rate_hz


class EspeakEngine:
    """Mandarin speech from libespeak-ng, resampled to 24 kHz and yielded in ~100 ms chunks.

    Voice: ``request.voice.voice`` (one of :data:`VOICES`) or else ``request.voice.seed``
    picks a variant, and the seed a base pitch, deterministically (see
    :func:`voice_for_seed`); ``request.voice.speed`` scales the speaking rate (see
    :func:`rate_for_speed`). Synthesis of a sentence
    takes a few milliseconds, so a segment is synthesised whole and ``should_stop`` is
    polled between chunks.

    Deterministic: the same request gives the same samples. libespeak-ng keeps its
    pitch-flutter phase (``static int Flutter_ix`` in wavegen.c) and other state in C
    statics that carry over from one utterance to the next and that neither a voice
    change nor ``espeak_Initialize`` resets, so each synthesis loads the library afresh
    and unloads it after (see ``_fresh_library``).
    """

    name: str = "espeak"
    sample_rate_hz: int = 24_000
    # Each synthesize() renders and resamples its whole segment before its first yield,
    # so the worker may interleave generators.
    interleaves = True

    def __init__(self, chunk_ms: int = 100) -> None:
        if chunk_ms <= 0:
            raise ValueError(f"chunk_ms must be positive, got {chunk_ms}")
        self.chunk_samples = self.sample_rate_hz * chunk_ms // 1000
        with _lock:
            native_rate_hz = _native_rate()
        # One per engine: the engine runs on one thread, and flush() resets it per segment.
        self._resampler = Resampler(native_rate_hz, self.sample_rate_hz)
        self._closed = False

    @staticmethod
    def available() -> bool:
        """Return whether libespeak-ng and its data load and initialise in this process."""
        try:
            with _lock:
                _native_rate()
        except (ImportError, EspeakError) as exc:
            logger.warning("espeak voice unavailable: %s", exc)
            return False
        return True

    def warm_up(self) -> None:
        """Synthesise a short phrase so the voice data is loaded and paged in."""
        for _ in self.synthesize(SynthesisRequest("你好。", VoiceSpec()), lambda: False):
            pass

    def synthesize(
        self, request: SynthesisRequest, should_stop: Callable[[], bool]
    ) -> Iterator[np.ndarray | WordMarks]:
        """Yield where its words start (:class:`WordMarks`, from espeak-ng's word events),
        then the segment as float32 chunks of ``chunk_samples`` (the last may be shorter).

        Returns early, without raising, once ``should_stop()`` is true.
        """
        if self._closed:
            raise EspeakError("engine is closed")
        voice_name, pitch = voice_for_seed(request.voice.seed, request.voice.voice)
        rate_wpm = rate_for_speed(request.voice.speed)
        # ChatTTS control tags ([uv_break], [laugh], ...) mean nothing to espeak, which
        # would read them out letter by letter.
        text = strip_tags(request.text)
        if should_stop() or not text.strip():
            return
        # The lock covers only the C call, never a yield: a consumer that pauses this
        # generator must not block other engines' synthesis.
        with _lock, _fresh_library() as library:
            pcm, words = library.synthesize(text, voice_name, rate_wpm, pitch)
        native = pcm.astype(np.float32) / np.float32(32768.0)
        audio = np.concatenate((self._resampler.process(native), self._resampler.flush()))
        if text == request.text and words:  # offsets in what was asked (no tags stripped)
            rate = self.sample_rate_hz
            yield WordMarks(tuple((char, ms * rate // 1000) for char, ms in words))
        for start in range(0, len(audio), self.chunk_samples):
            if should_stop():
                return
            yield audio[start : start + self.chunk_samples]

    def check_voice(self, voice: str) -> None:
        """Raise ValueError unless ``voice`` is one of :data:`VOICES` (the error lists them)."""
        check_voice(voice)

    def release_idle_memory(self) -> None:
        """Nothing to free: the library's buffers are a few hundred KB."""

    def voice_from_clip(self, audio: np.ndarray, sample_rate_hz: int) -> str:
        raise ValueError("this voice cannot be made from a clip (ChatTTS can)")

    def batcher(self, max_batch: int) -> None:
        """It does not batch: its segments interleave a chunk at a time."""
        return None

    def close(self) -> None:
        """Mark this engine unusable; the shared library stays loaded for other engines."""
        self._closed = True
