"""Vocoding GPT hidden states into audio: ChatTTS's Decoder + Vocos, whole or in windows.

Windows (:class:`ChunkWindows`, :func:`stream_windows`): chunk ``i`` ends after
``ChunkSchedule.size(i)`` steps (small first, then growing). Each chunk's window is its
new steps plus ``left_context_frames`` of already-sent mel frames; Decoder + Vocos run
on that window only, and :class:`streaming.crossfade.WindowJoiner` joins it to what was
sent: the last ``lookahead_frames`` (no right context yet) are held back and re-decoded
by the next window, and ``overlap_samples`` before them are crossfaded. Each step is
decoded a bounded number of times, so decode work grows linearly.

Units: one GPT step is 2 mel frames (the Decoder splits each hidden state in two) and a
mel frame is 256 samples at 24 kHz; Vocos (``center`` ISTFT) renders ``n`` frames into
``(n - 1) * 256`` samples, sample ``k`` of a window starting at frame ``f`` being global
sample ``f * 256 + k``.

:class:`OnnxVocoder` runs the same Decoder + Vocos backbone exported to ONNX Runtime.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from server.engines.chattts.precision import DTYPES, quantize_linear
from server.engines.chattts.settings import (
    FRAMES_PER_STEP,
    SAMPLES_PER_FRAME,
    SAMPLES_PER_STEP,
    ChatTTSSettings,
)
from streaming.crossfade import WindowJoiner

__all__ = [
    "ChunkWindows",
    "CompiledModule",
    "OnnxVocoder",
    "StreamStats",
    "Vocoder",
    "VocoderFeatures",
    "istft",
    "stream_windows",
]


@dataclass
class StreamStats:
    """Counters of one streamed utterance (for tests and bench)."""

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


logger = logging.getLogger(__name__)


class CompiledModule:
    """``torch.compile(module, dynamic=True)``, called the way it compiles, and the eager
    module in its place, for good, if it does not.

    torch 2.11-2.13 cannot compile a view made under ``torch.inference_mode`` (AOT
    autograd's functionalization: ``Cannot set version_counter for inference tensor`` on
    CPU, ``RuntimeError: <weakref ... UntypedStorage>`` seen on an H200; pytorch#169477,
    #180823), and ChatTTS's Decoder (``DVAE.forward``, decorated
    ``@torch.inference_mode()``) makes one, ``vq_feats.view(...)``. So a forward wrapped
    in such a decorator is compiled unwrapped (its ``__wrapped__``), and the compiled code
    runs with inference mode and gradients off, on a copy of its input that is an
    ordinary tensor. Should compiling or running the compiled code fail anyway (another
    torch, another backend), every module sharing ``failed`` (a list: empty while all is
    well) runs eagerly from then on, and the first failure is one WARNING line: a request
    never fails for it.
    """

    def __init__(self, module: Any, name: str, failed: list[str]) -> None:
        self.eager: Callable[[torch.Tensor], torch.Tensor] = module
        self.name = name
        self._failed = failed
        forward = getattr(type(module).forward, "__wrapped__", None)
        target = functools.partial(forward, module) if forward is not None else module
        self._compiled: Callable[[torch.Tensor], torch.Tensor] = torch.compile(target, dynamic=True)

    @property
    def compiled(self) -> bool:
        """False once a compilation failed and the eager modules serve."""
        return not self._failed

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self._failed:
            with _dispatch_keys_kept():
                try:
                    with torch.inference_mode(False), torch.no_grad():
                        return self._compiled(x.clone())
                except Exception as exc:  # compilation's many failure types, one answer
                    said = " ".join(str(exc).split("\n")[:2]).strip()
                    failure = f"{type(exc).__name__}: {said[:300]}"
                # Free the failed compile's frames here, in the guard: torch's dispatch
                # guards in them restore, when destroyed, the state they saw.
                gc.collect()
            self._failed.append(self.name)
            logger.warning(
                "torch.compile of the vocoder (%s) failed (%s): Decoder and Vocos run "
                "uncompiled from now on (--compile-vocoder false hides this)",
                self.name, failure,
            )  # fmt: skip
        return self.eager(x)


def _dispatch_keys_kept() -> contextlib.AbstractContextManager[object]:
    """The thread's dispatch-key state as it was, however the block ends: torch 2.13
    leaves the PythonDispatcher key set after a failed compile, and every eager call on
    the thread then fails an internal assert until the caller's inference mode ends."""
    guard = getattr(torch._C, "_ForceDispatchKeyGuard", None)
    if guard is None:
        return contextlib.nullcontext()
    kept: contextlib.AbstractContextManager[object] = guard(
        torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set()
    )
    return kept


class Vocoder:
    """ChatTTS's Decoder + Vocos on ``(steps, hidden)`` GPT states, as ``options`` set them
    up: decoder dtype, INT8 linears, ``torch.compile`` (:class:`CompiledModule`), or the
    ONNX Runtime backend."""

    def __init__(self, chat: Any, options: ChatTTSSettings) -> None:
        self.chat = chat
        if options.vocoder_quantization == "int8":
            quantize_linear(chat.decoder)
            quantize_linear(chat.vocos)
        self.decoder_dtype = DTYPES[options.decoder_dtype]
        if self.decoder_dtype != torch.float32:
            chat.decoder.to(dtype=self.decoder_dtype)
        self._decoder: Callable[[torch.Tensor], torch.Tensor] = chat.decoder
        self._backbone: Callable[[torch.Tensor], torch.Tensor] = chat.vocos.backbone
        if options.compile_vocoder:
            failed: list[str] = []  # shared: one failure, both eager, one warning
            self._decoder = CompiledModule(chat.decoder, "ChatTTS's Decoder", failed)
            self._backbone = CompiledModule(chat.vocos.backbone, "the Vocos backbone", failed)
        self.onnx: OnnxVocoder | None = None
        if options.vocoder_backend == "onnx":
            self.onnx = OnnxVocoder(chat)

    @torch.inference_mode()
    def vocode(self, hiddens: torch.Tensor) -> np.ndarray:
        """Decode ``(steps, hidden)`` GPT hidden states into float32 audio in one pass.

        This is ChatTTS's ``_decode_to_wavs`` for one sequence (Decoder, then Vocos):
        ``2 * steps - 1`` frames' worth of samples.
        """
        if self.onnx is not None:
            onnx_audio: np.ndarray = self.onnx(hiddens.t().unsqueeze(0))[0].cpu().numpy()
            return onnx_audio
        x = hiddens.t().unsqueeze(0).contiguous().to(self.decoder_dtype)
        mel = self._decoder(x).float()
        features = self._backbone(mel)
        audio = self.chat.vocos.head(features)
        result: np.ndarray = audio[0].float().cpu().numpy()
        return result

    @torch.inference_mode()
    def vocode_many(self, windows: list[torch.Tensor]) -> list[np.ndarray]:
        """:meth:`vocode` for windows of one length ``(steps, hidden)``, in one call."""
        if len(windows) == 1 or self.onnx is not None:
            return [self.vocode(window) for window in windows]
        x = torch.stack(windows).transpose(1, 2).contiguous().to(self.decoder_dtype)
        mel = self._decoder(x).float()
        audio = self.chat.vocos.head(self._backbone(mel)).float().cpu().numpy()
        return list(audio)


class ChunkWindows:
    """When an utterance's chunks are due and how each vocoded window joins the last.

    Chunk ``i`` ends after ``options.schedule.size(i)`` more steps; its window starts
    ``left_context_frames`` before what has been sent. :meth:`join` passes the window's
    audio to a :class:`WindowJoiner`, which holds back ``lookahead_frames`` for the next
    window and crossfades ``overlap_samples`` at the join.
    """

    def __init__(self, options: ChatTTSSettings, max_steps: int) -> None:
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

    @property
    def next_boundary(self) -> int:
        """Steps after which the next scheduled chunk ends."""
        return self._next_boundary

    @property
    def last_cut(self) -> int:
        """Steps at which the last chunk was cut (0 before the first)."""
        return self._last_cut

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


def stream_windows(
    vocode: Callable[[torch.Tensor], np.ndarray],
    options: ChatTTSSettings,
    hiddens: torch.Tensor,
    step_counts: Iterator[int],
    max_steps: int,
    stats: StreamStats,
) -> Iterator[np.ndarray]:
    """Vocode ``hiddens`` window by window as its rows become ready.

    ``step_counts`` yields how many rows of ``hiddens`` are ready, one more each time;
    each chunk due (and the last, at the end) is vocoded (``vocode``: ``(steps, hidden)``
    states to audio, :meth:`Vocoder.vocode`) and joined, and its samples
    yielded when there are any. ``stats`` counts decoded frames and emitted chunks.
    """
    started = time.perf_counter()
    windows = ChunkWindows(options, max_steps)
    steps = 0

    def window(final: bool) -> np.ndarray:
        first = windows.first_step()
        stats.decoded_frames += (steps - first) * FRAMES_PER_STEP
        return windows.join(vocode(hiddens[first:steps]), first, steps, final=final)

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
        with tempfile.TemporaryDirectory() as tmp:
            target = path or Path(tmp) / "vocoder.onnx"
            self._export(VocoderFeatures(chat).eval(), target)
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

    def _export(self, module: VocoderFeatures, target: Path) -> None:
        hidden = int(self.chat.config.gpt.hidden_size)
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

    def project(self, hiddens: torch.Tensor) -> torch.Tensor:
        """``(1, hidden, steps)`` hidden states to the head's ``(1, n_fft + 2, frames)``."""
        x = hiddens.detach().float().contiguous().cpu().numpy()
        projected = self.session.run(None, {"hiddens": x})[0]
        return torch.from_numpy(projected).to(self.device)

    @torch.inference_mode()
    def __call__(self, hiddens: torch.Tensor) -> torch.Tensor:
        """``(1, hidden, steps)`` hidden states to ``(1, samples)`` float32 audio."""
        return istft(self.chat, self.project(hiddens))
