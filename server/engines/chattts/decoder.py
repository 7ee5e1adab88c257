"""Our streaming decoder on ChatTTS's own modules: incremental GPT + windowed vocoding.

ChatTTS's ``infer(stream=True)`` holds audio back for 72 GPT steps, re-decodes the whole
sequence at every chunk (quadratic work) and slices off the new tail (clicks at joins).
:class:`StreamingDecoder` drives the modules a ``Chat`` has loaded (its GPT with a KV
cache, its Decoder and Vocos) itself:

- Generation (:meth:`StreamingDecoder.generate`) is ChatTTS's ``GPT.generate`` loop for
  one text, step for step: the same prompt building, embeddings, speaker embedding,
  logits processors (``gen_logits``: top-P, top-K, repetition penalty), temperature,
  EOS masking below ``min_new_token`` and per-step re-seeded sampling from the GPT's own
  generator. Same seed -> same tokens as ChatTTS (pinned by a test), but it yields each
  step's token and hidden state as soon as it is sampled, and polls ``should_stop``
  before every step.
- Vocoding (:meth:`StreamingDecoder.stream`): chunk ``i`` ends after
  ``ChunkSchedule.size(i)`` steps (small first, then growing). Each chunk's window is its
  new steps plus ``left_context_frames`` of already-sent mel frames; Decoder + Vocos run
  on that window only, and :class:`streaming.crossfade.WindowJoiner` joins it to what
  was sent: the last ``lookahead_frames`` (no right context yet) are held back and
  re-decoded by the next window, and ``overlap_samples`` before them are crossfaded. Each
  step is decoded a bounded number of times, so decode work grows linearly.

Units: one GPT step is 2 mel frames (the Decoder splits each hidden state in two) and a
mel frame is 256 samples at 24 kHz; Vocos (``center`` ISTFT) renders ``n`` frames into
``(n - 1) * 256`` samples, sample ``k`` of a window starting at frame ``f`` being global
sample ``f * 256 + k``.

Not thread-safe, like ``Chat``: one utterance at a time per instance.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
import warnings
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.utils.parametrize as parametrize
from ChatTTS.model.processors import gen_logits

from server.engines.base import Cancelled
from server.engines.chattts.options import (
    FRAMES_PER_STEP,
    SAMPLES_PER_FRAME,
    SAMPLES_PER_STEP,
    ChatTTSOptions,
)
from server.engines.chattts.static_cache import StaticGPT
from streaming.crossfade import WindowJoiner

logger = logging.getLogger(__name__)

__all__ = [
    "FRAMES_PER_STEP",
    "SAMPLES_PER_FRAME",
    "ChunkWindows",
    "GenerationParams",
    "OnnxVocoder",
    "Sampler",
    "StepOutput",
    "StreamStats",
    "StreamingDecoder",
    "VocoderFeatures",
    "cast_gpt",
    "istft",
    "quantize_linear",
]


_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def _never() -> bool:
    return False


def cast_gpt(model: Any, dtype: torch.dtype) -> None:
    """Cast ChatTTS's ``LlamaModel`` to ``dtype`` in place, its rotary frequencies excepted.

    ``Module.to`` casts every floating buffer, the rotary embedding's ``inv_freq``
    included: in bfloat16 its 8-bit mantissa turns position 2559 by up to a radian.
    The rotary forward computes in float32 from it anyway, so it stays float32 (as a
    model loaded in half precision by transformers keeps it).
    """
    rotary = model.rotary_emb
    frequencies = {
        name: getattr(rotary, name).detach().float().clone()
        for name in ("inv_freq", "original_inv_freq")
        if isinstance(getattr(rotary, name, None), torch.Tensor)
    }
    if any(t.dtype != torch.float32 for t in (getattr(rotary, n) for n in frequencies)):
        logger.warning("the GPT's rotary frequencies were already cast; precision is lost")
    model.to(dtype=dtype)
    for name, tensor in frequencies.items():
        setattr(rotary, name, tensor)


def quantize_linear(model: Any) -> None:
    """INT8 weights for the linear layers of ``model`` (ChatTTS's GPT, or its vocoder), in place.

    CPU: PyTorch's dynamic quantisation (int8 weights, activations quantised per call),
    the only INT8 path that paid on these CPUs (docs/batching.md); torch marks it
    deprecated in favour of torchao, whose int8 weight-only kernels were no faster here.
    CUDA: torchao's ``Int8WeightOnlyConfig`` (needs the torchao package). The embeddings
    and ChatTTS's output heads stay in float (the GPT's), as do convolutions (the
    vocoder's: its ConvNeXt blocks' pointwise layers are the linears).
    """
    device = next(model.parameters()).device
    if device.type == "cuda":
        try:
            from torchao.quantization import Int8WeightOnlyConfig, quantize_
        except ImportError as exc:  # pragma: no cover - CUDA hosts only
            raise RuntimeError("gpt_quantization int8 on CUDA needs torchao installed") from exc
        quantize_(model, Int8WeightOnlyConfig())  # pragma: no cover
        return  # pragma: no cover
    with warnings.catch_warnings():
        # "deprecated ... migrate to torchao": still the fastest CPU path (measured).
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", "torch.quantize_per_tensor", UserWarning)
        torch.ao.quantization.quantize_dynamic(
            model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True
        )


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


@dataclass
class StreamStats:
    """Counters of the last :meth:`StreamingDecoder.stream` call (for tests and bench)."""

    steps: int = 0
    #: Mel frames that went through the Decoder + Vocos, all windows together.
    decoded_frames: int = 0
    emitted_samples: int = 0
    #: (GPT steps so far, samples) of each chunk yielded, in order.
    chunks: list[tuple[int, int]] = field(default_factory=list)
    #: Seconds from the call to the first non-empty chunk; None until there is one.
    first_audio_s: float | None = None
    first_audio_step: int | None = None
    token_ids: list[list[int]] = field(default_factory=list)
    #: (steps, hidden) GPT hidden states of the utterance, for a one-shot reference decode.
    hiddens: torch.Tensor | None = None

    @property
    def emitted_frames(self) -> float:
        """Emitted audio in mel frames (a window of n frames renders n - 1 of audio)."""
        return self.emitted_samples / SAMPLES_PER_FRAME + 1

    @property
    def decode_ratio(self) -> float:
        """Frames decoded per frame emitted: 1.0 would be one decode of every frame."""
        return self.decoded_frames / self.emitted_frames if self.emitted_samples else 0.0


class StreamingDecoder:
    """Streams one utterance at a time from a loaded ``Chat``'s GPT, Decoder and Vocos."""

    def __init__(self, chat: Any, options: ChatTTSOptions | None = None) -> None:
        """``options``: how chunks are cut, decoded and joined, on what dtypes, with which
        KV cache (see :class:`ChatTTSOptions`); its sampling fields are not read here:
        each call's :class:`GenerationParams` carry them."""
        self.chat = chat
        self.options = options or ChatTTSOptions()
        self.last_stats = StreamStats()
        device = torch.device(chat.device)
        if device.type != "cuda" and (
            self.options.gpt_dtype != "float32" or self.options.decoder_dtype != "float32"
        ):
            raise ValueError("half-precision GPT / Decoder is for CUDA only")
        gpt_dtype = _DTYPES[self.options.gpt_dtype]
        if chat.gpt.gpt.dtype != gpt_dtype:
            cast_gpt(chat.gpt.gpt, gpt_dtype)
        if self.options.gpt_quantization == "int8":
            quantize_linear(chat.gpt.gpt)
        if self.options.vocoder_quantization == "int8":
            quantize_linear(chat.decoder)
            quantize_linear(chat.vocos)
        self._decoder_dtype = _DTYPES[self.options.decoder_dtype]
        if self._decoder_dtype != torch.float32:
            chat.decoder.to(dtype=self._decoder_dtype)
        self._decoder: Callable[[torch.Tensor], torch.Tensor] = chat.decoder
        self._backbone: Callable[[torch.Tensor], torch.Tensor] = chat.vocos.backbone
        if self.options.compile_vocoder:
            self._decoder = torch.compile(chat.decoder, dynamic=True)
            self._backbone = torch.compile(chat.vocos.backbone, dynamic=True)
        self._onnx: OnnxVocoder | None = None
        if self.options.vocoder_backend == "onnx":
            self._onnx = OnnxVocoder(chat)
        self.static_gpt: StaticGPT | None = None
        if self.options.gpt_cache == "static":
            self.static_gpt = StaticGPT(
                chat.gpt.gpt,
                max_tokens=self.options.gpt_cache_tokens,
                # 0 (one per interleaved segment) is resolved by the server; alone, one.
                slots=self.options.gpt_cache_slots or 1,
                cuda_graphs=self.options.cuda_graphs,
            )

    # -- generation ---------------------------------------------------------------------

    @torch.inference_mode()
    def generate(
        self, text: str, params: GenerationParams, should_stop: Callable[[], bool] = _never
    ) -> Generator[StepOutput, None, None]:
        """Yield one :class:`StepOutput` per generated step until EOS or ``max_new_token``.

        ``should_stop`` is polled before every GPT step; when true, raises
        :class:`Cancelled` (so at most one step runs after a stop is requested).
        """
        chat = self.chat
        gpt = chat.gpt
        num_vq = int(chat.config.gpt.num_vq)
        eos_token = int(chat.config.gpt.num_audio_tokens) - 1
        device = torch.device(chat.device)
        device_gpt = gpt.device_gpt

        input_ids, attention_mask, emb = self.prompt(text, params)
        sampler = self.sampler(params)

        start = input_ids.size(1)
        max_new = params.max_new_token
        ids_buf = torch.zeros(
            1, start + max_new, num_vq, dtype=input_ids.dtype, device=input_ids.device
        )
        ids_buf.narrow(1, 0, start).copy_(input_ids)
        mask_buf = torch.ones(1, start + max_new, dtype=torch.bool, device=input_ids.device)
        mask_buf.narrow(1, 0, attention_mask.size(1)).copy_(attention_mask)
        static = self.static_gpt
        # The static cache assumes an unpadded prompt (one text always is).
        unpadded = bool(attention_mask.all())
        slot = static.acquire(start + max_new) if static is not None and unpadded else None
        try:
            gpt_dtype = gpt.gpt.dtype
            # ChatTTS casts position ids to the model dtype; in float32 that is exact (and we
            # keep it, for bit-identical tokens), but bfloat16 rounds integers above 256 and
            # float16 above 2048: half-precision runs pass them as integers instead.
            index_dtype = gpt_dtype if gpt_dtype == torch.float32 else torch.long
            past: Any = None
            progress = start
            for step in range(max_new):
                if should_stop():
                    raise Cancelled("stopped inside the GPT loop")
                if step == 0:
                    inputs_embeds = emb
                else:
                    inputs_embeds = self.code_embeds(ids_buf.narrow(1, progress - 1, 1))
                if slot is not None:
                    assert static is not None
                    run = static.prefill if step == 0 else static.step
                    last_hidden = run(slot, inputs_embeds.to(device_gpt, dtype=gpt_dtype))
                else:
                    # Same inputs, dtypes and mask form as ChatTTS's _prepare_generation_inputs,
                    # so the arithmetic (hence the sampled tokens) is bit-identical.
                    mask = mask_buf.narrow(1, 0, progress)
                    position_ids = mask.long().cumsum(-1) - 1
                    position_ids.masked_fill_(mask.eq(0), 1)
                    if step == 0:
                        cache_position = torch.arange(0, progress, device=ids_buf.device)
                    else:
                        position_ids = position_ids.narrow(1, -1, 1)
                        cache_position = torch.arange(progress - 1, progress, device=ids_buf.device)
                    outputs = gpt.gpt(
                        attention_mask=mask.to(device_gpt, dtype=gpt_dtype),
                        position_ids=position_ids.to(device_gpt, dtype=index_dtype),
                        past_key_values=past,
                        inputs_embeds=inputs_embeds.to(device_gpt, dtype=gpt_dtype),
                        use_cache=True,
                        output_attentions=False,
                        cache_position=cache_position.to(device_gpt, dtype=index_dtype),
                    )
                    past = outputs.past_key_values
                    last_hidden = outputs.last_hidden_state
                    del outputs
                states = last_hidden.to(device, dtype=torch.float)
                del last_hidden
                hidden = states.narrow(1, -1, 1)
                logits = self.head_logits(states)[0]
                history = ids_buf.narrow(1, start, progress - start).permute(0, 2, 1)
                history = history.reshape(num_vq, -1).to(device)
                idx = sampler.sample(logits, history, step).view(-1, num_vq)
                if bool(idx.eq(eos_token).any()):
                    return
                ids_buf.narrow(1, progress, 1).copy_(idx.unsqueeze(1))
                progress += 1
                yield StepOutput(step, idx[0], hidden[0, 0])
        finally:
            if slot is not None:
                assert static is not None
                static.release(slot)

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
            int(chat.config.gpt.num_vq),
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
        chat = self.chat
        return Sampler.for_params(
            params,
            int(chat.config.gpt.num_vq),
            int(chat.config.gpt.num_audio_tokens) - 1,
            torch.device(chat.device),
            chat.gpt.generator,
        )

    def code_embeds(self, last_ids: torch.Tensor) -> torch.Tensor:
        """``(B, 1, num_vq)`` audio token ids -> ``(B, 1, hidden)``: the sum of the codebooks'
        embeddings, ChatTTS's input for a decode step."""
        gpt = self.chat.gpt
        device = torch.device(self.chat.device)
        last = last_ids.to(gpt.device_gpt)
        return torch.stack(
            [gpt.emb_code[q](last[:, :, q]).to(device) for q in range(last.size(2))], 3
        ).sum(3)

    def head_logits(self, states: torch.Tensor) -> torch.Tensor:
        """``(B, T, hidden)`` float GPT states -> ``(B, num_vq, V)`` logits of the last position.

        The heads see every position given, as in ChatTTS for the prefill: a GEMM over the
        whole prompt may round differently from a GEMV over its last row.
        """
        gpt = self.chat.gpt
        num_vq = len(gpt.head_code)
        vocab = int(self.chat.config.gpt.num_audio_tokens)
        with parametrize.cached():
            logits = torch.empty(
                states.size(0), states.size(1), vocab, num_vq, dtype=torch.float,
                device=states.device,
            )  # fmt: skip
            for q in range(num_vq):
                logits[..., q] = gpt.head_code[q](states)
        return logits.narrow(1, -1, 1).squeeze(1).float().permute(0, 2, 1)

    # -- vocoding -----------------------------------------------------------------------

    @torch.inference_mode()
    def vocode(self, hiddens: torch.Tensor) -> np.ndarray:
        """Decode ``(steps, hidden)`` GPT hidden states into float32 audio in one pass.

        This is ChatTTS's ``_decode_to_wavs`` for one sequence (Decoder, then Vocos):
        ``2 * steps - 1`` frames' worth of samples.
        """
        if self._onnx is not None:
            onnx_audio: np.ndarray = self._onnx(hiddens.t().unsqueeze(0))[0].cpu().numpy()
            return onnx_audio
        x = hiddens.t().unsqueeze(0).contiguous().to(self._decoder_dtype)
        mel = self._decoder(x).float()
        features = self._backbone(mel)
        audio = self.chat.vocos.head(features)
        result: np.ndarray = audio[0].float().cpu().numpy()
        return result

    @torch.inference_mode()
    def vocode_many(self, windows: list[torch.Tensor]) -> list[np.ndarray]:
        """:meth:`vocode` for windows of one length ``(steps, hidden)``, in one call."""
        if len(windows) == 1 or self._onnx is not None:
            return [self.vocode(window) for window in windows]
        x = torch.stack(windows).transpose(1, 2).contiguous().to(self._decoder_dtype)
        mel = self._decoder(x).float()
        audio = self.chat.vocos.head(self._backbone(mel)).float().cpu().numpy()
        return list(audio)

    def stream(
        self, text: str, params: GenerationParams, should_stop: Callable[[], bool] = _never
    ) -> Iterator[np.ndarray]:
        """Yield float32 mono 24 kHz chunks of ``text`` as they are decoded.

        Statistics land in :attr:`last_stats`. Raises :class:`Cancelled` when
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
            yield from self._vocode_steps(hiddens, steps, params.max_new_token, stats)
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
        yield from self._vocode_steps(hiddens, iter(range(1, steps + 1)), steps, stats)

    def _vocode_steps(
        self,
        hiddens: torch.Tensor,
        step_counts: Iterator[int],
        max_steps: int,
        stats: StreamStats,
    ) -> Iterator[np.ndarray]:
        # step_counts yields how many rows of hiddens are ready, one more each time.
        started = time.perf_counter()
        windows = ChunkWindows(self.options, max_steps)
        steps = 0

        def window(final: bool) -> np.ndarray:
            first = windows.first_step()
            stats.decoded_frames += (steps - first) * FRAMES_PER_STEP
            return windows.join(self.vocode(hiddens[first:steps]), first, steps, final=final)

        def emitted(chunk: np.ndarray) -> np.ndarray:
            stats.emitted_samples += chunk.size
            stats.chunks.append((steps, chunk.size))
            if stats.first_audio_s is None and chunk.size:
                stats.first_audio_s = time.perf_counter() - started
                stats.first_audio_step = steps
            return chunk

        for steps in step_counts:
            stats.steps = steps
            if windows.due(steps):
                chunk = window(final=False)
                if chunk.size:
                    yield emitted(chunk)
        if steps:
            chunk = window(final=True)
            if chunk.size:
                yield emitted(chunk)


class Sampler:
    """ChatTTS's sampling of one step for one utterance, as ``GPT.generate`` does it.

    Temperature per codebook, then the repetition penalty over the last 16 tokens, then
    the warpers (top-P, top-K), EOS forbidden below ``min_new_token``, softmax and a
    multinomial draw; with a seed, ChatTTS re-seeds its one generator with the same seed
    at every step, so a seeded utterance draws alone and its tokens do not depend on
    what else runs (the batched decoder draws each row through its own Sampler).
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

    @property
    def policy(self) -> tuple[float, float | None, int | None, float]:
        """What decides the transformation of the logits (rows alike can share it)."""
        p = self.params
        return (p.temperature, p.top_p, p.top_k, p.repetition_penalty)

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


class ChunkWindows:
    """When an utterance's chunks are due and how each vocoded window joins the last.

    Chunk ``i`` ends after ``options.schedule.size(i)`` more steps; its window starts
    ``left_context_frames`` before what has been sent. :meth:`join` passes the window's
    audio to a :class:`WindowJoiner`, which holds back ``lookahead_frames`` for the next
    window and crossfades ``overlap_samples`` at the join.
    """

    def __init__(self, options: ChatTTSOptions, max_steps: int) -> None:
        self.options = options
        self.max_steps = max_steps
        self._schedule = options.schedule
        self._joiner = WindowJoiner(
            overlap_samples=options.overlap_samples,
            holdback_samples=options.lookahead_frames * SAMPLES_PER_FRAME,
        )
        self._chunk_index = 0
        self._next_boundary = self._schedule.size(0)
        self._last_cut = 0

    def due(self, steps: int, *, hurry: bool = False) -> bool:
        """A (non-final) chunk ends after ``steps`` generated steps.

        ``hurry``: the listener is short of audio: cut as soon as ``first_chunk_steps``
        new steps are ready instead of at the scheduled (growing) size.
        """
        if steps >= self.max_steps:
            return False
        if hurry and steps - self._last_cut >= self.options.first_chunk_steps:
            return True
        return steps == self._next_boundary

    def first_step(self) -> int:
        """The first step of the next window: left context before what is not yet sent."""
        sent_frames = self._joiner.emitted_samples // SAMPLES_PER_FRAME
        return max(0, (sent_frames - self.options.left_context_frames) // FRAMES_PER_STEP)

    def join(self, audio: np.ndarray, first: int, steps: int, *, final: bool) -> np.ndarray:
        """The window ``[first, steps)``'s audio in; the samples that may be sent out."""
        chunk = self._joiner.push(audio, first * SAMPLES_PER_STEP, final=final)
        if not final:
            self._chunk_index += 1
            self._next_boundary = steps + self._schedule.size(self._chunk_index)
            self._last_cut = steps
        return chunk


class VocoderFeatures(torch.nn.Module):
    """Decoder -> Vocos backbone -> head projection: the vocoder up to its complex ISTFT.

    The traceable part of ChatTTS's decode (``DVAE.forward`` without its ``out=``
    multiply, which the ONNX exporter refuses), for export; :func:`istft` finishes it.
    """

    def __init__(self, chat: Any) -> None:
        super().__init__()
        self.decoder = chat.decoder
        self.backbone = chat.vocos.backbone
        self.out = chat.vocos.head.out

    def forward(self, hiddens: torch.Tensor) -> torch.Tensor:
        b, c, t = hiddens.shape
        x = hiddens.view(b, 2, c // 2, t).permute(0, 2, 3, 1).flatten(2)
        mel = self.decoder.out_conv(self.decoder.decoder(x)) * self.decoder.coef
        projected: torch.Tensor = self.out(self.backbone(mel)).transpose(1, 2)
        return projected


def istft(chat: Any, projected: torch.Tensor) -> torch.Tensor:
    """Vocos's ``ISTFTHead`` after its projection: magnitude/phase to audio ``(B, T)``."""
    mag, phase = projected.chunk(2, dim=1)
    mag = torch.clip(torch.exp(mag), max=1e2)
    spectrum = mag * (torch.cos(phase) + 1j * torch.sin(phase))
    audio: torch.Tensor = chat.vocos.head.istft(spectrum)
    return audio


class OnnxVocoder:
    """Decoder + Vocos backbone exported to ONNX and run in ONNX Runtime; ISTFT in torch.

    Exported once per instance (a few seconds at full size) with a dynamic step axis;
    uses the CUDA execution provider when the model is on CUDA and it is available.
    """

    def __init__(self, chat: Any, path: Path | None = None) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RuntimeError(
                "vocoder_backend='onnx' needs onnxruntime: pip install -e '.[onnx]'"
            ) from exc
        self.chat = chat
        self.device = torch.device(chat.device)
        module = VocoderFeatures(chat).eval()
        hidden = int(chat.config.gpt.hidden_size)
        with tempfile.TemporaryDirectory() as tmp:
            target = path or Path(tmp) / "vocoder.onnx"
            example = torch.zeros(1, hidden, 16, device=self.device)
            # The TorchScript exporter: it takes this module as is, where the
            # torch.export-based one needs more work; torch >= 2.9 flags it deprecated.
            with torch.inference_mode(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", "You are using the legacy", DeprecationWarning)
                torch.onnx.export(
                    module,
                    (example,),
                    str(target),
                    input_names=["hiddens"],
                    output_names=["projected"],
                    dynamic_axes={"hiddens": {2: "steps"}, "projected": {2: "frames"}},
                    opset_version=17,
                    dynamo=False,
                )
            wanted = ["CPUExecutionProvider"]
            if self.device.type == "cuda":
                wanted.insert(0, "CUDAExecutionProvider")
            available = set(ort.get_available_providers())
            options = ort.SessionOptions()
            # As many threads as torch: the GPT and ONNX Runtime must not oversubscribe.
            options.intra_op_num_threads = torch.get_num_threads()
            options.inter_op_num_threads = 1
            self.session = ort.InferenceSession(
                str(target), options, providers=[p for p in wanted if p in available]
            )
        self.provider: str = self.session.get_providers()[0]

    def project(self, hiddens: torch.Tensor) -> torch.Tensor:
        """``(1, hidden, steps)`` hidden states to the head's ``(1, n_fft + 2, frames)``."""
        x = hiddens.detach().float().contiguous().cpu().numpy()
        projected = self.session.run(None, {"hiddens": x})[0]
        return torch.from_numpy(projected).to(self.device)

    @torch.inference_mode()
    def __call__(self, hiddens: torch.Tensor) -> torch.Tensor:
        """``(1, hidden, steps)`` hidden states to ``(1, samples)`` float32 audio."""
        return istft(self.chat, self.project(hiddens))
