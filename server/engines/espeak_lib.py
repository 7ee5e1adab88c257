"""libespeak-ng through ctypes, and the helper process that runs it (see server.engines.espeak).

Kept apart from the engine, importing nothing but the standard library and
``espeakng_loader``: the helper (``python -m server.engines.espeak_lib``) stays small,
so forking it per synthesis is cheap.

Protocol on the helper's stdin/stdout: length-prefixed (4 bytes, big-endian) pickles.
It first writes the library's sample rate (or an error string), then answers each
request ``(text, voice_name, rate_wpm, pitch)`` with ``(pcm bytes, words)`` or an error
string, each from a fresh fork of itself, so every synthesis starts from the library's
state as loaded. ``None`` (or end of input) stops it.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import struct
import sys
from typing import IO, Any

__all__ = ["Library", "LibraryError", "read_message", "write_message"]


class LibraryError(Exception):
    """libespeak-ng could not be loaded or initialised, or refused a call."""


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


class Library:
    """The process's one libespeak-ng synthesiser. Use only while holding ``_lock``."""

    def __init__(self) -> None:
        import espeakng_loader

        try:
            lib = ctypes.CDLL(espeakng_loader.get_library_path())
            data_path = espeakng_loader.get_data_path()
        except (OSError, RuntimeError) as exc:
            raise LibraryError(f"cannot load libespeak-ng: {exc}") from exc
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
            raise LibraryError(f"espeak_Initialize failed ({sample_rate_hz}) with data {data_path}")
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
    ) -> tuple[bytes, list[tuple[int, int]]]:
        """The whole utterance as int16 samples (bytes) at ``sample_rate_hz``, and where its words
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
            return b"".join(self._pieces), self._words
        finally:
            self._pieces = []
            self._words = []

    @staticmethod
    def _check(call: str, status: int) -> None:
        if status != _EE_OK:
            raise LibraryError(f"{call} failed with status {status}")


def write_message(out: IO[bytes], message: object) -> None:
    data = pickle.dumps(message)
    out.write(struct.pack(">I", len(data)) + data)
    out.flush()


def read_message(stream: IO[bytes]) -> Any:
    header = stream.read(4)
    if len(header) < 4:
        raise EOFError("the espeak-ng helper's pipe closed")
    (size,) = struct.unpack(">I", header)
    return pickle.loads(stream.read(size))


def main() -> None:
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    try:
        library = Library()
    except Exception as exc:
        write_message(answers, f"{type(exc).__name__}: {exc}")
        return
    write_message(answers, library.sample_rate_hz)
    while True:
        try:
            request = read_message(requests)
        except EOFError:
            return
        if request is None:
            return
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: the library exactly as loaded
            os.close(read_end)
            try:
                answer: object = library.synthesize(*request)
            except Exception as exc:
                answer = f"{type(exc).__name__}: {exc}"
            with os.fdopen(write_end, "wb") as out:
                write_message(out, answer)
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as result:
            try:
                answer = read_message(result)
            except EOFError:
                answer = "the synthesis process died"
        os.waitpid(pid, 0)
        write_message(answers, answer)


if __name__ == "__main__":
    main()
