"""Our streaming decoder on ChatTTS's own modules: incremental GPT + windowed vocoding.

ChatTTS's ``infer(stream=True)`` holds audio back for 72 GPT steps, re-decodes the whole
sequence at every chunk (quadratic work) and slices off the new tail (clicks at joins).
:class:`StreamingDecoder` drives the modules a ``Chat`` has loaded (its GPT with a KV
cache, its Decoder and Vocos) itself, composing two parts:

- generation (:mod:`server.engines.chattts.generation`): ChatTTS's ``GPT.generate`` loop
  for one text, step for step, same seed -> same tokens as ChatTTS, each step yielded as
  soon as it is sampled, ``should_stop`` polled before every step;
- vocoding (:mod:`server.engines.chattts.vocoding`): chunks small first then growing,
  each decoded on a window with left context and joined to what was sent with a
  crossfade, so decode work grows linearly and joins do not click.

Not thread-safe, like ``Chat``: one utterance at a time per instance.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np
import torch

from server.engines.chattts.generation import Generation, GenerationParams, Sampler, StepOutput
from server.engines.chattts.precision import DTYPES, cast_gpt, quantize_linear
from server.engines.chattts.settings import (
    FRAMES_PER_STEP,
    SAMPLES_PER_FRAME,
    SAMPLES_PER_STEP,
    ChatTTSSettings,
)
from server.engines.chattts.static_cache import StaticGPT
from server.engines.chattts.vocoding import StreamStats, Vocoder, stream_windows

__all__ = [
    "FRAMES_PER_STEP",
    "SAMPLES_PER_FRAME",
    "SAMPLES_PER_STEP",
    "GenerationParams",
    "StepOutput",
    "StreamStats",
    "StreamingDecoder",
]


def _never() -> bool:
    return False


class StreamingDecoder:
    """Streams one utterance at a time from a loaded ``Chat``'s GPT, Decoder and Vocos."""

    def __init__(self, chat: Any, options: ChatTTSSettings | None = None) -> None:
        """``options``: how chunks are cut, decoded and joined, on what dtypes, with which
        KV cache (see :class:`ChatTTSSettings`); its sampling fields are not read here:
        each call's :class:`GenerationParams` carry them."""
        self.chat = chat
        self.options = options = options or ChatTTSSettings()
        self.last_stats = StreamStats()
        device = torch.device(chat.device)
        if device.type != "cuda" and (
            options.gpt_dtype != "float32" or options.decoder_dtype != "float32"
        ):
            raise ValueError("half-precision GPT / Decoder is for CUDA only")
        gpt_dtype = DTYPES[options.gpt_dtype]
        if chat.gpt.gpt.dtype != gpt_dtype:
            cast_gpt(chat.gpt.gpt, gpt_dtype)
        if options.gpt_quantization == "int8":
            quantize_linear(chat.gpt.gpt)
        self.generation = Generation(chat)
        self.vocoder = Vocoder(chat, options)
        self.static_gpt: StaticGPT | None = None
        if options.gpt_cache == "static":
            self.static_gpt = StaticGPT(
                chat.gpt.gpt,
                max_tokens=options.gpt_cache_tokens,
                # 0 (one per interleaved segment) is resolved by the server; alone, one.
                slots=options.gpt_cache_slots or 1,
                cuda_graphs=options.cuda_graphs,
            )

    # -- generation ---------------------------------------------------------------------

    def generate(
        self, text: str, params: GenerationParams, should_stop: Callable[[], bool] = _never
    ) -> Generator[StepOutput, None, None]:
        """ChatTTS's generation of ``text``, one :class:`StepOutput` per step, on the
        static cache when there is one (see :meth:`Generation.generate`)."""
        return self.generation.generate(text, params, self.static_gpt, should_stop)

    def prompt(
        self, text: str, params: GenerationParams
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """See :meth:`Generation.prompt`."""
        return self.generation.prompt(text, params)

    def sampler(self, params: GenerationParams) -> Sampler:
        """See :meth:`Generation.sampler`."""
        return self.generation.sampler(params)

    def code_embeds(self, last_ids: torch.Tensor) -> torch.Tensor:
        """See :meth:`Generation.code_embeds`."""
        return self.generation.code_embeds(last_ids)

    def head_logits(self, states: torch.Tensor) -> torch.Tensor:
        """See :meth:`Generation.head_logits`."""
        return self.generation.head_logits(states)

    # -- vocoding -----------------------------------------------------------------------

    def vocode(self, hiddens: torch.Tensor) -> np.ndarray:
        """See :meth:`Vocoder.vocode`."""
        return self.vocoder.vocode(hiddens)

    def vocode_many(self, windows: list[torch.Tensor]) -> list[np.ndarray]:
        """See :meth:`Vocoder.vocode_many`."""
        return self.vocoder.vocode_many(windows)

    def stream(
        self, text: str, params: GenerationParams, should_stop: Callable[[], bool] = _never
    ) -> Iterator[np.ndarray]:
        """Yield float32 mono 24 kHz chunks of ``text`` as they are decoded.

        Statistics land in :attr:`last_stats`. Raises ``Cancelled`` when
        ``should_stop`` turns true (polled before every GPT step).
        """
        stats = self.last_stats = StreamStats()
        hidden_size = int(self.chat.config.gpt.hidden_size)
        hiddens = torch.empty(
            params.max_new_token, hidden_size, dtype=torch.float, device=self.chat.device
        )
        stats.hiddens = hiddens[:0]

        def step_counts() -> Generator[int, None, None]:
            with contextlib.closing(self.generate(text, params, should_stop)) as outputs:
                for out in outputs:
                    hiddens[out.index].copy_(out.hidden)
                    stats.token_ids.append(out.ids.tolist())
                    stats.hiddens = hiddens[: out.index + 1]
                    yield out.index + 1

        steps = step_counts()
        try:
            yield from stream_windows(
                self.vocode, self.options, hiddens, steps, params.max_new_token, stats
            )
        finally:
            # Now, not when a traceback that holds this frame is freed: generation ends
            # here and gives back its KV-cache slot (the vocoder may have raised).
            steps.close()

    def vocode_stream(self, hiddens: torch.Tensor) -> Iterator[np.ndarray]:
        """Stream already generated ``(steps, hidden)`` states through the same windows.

        What :meth:`stream` does after generation, without the GPT: for measuring the
        windowed vocoder (context, overlap) on fixed hidden states.
        """
        stats = self.last_stats = StreamStats()
        stats.hiddens = hiddens
        steps = int(hiddens.size(0))
        yield from stream_windows(
            self.vocode, self.options, hiddens, iter(range(1, steps + 1)), steps, stats
        )
