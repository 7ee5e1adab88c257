"""Continuous batching on the real ChatTTS modules (tiny checkpoint) and through the server."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from chattts_client import BusyError, StreamClient

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from server.engines.chattts.batch import BatchedDecoder, Row
from server.engines.chattts.checkpoint import load_chat
from server.engines.chattts.decoder import GenerationParams, StreamingDecoder
from server.engines.chattts.settings import ChatTTSSettings
from server.scheduling import SchedulingSettings
from tests.conftest import fixed_length_chattts
from tests.scripted_engine import ScriptedEngine
from tests.server.ws.test_stream import assert_complete, deltas

STEPS = 48
TEXTS = [
    "你好，世界。",
    "今天天气很好。",
    "我们去公园吧",
    "这是第四句话。",
    "五",
    "六六六六",
    "七七七七七七七",
    "最后一句，八。",
]


def params(speaker: str, seed: int, steps: int = STEPS) -> GenerationParams:
    return GenerationParams(spk_emb=speaker, seed=seed, max_new_token=steps, min_new_token=steps)


def alone(
    decoder: StreamingDecoder, text: str, p: GenerationParams
) -> tuple[list[Any], np.ndarray]:
    """Tokens and audio of ``text`` decoded on its own (the unbatched streaming decoder)."""
    chunks = list(decoder.stream(text, p))
    audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return decoder.last_stats.token_ids, audio


def run_batch(batch: BatchedDecoder, rows: list[Row]) -> int:
    steps = 0
    while live := [row for row in rows if not row.done]:
        batch.step(live)
        steps += 1
    return steps


def join(batch: BatchedDecoder, text: str, p: GenerationParams) -> Row:
    row, embeds = batch.open(text, p)
    assert batch.prefill(row, embeds)
    return row


@pytest.mark.parametrize("attention", ["rows", "masked"])
def test_a_seeded_utterance_is_the_same_alone_and_in_a_batch_of_eight(
    chat: Any, speaker: str, attention: str
) -> None:
    """Batch of 1 (ChatTTS's own arithmetic) vs a batch of 8: the same tokens, the same
    audio to float tolerance, for the row under test and for every other row."""
    decoder = StreamingDecoder(chat)
    solo = [alone(decoder, text, params(speaker, 11 + i)) for i, text in enumerate(TEXTS)]
    batch = BatchedDecoder(decoder, max_batch=8, max_tokens=256, attention=attention)
    rows = [join(batch, text, params(speaker, 11 + i)) for i, text in enumerate(TEXTS)]
    assert run_batch(batch, rows) == STEPS - 1  # the prefill made each row's first token
    for row, (tokens, audio) in zip(rows, solo, strict=True):
        assert row.ids[: row.steps].tolist() == tokens
        np.testing.assert_allclose(np.concatenate(batch.take_audio(row)), audio, atol=1e-5)
    assert batch.vocoder_calls < batch.vocoded_windows  # equal windows shared a call


def test_rows_join_and_leave_mid_batch_without_changing_the_others(chat: Any, speaker: str) -> None:
    """Continuous batching: a row joins after others started, one leaves (cancelled)
    halfway; every row that finishes has exactly its solo tokens."""
    decoder = StreamingDecoder(chat)
    batch = BatchedDecoder(decoder, max_batch=3, max_tokens=256)
    first, second = (
        join(batch, TEXTS[0], params(speaker, 1)),
        join(batch, TEXTS[1], params(speaker, 2)),
    )
    for _ in range(10):
        batch.step([first, second])
    late = join(batch, TEXTS[2], params(speaker, 3))  # joins at step 10
    for _ in range(10):
        batch.step([first, second, late])
    batch.close(second)  # leaves: its row is free again
    fourth = join(batch, TEXTS[3], params(speaker, 4))
    assert fourth.row == 1  # the row second gave back
    run_batch(batch, [first, late, fourth])
    for row, text, seed in ((first, 0, 1), (late, 2, 3), (fourth, 3, 4)):
        tokens, _ = alone(decoder, TEXTS[text], params(speaker, seed))
        assert row.ids[: row.steps].tolist() == tokens


def test_a_row_that_ends_early_leaves_at_its_eos(chat: Any, speaker: str) -> None:
    """Rows end at their own EOS (random weights: at random) while the others go on."""
    decoder = StreamingDecoder(chat)
    batch = BatchedDecoder(decoder, max_batch=4, max_tokens=512)
    free = [GenerationParams(spk_emb=speaker, seed=s, max_new_token=200) for s in range(4)]
    rows = [join(batch, TEXTS[i], free[i]) for i in range(4)]
    run_batch(batch, rows)
    lengths = set()
    for row, p, text in zip(rows, free, TEXTS[:4], strict=True):
        tokens, audio = alone(decoder, text, p)
        assert row.ids[: row.steps].tolist() == tokens
        assert sum(c.size for c in batch.take_audio(row)) == audio.size
        lengths.add(row.steps)
    assert len(lengths) > 1  # they did end at different steps


def test_int8_runs_the_batch_on_quantised_linear_layers(
    tiny_checkpoint: Path, speaker: str
) -> None:
    """gpt_quantization int8: the GPT's linears are int8, a batch still speaks."""
    chat = load_chat(tiny_checkpoint, device="cpu")
    try:
        decoder = StreamingDecoder(chat, ChatTTSSettings(gpt_quantization="int8"))
        assert "quantized" in type(chat.gpt.gpt.layers[0].self_attn.q_proj).__module__
        batch = BatchedDecoder(decoder, max_batch=2, max_tokens=256)
        rows = [join(batch, text, params(speaker, i)) for i, text in enumerate(TEXTS[:2])]
        run_batch(batch, rows)
        assert all(sum(c.size for c in batch.take_audio(row)) > 0 for row in rows)
    finally:
        chat.unload()


# --- through the real server -----------------------------------------------------------


@pytest.fixture(scope="module")
def batched_server(tiny_checkpoint: Path) -> Iterator[LiveServer]:
    # max_streams: admission out of the way (it has its own tests below).
    settings = Settings(engine="chattts", model_dir=tiny_checkpoint, max_batch=8, max_streams=64)
    with run_live_server(settings, engine=fixed_length_chattts(tiny_checkpoint)) as server:
        yield server


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match, name
    return float(match.group(1))


@pytest.mark.live
async def test_many_concurrent_streams_each_receive_all_their_audio_in_order(
    batched_server: LiveServer,
) -> None:
    """Twelve contexts on three sockets at once, batched: every one gets all its segments
    and audio, frames in order with no gap; steps really ran several rows together."""

    async def connection(n: int) -> list[Any]:
        async with StreamClient.connect(batched_server.ws_url) as client:
            ids = [await client.start(f"c{n}-{k}", seed=10 * n + k) for k in range(4)]
            for context_id in ids:
                for delta in deltas("第一句话。第二句话。", 3):
                    await client.send_text(delta, context_id)
                await client.end(context_id)
            return [await client.collect(c, timeout_s=TIMEOUT_S * 4) for c in ids]

    results = [
        r for batch in await asyncio.gather(*(connection(n) for n in range(3))) for r in batch
    ]
    for result in results:
        assert_complete(result, "第一句话。第二句话。")
    text = httpx.get(batched_server.base_url + "/metrics", timeout=TIMEOUT_S).text
    steps = metric(text, "tts_engine_batch_size_count")
    assert steps > 0 and metric(text, "tts_engine_batch_size_sum") / steps > 1.5


@pytest.mark.live
async def test_a_cancel_mid_batch_frees_its_row_and_the_others_finish(
    batched_server: LiveServer,
) -> None:
    """Cancel one of several batched contexts: it ends cancelled, the others complete."""
    async with StreamClient.connect(batched_server.ws_url) as client:
        for k in range(3):
            await client.start(f"x{k}", seed=k)
            await client.send_text("一段话，" * 4, f"x{k}")
            await client.end(f"x{k}")
        await client.cancel("x1")
        results = [await client.collect(f"x{k}", timeout_s=TIMEOUT_S * 4) for k in range(3)]
    assert results[1].done is not None and results[1].done["cancelled"] is True
    for k in (0, 2):
        assert_complete(results[k], "一段话，" * 4)


async def _burst(server: LiveServer) -> tuple[list[np.ndarray], float, float]:
    """Eight contexts started at once on one socket: each one's PCM, and the prompts a
    prefill forward took (the count of forwards, the rows in all) during the burst."""
    before = httpx.get(server.base_url + "/metrics", timeout=TIMEOUT_S).text
    async with StreamClient.connect(server.ws_url) as client:
        for k in range(8):
            await client.start(f"b{k}", seed=40 + k)
            await client.send_text(TEXTS[k], f"b{k}")
            await client.end(f"b{k}")
        results = [await client.collect(f"b{k}", timeout_s=TIMEOUT_S * 4) for k in range(8)]
    for k, result in enumerate(results):
        assert_complete(result, TEXTS[k])
    after = httpx.get(server.base_url + "/metrics", timeout=TIMEOUT_S).text
    count, rows = (
        metric(after, f"tts_engine_prefill_rows_{part}")
        - metric(before, f"tts_engine_prefill_rows_{part}")
        for part in ("count", "sum")
    )
    return [np.frombuffer(r.pcm, dtype=np.int16) for r in results], count, rows


@pytest.mark.live
async def test_prompts_joining_together_run_in_one_forward_and_sound_the_same(
    batched_server: LiveServer, tiny_checkpoint: Path
) -> None:
    """A burst of eight contexts: their prompts run several to a forward (on by default),
    and every context's audio is what it is with a forward per prompt
    (``--prefill-together false``), to a PCM step."""
    together, forwards, segments = await _burst(batched_server)
    assert segments >= 8 and forwards < segments
    settings = Settings(engine="chattts", model_dir=tiny_checkpoint, max_batch=8, max_streams=64)
    settings = settings.replace(scheduling=SchedulingSettings(prefill_together=False))
    with run_live_server(settings, engine=fixed_length_chattts(tiny_checkpoint)) as alone:
        apart, forwards, rows = await _burst(alone)
    assert rows == segments and forwards == rows
    for k, (ours, theirs) in enumerate(zip(together, apart, strict=True)):
        assert ours.size == theirs.size and ours.size > 0, k
        assert np.abs(ours.astype(np.int32) - theirs).max() <= 2, k


# --- admission control -----------------------------------------------------------------


def busy_server(**changes: Any) -> Any:
    """A main engine slow enough that a context stays busy; espeak as the fallback voice."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.05, ms_per_char=300)
    settings = Settings(engine="chattts", model_dir=Path("unused"), max_streams=1, **changes)
    return run_live_server(settings, engine=lambda: (engine, False, None))


@pytest.mark.live
async def test_a_context_beyond_capacity_is_refused_busy_and_the_running_one_plays_on() -> None:
    """At capacity a new context gets busy with a retry hint; the running one completes,
    and once it is done a new context is admitted."""
    with busy_server() as live:
        async with StreamClient.connect(live.ws_url) as client:
            await client.start("a", seed=1)
            await client.send_text("第一个。", "a")
            await client.end("a")
            await client.start("b", seed=2)
            refused = await client.collect("b", timeout_s=TIMEOUT_S)
            assert [(e["code"], e["retry_after_ms"]) for e in refused.errors] == [("busy", 2000)]
            assert_complete(await client.collect("a", timeout_s=TIMEOUT_S), "第一个。")
            await client.start("c", seed=3)
            await client.send_text("第三个。", "c")
            await client.end("c")
            assert_complete(await client.collect("c", timeout_s=TIMEOUT_S), "第三个。")
        response = await asyncio.to_thread(
            httpx.post, live.base_url + "/v1/tts", json={"text": "你好。"}, timeout=TIMEOUT_S
        )
        assert response.status_code == 200  # nothing else speaking now
        metrics = httpx.get(live.base_url + "/metrics", timeout=TIMEOUT_S).text
        assert 'tts_contexts_refused_total{route="ws"} 1.0' in metrics


@pytest.mark.live
async def test_http_beyond_capacity_is_503_with_retry_after() -> None:
    """POST /v1/tts at capacity: 503 busy with a Retry-After header."""
    with busy_server(busy_retry_after_ms=1500) as live:
        async with StreamClient.connect(live.ws_url) as client:
            await client.start("a", seed=1)
            await client.send_text("占着引擎的一句话。", "a")
            response = await asyncio.to_thread(
                httpx.post, live.base_url + "/v1/tts", json={"text": "你好。"}, timeout=TIMEOUT_S
            )
            await client.end("a")
            await client.collect("a", timeout_s=TIMEOUT_S)
    assert response.status_code == 503 and response.headers["retry-after"] == "2"
    assert response.json()["error"] == {
        "code": "busy",
        "message": response.json()["error"]["message"],
        "type": "server_error",
        "param": None,
        "retry_after_ms": 1500,
    }


@pytest.mark.live
async def test_when_busy_fallback_serves_the_new_context_with_the_fallback_voice() -> None:
    """--when-busy fallback: the new context is spoken by espeak, with a warning; the
    running one keeps its engine."""
    with busy_server(when_busy="fallback") as live:
        engine = live.state.worker.engine  # type: ignore[attr-defined]
        async with StreamClient.connect(live.ws_url) as client:
            await client.start("a", seed=1)
            await client.send_text("主引擎的一句。", "a")
            await client.end("a")
            await client.start("b", seed=2)
            await client.send_text("备用声音的一句。", "b")
            await client.end("b")
            first = await client.collect("a", timeout_s=TIMEOUT_S)
            second = await client.collect("b", timeout_s=TIMEOUT_S)
    assert_complete(first, "主引擎的一句。")
    assert_complete(second, "备用声音的一句。")
    assert [w["code"] for w in second.warnings] == ["busy_fallback_voice"]
    assert [r.text for r in engine.requests] == ["主引擎的一句。"]  # b never reached it


@pytest.mark.live
async def test_the_client_retries_busy_as_the_server_hints() -> None:
    """StreamClient.open retries a busy start after retry_after_ms, a bounded number of times."""
    with busy_server(busy_retry_after_ms=300) as live:
        async with StreamClient.connect(live.ws_url) as client:
            await client.open("a", seed=1)
            await client.send_text("一句话。", "a")
            await client.end("a")
            started = asyncio.get_running_loop().time()
            await client.open("b", seed=2, attempts=20)  # admitted once a is done
            waited = asyncio.get_running_loop().time() - started
            await client.send_text("又一句。", "b")
            await client.end("b")
            assert_complete(await client.collect("b", timeout_s=TIMEOUT_S), "又一句。")
            assert_complete(await client.collect("a", timeout_s=TIMEOUT_S), "一句话。")
        assert waited >= 0.3
        async with StreamClient.connect(live.ws_url) as client:
            await client.open("c", seed=3)
            await client.send_text("很长的一句话，" * 5, "c")
            with pytest.raises(BusyError, match="busy"):
                await client.open("d", attempts=2)
            await client.cancel("c")
