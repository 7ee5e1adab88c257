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

import atexit
import contextlib
import logging
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from server.engines import espeak_lib
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


def identity(chunk_samples: int = 2400) -> str:
    """What, besides the request, decides this engine's samples (the phrase cache's key):
    the packaged library's version and the chunking."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        library = version("espeakng-loader")
    except PackageNotFoundError:
        library = "unknown"
    return f"espeak-ng/espeakng-loader {library}/24000 Hz/{chunk_samples} a chunk"


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


# libespeak-ng keeps its synthesiser in C globals (voice, parameters, output callback,
# and state that carries from one utterance into the next: its pitch-flutter phase and
# more, which made repeats of one request differ). Neither a voice change nor
# espeak_Initialize resets that state, and unloading the library to reset it leaks
# ~15-180 KB of heap per cycle. So the library lives in a small helper process that
# loads it once and never synthesises itself: each synthesis runs in a fork of that
# helper, which starts from the same untouched state, answers, and exits (~2 ms). The
# helper is single-threaded, so forking it is safe; this lock serialises its pipe.
_lock = threading.Lock()
_helper: _ForkServer | None = None


class _ForkServer:
    """The helper process (``python -m server.engines.espeak_lib``), over its stdin/stdout."""

    def __init__(self) -> None:
        import subprocess
        import sys

        self._process = subprocess.Popen(
            [sys.executable, "-m", "server.engines.espeak_lib"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._process.stdin is not None and self._process.stdout is not None
        self._in, self._out = self._process.stdin, self._process.stdout
        answer = self._answer()
        if isinstance(answer, str):
            self.close()
            raise EspeakError(answer)
        self.sample_rate_hz: int = answer

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def _answer(self) -> Any:
        try:
            return espeak_lib.read_message(self._out)
        except EOFError as exc:
            raise EspeakError(str(exc)) from None

    def synthesize(
        self, text: str, voice_name: str, rate_wpm: int, pitch: int
    ) -> tuple[np.ndarray, list[tuple[int, int]]]:
        espeak_lib.write_message(self._in, (text, voice_name, rate_wpm, pitch))
        answer = self._answer()
        if isinstance(answer, str):
            raise EspeakError(answer)
        pcm, words = answer
        return np.frombuffer(pcm, dtype=np.int16), words

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            espeak_lib.write_message(self._in, None)
            self._in.close()
        try:
            self._process.wait(5)
        except Exception:
            self._process.kill()
            self._process.wait()
        with contextlib.suppress(OSError):
            self._out.close()


def _fork_server() -> _ForkServer:
    """The helper, started on first use (again if it died). Hold ``_lock``."""
    global _helper
    if _helper is None or not _helper.alive:
        if _helper is None:
            atexit.register(_stop_helper)
        _helper = _ForkServer()
    return _helper


def _stop_helper() -> None:
    with _lock:
        if _helper is not None:
            _helper.close()


def _native_rate() -> int:
    """libespeak-ng's output rate. Hold ``_lock``."""
    return _fork_server().sample_rate_hz


#: The speed factors espeak's own rate covers (80-450 words a minute, 175 normal).
SPEED_RANGE = (_MIN_RATE_WPM / _NORMAL_RATE_WPM, _MAX_RATE_WPM / _NORMAL_RATE_WPM)


class EspeakEngine:
    """Mandarin speech from libespeak-ng, resampled to 24 kHz and yielded in ~100 ms chunks.

    Voice: ``request.voice.voice`` (one of :data:`VOICES`) or else the voice's seed (its
    ``speaker_seed`` when set) picks a variant, and that seed a base pitch,
    deterministically (see :func:`voice_for_seed`); ``request.voice.speed`` scales the
    speaking rate (see :func:`rate_for_speed`). Synthesis of a sentence takes a few
    milliseconds, so a segment is synthesised whole and ``should_stop`` is polled
    between chunks.

    Deterministic: the same request gives the same samples. libespeak-ng keeps its
    pitch-flutter phase (``static int Flutter_ix`` in wavegen.c) and other state in C
    statics that carry over from one utterance to the next, so each synthesis runs in a
    fork of a helper process that holds the library untouched (see ``_ForkServer``).
    """

    name: str = "espeak"
    sample_rate_hz: int = 24_000
    speed_range = SPEED_RANGE
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
        """Synthesise a short phrase: the helper process starts, and the voice data it
        loads is paged in before the first real segment."""
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
        voice_name, pitch = voice_for_seed(request.voice.speaker_key, request.voice.voice)
        rate_wpm = rate_for_speed(request.voice.speed)
        # ChatTTS control tags ([uv_break], [laugh], ...) mean nothing to espeak, which
        # would read them out letter by letter.
        text = strip_tags(request.text)
        if should_stop() or not text.strip():
            return
        # The lock covers only the C call, never a yield: a consumer that pauses this
        # generator must not block other engines' synthesis.
        with _lock:
            pcm, words = _fork_server().synthesize(text, voice_name, rate_wpm, pitch)
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

    @property
    def identity(self) -> str:
        """Deterministic (see the class docstring): the phrase cache may serve it."""
        return identity(self.chunk_samples)

    def release_idle_memory(self) -> None:
        """Nothing to free: the library's buffers are a few hundred KB."""

    def voice_from_clip(self, audio: np.ndarray, sample_rate_hz: int) -> str:
        raise ValueError("this voice cannot be made from a clip (ChatTTS can)")

    def batcher(self, max_batch: int) -> None:
        """It does not batch: its segments interleave (a segment's audio, made at once, goes
        over in the step after its synthesis: ``--interleave-slice-ms``)."""
        return None

    def close(self) -> None:
        """Mark this engine unusable; the helper process stays for other engines (it ends
        with this process: its input closes)."""
        self._closed = True
