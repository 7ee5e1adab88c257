"""The static KV cache (server.engines.chattts.static_cache) on ChatTTS's real GPT, tiny checkpoint.

The CUDA graph capture itself needs a GPU (bench/gpu_stream_decoder.sh checks it there);
what it captures, the fixed-shape step, runs here uncaptured (``static_shapes=True``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from server.engines.chattts.checkpoint import load_chat
from server.engines.chattts.decoder import GenerationParams, StreamingDecoder
from server.engines.chattts.engine import ChatTTSEngine
from server.engines.chattts.precision import cast_gpt
from server.engines.chattts.settings import ChatTTSSettings
from server.engines.chattts.static_cache import StaticGPT
from tests.server.test_chattts_stream import TEXT, _chattts_generation


def _static(chat: Any, **kwargs: Any) -> StreamingDecoder:
    settings = ChatTTSSettings(
        gpt_cache="static", gpt_cache_tokens=512, gpt_cache_slots=1, max_new_token=500
    )
    decoder = StreamingDecoder(chat, settings)
    if kwargs:
        decoder.static_gpt = StaticGPT(chat.gpt.gpt, max_tokens=512, slots=1, **kwargs)
    return decoder


def _teacher_forced(chat: Any, gpt: StaticGPT, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same random inputs through transformers' forward (dynamic cache) and ``gpt``."""
    model = chat.gpt.gpt
    hidden = int(model.config.hidden_size)
    generator = torch.Generator().manual_seed(11)
    prompt = torch.randn(1, 17, hidden, generator=generator)
    tokens = [torch.randn(1, 1, hidden, generator=generator) for _ in range(steps)]
    with torch.inference_mode():
        out = model(inputs_embeds=prompt, use_cache=True)
        cache = out.past_key_values
        reference = [out.last_hidden_state]
        for i, x in enumerate(tokens):
            out = model(
                inputs_embeds=x,
                past_key_values=cache,
                use_cache=True,
                position_ids=torch.tensor([[17 + i]]),
            )
            cache = out.past_key_values
            reference.append(out.last_hidden_state)
        slot = gpt.acquire(17 + steps)
        assert slot is not None
        try:
            ours = [gpt.prefill(slot, prompt)] + [gpt.step(slot, x) for x in tokens]
        finally:
            gpt.release(slot)
    return torch.cat(reference, 1), torch.cat(ours, 1)


def test_static_cache_matches_the_transformers_forward_exactly(chat: Any) -> None:
    """Eager static cache: the transformers forward's hidden states, bit for bit, prompt and steps."""
    reference, ours = _teacher_forced(chat, StaticGPT(chat.gpt.gpt, max_tokens=64, slots=1), 40)
    assert ours.shape == reference.shape == (1, 57, int(chat.config.gpt.hidden_size))
    assert torch.equal(ours, reference)


def test_graph_shaped_step_matches_the_transformers_forward(chat: Any) -> None:
    """The CUDA graph's fixed-shape step (whole buffer, later positions masked) agrees too."""
    gpt = StaticGPT(chat.gpt.gpt, max_tokens=64, slots=1, static_shapes=True)
    reference, ours = _teacher_forced(chat, gpt, 40)
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)
    # Garbage in the unused tail of the buffer must not leak into attention: it is
    # masked, not merely zero.
    with torch.inference_mode():
        gpt._slots[0].keys[:, :, :, 58:].normal_()
        gpt._slots[0].values[:, :, :, 58:].normal_()
    _, again = _teacher_forced(chat, gpt, 40)
    torch.testing.assert_close(again, ours, rtol=0, atol=0)


@pytest.mark.parametrize(("lo", "hi"), [(60, 60), (0, 400)])
def test_static_cache_gives_chattts_tokens(chat: Any, speaker: str, lo: int, hi: int) -> None:
    """Same seed and speaker: the static cache gives ChatTTS's own tokens and hidden states."""
    reference = _chattts_generation(chat, speaker, 5, lo, hi)
    decoder = _static(chat)
    params = GenerationParams(spk_emb=speaker, seed=5, max_new_token=hi, min_new_token=lo)
    ours = list(decoder.generate(TEXT, params))
    assert decoder.static_gpt is not None and decoder.static_gpt.fallbacks == 0
    assert len(ours) == reference.ids[0].size(0) > 0
    assert torch.equal(torch.stack([o.ids for o in ours]), reference.ids[0])
    assert torch.equal(torch.stack([o.hidden for o in ours]), reference.hiddens[0])


def test_graph_shaped_steps_stream_the_same_tokens(chat: Any, speaker: str) -> None:
    """A whole stream on the graph-shaped step: the dynamic path's tokens, audio within rounding."""
    params = GenerationParams(spk_emb=speaker, seed=4, max_new_token=120, min_new_token=120)
    dynamic = StreamingDecoder(chat)
    reference = np.concatenate(list(dynamic.stream(TEXT, params)))
    graphed = _static(chat, static_shapes=True)
    audio = np.concatenate(list(graphed.stream(TEXT, params)))
    assert graphed.last_stats.token_ids == dynamic.last_stats.token_ids
    assert audio.size == reference.size
    error = audio - reference
    assert 10 * np.log10(np.sum(reference**2) / max(np.sum(error**2), 1e-30)) > 60


def test_interleaved_utterances_share_the_slots_and_fall_back(chat: Any, speaker: str) -> None:
    """Two utterances at once on one slot: the second runs on the dynamic cache, both exact;
    a finished utterance frees its slot; one longer than the cache falls back too."""
    first = GenerationParams(spk_emb=speaker, seed=2, max_new_token=30, min_new_token=30)
    second = GenerationParams(spk_emb=speaker, seed=3, max_new_token=30, min_new_token=30)
    serial = StreamingDecoder(chat)
    expected = [[o.ids for o in serial.generate(TEXT, p)] for p in (first, second)]

    decoder = _static(chat)
    gpt = decoder.static_gpt
    assert gpt is not None
    a = decoder.generate(TEXT, first)
    b = decoder.generate(TEXT, second)
    got: list[list[torch.Tensor]] = [[], []]
    for _ in range(30):  # step them in turn, as the worker's scheduler does
        got[0].append(next(a).ids)
        got[1].append(next(b).ids)
    assert next(a, None) is None and next(b, None) is None
    assert all(
        torch.equal(torch.stack(g), torch.stack(e)) for g, e in zip(got, expected, strict=True)
    )
    assert gpt.allocated_slots == 1 and gpt.fallbacks == 1

    list(decoder.generate(TEXT, first))  # the slot is free again
    assert gpt.fallbacks == 1
    long = GenerationParams(spk_emb=speaker, seed=2, max_new_token=600, min_new_token=1)
    tokens = decoder.generate(TEXT, long)
    next(tokens)
    tokens.close()
    assert gpt.fallbacks == 2


def test_idle_release_frees_idle_slots(chat: Any, speaker: str) -> None:
    """release_memory drops idle slots' buffers; a busy slot survives it."""
    decoder = StreamingDecoder(
        chat,
        ChatTTSSettings(
            gpt_cache="static", gpt_cache_tokens=256, gpt_cache_slots=2, max_new_token=250
        ),
    )
    gpt = decoder.static_gpt
    assert gpt is not None
    params = GenerationParams(spk_emb=speaker, seed=2, max_new_token=5, min_new_token=5)
    running = decoder.generate(TEXT, params)
    next(running)
    list(decoder.generate(TEXT, params))
    assert gpt.allocated_slots == 2
    gpt.release_memory()
    assert gpt.allocated_slots == 1
    assert len(list(running)) == 4
    gpt.release_memory()
    assert gpt.allocated_slots == 0


def test_half_precision_positions_stay_exact(tiny_checkpoint: Path, speaker: str) -> None:
    """bfloat16 GPT past position 256: the dynamic path passes integer positions (bfloat16
    would round 257 to 256), so it agrees exactly with the static path, which always does."""
    chat = load_chat(tiny_checkpoint, device="cpu")
    try:
        dynamic_decoder = StreamingDecoder(chat)
        static_decoder = _static(chat)
        # What gpt_dtype="bfloat16" does on CUDA (StreamingDecoder refuses it on a CPU
        # model, and casts to its setting when built: so cast after building both).
        cast_gpt(chat.gpt.gpt, torch.bfloat16)
        static_decoder.static_gpt = StaticGPT(chat.gpt.gpt, max_tokens=512, slots=1)
        seen: list[torch.Tensor] = []
        hook = chat.gpt.gpt.register_forward_pre_hook(
            lambda module, args, kwargs: seen.append(kwargs["position_ids"]), with_kwargs=True
        )
        params = GenerationParams(spk_emb=speaker, seed=8, max_new_token=300, min_new_token=300)
        try:
            dynamic = [o.hidden for o in dynamic_decoder.generate(TEXT, params)]
        finally:
            hook.remove()
        assert all(p.dtype == torch.long for p in seen)
        assert int(seen[-1].max()) > 300
        static = [o.hidden for o in static_decoder.generate(TEXT, params)]
        assert len(static) == len(dynamic) == 300
        # Exact: rounded positions (257 -> 256) would show in the steps past 256.
        assert torch.equal(torch.stack(static), torch.stack(dynamic))
    finally:
        chat.unload()


def test_cuda_graphs_need_cuda_and_the_static_cache(chat: Any) -> None:
    """cuda_graphs on a CPU model, without the static cache, or with a rotary embedding
    that checks lengths on the host, is refused up front."""
    with pytest.raises(ValueError, match="CUDA"):
        StreamingDecoder(chat, ChatTTSSettings(gpt_cache="static", cuda_graphs=True))
    with pytest.raises(ValueError, match="static"):
        ChatTTSSettings(cuda_graphs=True)
    with pytest.raises(ValueError):
        ChatTTSSettings(gpt_cache="paged")
    rotary = chat.gpt.gpt.rotary_emb
    saved = rotary.rope_type
    rotary.rope_type = "dynamic"
    try:
        with pytest.raises(ValueError, match="rotary"):
            StaticGPT(chat.gpt.gpt, max_tokens=64, slots=1, cuda_graphs=True)
    finally:
        rotary.rope_type = saved


def test_a_failed_capture_serves_on_without_graphs(
    chat: Any, speaker: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """If capturing the CUDA graph fails, the error is logged and the utterance (and the
    ones after it) run on the eager static cache: same tokens, nothing lost."""
    params = GenerationParams(spk_emb=speaker, seed=4, max_new_token=40, min_new_token=40)
    expected = [o.ids for o in StreamingDecoder(chat).generate(TEXT, params)]
    decoder = _static(chat, static_shapes=True)
    gpt = decoder.static_gpt
    assert gpt is not None
    gpt.cuda_graphs = True  # as on CUDA; the capture below fails as a driver error would

    def failing_capture(slot: Any) -> None:
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    monkeypatch.setattr(gpt, "_capture", failing_capture)
    for _ in range(2):
        got = [o.ids for o in decoder.generate(TEXT, params)]
        assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    assert (gpt.cuda_graphs, gpt.static_shapes) == (False, False)
    assert "CUDA graph capture failed" in caplog.text
    assert gpt._slots[0].embeds is None and gpt._slots[0].graph is None


def test_cast_gpt_keeps_rotary_frequencies_in_float32(tiny_checkpoint: Path) -> None:
    """Casting the GPT to bfloat16 leaves inv_freq float32 and unrounded; weights are cast."""
    chat = load_chat(tiny_checkpoint, device="cpu")
    try:
        model = chat.gpt.gpt
        before = model.rotary_emb.inv_freq.clone()
        cast_gpt(model, torch.bfloat16)
        assert model.dtype == torch.bfloat16
        assert model.rotary_emb.inv_freq.dtype == torch.float32
        assert torch.equal(model.rotary_emb.inv_freq, before)
        assert not torch.equal(before.bfloat16().float(), before)  # bfloat16 would round
        cast_gpt(model, torch.float32)
        assert torch.equal(model.rotary_emb.inv_freq, before)
    finally:
        chat.unload()


def test_engine_speaks_on_the_static_cache(tiny_checkpoint: Path) -> None:
    """ChatTTSEngine(gpt_cache="static") streams the dynamic cache's exact audio."""
    from server.engines.base import SynthesisRequest, VoiceSpec

    request = SynthesisRequest("你好，世界。", VoiceSpec(seed=21))
    audio = []
    for cache in ("dynamic", "static"):
        engine = ChatTTSEngine(
            tiny_checkpoint,
            ChatTTSSettings(device="cpu", max_new_token=50, min_new_token=50, gpt_cache=cache),
        )
        try:
            audio.append(np.concatenate(list(engine.synthesize(request, lambda: False))))
            if cache == "static":
                assert engine._stream is not None and engine._stream.static_gpt is not None
                assert engine._stream.static_gpt.allocated_slots == 1
                engine.release_idle_memory()
                assert engine._stream.static_gpt.allocated_slots == 0
        finally:
            engine.close()
    assert np.array_equal(audio[0], audio[1])


async def test_server_on_the_static_cache_speaks_as_on_the_dynamic_one(
    tiny_checkpoint: Path,
) -> None:
    """A live server whose engine has one static-cache slot: two streams at once (the
    worker interleaves them; a segment that finds the slot taken runs on the dynamic
    cache) give exactly the audio of a server on the dynamic cache."""
    from server.config import Settings
    from tests.live import run_live_server
    from tests.server.test_stream import assert_complete, speak

    texts = {1: "第一个连接说话。第二句话。", 2: "另外一个连接，也在说话。"}
    pcm: dict[str, dict[int, bytes]] = {}
    for cache in ("dynamic", "static"):

        def factory(cache: str = cache) -> tuple[ChatTTSEngine, bool, None]:
            engine = ChatTTSEngine(
                tiny_checkpoint,
                ChatTTSSettings(
                    device="cpu",
                    max_new_token=40,
                    min_new_token=40,
                    gpt_cache=cache,
                    gpt_cache_slots=1,
                    gpt_cache_tokens=256,
                ),
            )
            return engine, False, None

        # max_batch 1: the interleaved path, where the static cache is used.
        settings = Settings(engine="chattts", model_dir=tiny_checkpoint, max_batch=1)
        with run_live_server(settings, engine=factory) as server:
            results = await asyncio.gather(
                *(speak(server, text, seed=seed) for seed, text in texts.items())
            )
            for text, result in zip(texts.values(), results, strict=True):
                assert_complete(result, text)
            pcm[cache] = {seed: r.pcm for seed, r in zip(texts, results, strict=True)}
            static_gpt = server.state.worker.engine._stream.static_gpt  # type: ignore[attr-defined]
            assert (static_gpt is not None) is (cache == "static")
            if static_gpt is not None:
                assert static_gpt.allocated_slots == 1
    assert pcm["static"] == pcm["dynamic"]


def test_a_vocoder_failure_gives_the_slot_back_at_once(
    chat: Any, speaker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vocoder raising mid-stream releases the utterance's cache slot right away,
    while the exception (and its traceback, which holds the stream's frames) still lives."""
    decoder = _static(chat)
    gpt = decoder.static_gpt
    assert gpt is not None

    def broken_vocoder(hiddens: torch.Tensor) -> np.ndarray:
        raise RuntimeError("vocoder failed")

    monkeypatch.setattr(decoder, "vocode", broken_vocoder)
    params = GenerationParams(spk_emb=speaker, seed=2, max_new_token=40, min_new_token=40)
    with pytest.raises(RuntimeError, match="vocoder failed") as failure:
        list(decoder.stream(TEXT, params))
    assert failure.value.__traceback__ is not None
    assert gpt.allocated_slots == 1 and not gpt._slots[0].busy


def test_warm_up_capture_failure_serves_on(
    chat: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """prepare() (the engine's warm-up) with a failing capture: logged, no exception, and
    the slots are left for the eager static cache."""
    cast_gpt(chat.gpt.gpt, torch.bfloat16)  # inputs must follow the model's dtype
    try:
        gpt = StaticGPT(chat.gpt.gpt, max_tokens=64, slots=2, static_shapes=True)
        gpt.cuda_graphs = True

        def failing_capture(slot: Any) -> None:
            raise RuntimeError("capture failed")

        monkeypatch.setattr(gpt, "_capture", failing_capture)
        gpt.prepare()
        assert "CUDA graph capture failed" in caplog.text
        assert gpt.allocated_slots == 2 and not gpt.cuda_graphs and not gpt.static_shapes
    finally:
        cast_gpt(chat.gpt.gpt, torch.float32)


def test_an_utterance_longer_than_the_cache_is_logged_once(
    chat: Any, speaker: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Too long for gpt_cache_tokens: a warning naming the setting (once), then the
    dynamic cache; every such utterance is counted."""
    decoder = StreamingDecoder(
        chat,
        ChatTTSSettings(
            gpt_cache="static", gpt_cache_tokens=64, gpt_cache_slots=1, max_new_token=60
        ),
    )
    params = GenerationParams(spk_emb=speaker, seed=2, max_new_token=60, min_new_token=60)
    first = [o.ids for o in decoder.generate(TEXT, params)]
    second = [o.ids for o in decoder.generate(TEXT, params)]
    assert len(first) == len(second) == 60
    assert decoder.static_gpt is not None and decoder.static_gpt.fallbacks == 2
    assert caplog.text.count("gpt_cache_tokens") == 1
