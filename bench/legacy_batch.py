"""The batched step as it was before issue 21 (commit 6acd143): the host-overhead baseline.

Kept callable for ``bench/host_overhead.py`` only: each row draws with its own
generator, reads its EOS flag from the device, and its repetition-penalty window is
assembled in Python, row by row, every step. The server uses
:mod:`server.engines.chattts.batch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from server.engines.chattts.decoder import GenerationParams, StreamingDecoder
from server.engines.chattts.generation import Sampler
from server.engines.chattts.static_cache import attend, layer_inputs, layer_output
from server.engines.chattts.vocoding import ChunkWindows

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["LegacyBatchedDecoder"]

_INITIAL_ROWS = 4
_MAX_GROUP_ROWS = 150  # x 4 codebooks stays below ChatTTS's 625-row penalty guard
_INITIAL_TOKENS = 1024


class BatchedGPT:
    """Prefill and batched one-token steps of ChatTTS's ``LlamaModel`` on rows of one store."""

    def __init__(
        self, model: Any, *, max_rows: int, max_tokens: int, attention: str = "auto"
    ) -> None:
        if max_rows < 1 or max_tokens < 2:
            raise ValueError("max_rows must be >= 1 and max_tokens >= 2")
        if attention not in ("auto", "rows", "masked"):
            raise ValueError("attention must be auto, rows or masked")
        self.model = model
        config = model.config
        self.layers = list(model.layers[: config.num_hidden_layers])
        first = self.layers[0].self_attn
        self.head_dim = int(first.head_dim)
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.scaling = float(first.scaling)
        self.max_rows = max_rows
        self.max_tokens = max_tokens
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        if attention == "auto":
            attention = "masked" if self.device.type == "cuda" else "rows"
        self.attention = attention
        self.keys = self._store(min(_INITIAL_ROWS, max_rows), min(_INITIAL_TOKENS, max_tokens))
        self.values = torch.zeros_like(self.keys)
        self._used: set[int] = set()

    def _store(self, rows: int, tokens: int) -> torch.Tensor:
        shape = (len(self.layers), rows, self.kv_heads, tokens, self.head_dim)
        return torch.zeros(shape, dtype=self.dtype, device=self.device)

    @property
    def rows(self) -> int:
        return int(self.keys.size(1))

    @property
    def tokens(self) -> int:
        return int(self.keys.size(3))

    def acquire(self, tokens: int) -> int | None:
        """A free row for an utterance of up to ``tokens`` positions, or None (full, too long)."""
        if tokens > self.max_tokens:
            return None
        if len(self._used) >= self.rows:
            if self.rows >= self.max_rows:
                return None
            self._grow(rows=min(self.max_rows, 2 * self.rows))
        row = min(r for r in range(self.rows) if r not in self._used)
        self._used.add(row)
        return row

    def release(self, row: int) -> None:
        self._used.discard(row)

    def reserve(self, tokens: int) -> None:
        """Make room for position ``tokens - 1`` in every row (doubling, once in a while)."""
        if tokens > self.tokens:
            self._grow(tokens=min(self.max_tokens, max(tokens, 2 * self.tokens)))

    def _grow(self, *, rows: int | None = None, tokens: int | None = None) -> None:
        rows, tokens = rows or self.rows, tokens or self.tokens
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = self._store(rows, tokens)
            new[:, : old.size(1), :, : old.size(3)].copy_(old)
            setattr(self, name, new)

    @torch.inference_mode()
    def prefill(self, row: int, embeds: torch.Tensor) -> torch.Tensor:
        """Run a prompt ``(1, T, hidden)`` into ``row`` from position 0; ``(1, T, hidden)``."""
        tokens = int(embeds.size(1))
        self.reserve(tokens)
        x = embeds.to(self.device, self.dtype)
        positions = torch.arange(tokens, device=self.device).unsqueeze(0)
        cos_sin = self.model.rotary_emb(x, position_ids=positions)
        for index, layer in enumerate(self.layers):
            residual, q, k, v = layer_inputs(layer, x, cos_sin, self.head_dim)
            keys = self.keys[index, row : row + 1]
            values = self.values[index, row : row + 1]
            keys[:, :, :tokens].copy_(k)
            values[:, :, :tokens].copy_(v)
            attended = attend(
                q, keys[:, :, :tokens], values[:, :, :tokens], None, self.scaling,
                enable_gqa=self.kv_heads != self.heads,
            )  # fmt: skip
            x = layer_output(layer, residual, attended)
        out: torch.Tensor = self.model.norm(x)
        return out

    @torch.inference_mode()
    def step(
        self, rows: Sequence[int], positions: Sequence[int], embeds: torch.Tensor
    ) -> torch.Tensor:
        """One token per row: ``embeds`` ``(n, 1, hidden)`` at each row's position; ``(n, 1, hidden)``."""
        n = len(rows)
        self.reserve(max(positions) + 1)
        x = embeds.to(self.device, self.dtype)
        row_index = torch.tensor(list(rows), device=self.device)
        position_index = torch.tensor(list(positions), device=self.device)
        cos_sin = self.model.rotary_emb(x, position_ids=position_index.view(n, 1))
        gqa = self.kv_heads != self.heads
        mask = None
        span = max(positions) + 1
        if self.attention == "masked" and n > 1:
            mask = (torch.arange(span, device=self.device) <= position_index[:, None]).view(
                n, 1, 1, span
            )
        for index, layer in enumerate(self.layers):
            residual, q, k, v = layer_inputs(layer, x, cos_sin, self.head_dim)
            keys, values = self.keys[index], self.values[index]
            keys[row_index, :, position_index] = k[:, :, 0]
            values[row_index, :, position_index] = v[:, :, 0]
            if mask is not None:
                attended = attend(
                    q, keys[row_index, :, :span], values[row_index, :, :span], mask,
                    self.scaling, enable_gqa=gqa,
                )  # fmt: skip
            else:
                attended = torch.cat(
                    [
                        attend(
                            q[i : i + 1],
                            keys[row : row + 1, :, : position + 1],
                            values[row : row + 1, :, : position + 1],
                            None,
                            self.scaling,
                            enable_gqa=gqa,
                        )
                        for i, (row, position) in enumerate(zip(rows, positions, strict=True))
                    ]
                )
            x = layer_output(layer, residual, attended)
        out: torch.Tensor = self.model.norm(x)
        return out


@dataclass(eq=False)
class Row:
    """One utterance's generation state in the batch."""

    params: GenerationParams
    sampler: Sampler
    windows: ChunkWindows
    prompt_tokens: int
    ids: torch.Tensor  # (max_new, num_vq) sampled tokens
    hiddens: torch.Tensor  # (max_new, hidden) the states that sampled them
    row: int | None = None
    steps: int = 0
    done: bool = False

    @property
    def position(self) -> int:
        """Where the next step's input (the last token) goes."""
        return self.prompt_tokens + self.steps - 1


class LegacyBatchedDecoder:
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
    ) -> None:
        self.stream = stream
        self.gpt = BatchedGPT(
            stream.chat.gpt.gpt, max_rows=max_batch, max_tokens=max_tokens, attention=attention
        )
        self.batch_vocoder = batch_vocoder
        config = stream.chat.config.gpt
        self.num_vq = int(config.num_vq)
        self.eos_token = int(config.num_audio_tokens) - 1
        self.hidden_size = int(config.hidden_size)
        self.device = torch.device(stream.chat.device)
        self._audio: dict[int, list[np.ndarray]] = {}
        #: Windows vocoded, and vocoder calls made (several windows in one call when batched).
        self.vocoded_windows = 0
        self.vocoder_calls = 0

    def open(self, text: str, params: GenerationParams) -> tuple[Row, Any]:
        """A row for ``text`` (not yet in the store): its prompt is built now."""
        input_ids, attention_mask, embeds = self.stream.prompt(text, params)
        if not bool(attention_mask.all()):
            raise ValueError("a padded prompt cannot join the batch")
        max_new = params.max_new_token
        row = Row(
            params=params,
            sampler=self.stream.sampler(params),
            windows=ChunkWindows(self.stream.options, max_new),
            prompt_tokens=int(input_ids.size(1)),
            ids=torch.zeros(max_new, self.num_vq, dtype=torch.long, device=self.device),
            hiddens=torch.empty(max_new, self.hidden_size, dtype=torch.float, device=self.device),
        )
        self._audio[id(row)] = []
        return row, embeds

    @torch.inference_mode()
    def prefill(self, row: Row, embeds: torch.Tensor) -> bool:
        """Put ``row`` in the store and sample its first token; False when the store is full."""
        slot = self.gpt.acquire(row.prompt_tokens + row.params.max_new_token)
        if slot is None:
            return False
        row.row = slot
        states = self.gpt.prefill(slot, embeds).to(self.device, dtype=torch.float)
        logits = self.stream.head_logits(states)[0]
        self._accept(row, logits, states[0, -1])
        self._vocode([row])
        return True

    @torch.inference_mode()
    def step(self, rows: Sequence[Row], hurry: Sequence[bool] | None = None) -> None:
        """Advance each of ``rows`` by one token, together; vocode the chunks now due."""
        last = torch.stack([row.ids[row.steps - 1] for row in rows]).view(len(rows), 1, self.num_vq)
        embeds = self.stream.code_embeds(last)
        slots = [row.row for row in rows]
        assert all(slot is not None for slot in slots), "step() before prefill()"
        out = self.gpt.step(
            [int(slot) for slot in slots if slot is not None],
            [row.position for row in rows],
            embeds.to(dtype=self.gpt.dtype),
        )
        states = out.to(self.device, dtype=torch.float)
        tokens = self._sample_rows(rows, self.stream.head_logits(states))
        for i, row in enumerate(rows):
            self._keep(row, tokens[i], states[i, 0])
        self._vocode(rows, hurry)

    def take_audio(self, row: Row) -> list[np.ndarray]:
        chunks = self._audio[id(row)]
        self._audio[id(row)] = []
        return chunks

    def close(self, row: Row) -> None:
        if row.row is not None:
            self.gpt.release(row.row)
            row.row = None
        self._audio.pop(id(row), None)

    def _accept(self, row: Row, logits: torch.Tensor, hidden: torch.Tensor) -> None:
        """Sample the row's next token from its ``(num_vq, V)`` logits (alone)."""
        history = row.ids[: row.steps].t()
        self._keep(row, row.sampler.sample(logits, history, row.steps).view(-1), hidden)

    def _sample_rows(self, rows: Sequence[Row], logits: torch.Tensor) -> list[torch.Tensor]:
        """Each row's next tokens from ``(n, num_vq, V)`` logits.

        Rows with one sampling policy are transformed together (temperature, repetition
        penalty, top-P, top-K: row-wise operations, so each row's values are what it would
        get alone); each row then draws with its own seed.
        """
        n, num_vq, vocab = logits.shape
        groups: dict[Any, list[int]] = {}
        for i, row in enumerate(rows):
            p = row.params
            policy = (p.temperature, p.top_p, p.top_k, p.repetition_penalty)
            groups.setdefault(policy, []).append(i)
        tokens: list[torch.Tensor] = [logits.new_empty(0)] * n
        for members in groups.values():
            # ChatTTS's penalty zeroes frequencies past row 625 (its max_input_ids guard,
            # meant for the vocabulary): groups stay below that so no row is touched.
            for start in range(0, len(members), _MAX_GROUP_ROWS):
                chunk = members[start : start + _MAX_GROUP_ROWS]
                sampler = rows[chunk[0]].sampler
                flat = logits[chunk].reshape(-1, vocab)
                flat /= sampler.temperature.repeat(len(chunk), 1)
                if sampler.penalty is not None:
                    flat = self._penalise(flat, [rows[i] for i in chunk], sampler.penalty)
                for warper in sampler.warpers:
                    flat = warper(None, flat)
                for j, i in enumerate(chunk):
                    row = rows[i]
                    drawn = row.sampler.draw(flat[j * num_vq : (j + 1) * num_vq], row.steps)
                    tokens[i] = drawn.view(-1)
        return tokens

    def _penalise(self, flat: torch.Tensor, rows: list[Row], penalty: Any) -> torch.Tensor:
        """ChatTTS's repetition penalty for several rows: the same per-row arithmetic, with
        each row's window (its last ``past_window`` tokens, fewer at its start)."""
        window = int(penalty.past_window)
        num_vq = self.num_vq
        ids = torch.zeros(len(rows), window, num_vq, dtype=torch.long, device=flat.device)
        valid = torch.zeros(len(rows), window, num_vq, dtype=torch.long, device=flat.device)
        for j, row in enumerate(rows):
            taken = min(window, row.steps)
            if taken:
                ids[j, window - taken :] = row.ids[row.steps - taken : row.steps]
                valid[j, window - taken :] = 1
        ids = ids.permute(0, 2, 1).reshape(-1, window)
        valid = valid.permute(0, 2, 1).reshape(-1, window)
        freq = torch.zeros(flat.shape, dtype=torch.long, device=flat.device)
        freq.scatter_add_(1, ids, valid)
        alpha = torch.pow(penalty.penalty, freq)
        flat = flat.contiguous()
        return torch.where(flat < 0, flat.multiply(alpha), flat.divide(alpha))

    def _keep(self, row: Row, idx: torch.Tensor, hidden: torch.Tensor) -> None:
        """Record the row's sampled ``(num_vq,)`` tokens: EOS ends it."""
        if bool(idx.eq(self.eos_token).any()):
            row.done = True
            return
        row.ids[row.steps].copy_(idx)
        row.hiddens[row.steps].copy_(hidden)
        row.steps += 1
        if row.steps >= row.params.max_new_token:
            row.done = True

    def _vocode(self, rows: Sequence[Row], hurry: Sequence[bool] | None = None) -> None:
        """Vocode every window now due (a chunk boundary, or the end), equal lengths together."""
        due: dict[int, list[tuple[Row, int, bool]]] = {}
        hurried = hurry or [False] * len(rows)
        for row, short in zip(rows, hurried, strict=True):
            final = row.done
            if row.steps and (final or row.windows.due(row.steps, hurry=short)):
                first = row.windows.first_step()
                due.setdefault(row.steps - first, []).append((row, first, final))
        for group in due.values():
            windows = [row.hiddens[first : row.steps] for row, first, _ in group]
            if self.batch_vocoder:
                audio = self.stream.vocode_many(windows)
                self.vocoder_calls += 1
            else:
                audio = [self.stream.vocode(window) for window in windows]
                self.vocoder_calls += len(windows)
            self.vocoded_windows += len(windows)
            for (row, first, final), samples in zip(group, audio, strict=True):
                chunk = row.windows.join(samples, first, row.steps, final=final)
                if chunk.size:
                    self._audio[id(row)].append(chunk)
