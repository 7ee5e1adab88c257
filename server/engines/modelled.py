"""An engine whose cost follows a model: capacity planning without a GPU.

:class:`ModelledEngine` sleeps what a step of ChatTTS costs on a given machine (``a + b * n``
for a batch of ``n``) and yields tone, so benchmarks (bench/capacity.py, bench/fleet.py)
measure the server, the scheduler and admission at a chosen engine speed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from server.engines.base import BatchRow, SynthesisRequest
from streaming.chunking import ChunkSchedule

_NO_AUDIO = np.zeros(0, np.float32)


class ModelledEngine:
    """A stand-in whose cost follows a model, for capacity benchmarks (bench/capacity.py).

    A GPT step of a batch of ``n`` rows costs ``step_a_s + step_b_s * n`` seconds
    (slept, so the GIL is free); a segment of ``c`` characters takes
    ``round(c * steps_per_char)`` steps, each 512 samples of tone (ChatTTS's 46.875
    steps per second of audio); a prefill costs ``prefill_s`` (default ``step_a_s``), prompts
    prefilled together ``prefill_s + b * n``. A
    batched step or prefill spends ``host_share`` of its cost holding the GIL (Python
    busy work, as an engine's host work dispatching a step's operations does) and sleeps
    the rest (a device's time, the GIL free). ``mode`` picks the design it serves:

    - ``"batched"``: continuous batching (:meth:`batcher`), chunks on ChatTTS's schedule;
    - ``"interleave"``: a ``synthesize`` generator per segment, one row per step, chunks on
      the same schedule; the worker interleaves segments a chunk at a time;
    - ``"whole"``: the seed article's design: each segment made whole, one at a time.
    """

    name = "modelled"
    sample_rate_hz = 24_000
    samples_per_step = 512
    #: One cycle of a 1 Hz tone at 0.3 of full scale, one second of samples: any integral
    #: frequency's samples are entries of it (:meth:`_tone`).
    _cycle = (0.3 * np.sin(2 * np.pi * np.arange(sample_rate_hz) / sample_rate_hz)).astype(
        np.float32
    )

    def __init__(
        self,
        *,
        step_a_s: float,
        step_b_s: float,
        mode: str = "batched",
        steps_per_char: float = 10.4,
        prefill_s: float | None = None,
        host_share: float = 0.0,
        schedule: ChunkSchedule | None = None,
    ) -> None:
        if mode not in ("batched", "interleave", "whole"):
            raise ValueError("mode must be batched, interleave or whole")
        self.step_a_s = step_a_s
        self.step_b_s = step_b_s
        self.mode = mode
        self.steps_per_char = steps_per_char
        # A prompt is one forward: as overhead-bound as a step on a GPU.
        self.prefill_s = step_a_s if prefill_s is None else prefill_s
        if not 0.0 <= host_share <= 1.0:
            raise ValueError("host_share must be between 0 and 1")
        self.host_share = host_share
        self.schedule = schedule or ChunkSchedule()
        self._banks: dict[int, np.ndarray] = {}  # a tone by frequency (_bank)

    @property
    def interleaves(self) -> bool:
        return self.mode == "interleave"

    def warm_up(self) -> None:
        """Every frequency's tone made (:meth:`_bank`; ~0.1 s, ~70 MB), as a real engine
        loads its weights before serving: not in the engine thread in the middle of a
        benchmark's burst, ~0.4 ms a seed not seen before."""
        for freq_hz in range(200, 500):
            self._bank(freq_hz)

    def check_voice(self, voice: str) -> None:
        """Every voice is accepted."""

    def release_idle_memory(self) -> None:
        pass

    def _steps(self, request: SynthesisRequest) -> int:
        return max(1, round(len(request.text) * self.steps_per_char))

    def _tone(self, first_step: int, steps: int, seed: int) -> np.ndarray:
        """``steps`` steps of the seed's tone from ``first_step`` on, a slice of it.

        A GPU engine's audio is made on the device and the host only takes it; working out
        ``sin`` here, in the engine thread under the GIL, would charge the server's
        process ~1.3 ms of CPU for every 96-step chunk (measured: a burst of 448 streams
        spent more of the engine thread on tone than on its steps). The tone is looked up
        in a table of one cycle, once for each frequency (:meth:`_bank`); the same
        samples as ``sin`` to float32 rounding."""
        return self._tones([(first_step, steps, seed)])[0]

    def _tones(self, asked: Sequence[tuple[int, int, int]]) -> list[np.ndarray]:
        """:meth:`_tone` for each ``(first_step, steps, seed)`` of ``asked``, views of one
        array: ChatTTS's batched engine vocodes the rows due together and copies their
        audio to the host once (``Vocoder.vocode_many``, views of one array too), and so
        does this model: each chunk is a slice of its frequency's tone (:meth:`_bank`),
        and the slices are copied out together, a memory copy, about what a device's
        copy to the host costs the host. (ChatTTS also joins each row's window with its
        last, a few NumPy calls a row, which this model leaves out.) Working the samples
        out instead, the phase of each in 64-bit integers, cost ~20 ns a sample: a step
        due for 150,000 samples took ~3 ms of the engine thread, for a device's copy of
        ~30 us. A chunk longer than a bank (a whole segment, ``mode="whole"``) is worked
        out so (:meth:`_phases`)."""
        per_step = self.samples_per_step
        longest = self.schedule.max_steps * per_step
        pieces = []
        for first_step, steps, seed in asked:
            freq_hz, start, size = 200 + seed % 300, first_step * per_step, steps * per_step
            if size > longest:
                pieces.append(self._phases(start, size, freq_hz))
                continue
            bank = self._bank(freq_hz)
            offset = start % (bank.size - longest)  # its period
            pieces.append(bank[offset : offset + size])
        audio = np.concatenate(pieces) if pieces else _NO_AUDIO
        ends = np.cumsum([piece.size for piece in pieces]).tolist()
        return [audio[end - piece.size : end] for end, piece in zip(ends, pieces, strict=True)]

    def _bank(self, freq_hz: int) -> np.ndarray:
        """The ``freq_hz`` tone from phase 0: one period (``rate / gcd(f, rate)``
        samples), then as many samples again as the schedule's longest chunk, so that a
        chunk starting anywhere in the period is a slice. Made when first asked for
        (~0.4 ms; all of them at :meth:`warm_up`) and kept: 300 frequencies, ~0.3 MB
        each at the most."""
        bank = self._banks.get(freq_hz)
        if bank is None:
            rate = self.sample_rate_hz
            period = rate // math.gcd(freq_hz, rate)
            longest = self.schedule.max_steps * self.samples_per_step
            # One period worked out, then repeated (np.resize repeats an array).
            bank = np.resize(self._phases(0, period, freq_hz), period + longest)
            self._banks[freq_hz] = bank
        return bank

    def _phases(self, start: int, size: int, freq_hz: int) -> np.ndarray:
        """Samples ``start`` to ``start + size`` of the ``freq_hz`` tone: sample ``n``'s
        phase is ``f * n mod rate``, an entry of the one-cycle table."""
        phase = np.arange(start, start + size, dtype=np.int64)
        phase *= freq_hz
        np.remainder(phase, self.sample_rate_hz, out=phase)
        return self._cycle.take(phase)

    def synthesize(
        self, request: SynthesisRequest, should_stop: Callable[[], bool]
    ) -> Iterator[np.ndarray]:
        total = self._steps(request)
        step_s = self.step_a_s + self.step_b_s
        time.sleep(self.prefill_s)
        if self.mode == "whole":
            time.sleep(total * step_s)
            yield self._tone(0, total, request.voice.seed)
            return
        done, index = 0, 0
        while done < total and not should_stop():
            steps = min(self.schedule.size(index), total - done)
            time.sleep(steps * step_s)
            yield self._tone(done, steps, request.voice.seed)
            done, index = done + steps, index + 1

    def close(self) -> None:
        pass

    def voice_from_clip(self, audio: np.ndarray, sample_rate_hz: int) -> str:
        raise ValueError("this voice cannot be made from a clip (ChatTTS can)")

    def batcher(self, max_batch: int) -> _ModelledBatcher | None:
        return _ModelledBatcher(self, max_batch) if self.mode == "batched" else None


class _ModelledBatcher:
    """The batched side of :class:`ModelledEngine`: a step costs ``a + b * n``."""

    def __init__(self, engine: ModelledEngine, max_batch: int) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self.max_batch_seen = 0

    def open(self, request: SynthesisRequest) -> BatchRow:
        engine = self.engine
        return BatchRow(
            request, state=_ModelledRow(engine._steps(request), engine.schedule.size(0))
        )

    def prefill(self, row: BatchRow) -> None:
        self._spend(self.engine.prefill_s)
        self._advance([row])

    def prefill_many(self, rows: Sequence[BatchRow]) -> None:
        """Prompts in one forward: one prompt's cost, and ``b`` a row as a step's."""
        self._spend(self.engine.prefill_s + self.engine.step_b_s * len(rows))
        self._advance(rows)

    def step(self, rows: Sequence[BatchRow]) -> None:
        self.max_batch_seen = max(self.max_batch_seen, len(rows))
        self._spend(self.engine.step_a_s + self.engine.step_b_s * len(rows))
        self._advance(rows)

    def _advance(self, rows: Sequence[BatchRow]) -> None:
        """One token for each of ``rows``; the chunks now due made together (_tones)."""
        first = self.engine.schedule.size(0)
        due: list[tuple[BatchRow, _ModelledRow]] = []
        for row in rows:
            model: _ModelledRow = row.state
            model.steps += 1
            hurried = row.hurry and model.steps - model.emitted >= first
            if hurried or model.steps in (model.boundary, model.total):
                due.append((row, model))
            row.done = model.steps >= model.total
        if not due:
            return
        tones = self.engine._tones(
            [(m.emitted, m.steps - m.emitted, row.request.voice.seed) for row, m in due]
        )
        for (row, model), tone in zip(due, tones, strict=True):
            row.chunks.append(tone)
            model.emitted = model.steps
            model.index += 1
            model.boundary = model.steps + self.engine.schedule.size(model.index)

    def close(self, row: BatchRow) -> None:
        pass

    def _spend(self, cost_s: float) -> None:
        """``cost_s``: the host's share holding the GIL, then the device's asleep."""
        host_s = cost_s * self.engine.host_share
        if host_s > 0:
            end = time.perf_counter() + host_s
            while time.perf_counter() < end:
                pass
        time.sleep(cost_s - host_s)

    def memory_bytes(self) -> int | None:
        return None


@dataclass
class _ModelledRow:
    total: int
    boundary: int
    steps: int = 0
    emitted: int = 0
    index: int = 0


def build_modelled(**options: Any) -> tuple[ModelledEngine, bool, None]:
    """A factory's answer for ``ModelledEngine(**options)`` (``functools.partial`` of it
    pickles, for ``--engine-process``)."""
    return ModelledEngine(**options), False, None
