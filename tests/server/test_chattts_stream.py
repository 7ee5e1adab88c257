"""Our streaming decoder on the tiny random-weight checkpoint, on ChatTTS's real modules."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from server.engines.base import Cancelled
from server.engines.chattts.decoder import (
    SAMPLES_PER_STEP,
    GenerationParams,
    StreamingDecoder,
)
from server.engines.chattts.settings import ChatTTSSettings
from tests.seams import measure_seams

TEXT = "今天天气很好，我们一起去公园散步吧。"


def _chattts_generation(chat: Any, speaker: str, seed: int, lo: int, hi: int) -> Any:
    params = chat.InferCodeParams(
        prompt="[speed_5]",
        spk_emb=speaker,
        temperature=0.3,
        top_P=0.7,
        top_K=20,
        manual_seed=seed,
        max_new_token=hi,
        min_new_token=lo,
        show_tqdm=False,
    )
    return next(chat._infer_code([TEXT], False, chat.device, True, params))


@pytest.mark.parametrize(("lo", "hi"), [(60, 60), (0, 400)])
def test_same_seed_same_tokens_as_chattts(chat: Any, speaker: str, lo: int, hi: int) -> None:
    """Same seed and speaker: our generation gives ChatTTS's tokens and hidden states exactly."""
    reference = _chattts_generation(chat, speaker, 5, lo, hi)
    ours = list(
        StreamingDecoder(chat).generate(
            TEXT, GenerationParams(spk_emb=speaker, seed=5, max_new_token=hi, min_new_token=lo)
        )
    )
    assert len(ours) == reference.ids[0].size(0) > 0
    assert torch.equal(torch.stack([o.ids for o in ours]), reference.ids[0])
    assert torch.equal(torch.stack([o.hidden for o in ours]), reference.hiddens[0])


def test_chunks_follow_the_schedule(chat: Any, speaker: str) -> None:
    """Chunks come out after 8, 8+16, 8+16+32, ... steps, the last one at the end."""
    decoder = StreamingDecoder(
        chat, ChatTTSSettings(first_chunk_steps=8, chunk_growth=2.0, max_chunk_steps=32)
    )
    params = GenerationParams(spk_emb=speaker, seed=1, max_new_token=150, min_new_token=150)
    chunks = list(decoder.stream(TEXT, params))
    stats = decoder.last_stats
    assert [steps for steps, _ in stats.chunks] == [8, 24, 56, 88, 120, 150]
    assert [c.size for c in chunks] == [size for _, size in stats.chunks]
    assert stats.first_audio_step == 8
    assert sum(c.size for c in chunks) == 150 * SAMPLES_PER_STEP - 256


class _FrameCounter:
    """Counts the mel frames the Decoder processes (a forward hook)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.frames = 0
        self._handle = module.register_forward_hook(self._hook)

    def _hook(self, module: Any, args: Any, output: torch.Tensor) -> None:
        self.frames += int(output.size(-1))

    def close(self) -> None:
        self._handle.remove()


def _decoded_frames(chat: Any, speaker: str, steps: int, ours: bool) -> float:
    counter = _FrameCounter(chat.decoder)
    try:
        if ours:
            params = GenerationParams(
                spk_emb=speaker, seed=2, max_new_token=steps, min_new_token=steps
            )
            list(StreamingDecoder(chat).stream(TEXT, params))
        else:
            infer = chat.InferCodeParams(
                spk_emb=speaker,
                manual_seed=2,
                max_new_token=steps,
                min_new_token=steps,
                stream_batch=24,
                pass_first_n_batches=0,
                show_tqdm=False,
            )
            list(
                chat.infer(
                    [TEXT],
                    stream=True,
                    skip_refine_text=True,
                    split_text=False,
                    do_text_normalization=False,
                    do_homophone_replacement=False,
                    params_infer_code=infer,
                )
            )
    finally:
        counter.close()
    return counter.frames / (2 * steps)


def test_decode_work_grows_linearly(chat: Any, speaker: str) -> None:
    """Decoder frames per emitted frame stay bounded (<= 1.25 at length) as utterances grow."""
    short = _decoded_frames(chat, speaker, 200, ours=True)
    long = _decoded_frames(chat, speaker, 600, ours=True)
    assert long <= short <= 1.4
    assert long <= 1.25
    # ChatTTS's own stream re-decodes everything per chunk: its work per frame grows.
    assert _decoded_frames(chat, speaker, 200, ours=False) > 3


def test_joins_are_continuous_and_match_one_shot(chat: Any, speaker: str) -> None:
    """Streamed audio tracks a one-shot decode of the same steps, with no rough joins."""
    decoder = StreamingDecoder(chat)
    params = GenerationParams(spk_emb=speaker, seed=4, max_new_token=300, min_new_token=300)
    streamed = np.concatenate(list(decoder.stream(TEXT, params)))
    reference = _chattts_generation(chat, speaker, 4, 300, 300)
    one_shot = chat._decode_to_wavs([reference.hiddens[0].clone()], True)[0]
    assert streamed.size == one_shot.size
    error = streamed - one_shot
    snr_db = 10 * np.log10(np.sum(one_shot**2) / np.sum(error**2))
    assert snr_db > 25
    joins = np.cumsum([size for _, size in decoder.last_stats.chunks])[:-1]
    seams = measure_seams(streamed, joins.tolist())
    assert seams.joins == len(joins) >= 4
    assert seams.step_ratio_max < 4
    assert seams.flux_ratio_max < 2


def test_vocode_stream_replays_the_same_windows(chat: Any, speaker: str) -> None:
    """vocode_stream over a stream's hidden states gives that stream's chunks exactly."""
    decoder = StreamingDecoder(chat)
    params = GenerationParams(spk_emb=speaker, seed=8, max_new_token=90, min_new_token=90)
    chunks = list(decoder.stream(TEXT, params))
    hiddens = decoder.last_stats.hiddens
    assert hiddens is not None and hiddens.size(0) == 90
    replayed = list(decoder.vocode_stream(hiddens.clone()))
    assert [c.size for c in replayed] == [c.size for c in chunks]
    assert all(np.array_equal(a, b) for a, b in zip(replayed, chunks, strict=True))


class _StopAfter:
    """should_stop that turns true on its n-th call; counts GPT forwards after that.

    A forward is counted at the GPT's final norm, which both KV-cache paths run once per
    forward (the static one does not call the transformers model itself).
    """

    def __init__(self, chat: Any, n: int) -> None:
        self.n = n
        self.calls = 0
        self.forwards_after_stop = 0
        self._handle = chat.gpt.gpt.norm.register_forward_hook(self._hook)

    def _hook(self, module: Any, args: Any, output: Any) -> None:
        if self.calls >= self.n:
            self.forwards_after_stop += 1

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls >= self.n

    def close(self) -> None:
        self._handle.remove()


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("n", [1, 5, 30])
def test_cancellation_stops_between_steps(chat: Any, speaker: str, n: int, cache: str) -> None:
    """A stop lands before the next GPT step: Cancelled, and no forward runs after it."""
    stop = _StopAfter(chat, n)
    params = GenerationParams(spk_emb=speaker, seed=1, max_new_token=100, min_new_token=100)
    decoder = StreamingDecoder(chat, ChatTTSSettings(gpt_cache=cache, gpt_cache_slots=1))
    try:
        with pytest.raises(Cancelled):
            list(decoder.stream(TEXT, params, stop))
    finally:
        stop.close()
    assert stop.calls == n
    assert stop.forwards_after_stop == 0
    assert decoder.last_stats.steps == n - 1
    if decoder.static_gpt is not None:
        # The cancelled utterance gave its cache slot back: the next one reuses it.
        list(decoder.generate(TEXT, GenerationParams(seed=1, max_new_token=3, min_new_token=3)))
        assert decoder.static_gpt.allocated_slots == 1
        assert decoder.static_gpt.fallbacks == 0


def test_same_seed_and_speaker_give_identical_audio(chat: Any, speaker: str) -> None:
    """Voice lock: the same speaker and seed give bit-identical streamed audio, whatever ran between."""
    decoder = StreamingDecoder(chat)
    params = GenerationParams(spk_emb=speaker, seed=9, max_new_token=80, min_new_token=80)
    first = np.concatenate(list(decoder.stream(TEXT, params)))
    list(decoder.stream("别的句子。", GenerationParams(seed=1, max_new_token=30)))
    torch.manual_seed(1234)
    assert np.array_equal(first, np.concatenate(list(decoder.stream(TEXT, params))))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"gpt_dtype": "float16"},
        {"decoder_dtype": "bfloat16"},
    ],
)
def test_half_precision_is_refused_on_cpu(chat: Any, kwargs: dict[str, str]) -> None:
    """Half-precision GPT or Decoder settings raise ValueError on a CPU model."""
    with pytest.raises(ValueError, match="CUDA"):
        StreamingDecoder(chat, ChatTTSSettings(**kwargs))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"gpt_dtype": "float8"},
        {"left_context_frames": -1},
        {"overlap_samples": 100_000},
        {"first_chunk_steps": 0},
    ],
)
def test_bad_settings_are_rejected(kwargs: dict[str, Any]) -> None:
    """Unknown dtypes, negative context, an overlap beyond half the first chunk raise ValueError."""
    with pytest.raises(ValueError):
        ChatTTSSettings(**kwargs)


def test_onnx_vocoder_matches_torch(chat: Any, speaker: str) -> None:
    """vocoder_backend="onnx" streams the same audio as torch, to float rounding."""
    pytest.importorskip("onnxruntime")
    params = GenerationParams(spk_emb=speaker, seed=6, max_new_token=60, min_new_token=60)
    with torch.random.fork_rng(devices=[]):
        reference = np.concatenate(list(StreamingDecoder(chat).stream(TEXT, params)))
    onnx_decoder = StreamingDecoder(chat, ChatTTSSettings(vocoder_backend="onnx"))
    streamed = np.concatenate(list(onnx_decoder.stream(TEXT, params)))
    assert streamed.size == reference.size
    error = streamed - reference
    assert 10 * np.log10(np.sum(reference**2) / np.sum(error**2)) > 60
