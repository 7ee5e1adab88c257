"""Per-row progress of a batch: device tensors a step updates in place, and a host mirror.

A row is one utterance in the batched decoder's key/value store. What a step reads and
writes on the device (each row's last tokens, position, steps, its token and hidden-state
history, which rows step, which ended) lives in tensors allocated once (and grown by
doubling on the CPU), indexed by row: a step updates them for all rows with a few tensor
operations, whatever the batch size, and never rebuilds them. The host keeps its own
copy of what it needs to plan (steps, ends, chunk boundaries) in numpy arrays, updated
from the one read of each step's end flags, so no row's state is read back one by one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["RowTable"]


class RowTable:
    """Progress of up to ``rows`` rows of up to ``steps`` generated steps each."""

    def __init__(
        self, *, rows: int, steps: int, num_vq: int, hidden: int, device: torch.device
    ) -> None:
        self.num_vq = num_vq
        self.hidden = hidden
        self.device = device
        self._allocate(rows, steps)

    def _allocate(self, rows: int, steps: int) -> None:
        device, q = self.device, self.num_vq
        # Device: what the step reads and writes.
        self.last_ids = torch.zeros(rows, q, dtype=torch.long, device=device)
        #: Where each row's next input (its last token) goes: prompt + steps - 1.
        self.positions = torch.zeros(rows, dtype=torch.long, device=device)
        self.steps = torch.zeros(rows, dtype=torch.long, device=device)
        # Token and hidden-state history; column ``steps`` takes what is not kept.
        self.ids = torch.zeros(rows, steps + 1, q, dtype=torch.long, device=device)
        self.hiddens = torch.zeros(rows, steps + 1, self.hidden, device=device)
        self.active = torch.zeros(rows, dtype=torch.bool, device=device)
        self.ended = torch.zeros(rows, dtype=torch.bool, device=device)
        self.index = torch.arange(rows, device=device)
        # Staging for the host's active mask: pinned, so its copy needs no synchronisation.
        self._staging = torch.zeros(rows, dtype=torch.bool)
        if device.type == "cuda":
            self._staging = self._staging.pin_memory()
        self._staging_host = self._staging.numpy()
        # Host mirror.
        self.host_steps = np.zeros(rows, dtype=np.int64)
        # A free row's position is 0, as on the device: prompt 1, no steps.
        self.host_prompt = np.ones(rows, dtype=np.int64)
        self.host_max_new = np.zeros(rows, dtype=np.int64)
        self.host_done = np.zeros(rows, dtype=bool)
        self.host_active = np.zeros(rows, dtype=bool)
        self.host_hurry = np.zeros(rows, dtype=bool)
        self.next_boundary = np.zeros(rows, dtype=np.int64)
        self.last_cut = np.zeros(rows, dtype=np.int64)
        #: The caller's object for each row in use (None when free).
        self.entries: list[Any] = [None] * rows

    @property
    def rows(self) -> int:
        return int(self.positions.size(0))

    @property
    def max_steps(self) -> int:
        """Steps each row can hold (its history's last column is scratch)."""
        return int(self.ids.size(1)) - 1

    def grow(self, rows: int, steps: int) -> None:
        """Room for ``rows`` rows of ``steps`` steps, what is there kept."""
        rows, steps = max(rows, self.rows), max(steps, self.max_steps)
        if (rows, steps) == (self.rows, self.max_steps):
            return
        old_rows, old_steps = self.rows, self.max_steps
        old = dict(vars(self))
        self._allocate(rows, steps)
        for name in ("last_ids", "positions", "steps", "active", "ended"):
            getattr(self, name)[:old_rows].copy_(old[name])
        for name in ("ids", "hiddens"):
            getattr(self, name)[:old_rows, :old_steps].copy_(old[name][:, :old_steps])
        for name in ("host_steps", "host_prompt", "host_max_new", "host_done", "next_boundary"):
            getattr(self, name)[:old_rows] = old[name]
        self.last_cut[:old_rows] = old["last_cut"]
        self.entries[:old_rows] = old["entries"]

    # -- one row, at join and leave (host work per row is fine here) ----------------------

    def open(self, row: int, entry: Any, prompt_tokens: int, max_new: int, boundary: int) -> None:
        """``row`` starts an utterance of a ``prompt_tokens`` prompt, up to ``max_new`` steps;
        its first chunk is due after ``boundary`` steps."""
        self.entries[row] = entry
        self.host_steps[row] = 0
        self.host_prompt[row] = prompt_tokens
        self.host_max_new[row] = max_new
        self.host_done[row] = False
        self.next_boundary[row] = boundary
        self.last_cut[row] = 0
        self.steps[row] = 0
        self.positions[row] = prompt_tokens - 1

    def close(self, row: int) -> None:
        """Free ``row``: while free it still computes (padding), harmlessly, at position 0."""
        self.entries[row] = None
        self.host_done[row] = False
        self.host_steps[row] = 0
        self.host_prompt[row] = 1
        self.positions[row] = 0
        self.steps[row] = 0

    def advance_one(self, row: int, ended: bool) -> None:
        """The host side of :meth:`commit` for one row (its prefill)."""
        if not ended:
            self.host_steps[row] += 1
        self.host_done[row] = ended or self.host_steps[row] >= self.host_max_new[row]

    # -- every row at once ----------------------------------------------------------------

    def set_active(self, slots: np.ndarray, hurry: np.ndarray | None, n: int) -> None:
        """Rows ``slots`` step now (``hurry``: their listeners are short of audio)."""
        self.host_active[:] = False
        self.host_active[slots] = True
        self.host_hurry[:] = False
        if hurry is not None:
            self.host_hurry[slots] = hurry
        self._staging_host[:n] = self.host_active[:n]
        self.active[:n].copy_(self._staging[:n], non_blocking=True)

    def commit(
        self,
        start: int,
        tokens: torch.Tensor,
        states: torch.Tensor,
        active: torch.Tensor,
        eos_token: int,
    ) -> torch.Tensor:
        """Rows ``start ..`` sampled ``tokens`` ``(n, num_vq)`` from ``states`` ``(n, hidden)``:
        keep them for the ``active`` rows that did not sample EOS; flag the rows that ended
        in :attr:`ended`. Returns which rows kept their tokens. Device work only."""
        n = int(tokens.size(0))
        rows = slice(start, start + n)
        index = self.index[rows]
        eos = tokens.eq(eos_token).any(dim=-1)
        kept = active & ~eos
        steps = self.steps[rows]
        column = torch.where(kept, steps, self.max_steps)
        self.ids[index, column] = tokens
        self.hiddens[index, column] = states
        self.last_ids[rows] = torch.where(kept.view(n, 1), tokens, self.last_ids[rows])
        steps += kept
        self.positions[rows] += kept
        self.ended[rows] = active & eos
        return kept

    def advance(self, n: int, ended: np.ndarray) -> np.ndarray:
        """The host side of a step over rows ``0 .. n - 1`` given which ``ended`` (EOS):
        steps and ends; returns the rows that finished now."""
        active = self.host_active[:n]
        self.host_steps[:n] += active & ~ended
        finished = active & (ended | (self.host_steps[:n] >= self.host_max_new[:n]))
        self.host_done[:n] |= finished
        return finished

    def due(self, n: int, first_chunk_steps: int) -> np.ndarray:
        """Rows of the last step whose chunk is due: at a boundary, hurried, or at the end
        (what :meth:`ChunkWindows.due` decides, for all rows at once)."""
        steps = self.host_steps[:n]
        scheduled = steps == self.next_boundary[:n]
        hurried = self.host_hurry[:n] & (steps - self.last_cut[:n] >= first_chunk_steps)
        ongoing = (steps < self.host_max_new[:n]) & (scheduled | hurried)
        return self.host_active[:n] & (steps > 0) & (self.host_done[:n] | ongoing)

    def host_positions(self, n: int) -> np.ndarray:
        """Each of the first ``n`` rows' next position, as the device has it."""
        positions: np.ndarray = self.host_prompt[:n] + self.host_steps[:n] - 1
        return positions
