"""CUDA graphs of the static KV cache, on a real GPU (skipped without one).

These run where a GPU is lent: ``bash bench/gpu_check.sh`` runs them before the GPU
benchmark. On the CPU the same arithmetic is covered uncaptured by test_gpt_static.py;
what only a GPU can show is that the capture and replay give that arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from server.engines.chattts.checkpoint import load_chat
from server.engines.chattts.decoder import GenerationParams, StreamingDecoder
from server.engines.chattts.engine import ChatTTSEngine
from server.engines.chattts.precision import cast_gpt
from server.engines.chattts.settings import ChatTTSSettings
from server.engines.chattts.static_cache import StaticGPT
from tests.conftest import sample_speaker
from tests.server.test_chattts_stream import TEXT

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.fixture(scope="module")
def cuda_chat(tiny_checkpoint: Path) -> Iterator[Any]:
    chat = load_chat(tiny_checkpoint, device="cuda")
    yield chat
    chat.unload()


@pytest.fixture(scope="module")
def cuda_speaker(cuda_chat: Any) -> str:
    return sample_speaker(cuda_chat)


def _run(gpt: StaticGPT, prompt: torch.Tensor, tokens: list[torch.Tensor]) -> torch.Tensor:
    slot = gpt.acquire(prompt.size(1) + len(tokens))
    assert slot is not None
    try:
        with torch.inference_mode():
            outputs = [gpt.prefill(slot, prompt)] + [gpt.step(slot, x) for x in tokens]
    finally:
        gpt.release(slot)
    return torch.cat(outputs, 1).float()


def _inputs(model: Any, steps: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    hidden = int(model.config.hidden_size)
    generator = torch.Generator().manual_seed(11)
    prompt = torch.randn(1, 17, hidden, generator=generator).cuda()
    return prompt, [torch.randn(1, 1, hidden, generator=generator).cuda() for _ in range(steps)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_graph_replay_matches_the_eager_static_cache(
    tiny_checkpoint: Path, dtype: torch.dtype
) -> None:
    """Teacher-forced steps: the replayed graph's hidden states are the eager ones."""
    chat = load_chat(tiny_checkpoint, device="cuda")
    try:
        cast_gpt(chat.gpt.gpt, dtype)
        model = chat.gpt.gpt
        prompt, tokens = _inputs(model, 60)
        eager = _run(StaticGPT(model, max_tokens=128, slots=1), prompt, tokens)
        graphed_gpt = StaticGPT(model, max_tokens=128, slots=1, cuda_graphs=True)
        graphed = _run(graphed_gpt, prompt, tokens)
        assert graphed_gpt.cuda_graphs, "the capture failed (see the log)"
        assert graphed_gpt._slots[0].graph is not None
        assert graphed_gpt._slots[0].replays == 60
        tolerance = 1e-4 if dtype == torch.float32 else 3e-2
        torch.testing.assert_close(graphed, eager, rtol=tolerance, atol=tolerance)
    finally:
        chat.unload()


def test_graph_stream_follows_the_dynamic_cache(cuda_chat: Any, cuda_speaker: str) -> None:
    """A seeded stream on CUDA graphs: ChatTTS's (dynamic cache) tokens for at least the
    first 30 steps, hidden states within float rounding until they part."""
    params = GenerationParams(spk_emb=cuda_speaker, seed=4, max_new_token=80, min_new_token=80)
    dynamic = list(StreamingDecoder(cuda_chat).generate(TEXT, params))
    decoder = StreamingDecoder(
        cuda_chat, ChatTTSSettings(gpt_cache="static", cuda_graphs=True, gpt_cache_slots=1)
    )
    graphed = list(decoder.generate(TEXT, params))
    assert decoder.static_gpt is not None and decoder.static_gpt.cuda_graphs
    same = 0
    for a, b in zip(dynamic, graphed, strict=True):
        if not torch.equal(a.ids, b.ids):
            break
        torch.testing.assert_close(b.hidden, a.hidden, rtol=1e-3, atol=1e-3)
        same += 1
    assert same >= 30, f"tokens parted after {same} steps"


def test_interleaved_slots_each_replay_their_own_graph(cuda_chat: Any, cuda_speaker: str) -> None:
    """Two utterances stepped in turn on two graphed slots give their serial tokens; the
    idle release keeps the graphs; prepare() captures every slot."""
    first = GenerationParams(spk_emb=cuda_speaker, seed=2, max_new_token=40, min_new_token=40)
    second = GenerationParams(spk_emb=cuda_speaker, seed=3, max_new_token=40, min_new_token=40)
    decoder = StreamingDecoder(
        cuda_chat, ChatTTSSettings(gpt_cache="static", cuda_graphs=True, gpt_cache_slots=3)
    )
    gpt = decoder.static_gpt
    assert gpt is not None
    serial = [[o.ids for o in decoder.generate(TEXT, p)] for p in (first, second)]
    a = decoder.generate(TEXT, first)
    b = decoder.generate(TEXT, second)
    got: list[list[torch.Tensor]] = [[], []]
    for _ in range(40):
        got[0].append(next(a).ids)
        got[1].append(next(b).ids)
    assert next(a, None) is None and next(b, None) is None  # both slots released
    for tokens, expected in zip(got, serial, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(tokens, expected, strict=True))
    assert gpt.fallbacks == 0 and gpt.allocated_slots == 2
    assert all(slot.graph is not None for slot in gpt._slots)
    gpt.release_memory()
    assert gpt.allocated_slots == 2
    gpt.prepare()
    assert gpt.allocated_slots == 3 and all(slot.graph is not None for slot in gpt._slots)


def test_engine_warm_up_captures_every_slot(tiny_checkpoint: Path) -> None:
    """ChatTTSEngine with CUDA graphs: warm-up captures all slots, then speaks."""
    from server.engines.base import SynthesisRequest, VoiceSpec

    engine = ChatTTSEngine(
        tiny_checkpoint,
        ChatTTSSettings(
            device="cuda",
            max_new_token=40,
            min_new_token=40,
            gpt_cache="static",
            cuda_graphs=True,
            gpt_cache_slots=2,
        ),
    )
    try:
        engine.warm_up()
        assert engine._stream is not None
        gpt = engine._stream.static_gpt
        assert gpt is not None and gpt.cuda_graphs
        assert gpt.allocated_slots == 2 and all(s.graph is not None for s in gpt._slots)
        request = SynthesisRequest("你好，世界。", VoiceSpec(seed=21))
        chunks = list(engine.synthesize(request, lambda: False))
        assert sum(c.size for c in chunks) > 0
    finally:
        engine.close()
