"""The ChatTTS engine: ChatTTS's modules behind :class:`Engine`, streamed two ways.

``decoder="ours"`` (the default) streams through
:class:`server.engines.chattts.decoder.StreamingDecoder`: ChatTTS's GPT step by step
with a KV cache, a small first chunk, and windowed Decoder + Vocos passes joined with a
crossfade (linear decode work, no clicks at joins). ``decoder="chattts"`` falls back
to ChatTTS's own ``infer(stream=True)``, which re-decodes the whole sequence per chunk.
Both sample the same tokens for the same seed.

Calling contract (from :mod:`server.engines.base`): one thread, one synthesis at a time
per instance. ``Chat`` is not thread-safe (interrupt flag, RNG, model state), which is
why cancellation can safely use the instance's interrupt context.

Speed mapping: ``VoiceSpec.speed`` becomes ChatTTS's ``[speed_N]`` prompt with
``N = clamp(round_half_up(5 * speed), 0, 9)``: 1.0 -> ``[speed_5]`` (ChatTTS's default),
1.2 -> 6, 1.4 -> 7, 0.8 -> 4, 0.5 -> 3, >= 1.7 -> 9, < 0.1 -> 0. Ten levels are all
ChatTTS has; it does not say how fast each one is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from server.engines.base import (
    DEFAULT_SPEED_RANGE,
    Batcher,
    BatchRow,
    Cancelled,
    SynthesisRequest,
    VoiceSpec,
)
from server.engines.chattts.batch import BatchedDecoder
from server.engines.chattts.checkpoint import load_chat
from server.engines.chattts.decoder import GenerationParams, StreamingDecoder
from server.engines.chattts.manifest import ModelDirectory
from server.engines.chattts.settings import ChatTTSSettings

logger = logging.getLogger(__name__)

__all__ = ["ChatTTSEngine", "resolve_device", "speed_prompt"]

#: Speaker embeddings kept per engine, keyed by (voice, seed); each is a few hundred bytes.
_SPEAKER_CACHE_SIZE = 64
#: ChatTTS emits at most ``stream_speed`` samples per streamed chunk and holds the rest
#: back until the end; a bound this large means "everything decoded so far".
_UNBOUNDED_STREAM_SPEED = 1 << 30
_WARM_UP_TEXT = "你好。"


def resolve_device(device: str) -> str:
    """Map ``"auto"`` to ``"cuda"`` when CUDA is available, else ``"cpu"``."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def speed_prompt(speed: float) -> str:
    """Return ChatTTS's ``[speed_N]`` prompt for a speed factor (1.0 is ``[speed_5]``)."""
    if not math.isfinite(speed):
        raise ValueError(f"speed must be finite, not {speed!r}")
    level = min(9, max(0, math.floor(5 * speed + 0.5)))
    return f"[speed_{level}]"


def model_identity(chat: Any, options: ChatTTSSettings, device: str) -> str:
    """A digest of the checkpoint (the file hashes ChatTTS checked as it loaded), every
    engine option, the device type and the library versions."""
    from dataclasses import asdict
    from importlib.metadata import PackageNotFoundError, version

    try:
        chattts_version = version("chattts")
    except PackageNotFoundError:
        chattts_version = "unknown"
    described = {
        "files": dict(sorted(chat.sha256_map.items())),
        "options": asdict(options),
        "device": device.split(":")[0],
        "torch": torch.__version__,
        "chattts": chattts_version,
    }
    digest = hashlib.sha256(json.dumps(described, sort_keys=True, default=repr).encode())
    return f"chattts/{digest.hexdigest()[:32]}"


class _StopContext:
    """Stands in for ChatTTS's ``GPT.Context``, which ``GPT.generate`` polls every step.

    ``get()`` also polls the current request's ``should_stop`` and raises
    :class:`Cancelled` from inside the GPT loop: raising (rather than returning True,
    which only ends generation) also skips the Decoder + Vocos pass ChatTTS would run
    on the partial result.
    """

    def __init__(self) -> None:
        self._interrupt = False
        self.should_stop: Callable[[], bool] | None = None

    def set(self, value: bool) -> None:
        self._interrupt = value

    def get(self) -> bool:
        if self.should_stop is not None and self.should_stop():
            raise Cancelled("stopped inside the GPT loop")
        return self._interrupt


class ChatTTSEngine:
    """ChatTTS on one device, streaming float32 mono chunks at 24 kHz; ``options``
    (:class:`ChatTTSSettings`) say how.

    With ``decoder="ours"`` the first chunk comes after ``first_chunk_steps`` GPT steps
    and chunks then grow by ``chunk_growth`` up to ``max_chunk_steps``; each is decoded
    with ``left_context_frames`` of context, ``lookahead_frames`` held back and
    ``overlap_samples`` crossfaded.

    With ``decoder="chattts"``, ``stream_batch`` GPT steps make one chunk (46.875 steps per second of audio);
    ChatTTS drops the first ``pass_first_n_batches`` yields, i.e. holds the first audio
    back until ``stream_batch * (pass_first_n_batches + 1)`` steps (its default is 2;
    ours is 0 for the earliest first chunk). ``max_new_token`` bounds a segment's length
    in GPT steps; ``min_new_token`` forbids EOS before that many steps (set both equal
    for fixed-length runs, as random-weight checkpoints end at random).
    """

    name = "chattts"
    sample_rate_hz = 24_000
    #: What speed_prompt's [speed_N] covers; beyond, the server time-stretches.
    speed_range = DEFAULT_SPEED_RANGE

    def __init__(
        self, model_dir: str | Path | ModelDirectory, options: ChatTTSSettings | None = None
    ) -> None:
        self.options = options = options or ChatTTSSettings()
        self.device = resolve_device(options.device)
        self.max_new_token = options.max_new_token
        self._speakers: OrderedDict[tuple[str | None, int], str] = OrderedDict()
        self._stop_context = _StopContext()
        self._chat: Any = load_chat(model_dir, device=self.device, compile=options.compile)
        # An instance attribute: ChatTTS reads chat.context at each generate() call.
        self._chat.context = self._stop_context
        self._stream: StreamingDecoder | None = None
        if options.decoder == "ours":
            self._stream = StreamingDecoder(self._chat, options)
        #: What, besides a request, decides its samples (the phrase cache's key).
        self.identity = model_identity(self._chat, options, self.device)

    def warm_up(self) -> None:
        """Run one short synthesis so the first real request pays no lazy start-up cost."""
        started = time.perf_counter()
        static_gpt = self._stream.static_gpt if self._stream is not None else None
        if static_gpt is not None and static_gpt.cuda_graphs:
            static_gpt.prepare()  # every slot's CUDA graph, so no request pays a capture
        request = SynthesisRequest(text=_WARM_UP_TEXT, voice=VoiceSpec())
        samples = sum(
            chunk.size for chunk in self._synthesize(request, lambda: False, max_new_token=48)
        )
        logger.info(
            "ChatTTS warm-up on %s: %s samples in %.2f s",
            self.device,
            samples,
            time.perf_counter() - started,
        )

    def synthesize(
        self, request: SynthesisRequest, should_stop: Callable[[], bool]
    ) -> Iterator[np.ndarray]:
        """Yield float32 mono chunks as ChatTTS decodes them; raise Cancelled when stopped.

        ``should_stop`` is polled between chunks and at every GPT step.
        """
        return self._synthesize(request, should_stop, max_new_token=self.max_new_token)

    def _synthesize(
        self, request: SynthesisRequest, should_stop: Callable[[], bool], *, max_new_token: int
    ) -> Iterator[np.ndarray]:
        chat = self._loaded()
        if self._stream is not None:
            yield from self._stream_ours(self._stream, request, should_stop, max_new_token)
        else:
            yield from self._stream_chattts(chat, request, should_stop, max_new_token)

    def batcher(self, max_batch: int) -> Batcher | None:
        """Continuous batching of our decoder's batch_rows (``decoder="ours"``, ``max_batch``
        above 1); None otherwise: segments then interleave a chunk at a time."""
        if self._stream is None or max_batch < 2:
            return None
        options = self.options
        decoder = BatchedDecoder(
            self._stream,
            max_batch=max_batch,
            max_tokens=options.gpt_cache_tokens,
            attention=options.batch_attention,
            batch_vocoder=options.batch_vocoder,
            cuda_graphs=options.batch_cuda_graphs,
        )
        decoder.prepare()  # every bucket's CUDA graph (with batch_cuda_graphs) up front
        return _ChatTTSBatcher(self, decoder)

    def generation_params(self, request: SynthesisRequest, max_new_token: int) -> GenerationParams:
        voice = request.voice
        options = self.options

        def own(value: Any, default: Any) -> Any:
            return default if value is None else value

        return GenerationParams(
            prompt=speed_prompt(voice.speed),
            # A reference clip is the speaker (ChatTTS: [empty_spk] with the clip's codes).
            spk_emb=None if voice.reference is not None else self.speaker(voice),
            temperature=own(voice.temperature, options.temperature),
            top_p=own(voice.top_p, options.top_p),
            top_k=own(voice.top_k, options.top_k),
            seed=voice.seed,
            max_new_token=max_new_token,
            min_new_token=min(options.min_new_token, max_new_token),
            spk_smp=voice.reference,
            txt_smp=voice.transcript,
        )

    def _stream_ours(
        self,
        stream: StreamingDecoder,
        request: SynthesisRequest,
        should_stop: Callable[[], bool],
        max_new_token: int,
    ) -> Iterator[np.ndarray]:
        params = self.generation_params(request, max_new_token)
        if should_stop():
            raise Cancelled("stopped before synthesis")
        for chunk in stream.stream(request.text, params, should_stop):
            yield chunk
            if should_stop():
                raise Cancelled("stopped between chunks")

    def _stream_chattts(
        self,
        chat: Any,
        request: SynthesisRequest,
        should_stop: Callable[[], bool],
        max_new_token: int,
    ) -> Iterator[np.ndarray]:
        voice = request.voice
        # Fresh every call: ChatTTS writes spk_smp / txt_smp onto the params it is given.
        ours = self.generation_params(request, max_new_token)
        params = chat.InferCodeParams(
            prompt=ours.prompt,
            spk_emb=ours.spk_emb,
            spk_smp=ours.spk_smp,
            txt_smp=ours.txt_smp,
            temperature=ours.temperature,
            top_P=ours.top_p,
            top_K=ours.top_k,
            manual_seed=voice.seed,
            max_new_token=max_new_token,
            min_new_token=ours.min_new_token,
            stream_batch=self.options.stream_batch,
            pass_first_n_batches=self.options.pass_first_n_batches,
            stream_speed=_UNBOUNDED_STREAM_SPEED,
            show_tqdm=False,
        )
        if should_stop():
            raise Cancelled("stopped before synthesis")
        self._stop_context.should_stop = should_stop
        try:
            # The text front-end has already reduced the text to what ChatTTS can say;
            # ChatTTS's own normaliser would only delete characters. infer() resets the
            # interrupt flag itself.
            chunks = chat.infer(
                [request.text],
                stream=True,
                skip_refine_text=True,
                split_text=False,
                do_text_normalization=False,
                do_homophone_replacement=False,
                params_infer_code=params,
            )
            try:
                for batch in chunks:
                    # (batch, samples) with a batch of one text.
                    chunk = np.ascontiguousarray(batch[0], dtype=np.float32)
                    if chunk.size:
                        yield chunk
                    if should_stop():
                        raise Cancelled("stopped between chunks")
            finally:
                chunks.close()
        finally:
            self._stop_context.should_stop = None

    def speaker(self, voice: VoiceSpec) -> str:
        """Return the ChatTTS speaker string ``voice`` speaks with (cached per voice, seed).

        That is ``voice.voice`` when given (checked against this model), else the speaker
        ``voice.speaker_seed`` (or ``voice.seed``) samples: always the same one for a seed,
        whatever ran before.
        Raises :class:`ValueError` for a speaker string this model cannot use.
        """
        key = (voice.voice, voice.speaker_key)
        speaker = self._speakers.get(key)
        if speaker is not None:
            self._speakers.move_to_end(key)
            return speaker
        if voice.voice is not None:
            speaker = self._checked_voice(voice.voice)
        else:
            speaker = self._seeded_speaker(key[1])
        self._speakers[key] = speaker
        if len(self._speakers) > _SPEAKER_CACHE_SIZE:
            self._speakers.popitem(last=False)
        return speaker

    def _seeded_speaker(self, seed: int) -> str:
        # Seed a forked RNG so a seed names the same speaker whatever ran before, without
        # moving the global RNG. The speaker statistic lives on the model device, so a
        # seed's speaker is the same on every machine of one device type only.
        cuda_devices = (
            list(range(torch.cuda.device_count())) if self.device.startswith("cuda") else []
        )
        with torch.random.fork_rng(devices=cuda_devices):
            torch.manual_seed(seed)
            speaker: str = self._loaded().sample_random_speaker()
        return speaker

    def mix_speakers(self, parts: Sequence[tuple[VoiceSpec, float]]) -> str:
        """A speaker string blended from the speakers of ``parts`` (voice, weight > 0):
        each speaker embedding (decoded from its string, or sampled from its seed) is
        scaled to unit length, the weighted mean taken, and scaled back to the parents'
        weighted mean length (ChatTTS normalises an embedding before use, so the weights
        set the direction: how much of each voice). On the engine thread."""
        chat = self._loaded()
        weights = np.array([weight for _, weight in parts], dtype=np.float64)
        if not parts or not np.all(weights > 0):
            raise ValueError("a mix needs voices with positive weights")
        weights /= weights.sum()
        vectors = [
            np.asarray(chat.speaker._decode(self.speaker(voice)), np.float64) for voice, _ in parts
        ]
        norms = np.array([max(float(np.linalg.norm(v)), 1e-12) for v in vectors])
        direction = sum(w * v / n for w, v, n in zip(weights, vectors, norms, strict=True))
        length = float(np.linalg.norm(direction))
        if length < 1e-6:
            raise ValueError("these voices cancel out: give other weights or voices")
        mixed = direction / length * float(weights @ norms)
        encoded: str = chat.speaker._encode(torch.from_numpy(mixed.astype(np.float32)))
        return encoded

    def voice_from_clip(self, audio: np.ndarray, sample_rate_hz: int) -> str:
        """ChatTTS's reference-voice encoding of a clip (``Chat.sample_audio_speaker``):
        the DVAE's codes of the clip at 24 kHz, as the string ``VoiceSpec.reference``
        holds. On the engine thread."""
        if sample_rate_hz != self.sample_rate_hz:
            from streaming.audio import Resampler

            resampler = Resampler(sample_rate_hz, self.sample_rate_hz)
            audio = np.concatenate((resampler.process(audio), resampler.flush()))
        with torch.inference_mode():
            reference: str = self._loaded().sample_audio_speaker(audio.astype(np.float32))
        return reference

    def check_voice(self, voice: str) -> None:
        """Raise ValueError when ``voice`` is not a speaker string this model can use.

        Cheap and read-only: callers check a client's voice before queueing any work.
        """
        self._checked_voice(voice)

    def _checked_voice(self, voice: str) -> str:
        # Reject a foreign or corrupt speaker string here, with a clear message, rather
        # than as a shape error deep inside the GPT's embedding. (_decode is ChatTTS's
        # own inverse of sample_random_speaker's encoding.)
        chat = self._loaded()
        try:
            size = int(chat.speaker._decode(voice).size)
        except Exception as exc:
            # The decoder's own words (zlib's, lzma's, numpy's) mean nothing to a caller.
            logger.debug("a speaker string did not decode: %s: %s", type(exc).__name__, exc)
            raise ValueError(
                "not a ChatTTS speaker string (one Chat.sample_random_speaker() returned): "
                "it does not decode"
            ) from None
        expected = int(chat.config.gpt.hidden_size)
        if size != expected:
            raise ValueError(f"speaker string has {size} dimensions; this model needs {expected}")
        return voice

    def _loaded(self) -> Any:
        if self._chat is None:
            raise RuntimeError("the ChatTTS engine is closed")
        return self._chat

    @property
    def interleaves(self) -> bool:
        """Our decoder keeps each synthesis's state (KV cache, windows) in its own
        generator, so the worker may interleave several; ChatTTS's own stream shares the
        ``Chat`` instance's state and may not."""
        return self._stream is not None

    def release_idle_memory(self) -> None:
        """Free idle static KV-cache slots (not with CUDA graphs: those stay captured),
        then return the CUDA allocator's cached blocks."""
        if self._stream is not None and self._stream.static_gpt is not None:
            self._stream.static_gpt.release_memory()
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()

    def close(self) -> None:
        """Unload the model and free the CUDA cache; the engine is unusable afterwards."""
        chat, self._chat = self._chat, None
        if chat is None:
            return
        self._stream = None
        chat.unload()
        del chat
        self._speakers.clear()
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()
        logger.info("ChatTTS engine on %s closed", self.device)


class _ChatTTSBatcher:
    """:class:`Batcher` over a :class:`BatchedDecoder`: requests in, audio chunks out."""

    def __init__(self, engine: ChatTTSEngine, decoder: BatchedDecoder) -> None:
        self._engine = engine
        self._decoder = decoder

    @property
    def max_batch(self) -> int:
        return self._decoder.gpt.max_rows

    def open(self, request: SynthesisRequest) -> BatchRow:
        params = self._engine.generation_params(request, self._engine.max_new_token)
        row, embeds = self._decoder.open(request.text, params)
        batch_row = BatchRow(request, state=(row, embeds))
        row.owner = batch_row
        return batch_row

    def prefill(self, batch_row: BatchRow) -> None:
        row, embeds = batch_row.state
        if not self._decoder.prefill(row, embeds):
            raise RuntimeError("no room in the batch's KV cache for this segment")
        batch_row.state = (row, None)
        self._collect(batch_row)

    def prefill_many(self, batch_rows: Sequence[BatchRow]) -> None:
        """:meth:`prefill` for several rows, their prompts in one forward; a row the
        KV cache has no room for gets its error, the others join."""
        rows = [b.state[0] for b in batch_rows]
        joined = self._decoder.prefill_many(rows, [b.state[1] for b in batch_rows])
        for batch_row, ok in zip(batch_rows, joined, strict=True):
            if not ok:
                batch_row.error = RuntimeError("no room in the batch's KV cache for this segment")
                continue
            batch_row.state = (batch_row.state[0], None)
            self._collect(batch_row)

    def step(self, batch_rows: Sequence[BatchRow]) -> None:
        # Only the rows that made audio or ended have news: the others are left alone.
        rows = [b.state[0] for b in batch_rows]
        for row in self._decoder.step(rows, [b.hurry for b in batch_rows]):
            self._collect(row.owner)

    def close(self, batch_row: BatchRow) -> None:
        self._decoder.close(batch_row.state[0])

    def memory_bytes(self) -> int | None:
        device = self._decoder.device
        return int(torch.cuda.memory_allocated(device)) if device.type == "cuda" else None

    def _collect(self, batch_row: BatchRow) -> None:
        row = batch_row.state[0]
        batch_row.chunks += self._decoder.take_audio(row)
        batch_row.done = row.done
