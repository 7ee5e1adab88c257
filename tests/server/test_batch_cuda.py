"""The batched step on a real GPU (skipped without one): graphs per bucket, one sync a step.

These run where a GPU is lent (``bash bench/gpu_check.sh`` runs the CUDA tests). On the
CPU the same fixed-shape step runs uncaptured in tests/server/test_batch_step.py; what
only a GPU can show is that capturing and replaying it gives that arithmetic, and that
a step synchronises the device once.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from server.engines.chattts.batch import BatchedDecoder, Row
from server.engines.chattts.checkpoint import load_chat
from server.engines.chattts.decoder import GenerationParams, StreamingDecoder
from server.engines.chattts.settings import ChatTTSSettings
from tests.conftest import sample_speaker

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

TEXTS = ["你好，世界。", "今天天气很好。", "我们去公园吧", "五", "六六六六"]
STEPS = 40


@pytest.fixture(scope="module")
def cuda_chat(tiny_checkpoint: Path) -> Iterator[Any]:
    chat = load_chat(tiny_checkpoint, device="cuda")
    yield chat
    chat.unload()


@pytest.fixture(scope="module")
def cuda_speaker(cuda_chat: Any) -> str:
    return sample_speaker(cuda_chat)


def params(speaker: str, seed: int, steps: int = STEPS) -> GenerationParams:
    return GenerationParams(spk_emb=speaker, seed=seed, max_new_token=steps, min_new_token=steps)


def join(batch: BatchedDecoder, text: str, p: GenerationParams) -> Row:
    row, embeds = batch.open(text, p)
    assert batch.prefill(row, embeds)
    return row


def run_rows(batch: BatchedDecoder, speaker: str) -> list[torch.Tensor]:
    """Five rows (a bucket of 8), one joining late: each row's tokens."""
    rows = [join(batch, TEXTS[s], params(speaker, s)) for s in range(4)]
    for _ in range(6):
        batch.step(rows)
    rows.append(join(batch, TEXTS[4], params(speaker, 4)))
    while live := [row for row in rows if not row.done]:
        batch.step(live)
    return [row.ids[: row.steps].clone() for row in rows]


def test_graph_replay_gives_the_uncaptured_tokens(cuda_chat: Any, cuda_speaker: str) -> None:
    """Captured per bucket and replayed, the step samples exactly the tokens the same
    fixed-shape step does uncaptured; the graphs were captured and replayed."""
    decoder = StreamingDecoder(cuda_chat, ChatTTSSettings(device="cuda"))
    static = BatchedDecoder(decoder, max_batch=8, max_tokens=256, static_shapes=True)
    expected = run_rows(static, cuda_speaker)
    graphed = BatchedDecoder(decoder, max_batch=8, max_tokens=256, cuda_graphs=True)
    got = run_rows(graphed, cuda_speaker)
    assert graphed.graphs is not None
    assert graphed.graphs.replays == 6 + STEPS - 1  # the late row's steps after 6
    assert {key[0] for key in graphed.graphs.captured} == {4, 8}  # 4 rows, then 5 (of 8)
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)


def test_batched_rows_follow_their_solo_tokens(cuda_chat: Any, cuda_speaker: str) -> None:
    """On CUDA, with graphs, each seeded row samples its solo (ChatTTS) tokens for at least
    its first 30 steps (GEMMs over 8 rows round differently from one, so far-off steps
    may part, as the static cache's graph test allows)."""
    decoder = StreamingDecoder(cuda_chat, ChatTTSSettings(device="cuda"))
    solo = [
        torch.stack([o.ids for o in decoder.generate(TEXTS[s], params(cuda_speaker, s))])
        for s in range(5)
    ]
    graphed = BatchedDecoder(decoder, max_batch=8, max_tokens=256, cuda_graphs=True)
    for got, expected in zip(run_rows(graphed, cuda_speaker), solo, strict=True):
        same = int((got == expected).all(dim=1).long().cumprod(0).sum())
        assert same >= 30, f"tokens parted after {same} steps"


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_a_step_synchronises_the_device_once(
    cuda_chat: Any, cuda_speaker: str, cuda_graphs: bool
) -> None:
    """torch's sync debug mode warns at every device synchronisation: a step of 16 rows
    that vocodes nothing makes exactly one (its end flags), eager or replayed."""
    decoder = StreamingDecoder(cuda_chat, ChatTTSSettings(device="cuda"))
    batch = BatchedDecoder(decoder, max_batch=16, max_tokens=256, cuda_graphs=cuda_graphs)
    rows = [join(batch, TEXTS[s % 5], params(cuda_speaker, s)) for s in range(16)]
    batch.step(rows)  # a first step (a graph capture, lazy inits)
    counts = []
    for _ in range(8):
        windows = batch.vocoded_windows
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                batch.step(rows)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        if batch.vocoded_windows == windows:
            counts.append(sum("synchroniz" in str(w.message) for w in caught))
    assert counts and set(counts) == {1}


def test_the_engine_captures_every_bucket_before_serving(tiny_checkpoint: Path) -> None:
    """batch_cuda_graphs: the engine's batcher captures every (rows, span) bucket at once."""
    from server.engines.chattts.engine import ChatTTSEngine

    engine = ChatTTSEngine(
        tiny_checkpoint,
        ChatTTSSettings(device="cuda", batch_cuda_graphs=True, gpt_cache_tokens=256),
    )
    try:
        batcher = engine.batcher(8)
        assert batcher is not None
        graphs = batcher._decoder.graphs  # type: ignore[attr-defined]
        assert graphs is not None
        assert {key[:2] for key in graphs.captured} == {
            (rows, span) for rows in (1, 2, 4, 8) for span in (64, 128, 256)
        }
    finally:
        engine.close()
