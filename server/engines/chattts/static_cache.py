"""ChatTTS's GPT (a transformers ``LlamaModel``) with a preallocated KV cache and CUDA graphs.

ChatTTS decodes with transformers' ``DynamicCache``, which grows every layer's keys and
values by concatenation at every step (a copy of the whole cache per token: quadratic
memory traffic over an utterance) and leaves every step a different shape, so nothing
can be captured. :class:`StaticGPT` runs the same model, layer by layer and on its own
modules (ChatTTS's weights: ``input_layernorm``, ``q/k/v/o_proj`` with the model's
rotary embedding, ``post_attention_layernorm``, ``mlp``, the final ``norm``), against
key/value buffers allocated once:

- **eager** (any device): each token's keys and values are written in place at their
  position and attention reads the filled prefix only (the same SDPA shapes as the
  dynamic cache, without the copies);
- **CUDA graphs** (``cuda_graphs=True``, CUDA only): the one-token step is captured
  once per cache slot with static shapes (attention over the whole buffer, positions
  past the current one masked out) and replayed: one launch per token instead of
  hundreds of kernel launches from Python, which is what bounds a 20-layer GPT's step
  time on a GPU.

A cache *slot* holds one utterance; the engine interleaves several utterances (EDF, see
``server.runtime.worker``), so there are ``slots`` of them. An utterance that finds no free slot,
or is longer than ``max_tokens`` (prompt + generated), is not refused: the caller falls
back to ChatTTS's dynamic path for it (:meth:`StaticGPT.acquire` returns ``None``).

Equivalence with the transformers forward is pinned by tests (hidden states, and the
sampled tokens of a seeded run, on the tiny checkpoint); the math is the same, only the
kernels' shapes may differ, so float results may differ in the last bits.

Not thread-safe: one engine thread drives it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

logger = logging.getLogger(__name__)

__all__ = ["CacheSlot", "StaticGPT", "attend", "layer_inputs", "layer_output"]


def layer_inputs(
    layer: Any, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor], head_dim: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A Llama layer's attention inputs for ``x`` ``(B, T, hidden)``: (residual, q, k, v),
    each of q, k, v ``(B, heads, T, head_dim)`` with the rotary embedding applied."""
    batch, tokens = x.size(0), x.size(1)
    h = layer.input_layernorm(x)
    attn = layer.self_attn
    q = attn.q_proj(h).view(batch, tokens, -1, head_dim).transpose(1, 2)
    k = attn.k_proj(h).view(batch, tokens, -1, head_dim).transpose(1, 2)
    v = attn.v_proj(h).view(batch, tokens, -1, head_dim).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, *cos_sin)
    return x, q, k, v


def layer_output(layer: Any, residual: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
    """The rest of the layer: output projection, residual, MLP."""
    batch, tokens = residual.size(0), residual.size(1)
    attended = attended.transpose(1, 2).reshape(batch, tokens, -1)
    x = residual + layer.self_attn.o_proj(attended)
    out: torch.Tensor = x + layer.mlp(layer.post_attention_layernorm(x))
    return out


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    *,
    enable_gqa: bool,
) -> torch.Tensor:
    """Scaled dot-product attention; causal when unmasked with more than one query.

    ``mask`` (bool, True takes part; or additive, 0 or -inf, in ``q``'s dtype)
    broadcasts to ``(B, heads, T, S)``.
    """
    causal = mask is None and q.size(2) > 1
    if mask is not None and q.is_cuda:
        # The masked (graph) step: memory-efficient attention or the math kernel,
        # never cuDNN attention, whose masked path has open bugs in half precision.
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa
            )
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=enable_gqa
    )


@dataclass(eq=False)
class CacheSlot:
    """One utterance's keys and values: ``(layers, 1, kv_heads, max_tokens, head_dim)``."""

    index: int
    keys: torch.Tensor
    values: torch.Tensor
    #: Positions written so far (the next token's position).
    length: int = 0
    busy: bool = False
    # CUDA graph state: static inputs, the captured graph and its output.
    embeds: torch.Tensor | None = None
    position: torch.Tensor | None = None
    graph: Any = None
    output: torch.Tensor | None = None
    #: The stream this slot's graph was warmed up and captured on (its own: cuBLAS keeps
    #: a workspace per stream, which must live exactly as long as the graph using it).
    stream: Any = None
    replays: int = 0


class StaticGPT:
    """Prefill and one-token steps of ChatTTS's ``LlamaModel`` on preallocated caches.

    ``model`` is ``chat.gpt.gpt``. ``max_tokens``: positions per slot (prompt +
    generated). ``slots``: utterances at once. Buffers are allocated lazily, a slot at a
    time, in the model's dtype and on its device.

    ``static_shapes``: run each step as the CUDA graph would (one fixed-shape function of
    the slot's input buffers: attention over the whole buffer, later positions masked),
    without capturing it; implied by ``cuda_graphs``. On its own it is what the tests
    check that function's arithmetic with on any device.
    """

    def __init__(
        self,
        model: Any,
        *,
        max_tokens: int,
        slots: int,
        cuda_graphs: bool = False,
        static_shapes: bool = False,
    ) -> None:
        if max_tokens < 2:
            raise ValueError("max_tokens must be >= 2")
        if slots < 1:
            raise ValueError("slots must be >= 1")
        self.model = model
        config = model.config
        self.layers = list(model.layers[: config.num_hidden_layers])
        attn = self.layers[0].self_attn
        self.head_dim = int(attn.head_dim)
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.scaling = float(attn.scaling)
        self.max_tokens = max_tokens
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        rope_type = str(getattr(model.rotary_emb, "rope_type", "default"))
        if cuda_graphs and ("dynamic" in rope_type or rope_type == "longrope"):
            # Their rotary update checks the sequence length on the host: not capturable.
            raise ValueError(f"cuda_graphs cannot capture the {rope_type!r} rotary embedding")
        if cuda_graphs and self.device.type != "cuda":
            raise ValueError("cuda_graphs needs the GPT on a CUDA device")
        self.cuda_graphs = cuda_graphs
        self.static_shapes = static_shapes or cuda_graphs
        self._slot_count = slots
        self._slots: list[CacheSlot] = []
        # Key positions, for the graph step's mask (arange(max_tokens) <= position).
        self._key_positions = torch.arange(max_tokens, device=self.device)
        #: Utterances that fell back to the dynamic cache (no free slot, too long, no memory).
        self.fallbacks = 0
        self._warned_long = False

    # -- slots --------------------------------------------------------------------------

    def acquire(self, tokens: int) -> CacheSlot | None:
        """A free slot for an utterance of at most ``tokens`` positions, or ``None``."""
        if tokens > self.max_tokens:
            self.fallbacks += 1
            if not self._warned_long:
                self._warned_long = True
                logger.warning(
                    "an utterance of up to %d positions does not fit the static KV cache "
                    "(%d): it runs on the dynamic cache (raise gpt_cache_tokens above the "
                    "prompt + max_new_token)",
                    tokens,
                    self.max_tokens,
                )
            return None
        for slot in self._slots:
            if not slot.busy:
                break
        else:
            if len(self._slots) == self._slot_count:
                self.fallbacks += 1
                return None
            try:
                slot = self._new_slot(len(self._slots))
            except torch.OutOfMemoryError:
                self.fallbacks += 1
                logger.warning("no memory for another static KV-cache slot: dynamic cache")
                return None
            self._slots.append(slot)
        slot.busy = True
        slot.length = 0
        return slot

    def release(self, slot: CacheSlot) -> None:
        """Give ``slot`` back (its buffers are kept for the next utterance)."""
        slot.busy = False
        slot.length = 0

    def release_memory(self) -> None:
        """Drop every idle slot's buffers (the engine's idle memory release).

        Not with ``cuda_graphs``: capturing again would land on the first step of the
        next request; the graphs and their caches stay (``slots`` x the cache size).
        """
        if self.cuda_graphs:
            return
        self._slots = [slot for slot in self._slots if slot.busy]
        for index, slot in enumerate(self._slots):
            slot.index = index

    def prepare(self) -> None:
        """Allocate every slot now, and capture its CUDA graph when ``cuda_graphs``:
        the engine's warm-up calls this so that no request pays a capture."""
        hidden = int(self.model.config.hidden_size)
        zeros = torch.zeros(1, 1, hidden, device=self.device, dtype=self.dtype)
        while len(self._slots) < self._slot_count:
            self._slots.append(self._new_slot(len(self._slots)))
        for slot in self._slots:
            if self.static_shapes and slot.embeds is None and not slot.busy:
                with torch.inference_mode():
                    self._run_static(slot, zeros, self.max_tokens - 1)

    @property
    def allocated_slots(self) -> int:
        return len(self._slots)

    def _new_slot(self, index: int) -> CacheSlot:
        shape = (len(self.layers), 1, self.kv_heads, self.max_tokens, self.head_dim)
        keys = torch.zeros(shape, dtype=self.dtype, device=self.device)
        values = torch.zeros(shape, dtype=self.dtype, device=self.device)
        return CacheSlot(index=index, keys=keys, values=values)

    # -- forward ------------------------------------------------------------------------

    @torch.inference_mode()
    def prefill(self, slot: CacheSlot, embeds: torch.Tensor) -> torch.Tensor:
        """Run the prompt ``(1, T, hidden)`` from position 0; return ``(1, T, hidden)``."""
        if slot.length != 0:
            raise RuntimeError("prefill starts an utterance: the slot is not empty")
        tokens = int(embeds.size(1))
        positions = torch.arange(tokens, device=self.device).unsqueeze(0)
        out = self._forward_eager(slot, embeds.to(self.device, self.dtype), positions, 0)
        slot.length = tokens
        return out

    @torch.inference_mode()
    def step(self, slot: CacheSlot, embeds: torch.Tensor) -> torch.Tensor:
        """Run one token ``(1, 1, hidden)`` at the slot's next position; ``(1, 1, hidden)``."""
        position = slot.length
        if position >= self.max_tokens:
            raise RuntimeError(f"the cache slot is full ({self.max_tokens} positions)")
        embeds = embeds.to(self.device, self.dtype)
        if self.static_shapes:
            out = self._run_static(slot, embeds, position)
        else:
            positions = torch.tensor([[position]], device=self.device)
            out = self._forward_eager(slot, embeds, positions, position)
        slot.length = position + 1
        return out

    def _layer(
        self,
        layer: Any,
        x: torch.Tensor,
        cos_sin: tuple[torch.Tensor, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return layer_inputs(layer, x, cos_sin, self.head_dim)

    def _finish_layer(
        self, layer: Any, residual: torch.Tensor, attended: torch.Tensor
    ) -> torch.Tensor:
        return layer_output(layer, residual, attended)

    def _attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        return attend(q, k, v, mask, self.scaling, enable_gqa=self.kv_heads != self.heads)

    def _forward_eager(
        self, slot: CacheSlot, x: torch.Tensor, positions: torch.Tensor, start: int
    ) -> torch.Tensor:
        # Tokens at positions start .. start + T - 1; attention over the filled prefix.
        end = start + int(x.size(1))
        cos_sin = self.model.rotary_emb(x, position_ids=positions)
        for index, layer in enumerate(self.layers):
            residual, q, k, v = self._layer(layer, x, cos_sin)
            keys = slot.keys[index]
            values = slot.values[index]
            keys[:, :, start:end].copy_(k)
            values[:, :, start:end].copy_(v)
            attended = self._attend(q, keys[:, :, :end], values[:, :, :end], None)
            x = self._finish_layer(layer, residual, attended)
        out: torch.Tensor = self.model.norm(x)
        return out

    # -- CUDA graphs --------------------------------------------------------------------

    def _forward_static(self, slot: CacheSlot) -> torch.Tensor:
        # The captured step: one token at slot.position, attention over the whole
        # buffer with later positions masked. Every shape and address is fixed.
        assert slot.embeds is not None and slot.position is not None
        x = slot.embeds
        positions = slot.position.view(1, 1)
        cos_sin = self.model.rotary_emb(x, position_ids=positions)
        mask = (self._key_positions <= slot.position).view(1, 1, 1, -1)
        for index, layer in enumerate(self.layers):
            residual, q, k, v = self._layer(layer, x, cos_sin)
            keys = slot.keys[index]
            values = slot.values[index]
            keys.index_copy_(2, slot.position, k)
            values.index_copy_(2, slot.position, v)
            attended = self._attend(q, keys, values, mask)
            x = self._finish_layer(layer, residual, attended)
        out: torch.Tensor = self.model.norm(x)
        return out

    def _static_inputs(self, slot: CacheSlot) -> None:
        hidden = int(self.model.config.hidden_size)
        slot.embeds = torch.zeros(1, 1, hidden, dtype=self.dtype, device=self.device)
        # Warm-up and capture write position max_tokens - 1 of this slot's cache, which
        # any later use of that position overwrites before reading it.
        slot.position = torch.full((1,), self.max_tokens - 1, device=self.device)

    def _capture(self, slot: CacheSlot) -> None:
        # Warm-up and capture on the slot's own stream, made on the GPT's device (the
        # default capture stream belongs to the current device, which need not be it).
        slot.stream = torch.cuda.Stream(self.device)
        with torch.cuda.device(self.device):
            slot.stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(slot.stream):
                for _ in range(2):  # kernel selection, lazy inits: not inside the capture
                    self._forward_static(slot)
            torch.cuda.current_stream(self.device).wait_stream(slot.stream)
            graph = torch.cuda.CUDAGraph()
            # Each slot's graph has its own memory pool: slots replay in any order, so
            # a shared pool's "replay in capture order" condition would not hold.
            with torch.cuda.graph(graph, stream=slot.stream, capture_error_mode="thread_local"):
                slot.output = self._forward_static(slot)
        slot.graph = graph
        logger.info("captured the GPT step as a CUDA graph (cache slot %d)", slot.index)

    def _run_static(self, slot: CacheSlot, embeds: torch.Tensor, position: int) -> torch.Tensor:
        if slot.embeds is None:
            self._static_inputs(slot)
            if self.cuda_graphs:
                try:
                    self._capture(slot)
                except Exception:
                    # Serve on: this and every later step run the eager static cache.
                    logger.exception("CUDA graph capture failed; the GPT runs without graphs")
                    self.cuda_graphs = self.static_shapes = False
                    for each in self._slots:
                        each.embeds = each.position = each.graph = each.output = None
                        each.stream = None
                    return self._forward_eager(
                        slot,
                        embeds.to(self.device, self.dtype),
                        torch.tensor([[position]], device=self.device),
                        position,
                    )
        assert slot.embeds is not None and slot.position is not None
        slot.embeds.copy_(embeds)
        slot.position.fill_(position)
        if slot.graph is None:
            return self._forward_static(slot)
        assert slot.output is not None
        slot.graph.replay()
        slot.replays += 1
        return slot.output.clone()
