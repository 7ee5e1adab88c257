"""ChatTTS's GPT generation for one text, step by step, on a loaded ``Chat``'s modules.

:class:`Generation` is ChatTTS's ``GPT.generate`` loop for one text: the same prompt
building, embeddings, speaker embedding, logits processors (``gen_logits``: top-P,
top-K, repetition penalty), temperature, EOS masking below ``min_new_token`` and
per-step re-seeded sampling from the GPT's own generator (:class:`Sampler`). Same seed
-> same tokens as ChatTTS (pinned by tests/server/engines/chattts/test_chattts_stream.py), but it yields
each step's token and hidden state as soon as it is sampled, and polls ``should_stop``
before every step. Its prompt, input-embedding and head pieces are what the batched
decoder (:mod:`server.engines.chattts.batch`) builds on.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.utils.parametrize as parametrize
from ChatTTS.model.processors import gen_logits

from server.engines.base import Cancelled
from server.engines.chattts.static_cache import CacheSlot, StaticGPT

__all__ = ["Generation", "GenerationParams", "Sampler", "StepOutput"]


@dataclass(frozen=True)
class GenerationParams:
    """ChatTTS's ``InferCodeParams`` subset that shapes generation (same defaults)."""

    prompt: str = "[speed_5]"
    spk_emb: str | None = None
    temperature: float = 0.3
    top_p: float | None = 0.7
    top_k: int | None = 20
    repetition_penalty: float = 1.05
    max_new_token: int = 2048
    min_new_token: int = 0
    seed: int | None = None
    #: A reference clip: its encoded audio (``Chat.sample_audio_speaker``) and transcript.
    spk_smp: str | None = None
    txt_smp: str | None = None


@dataclass(frozen=True)
class StepOutput:
    """One generated GPT step: its ``num_vq`` audio token ids and its hidden state."""

    index: int
    ids: torch.Tensor
    hidden: torch.Tensor


def _never() -> bool:
    return False


class Sampler:
    """ChatTTS's sampling of one step for one utterance, as ``GPT.generate`` does it.

    Temperature per codebook, then the repetition penalty over the last 16 tokens, then
    the warpers (top-P, top-K), EOS forbidden below ``min_new_token``, softmax and a
    multinomial draw; with a seed, ChatTTS re-seeds its one generator with the same seed
    at every step, so a seeded utterance draws alone and its tokens do not depend on
    what else runs. (The batched decoder draws every row at once instead:
    :mod:`server.engines.chattts.sampling`.)
    """

    def __init__(
        self,
        params: GenerationParams,
        penalty: Any,
        warpers: tuple[Any, ...],
        temperature: torch.Tensor,
        eos_token: int,
        generator: torch.Generator,
    ) -> None:
        self.params = params
        self.penalty = penalty  # ChatTTS's repetition penalty processor, or None
        self.warpers = warpers
        self.temperature = temperature
        self.eos_token = eos_token
        self.generator = generator

    @classmethod
    def for_params(
        cls,
        params: GenerationParams,
        num_vq: int,
        eos_token: int,
        device: torch.device,
        generator: torch.Generator,
    ) -> Sampler:
        warpers, processors = gen_logits(
            num_code=eos_token,
            top_P=params.top_p,
            top_K=params.top_k,
            repetition_penalty=params.repetition_penalty,
        )
        # (num_vq, 1): one temperature per codebook, as ChatTTS expands it.
        temperature = torch.full((num_vq, 1), params.temperature, device=device)
        penalty = processors[0] if processors else None
        return cls(params, penalty, tuple(warpers), temperature, eos_token, generator)

    def sample(self, logits: torch.Tensor, history: torch.Tensor, step: int) -> torch.Tensor:
        """``(num_vq, V)`` logits (modified) and ``(num_vq, steps)`` history -> ``(num_vq, 1)``."""
        logits /= self.temperature
        if self.penalty is not None:
            logits = self.penalty(history, logits)
        for warper in self.warpers:
            logits = warper(history, logits)
        return self.draw(logits, step)

    def draw(self, logits: torch.Tensor, step: int) -> torch.Tensor:
        """The draw from warped ``(num_vq, V)`` logits: EOS masked early, softmax, multinomial."""
        if step < self.params.min_new_token:
            logits[:, self.eos_token] = -torch.inf
        scores = torch.softmax(logits, dim=-1)
        if self.params.seed is None:
            return torch.multinomial(scores, num_samples=1)
        # ChatTTS re-seeds its generator with the same seed at every step.
        return torch.multinomial(
            scores, num_samples=1, generator=self.generator.manual_seed(self.params.seed)
        )


class _ChatTTSForward:
    """ChatTTS's own GPT forward (transformers' dynamic cache) for one utterance.

    Same inputs, dtypes and mask form as ChatTTS's ``_prepare_generation_inputs``, so the
    arithmetic (hence the sampled tokens) is bit-identical.
    """

    def __init__(self, gpt: Any, mask: torch.Tensor) -> None:
        self.gpt = gpt
        self.mask = mask  # (1, prompt + max_new) bool
        self.dtype = gpt.gpt.dtype
        # ChatTTS casts position ids to the model dtype; in float32 that is exact (and we
        # keep it, for bit-identical tokens), but bfloat16 rounds integers above 256 and
        # float16 above 2048: half-precision runs pass them as integers instead.
        self.index_dtype = self.dtype if self.dtype == torch.float32 else torch.long
        self.past: Any = None

    def __call__(self, step: int, embeds: torch.Tensor, progress: int) -> torch.Tensor:
        device = self.gpt.device_gpt
        mask = self.mask.narrow(1, 0, progress)
        position_ids = mask.long().cumsum(-1) - 1
        position_ids.masked_fill_(mask.eq(0), 1)
        if step == 0:
            cache_position = torch.arange(0, progress, device=mask.device)
        else:
            position_ids = position_ids.narrow(1, -1, 1)
            cache_position = torch.arange(progress - 1, progress, device=mask.device)
        outputs = self.gpt.gpt(
            attention_mask=mask.to(device, dtype=self.dtype),
            position_ids=position_ids.to(device, dtype=self.index_dtype),
            past_key_values=self.past,
            inputs_embeds=embeds.to(device, dtype=self.dtype),
            use_cache=True,
            output_attentions=False,
            cache_position=cache_position.to(device, dtype=self.index_dtype),
        )
        self.past = outputs.past_key_values
        hidden: torch.Tensor = outputs.last_hidden_state
        return hidden


class Generation:
    """ChatTTS's GPT generation on a loaded ``Chat``: prompts, embeddings, heads, the loop."""

    def __init__(self, chat: Any) -> None:
        self.chat = chat
        config = chat.config.gpt
        self.num_vq = int(config.num_vq)
        self.vocab = int(config.num_audio_tokens)
        self.eos_token = self.vocab - 1
        self.device = torch.device(chat.device)

    @torch.inference_mode()
    def generate(
        self,
        text: str,
        params: GenerationParams,
        static: StaticGPT | None = None,
        should_stop: Callable[[], bool] = _never,
    ) -> Generator[StepOutput, None, None]:
        """Yield one :class:`StepOutput` per generated step until EOS or ``max_new_token``.

        ``static``: run the GPT on this preallocated cache when it has a slot free (and
        the prompt is unpadded), else on ChatTTS's dynamic one. ``should_stop`` is polled
        before every GPT step; when true, raises :class:`Cancelled` (so at most one step
        runs after a stop is requested).
        """
        input_ids, attention_mask, emb = self.prompt(text, params)
        sampler = self.sampler(params)
        start = input_ids.size(1)
        max_new = params.max_new_token
        ids = torch.zeros(
            1, start + max_new, self.num_vq, dtype=input_ids.dtype, device=input_ids.device
        )
        ids.narrow(1, 0, start).copy_(input_ids)
        mask = torch.ones(1, start + max_new, dtype=torch.bool, device=input_ids.device)
        mask.narrow(1, 0, attention_mask.size(1)).copy_(attention_mask)
        # The static cache assumes an unpadded prompt (one text always is).
        unpadded = bool(attention_mask.all())
        slot = static.acquire(start + max_new) if static is not None and unpadded else None
        forward = _ChatTTSForward(self.chat.gpt, mask) if slot is None else None
        try:
            progress = start
            for step in range(max_new):
                if should_stop():
                    raise Cancelled("stopped inside the GPT loop")
                embeds = emb if step == 0 else self.code_embeds(ids.narrow(1, progress - 1, 1))
                if forward is not None:
                    last_hidden = forward(step, embeds, progress)
                else:
                    assert static is not None and slot is not None
                    last_hidden = self._static_step(static, slot, step, embeds)
                states = last_hidden.to(self.device, dtype=torch.float)
                del last_hidden
                history = ids.narrow(1, start, progress - start).permute(0, 2, 1)
                history = history.reshape(self.num_vq, -1).to(self.device)
                idx = sampler.sample(self.head_logits(states)[0], history, step)
                idx = idx.view(-1, self.num_vq)
                if bool(idx.eq(self.eos_token).any()):
                    return
                ids.narrow(1, progress, 1).copy_(idx.unsqueeze(1))
                progress += 1
                yield StepOutput(step, idx[0], states[0, -1])
        finally:
            if slot is not None:
                assert static is not None
                static.release(slot)

    def _static_step(
        self, static: StaticGPT, slot: CacheSlot, step: int, embeds: torch.Tensor
    ) -> torch.Tensor:
        gpt = self.chat.gpt
        run = static.prefill if step == 0 else static.step
        return run(slot, embeds.to(gpt.device_gpt, dtype=gpt.gpt.dtype))

    def prompt(
        self, text: str, params: GenerationParams
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """ChatTTS's prompt for one text: ``(input_ids, attention_mask, embeds (1, T, H))``,
        the speaker embedding written in, as ``GPT.generate`` gets them."""
        chat = self.chat
        device_gpt = chat.gpt.device_gpt
        input_ids, attention_mask, text_mask = chat.tokenizer.encode(
            chat.speaker.decorate_code_prompts(
                [text], params.prompt, params.txt_smp, params.spk_emb
            ),
            self.num_vq,
            prompt=(
                chat.speaker.decode_prompt(params.spk_smp) if params.spk_smp is not None else None
            ),
            device=device_gpt,
        )
        emb = chat.embed(input_ids, text_mask)
        if params.spk_emb is not None:
            chat.speaker.apply(
                emb, params.spk_emb, input_ids, chat.tokenizer.spk_emb_ids, device_gpt
            )
        return input_ids, attention_mask, emb

    def sampler(self, params: GenerationParams) -> Sampler:
        """ChatTTS's sampler for ``params``, drawing from the GPT's own generator."""
        return Sampler.for_params(
            params, self.num_vq, self.eos_token, self.device, self.chat.gpt.generator
        )

    def code_embeds(self, last_ids: torch.Tensor) -> torch.Tensor:
        """``(B, 1, num_vq)`` audio token ids -> ``(B, 1, hidden)``: the sum of the codebooks'
        embeddings, ChatTTS's input for a decode step."""
        gpt = self.chat.gpt
        last = last_ids.to(gpt.device_gpt)
        return torch.stack(
            [gpt.emb_code[q](last[:, :, q]).to(self.device) for q in range(last.size(2))], 3
        ).sum(3)

    def head_weights(self) -> list[torch.Tensor]:
        """The output heads' weights, weight norm applied: what :meth:`head_logits`
        computes them to, for callers that apply them many times."""
        with parametrize.cached():
            return [head.weight.detach().clone() for head in self.chat.embed.head_code]

    def head_logits(self, states: torch.Tensor) -> torch.Tensor:
        """``(B, T, hidden)`` float GPT states -> ``(B, num_vq, V)`` logits of the last position.

        The heads see every position given, as in ChatTTS for the prefill: a GEMM over the
        whole prompt may round differently from a GEMV over its last row.
        """
        gpt = self.chat.gpt
        with parametrize.cached():
            logits = torch.empty(
                states.size(0), states.size(1), self.vocab, self.num_vq, dtype=torch.float,
                device=states.device,
            )  # fmt: skip
            for q in range(self.num_vq):
                logits[..., q] = gpt.head_code[q](states)
        return logits.narrow(1, -1, 1).squeeze(1).float().permute(0, 2, 1)
