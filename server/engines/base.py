"""The engine interface: what the worker and the session know about any speech engine.

An engine is synchronous and single-threaded by contract: the worker calls every method
from one dedicated thread, one synthesis at a time. Nothing here may touch the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from streaming.errors import TTSError


@dataclass(frozen=True)
class VoiceSpec:
    """Everything that fixes how a context sounds; the same for all of its segments.

    ``voice`` is an engine-specific speaker string (for ChatTTS: an encoded speaker
    embedding as returned by ``Chat.sample_random_speaker()``; for espeak: a variant
    name) or ``None``; ``speaker_seed`` (when set, and ``voice`` is not) names the speaker
    that seed samples; otherwise ``seed`` fixes both the sampled speaker and the sampling
    RNG. ``speed`` is a factor, 1.0 being the engine's normal rate. A named voice may add
    a reference clip (ChatTTS: ``reference``, its encoded audio, and ``transcript``) and
    sampling settings of its own (None: the engine's).
    """

    voice: str | None = None
    seed: int = 0
    speed: float = 1.0
    speaker_seed: int | None = None
    reference: str | None = None
    transcript: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None

    @property
    def speaker_key(self) -> int:
        """The seed that picks the sampled speaker (when ``voice`` names none)."""
        return self.seed if self.speaker_seed is None else self.speaker_seed

    def retry(self) -> VoiceSpec:
        """The same speaker with another sampling seed, derived from this one (the same
        every time, so a retried segment is as reproducible as its seed): for a segment
        whose first try made no audio."""
        return replace(self, seed=derived_seed(self.seed), speaker_seed=self.speaker_key)


def derived_seed(seed: int) -> int:
    """Another seed in 0..2**31-2, a fixed function of ``seed`` (Knuth's multiplicative
    hash, so neighbouring seeds stay apart), never ``seed`` itself."""
    derived = (seed * 2654435761 + 0x9E3779B9) % (2**31 - 1)
    return derived if derived != seed else (derived + 1) % (2**31 - 1)


@dataclass(frozen=True)
class SynthesisRequest:
    """One segment of text to speak, already normalised to what the engine can say."""

    text: str
    voice: VoiceSpec
    #: Spoken by the fallback voice from the start (a context the server degraded).
    fallback: bool = False


@dataclass(frozen=True)
class WordMarks:
    """Where the engine says words start: ``(offset in SynthesisRequest.text, sample in
    the segment's audio)`` pairs. An engine that knows (espeak-ng) may yield one before
    the segment's chunks; the server then times the segment's words by them instead of
    estimating (streaming.timestamps)."""

    marks: tuple[tuple[int, int], ...]


def audio_only(chunks: Iterable[np.ndarray | WordMarks]) -> Iterator[np.ndarray]:
    """The audio chunks of a ``synthesize`` generator, without its word marks."""
    return (chunk for chunk in chunks if not isinstance(chunk, WordMarks))


@dataclass(eq=False)
class BatchRow:
    """One segment in a batch: what the worker and a :class:`Batcher` share about it.

    The batcher appends audio (and an engine's :class:`WordMarks`) to ``chunks`` (the
    worker takes them after each call), sets ``done`` when the segment has ended, or
    ``error`` when it failed on this row alone; ``state`` is the batcher's own
    per-row data. ``should_stop`` turns true when the segment's listener left
    (the worker sets it before the prefill).
    """

    request: SynthesisRequest
    chunks: list[np.ndarray | WordMarks] = field(default_factory=list)
    prefilled: bool = False
    #: Set by the worker before a step: its listener is short of audio, so the next
    #: chunk should be cut as soon as a minimal one is ready, not at its scheduled size.
    hurry: bool = False
    done: bool = False
    error: BaseException | None = None
    state: Any = None
    should_stop: Callable[[], bool] = field(default=lambda: False, repr=False)


class Batcher(Protocol):
    """An engine's continuous-batching side: many rows advance in one step.

    The worker calls it from the engine thread only: :meth:`open` when a segment is
    admitted, :meth:`prefill` once before its first step (its first token), :meth:`step`
    for the rows to advance together (already prefilled, not done), and
    :meth:`close` when an row leaves (done, failed or cancelled), between steps.

    A batcher may also have ``prefill_many(rows)``: several rows' prefills in one go (one
    forward for their prompts), setting ``error`` on a row that cannot join; the worker
    then uses it for the rows joining in a round (``--prefill-together``).
    """

    @property
    def max_batch(self) -> int:
        """Most rows one step can take."""
        ...

    def open(self, request: SynthesisRequest) -> BatchRow: ...

    def prefill(self, row: BatchRow) -> None: ...

    def step(self, rows: Sequence[BatchRow]) -> None:
        """Advance each by one step; a failure of the whole step raises."""
        ...

    def close(self, row: BatchRow) -> None: ...

    def memory_bytes(self) -> int | None:
        """Accelerator memory allocated now (None on the CPU): the memory curve by batch."""
        ...


class Cancelled(TTSError):
    """Raised inside an engine when ``should_stop()`` turned true mid-synthesis."""

    code = "cancelled"


#: The speeds an engine's own rate control covers unless it says otherwise (its
#: ``speed_range``): ChatTTS's ``[speed_N]`` prompts. Beyond, the server time-stretches.
DEFAULT_SPEED_RANGE = (0.5, 2.0)


def native_speed_range(engine: object) -> tuple[float, float]:
    """The speed factors ``engine`` makes itself (its ``speed_range``, else the default)."""
    found: tuple[float, float] = getattr(engine, "speed_range", DEFAULT_SPEED_RANGE)
    return found


class Engine(Protocol):
    """A speech engine: text segment in, float32 mono chunks at ``sample_rate_hz`` out.

    An engine may say which speed factors its own rate control covers (``speed_range``,
    see :func:`native_speed_range`); the server stretches the rest."""

    #: Short stable name, shown on /ready and in metrics ("chattts", "espeak", ...).
    name: str
    #: Native output rate of the chunks ``synthesize`` yields.
    sample_rate_hz: int

    def warm_up(self) -> None:
        """Run one short synthesis so the first real request pays no lazy start-up cost."""

    def synthesize(
        self, request: SynthesisRequest, should_stop: Callable[[], bool]
    ) -> Iterator[np.ndarray | WordMarks]:
        """Yield float32 mono chunks (values nominally in [-1, 1]) as they are produced
        (and, from an engine that knows, one :class:`WordMarks` before them).

        ``should_stop`` is polled between units of work; when it returns true the
        generator stops early (returning, or raising :class:`Cancelled`). Chunks may be
        empty. The generator may be closed early by the caller.
        """
        ...

    @property
    def interleaves(self) -> bool:
        """``synthesize`` generators are independent, so the worker may advance several
        alternately on the engine thread."""
        ...

    def check_voice(self, voice: str) -> None:
        """Raise ValueError for a ``voice`` this engine cannot use, saying what it accepts.

        Called from the event loop before any work is queued: cheap and read-only.
        """

    def release_idle_memory(self) -> None:
        """Free cached memory after an idle period (a no-op where there is none)."""

    def voice_from_clip(self, audio: np.ndarray, sample_rate_hz: int) -> str:
        """A reference voice from a spoken clip (mono float32): what ``VoiceSpec.reference``
        holds. Runs on the engine thread; raises ValueError when the engine cannot."""
        ...

    def batcher(self, max_batch: int) -> Batcher | None:
        """Its batching side for up to ``max_batch`` rows, or None if it does not batch
        (then the worker interleaves ``synthesize`` generators). Called once, on the
        engine thread, after warm-up."""

    def close(self) -> None:
        """Release the model (GPU memory, threads); the engine is unusable afterwards."""
