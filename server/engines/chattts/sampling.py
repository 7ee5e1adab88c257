"""ChatTTS's sampling for every row of a batch in one set of tensor operations.

Each row keeps ChatTTS's own sampling settings (temperature, repetition penalty over its
last 16 tokens, top-P, top-K, EOS forbidden below ``min_new_token``, its seed) in
preallocated per-row tensors, written when the row joins; a step transforms the logits
of all rows at once and draws every row's tokens in one operation.

The draw: ``torch.multinomial(p, 1, generator)`` is ``argmax(p / q)`` with ``q`` drawn
as ``Exp(1)`` noise from the generator (ATen's single-sample path), and ChatTTS re-seeds
its generator with the utterance's seed at every step, so a seeded row's ``q`` is the
same tensor at every step. :meth:`RowSampling.assign` draws it once, as ChatTTS would
(same shape, same generator, same seed), and every step takes ``argmax(p / q)`` for all
rows together: the same tokens as ChatTTS, with no generator call per row. Unseeded
rows draw fresh noise each step, one call for the batch.

Two modes transform the logits:

- ``"parity"``: ChatTTS's warpers op for op (transformers' top-P over the fully sorted
  vocabulary, then top-K): bit-identical to ChatTTS's ``infer`` for seeded rows; a full
  sort of 626 codes per codebook and row each step;
- ``"fast"`` (what serving uses): top-K first (``torch.topk`` of the largest top-K among
  the rows), then top-P on those candidates with the whole vocabulary's normaliser, EOS
  and the draw over the candidates only. It keeps the same tokens (the kept set is the
  same: top-P keeps a prefix of the sorted codes and so does top-K), except where a
  cumulative probability lands within float rounding of ``1 - top_p``: the two modes
  sum the probabilities in a different order (tests pin equal tokens on the tiny
  checkpoint, alone and in batches).

Every operation is row-wise with static shapes, so a row's tokens do not depend on the
other rows, and the whole draw can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch

from server.engines.chattts.generation import GenerationParams

__all__ = ["SAMPLING_MODES", "RowSampling"]

SAMPLING_MODES = ("fast", "parity")
#: ChatTTS's repetition-penalty window (``gen_logits``: the last 16 tokens).
PENALTY_WINDOW = 16
#: ``min_tokens_to_keep`` of ChatTTS's top-P and top-K warpers.
MIN_TOKENS_TO_KEEP = 3


class RowSampling:
    """Per-row sampling settings and state, ``rows`` of them, and the batched draw."""

    def __init__(
        self, *, rows: int, num_vq: int, vocab: int, device: torch.device, mode: str = "fast"
    ) -> None:
        if mode not in SAMPLING_MODES:
            raise ValueError(f"sampling mode must be one of {SAMPLING_MODES}, not {mode!r}")
        self.mode = mode
        self.num_vq = num_vq
        self.vocab = vocab
        self.eos_token = vocab - 1
        self.device = device
        #: Candidates the fast mode keeps per codebook: the largest top-K of any row so far
        #: (only grows, so a captured step stays valid until a row needs more).
        self.candidates = MIN_TOKENS_TO_KEEP
        self._allocate(rows)

    def _allocate(self, rows: int) -> None:
        q, v, device = self.num_vq, self.vocab, self.device
        self.temperature = torch.ones(rows, 1, 1, device=device)
        self.penalty = torch.ones(rows, 1, 1, device=device)
        # Top-P removes a code whose ascending cumulative probability is <= 1 - top_p;
        # -inf (no top-P) removes none.
        self.remove_below = torch.full((rows, 1, 1), -torch.inf, device=device)
        self.top_k = torch.full((rows, 1, 1), v, dtype=torch.long, device=device)
        self.seeded = torch.zeros(rows, 1, 1, dtype=torch.bool, device=device)
        self.min_new = torch.zeros(rows, dtype=torch.long, device=device)
        self.noise = torch.ones(rows, q, v, device=device)
        # The last PENALTY_WINDOW tokens, oldest first; EOS marks an empty place (EOS is
        # never part of a history: a row ends at it).
        self.window = torch.full(
            (rows, q, PENALTY_WINDOW), self.eos_token, dtype=torch.long, device=device
        )

    @property
    def rows(self) -> int:
        return int(self.temperature.size(0))

    def grow(self, rows: int) -> None:
        """Room for ``rows`` rows (the first ones kept)."""
        old = {name: getattr(self, name) for name in self._tensors()}
        self._allocate(rows)
        for name, tensor in old.items():
            getattr(self, name)[: tensor.size(0)].copy_(tensor)

    @staticmethod
    def _tensors() -> tuple[str, ...]:
        return (
            "temperature", "penalty", "remove_below", "top_k", "seeded", "min_new",
            "noise", "window",
        )  # fmt: skip

    def assign(self, row: int, params: GenerationParams, generator: torch.Generator) -> bool:
        """Set ``row``'s sampling from ``params``; its noise from ``generator`` when seeded.

        Returns True when the fast mode's candidate count grew (a captured step built
        for fewer candidates must be captured again).
        """
        self.temperature[row].fill_(params.temperature)
        self.penalty[row].fill_(params.repetition_penalty)
        # In float32, as transformers' comparison casts the Python float.
        self.remove_below[row].fill_(-torch.inf if params.top_p is None else 1 - params.top_p)
        top_k = self.vocab if params.top_k is None else max(params.top_k, MIN_TOKENS_TO_KEEP)
        self.top_k[row].fill_(min(top_k, self.vocab))
        self.min_new[row] = params.min_new_token
        self.window[row].fill_(self.eos_token)
        self.seeded[row].fill_(params.seed is not None)
        if params.seed is not None:
            # What torch.multinomial draws from a generator re-seeded with this seed.
            self.noise[row].exponential_(1, generator=generator.manual_seed(params.seed))
        grown = min(top_k, self.vocab) > self.candidates
        self.candidates = max(self.candidates, min(top_k, self.vocab))
        return grown

    def sample(self, logits: torch.Tensor, start: int, steps: torch.Tensor) -> torch.Tensor:
        """Tokens ``(n, num_vq)`` for rows ``start .. start + n - 1`` from their logits
        ``(n, num_vq, V)`` (modified in place) after ``steps`` ``(n,)`` generated tokens."""
        rows = slice(start, start + logits.size(0))
        logits /= self.temperature[rows]
        logits = self._penalise(logits, rows)
        early = (steps < self.min_new[rows]).view(-1, 1, 1)
        if self.mode == "parity":
            return self._draw_parity(logits, rows, early)
        return self._draw_fast(logits, rows, early)

    def remember(self, start: int, tokens: torch.Tensor, commit: torch.Tensor) -> None:
        """Append each committed row's ``tokens`` to its penalty window."""
        rows = slice(start, start + tokens.size(0))
        window = self.window[rows]
        shifted = torch.cat((window[..., 1:], tokens.unsqueeze(-1)), dim=-1)
        window.copy_(torch.where(commit.view(-1, 1, 1), shifted, window))

    def _penalise(self, logits: torch.Tensor, rows: slice) -> torch.Tensor:
        # ChatTTS's penalty: a code seen c times in the window is multiplied (negative) or
        # divided (positive) by penalty ** c. Only the window's codes change, so only they
        # are computed: counts from the window itself, the same arithmetic per code.
        window = self.window[rows]
        counts = (window.unsqueeze(-1) == window.unsqueeze(-2)).sum(-1)
        counts = counts.masked_fill(window == self.eos_token, 0)
        alpha = torch.pow(self.penalty[rows], counts)
        seen = logits.gather(-1, window)
        penalised = torch.where(seen < 0, seen.multiply(alpha), seen.divide(alpha))
        # A code in the window several times is written several times, with one value.
        return logits.scatter(-1, window, penalised)

    def _noise(self, rows: slice, like: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
        seeded = self.noise[rows] if index is None else self.noise[rows].gather(-1, index)
        fresh = torch.empty_like(like).exponential_(1)
        return torch.where(self.seeded[rows], seeded, fresh)

    def _draw_parity(self, logits: torch.Tensor, rows: slice, early: torch.Tensor) -> torch.Tensor:
        # transformers' TopPLogitsWarper then TopKLogitsWarper, per-row thresholds.
        ordered, order = torch.sort(logits, descending=False)
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= self.remove_below[rows]
        remove[..., -MIN_TOKENS_TO_KEEP:] = False
        remove = remove.scatter(-1, order, remove)
        logits = logits.masked_fill(remove, -torch.inf)
        top = torch.topk(logits, self.candidates, dim=-1).values
        kth = top.gather(-1, (self.top_k[rows] - 1).expand(-1, logits.size(1), 1))
        logits = logits.masked_fill(logits < kth, -torch.inf)
        logits[..., self.eos_token].masked_fill_(early.view(-1, 1), -torch.inf)
        probs = torch.softmax(logits, dim=-1)
        return torch.argmax(probs / self._noise(rows, probs, None), dim=-1)

    def _draw_fast(self, logits: torch.Tensor, rows: slice, early: torch.Tensor) -> torch.Tensor:
        values, index = torch.topk(logits, self.candidates, dim=-1)
        # Top-P on the candidates: a candidate's ascending cumulative probability is one
        # minus the mass of the candidates above it (the whole vocabulary's normaliser).
        probs = torch.exp(values - torch.logsumexp(logits, dim=-1, keepdim=True))
        above = probs.cumsum(dim=-1) - probs
        keep = (1 - above) > self.remove_below[rows]
        rank = torch.arange(self.candidates, device=logits.device)
        keep |= rank < MIN_TOKENS_TO_KEEP
        keep &= rank < self.top_k[rows]
        keep &= ~(early & (index == self.eos_token))
        probs = torch.softmax(values.masked_fill(~keep, -torch.inf), dim=-1)
        choice = torch.argmax(probs / self._noise(rows, probs, index), dim=-1, keepdim=True)
        return index.gather(-1, choice).squeeze(-1)
