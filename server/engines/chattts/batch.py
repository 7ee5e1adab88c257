"""Continuous batching of ChatTTS: many utterances advance in one step of tensor work.

:class:`BatchedDecoder` is the generation loop of
:class:`~server.engines.chattts.decoder.StreamingDecoder` spread over a batch. A row
(:class:`Row`) is one utterance: it joins with its prompt prefilled alone (from position
0, into its own row of :class:`~server.engines.chattts.batch_gpt.BatchedGPT`'s store),
then steps with the others, and leaves when it ends or is closed.

A step is the same few hundred tensor operations whatever the batch size: the input
embeddings of every row's last tokens, one forward through the GPT, the heads, the
sampler for all rows at once (:class:`~server.engines.chattts.sampling.RowSampling`:
ChatTTS's temperature, repetition penalty, top-P, top-K, EOS below ``min_new_token``
and per-row seeds, drawn in one operation), and the bookkeeping (positions, steps,
histories, end flags) as in-place updates of preallocated tensors
(:class:`~server.engines.chattts.batch_rows.RowTable`). The host reads the device once
per step: every row's end flag together. From that it updates its own mirror of each
row's progress with numpy operations, and only rows whose chunk is due get Python
work: their window is vocoded (equal lengths in one call) and joined to what they sent
(:class:`~server.engines.chattts.vocoding.ChunkWindows`).

Shapes: on the CPU a step covers rows ``0 .. n - 1`` (``n`` one past the highest row in
use; free and sitting-out rows among them compute, and nothing of theirs is kept) and
attends over the longest active row's positions. With ``static_shapes`` (implied by
``cuda_graphs``) the row count and span are rounded up to buckets, so each step is one
of a few fixed-shape functions, which ``cuda_graphs`` captures once per bucket
(:mod:`server.engines.chattts.batch_graphs`); the CPU runs the very same function.

Same output: a prefill is the single-utterance arithmetic exactly and a step differs
from a batch of one only in how a GEMM over several rows rounds, so a seeded utterance
gives the same tokens alone or with others (tests/server/engines/chattts/test_batch_step.py). The
sampler's ``"fast"`` mode (serving's) keeps ChatTTS's tokens but for rounding ties;
``sampling="parity"`` is ChatTTS's warpers op for op (see the sampling module).

Not thread-safe: the engine thread drives it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from server.engines.chattts.batch_gpt import BatchedGPT
from server.engines.chattts.batch_graphs import MIN_SPAN, StepGraphs, bucket, buckets
from server.engines.chattts.batch_rows import RowTable
from server.engines.chattts.decoder import GenerationParams, StreamingDecoder
from server.engines.chattts.sampling import RowSampling
from server.engines.chattts.vocoding import ChunkWindows

logger = logging.getLogger(__name__)

__all__ = ["BatchedDecoder", "BatchedGPT", "Row"]


@dataclass(eq=False)
class Row:
    """One utterance in the batch: its settings, chunk windows and audio not yet taken.

    Its progress lives in the batch's tables while it holds a row (``row``); once closed,
    the last figures stay here.
    """

    params: GenerationParams
    windows: ChunkWindows
    prompt_tokens: int
    table: RowTable
    #: Its row of the batch (None before the prefill and after close).
    row: int | None = None
    #: The caller's object for this utterance (the engine's batcher keeps its own there).
    owner: Any = None
    chunks: list[np.ndarray] = field(default_factory=list)
    _steps: int = 0
    _done: bool = False

    @property
    def steps(self) -> int:
        """Tokens generated and kept (the EOS step is not one)."""
        return self._steps if self.row is None else int(self.table.host_steps[self.row])

    @property
    def done(self) -> bool:
        """Ended: EOS sampled or ``max_new_token`` reached."""
        return self._done if self.row is None else bool(self.table.host_done[self.row])

    @property
    def ids(self) -> torch.Tensor:
        """``(max_steps, num_vq)`` its tokens so far in the first :attr:`steps` rows."""
        if self.row is None:
            raise RuntimeError("the row is not in the batch")
        return self.table.ids[self.row]

    @property
    def hiddens(self) -> torch.Tensor:
        """``(max_steps, hidden)`` the GPT states that sampled its tokens, likewise."""
        if self.row is None:
            raise RuntimeError("the row is not in the batch")
        return self.table.hiddens[self.row]


class BatchedDecoder:
    """Generation and vocoding of many utterances at once; see the module docstring.

    ``stream`` is the :class:`StreamingDecoder` whose model, prompt building, heads and
    vocoder this uses. Calling contract: :meth:`open`, then :meth:`prefill` (first
    token), then :meth:`step` with any set of open, prefilled, unfinished rows, and
    :meth:`close` when a row leaves; :meth:`take_audio` returns what a row made since.
    """

    def __init__(
        self,
        stream: StreamingDecoder,
        *,
        max_batch: int,
        max_tokens: int,
        attention: str = "auto",
        batch_vocoder: bool = True,
        sampling: str = "fast",
        static_shapes: bool = False,
        cuda_graphs: bool = False,
    ) -> None:
        self.stream = stream
        self.generation = stream.generation
        self.options = stream.options
        self.gpt = BatchedGPT(
            stream.chat.gpt.gpt, max_rows=max_batch, max_tokens=max_tokens, attention=attention
        )
        if cuda_graphs and self.gpt.attention != "masked":
            raise ValueError("cuda_graphs needs the masked attention")
        self.batch_vocoder = batch_vocoder
        config = stream.chat.config.gpt
        self.num_vq = int(config.num_vq)
        self.eos_token = int(config.num_audio_tokens) - 1
        self.device = torch.device(stream.chat.device)
        self.static_shapes = static_shapes or cuda_graphs
        rows = self.gpt.rows
        self.table = RowTable(
            rows=rows, steps=1, num_vq=self.num_vq, hidden=int(config.hidden_size),
            device=self.device,
        )  # fmt: skip
        self.sampling = RowSampling(
            rows=rows, num_vq=self.num_vq, vocab=self.eos_token + 1, device=self.device,
            mode=sampling,
        )  # fmt: skip
        # ChatTTS's default top-K: a captured step then serves the default voice as is.
        self.sampling.candidates = min(self.eos_token + 1, max(self.options.top_k, 3))
        self._heads = self.generation.head_weights()
        self._one = torch.ones(1, dtype=torch.bool, device=self.device)
        self.graphs: StepGraphs | None = None
        if cuda_graphs:
            self.graphs = StepGraphs(self._advance, lambda: self.table.active, self.device)
        if self.static_shapes:
            # Fixed addresses for the graphs: every row and position allocated now.
            self.gpt.allocate()
            self._ensure(self.gpt.max_rows, max_tokens)
        #: Windows vocoded, and vocoder calls made (several windows in one call when batched).
        self.vocoded_windows = 0
        self.vocoder_calls = 0

    @torch.inference_mode()
    def prepare(self) -> None:
        """With ``cuda_graphs``, capture the step for every bucket now (largest first, so
        the smaller ones fit in the memory the larger reserved): the engine's warm-up
        calls this so that no request pays a capture."""
        if self.graphs is None:
            return
        try:
            for span in reversed(buckets(MIN_SPAN, self.gpt.max_tokens)):
                for n in reversed(buckets(1, self.gpt.max_rows)):
                    self.graphs.capture(n, span, self.sampling.candidates)
        except Exception:
            self._without_graphs()

    def _without_graphs(self) -> None:
        # Serve on: the same fixed-shape step, uncaptured.
        logger.exception("CUDA graph capture failed; the batched step runs without graphs")
        self.graphs = None

    # -- rows join and leave --------------------------------------------------------------

    def open(self, text: str, params: GenerationParams) -> tuple[Row, Any]:
        """A row for ``text`` (not yet in the store): its prompt is built now."""
        input_ids, attention_mask, embeds = self.generation.prompt(text, params)
        if not bool(attention_mask.all()):
            raise ValueError("a padded prompt cannot join the batch")
        row = Row(
            params=params,
            windows=ChunkWindows(self.options, params.max_new_token),
            prompt_tokens=int(input_ids.size(1)),
            table=self.table,
        )
        return row, embeds

    @torch.inference_mode()
    def prefill(self, row: Row, embeds: torch.Tensor) -> bool:
        """Put ``row`` in the store and sample its first token; False when the store is full."""
        if not self._place(row):
            return False
        self._prefill_alone(row, embeds)
        return True

    @torch.inference_mode()
    def prefill_many(self, rows: Sequence[Row], embeds: Sequence[torch.Tensor]) -> list[bool]:
        """:meth:`prefill` for several rows, their prompts in one forward
        (:meth:`BatchedGPT.prefill_many`): on a GPU, where a forward costs its launches,
        about what one prompt costs. False for a row the store had no room for."""
        placed = [
            (row, prompt) for row, prompt in zip(rows, embeds, strict=True) if self._place(row)
        ]
        if len(placed) == 1:  # alone: the lone prompt's forward (no padding to do)
            self._prefill_alone(*placed[0])
        elif placed:
            slots = [row.row for row, _ in placed]
            states = self.gpt.prefill_many(slots, [prompt for _, prompt in placed])  # type: ignore[arg-type]
            states = states.to(self.device, dtype=torch.float)
            for i, (row, _) in enumerate(placed):
                self._first_token(row, states[i : i + 1, : row.prompt_tokens])
        return [row.row is not None for row in rows]

    def _prefill_alone(self, row: Row, embeds: torch.Tensor) -> None:
        """A placed row's prompt in a forward of its own, then its first token."""
        assert row.row is not None
        states = self.gpt.prefill(row.row, embeds).to(self.device, dtype=torch.float)
        self._first_token(row, states)

    def _place(self, row: Row) -> bool:
        """Give ``row`` a row of the store and its sampling settings; False when full."""
        max_new = row.params.max_new_token
        slot = self.gpt.acquire(row.prompt_tokens + max_new)
        if slot is None:
            return False
        try:
            self._ensure(self.gpt.rows, max_new)
        except BaseException:
            self.gpt.release(slot)  # not the row's yet: close() would not free it
            raise
        row.row = slot
        grown = self.sampling.assign(slot, row.params, self.generation.chat.gpt.generator)
        if grown and self.graphs is not None:
            self.graphs.clear()  # more candidates: new shapes
        self.table.open(slot, row, row.prompt_tokens, max_new, row.windows.next_boundary)
        return True

    def _first_token(self, row: Row, states: torch.Tensor) -> None:
        """Sample a placed row's first token from its prompt's states ``(1, T, hidden)``."""
        slot = row.row
        assert slot is not None
        tokens = self.sampling.sample(
            self.generation.head_logits(states), slot, self.table.steps[slot : slot + 1]
        )
        kept = self.table.commit(slot, tokens, states[:, -1], self._one, self.eos_token)
        self.sampling.remember(slot, tokens, kept)
        self.table.advance_one(slot, bool(self.table.ended[slot]))
        if row.steps and (row.done or row.windows.due(row.steps)):
            self._vocode(np.array([slot]))

    def take_audio(self, row: Row) -> list[np.ndarray]:
        chunks, row.chunks = row.chunks, []
        return chunks

    @torch.inference_mode()
    def close(self, row: Row) -> None:
        """``row`` leaves (ended, cancelled or failed): its row is free for the next."""
        if row.row is not None:
            row._steps, row._done = row.steps, row.done
            self.table.close(row.row)
            self.gpt.release(row.row)
            row.row = None
        row.chunks = []

    def _ensure(self, rows: int, steps: int) -> None:
        if rows > self.table.rows or steps > self.table.max_steps:
            self.table.grow(rows, steps)
            if self.graphs is not None:
                self.graphs.clear()
        if rows > self.sampling.rows:
            self.sampling.grow(rows)

    # -- the step -------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self, rows: Sequence[Row], hurry: Sequence[bool] | None = None) -> list[Row]:
        """Advance each of ``rows`` by one token, together; vocode the chunks now due.

        ``hurry[i]``: row ``i``'s listener is short of audio (its next chunk is cut as
        soon as a minimal one is ready). Returns the rows that made audio or ended.
        """
        if not rows:
            return []
        try:
            slots = np.fromiter((row.row for row in rows), dtype=np.int64, count=len(rows))
        except TypeError:
            raise ValueError("step() before prefill(), or after close()") from None
        table = self.table
        if table.host_done[slots].any():
            raise ValueError("a finished row cannot step")
        high = self.gpt.high
        span = int(table.host_positions(high)[slots].max()) + 1
        if self.static_shapes:
            n = bucket(high, 1, self.gpt.max_rows)
            span = bucket(span, MIN_SPAN, self.gpt.max_tokens)
        else:
            n = high
            self.gpt.reserve(span)
        hurried = None if hurry is None else np.fromiter(hurry, dtype=bool, count=len(rows))
        table.set_active(slots, hurried, n)
        ended = None
        if self.graphs is not None:
            try:
                ended = self.graphs.run(n, span, self.sampling.candidates)
            except Exception:
                self._without_graphs()
        if ended is None:
            ended = self._advance(n, span)
        # The step's one read of the device: every row's end flag together.
        finished = table.advance(n, np.array(ended.tolist(), dtype=bool))
        due = table.due(n, self.options.first_chunk_steps)
        if due.any():
            self._vocode(np.flatnonzero(due))
        return [table.entries[slot] for slot in np.flatnonzero(due | finished).tolist()]

    def _advance(self, n: int, span: int) -> torch.Tensor:
        """The device work of a step for rows ``0 .. n - 1``, attention over ``span``
        positions: returns the rows' end flags ``(n,)``. A fixed-shape function of the
        tables for given ``n`` and ``span`` (what a CUDA graph captures)."""
        table = self.table
        last = table.last_ids[:n].view(n, 1, self.num_vq)
        embeds = self.generation.code_embeds(last)
        host_positions = None
        if self.gpt.attention == "rows":
            host_positions = table.host_positions(n)
        out = self.gpt.step(embeds, table.positions[:n], span, host_positions)
        states = out[:, 0].to(self.device, dtype=torch.float)
        logits = torch.stack([F.linear(states, weight) for weight in self._heads], dim=1)
        tokens = self.sampling.sample(logits, 0, table.steps[:n])
        kept = table.commit(0, tokens, states, table.active[:n], self.eos_token)
        self.sampling.remember(0, tokens, kept)
        return table.ended[:n]

    # -- vocoding -------------------------------------------------------------------------

    def _vocode(self, slots: np.ndarray) -> None:
        """Vocode the window due of each row in ``slots``, equal lengths together."""
        table = self.table
        due: dict[int, list[tuple[Row, int, int]]] = {}
        for slot in slots.tolist():
            row = table.entries[slot]
            first = row.windows.first_step()
            due.setdefault(row.steps - first, []).append((row, slot, first))
        for group in due.values():
            windows = [table.hiddens[slot, first : row.steps] for row, slot, first in group]
            if self.batch_vocoder:
                audio = self.stream.vocode_many(windows)
                self.vocoder_calls += 1
            else:
                audio = [self.stream.vocode(window) for window in windows]
                self.vocoder_calls += len(windows)
            self.vocoded_windows += len(windows)
            for (row, slot, first), samples in zip(group, audio, strict=True):
                chunk = row.windows.join(samples, first, row.steps, final=row.done)
                table.next_boundary[slot] = row.windows.next_boundary
                table.last_cut[slot] = row.windows.last_cut
                if chunk.size:
                    row.chunks.append(chunk)
