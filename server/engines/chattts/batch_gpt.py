"""ChatTTS's GPT on a key/value store with a row per utterance, each at its own position.

:class:`BatchedGPT` runs ChatTTS's ``LlamaModel`` layer by layer (the modules of
:mod:`server.engines.chattts.static_cache`) against one store shaped
``(layers, rows, kv_heads, tokens, head_dim)``. A prompt is prefilled into one row from
position 0, alone or with other joining prompts in one forward (:meth:`prefill_many`). A step runs one token for each of the first ``n`` rows together: the
layers' linear projections run on all of them at once (one GEMM per weight, the cost a
batch shares), each row's keys and values are written at its own position (a tensor of
positions, never read by the host), and attention reads each row's own filled prefix,
so no row sees another's keys:

- ``"masked"``: one SDPA over the first ``span`` positions of all ``n`` rows (a view
  of the store, no copy), later positions masked out per row; with a fixed ``span`` the
  step's shapes are static, which is what a CUDA graph captures;
- ``"rows"``: one SDPA per row over exactly its prefix (no reads past a row's own
  length; a Python loop over the rows, for CPU measurements).

The store grows on demand (rows and tokens, by doubling up to ``max_rows`` and
``max_tokens``), so memory follows what is in flight; :meth:`allocate` sizes it once
(CUDA graphs need fixed addresses).

Not thread-safe: the engine thread drives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from server.engines.chattts.static_cache import attend, layer_inputs, layer_output

__all__ = ["ATTENTION_MODES", "BatchedGPT"]

ATTENTION_MODES = ("auto", "rows", "masked")
_INITIAL_ROWS = 4
_INITIAL_TOKENS = 1024


class BatchedGPT:
    """Prefill and batched one-token steps of ChatTTS's ``LlamaModel`` on rows of one store."""

    def __init__(
        self, model: Any, *, max_rows: int, max_tokens: int, attention: str = "auto"
    ) -> None:
        if max_rows < 1 or max_tokens < 2:
            raise ValueError("max_rows must be >= 1 and max_tokens >= 2")
        if attention not in ATTENTION_MODES:
            raise ValueError(f"attention must be one of {ATTENTION_MODES}")
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
        # Masked everywhere: one call per layer whatever the batch (measured no slower
        # than row by row on the CPU: docs/batching.md).
        self.attention = "masked" if attention == "auto" else attention
        self.keys = self._store(min(_INITIAL_ROWS, max_rows), min(_INITIAL_TOKENS, max_tokens))
        self.values = torch.zeros_like(self.keys)
        self._used = np.zeros(max_rows, dtype=bool)
        self._rows = torch.arange(max_rows, device=self.device)
        self._key_positions = torch.arange(max_tokens, device=self.device)

    def _store(self, rows: int, tokens: int) -> torch.Tensor:
        shape = (len(self.layers), rows, self.kv_heads, tokens, self.head_dim)
        return torch.zeros(shape, dtype=self.dtype, device=self.device)

    @property
    def rows(self) -> int:
        """Rows the store holds now."""
        return int(self.keys.size(1))

    @property
    def tokens(self) -> int:
        """Positions per row the store holds now."""
        return int(self.keys.size(3))

    @property
    def high(self) -> int:
        """One past the highest row in use (0 when none): a step covers rows below it."""
        used = np.flatnonzero(self._used)
        return int(used[-1]) + 1 if used.size else 0

    def acquire(self, tokens: int) -> int | None:
        """The lowest free row for an utterance of up to ``tokens`` positions, or None
        (all ``max_rows`` in use, or longer than ``max_tokens``)."""
        if tokens > self.max_tokens:
            return None
        free = np.flatnonzero(~self._used)
        if not free.size:
            return None
        row = int(free[0])
        if row >= self.rows:
            self._grow(rows=min(self.max_rows, 2 * self.rows))
        self._used[row] = True
        return row

    def release(self, row: int) -> None:
        self._used[row] = False

    def reserve(self, tokens: int) -> None:
        """Make room for position ``tokens - 1`` in every row (doubling, once in a while)."""
        if tokens > self.tokens:
            self._grow(tokens=min(self.max_tokens, max(tokens, 2 * self.tokens)))

    def allocate(self) -> None:
        """Size the store for ``max_rows`` x ``max_tokens`` now (it never moves again)."""
        self._grow(rows=self.max_rows, tokens=self.max_tokens)

    def _grow(self, *, rows: int | None = None, tokens: int | None = None) -> None:
        rows, tokens = rows or self.rows, tokens or self.tokens
        if (rows, tokens) == (self.rows, self.tokens):
            return
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
    def prefill_many(self, rows: Sequence[int], prompts: Sequence[torch.Tensor]) -> torch.Tensor:
        """Run several prompts, each ``(1, T_i, hidden)``, into ``rows`` (one each) from
        position 0, in one forward: ``(n, T, hidden)``, prompt ``i``'s states in its first
        ``T_i`` positions.

        The prompts are padded on the right to the longest: attention is causal, so a
        prompt's positions see only its own earlier ones, never the padding after it, and
        only its own positions are written to its row. What differs from prefilling each
        alone is how the GEMMs over several prompts round.
        """
        lengths = [int(prompt.size(1)) for prompt in prompts]
        if len(lengths) != len(rows) or not lengths:
            raise ValueError("one prompt for each row, and at least one")
        longest = max(lengths)
        self.reserve(longest)
        x = torch.nn.utils.rnn.pad_sequence([prompt[0] for prompt in prompts], batch_first=True)
        x = x.to(self.device, self.dtype)
        positions = torch.arange(longest, device=self.device).unsqueeze(0)
        cos_sin = self.model.rotary_emb(x, position_ids=positions)
        # Every (prompt, position) pair written, and the row and position it goes to:
        # built on the host (no device read), copied over once each.
        source = torch.as_tensor(np.repeat(np.arange(len(lengths)), lengths), device=self.device)
        target = torch.as_tensor(np.repeat(np.asarray(rows), lengths), device=self.device)
        position = torch.as_tensor(
            np.concatenate([np.arange(n) for n in lengths]), device=self.device
        )
        for index, layer in enumerate(self.layers):
            residual, q, k, v = layer_inputs(layer, x, cos_sin, self.head_dim)
            self.keys[index][target, :, position] = k[source, :, position]
            self.values[index][target, :, position] = v[source, :, position]
            attended = attend(q, k, v, None, self.scaling, enable_gqa=self.kv_heads != self.heads)
            x = layer_output(layer, residual, attended)
        out: torch.Tensor = self.model.norm(x)
        return out

    def step(
        self,
        embeds: torch.Tensor,
        positions: torch.Tensor,
        span: int,
        host_positions: np.ndarray | None = None,
    ) -> torch.Tensor:
        """One token for each of the first ``n`` rows: ``embeds`` ``(n, 1, hidden)`` at
        ``positions`` ``(n,)`` (a device tensor); ``(n, 1, hidden)``.

        ``span``: positions attention covers (above every row's position); the store
        must hold them (:meth:`reserve`). ``host_positions``: the same positions on the
        host, which the ``rows`` attention needs.
        """
        n = int(embeds.size(0))
        x = embeds.to(self.device, self.dtype)
        rows = self._rows[:n]
        cos_sin = self.model.rotary_emb(x, position_ids=positions.view(n, 1))
        # Additive (0 / -inf) once per step: a boolean mask is converted by every call.
        later = (self._key_positions[:span] > positions.view(n, 1)).view(n, 1, 1, span)
        mask = torch.zeros(n, 1, 1, span, dtype=self.dtype, device=self.device)
        mask.masked_fill_(later, -torch.inf)
        for index, layer in enumerate(self.layers):
            residual, q, k, v = layer_inputs(layer, x, cos_sin, self.head_dim)
            keys, values = self.keys[index], self.values[index]
            # Row i's key at its own position (index_copy_ would write every position
            # into every row).
            keys[rows, :, positions] = k[:, :, 0]
            values[rows, :, positions] = v[:, :, 0]
            if self.attention == "rows" and host_positions is not None:
                attended = self._attend_rows(q, keys, values, host_positions)
            else:
                attended = attend(
                    q, keys[:n, :, :span], values[:n, :, :span], mask, self.scaling,
                    enable_gqa=self.kv_heads != self.heads,
                )  # fmt: skip
            x = layer_output(layer, residual, attended)
        out: torch.Tensor = self.model.norm(x)
        return out

    def _attend_rows(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, positions: np.ndarray
    ) -> torch.Tensor:
        gqa = self.kv_heads != self.heads
        attended = []
        for i, end in enumerate(positions.tolist()):
            keys_i, values_i = keys[i : i + 1, :, : end + 1], values[i : i + 1, :, : end + 1]
            attended.append(
                attend(q[i : i + 1], keys_i, values_i, None, self.scaling, enable_gqa=gqa)
            )
        return torch.cat(attended)
