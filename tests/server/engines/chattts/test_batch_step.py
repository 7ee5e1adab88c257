"""The batched step on the real ChatTTS modules (tiny checkpoint): every row's tokens are
its own whatever else runs, and a step is tensor work with one read of the device."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch

from server.engines.chattts.batch import BatchedDecoder, Row
from server.engines.chattts.decoder import GenerationParams, StreamingDecoder
from server.engines.chattts.settings import ChatTTSSettings
from tests.server.engines.chattts.test_chattts_stream import TEXT, _chattts_generation

STEPS = 40
TEXTS = ["你好，世界。", "今天天气很好。", "我们去公园吧", "五", "六六六六", "最后一句，八。"]


def params(speaker: str, seed: int | None, steps: int = STEPS) -> GenerationParams:
    return GenerationParams(spk_emb=speaker, seed=seed, max_new_token=steps, min_new_token=steps)


def solo_tokens(decoder: StreamingDecoder, text: str, p: GenerationParams) -> list[list[int]]:
    """The tokens of ``text`` generated alone, by ChatTTS's own loop (the unbatched path)."""
    return [out.ids.tolist() for out in decoder.generate(text, p)]


def join(batch: BatchedDecoder, text: str, p: GenerationParams) -> Row:
    row, embeds = batch.open(text, p)
    assert batch.prefill(row, embeds)
    return row


def run(batch: BatchedDecoder, rows: list[Row]) -> None:
    while live := [row for row in rows if not row.done]:
        batch.step(live)


def tokens(row: Row) -> list[list[int]]:
    result: list[list[int]] = row.ids[: row.steps].tolist()
    return result


@pytest.fixture(scope="module")
def decoder(chat: Any) -> StreamingDecoder:
    return StreamingDecoder(chat)


@pytest.fixture(scope="module")
def solo(decoder: StreamingDecoder, speaker: str) -> dict[int, list[list[int]]]:
    """Seed -> its utterance's tokens alone, for the 64 seeded utterances used below."""
    return {
        seed: solo_tokens(decoder, TEXTS[seed % len(TEXTS)], params(speaker, seed))
        for seed in range(64)
    }


@pytest.mark.parametrize("size", [1, 8, 64])
def test_every_seeded_row_has_its_solo_tokens_in_a_batch(
    decoder: StreamingDecoder, speaker: str, solo: dict[int, list[list[int]]], size: int
) -> None:
    """A batch of 1, 8 or 64 rows, one in eight unseeded: each seeded row samples exactly
    the tokens its utterance has alone (ChatTTS's own sampling) for all its steps."""
    batch = BatchedDecoder(decoder, max_batch=size, max_tokens=256)
    seeds = list(range(size))
    rows = [
        join(batch, TEXTS[s % len(TEXTS)], params(speaker, None if s % 8 == 7 else s))
        for s in seeds
    ]
    run(batch, rows)
    for seed, row in zip(seeds, rows, strict=True):
        assert row.steps == STEPS
        if seed % 8 != 7:
            assert tokens(row) == solo[seed], f"row {seed}"


@pytest.mark.parametrize("together", [1, 3, 8])
def test_prompts_prefilled_together_keep_every_rows_solo_tokens(
    decoder: StreamingDecoder, speaker: str, solo: dict[int, list[list[int]]], together: int
) -> None:
    """Prompts of different lengths prefilled in one forward (padded to the longest),
    some rows already stepping when others join: every seeded row samples the tokens its
    utterance has alone, and its keys and values are those of its prompt alone."""
    batch = BatchedDecoder(decoder, max_batch=16, max_tokens=256)
    early = [join(batch, TEXTS[s % len(TEXTS)], params(speaker, s)) for s in (10, 11)]
    for _ in range(3):
        batch.step(early)
    seeds = list(range(together))
    opened = [batch.open(TEXTS[s % len(TEXTS)], params(speaker, s)) for s in seeds]
    assert together == 1 or len({row.prompt_tokens for row, _ in opened}) > 1  # padded
    assert (
        batch.prefill_many([row for row, _ in opened], [e for _, e in opened]) == [True] * together
    )
    alone = BatchedDecoder(decoder, max_batch=1, max_tokens=256)
    for seed, (row, _) in zip(seeds, opened, strict=True):
        single = join(alone, TEXTS[seed % len(TEXTS)], params(speaker, seed))
        assert single.row is not None and row.row is not None
        span = row.prompt_tokens
        for store, one in ((batch.gpt.keys, alone.gpt.keys), (batch.gpt.values, alone.gpt.values)):
            torch.testing.assert_close(
                store[:, row.row, :, :span], one[:, single.row, :, :span], rtol=1e-5, atol=1e-5
            )
        alone.close(single)
    rows = early + [row for row, _ in opened]
    run(batch, rows)
    for seed, row in zip([10, 11, *seeds], rows, strict=True):
        assert tokens(row) == solo[seed], f"row {seed}"


def test_a_full_store_refuses_only_the_rows_it_has_no_room_for(
    decoder: StreamingDecoder, speaker: str, solo: dict[int, list[list[int]]]
) -> None:
    """Three prompts prefilled together into a store of two rows: the first two join
    (and speak their solo tokens), the third is refused, and nothing of it is kept."""
    batch = BatchedDecoder(decoder, max_batch=2, max_tokens=256)
    opened = [batch.open(TEXTS[s], params(speaker, s)) for s in range(3)]
    assert batch.prefill_many([row for row, _ in opened], [e for _, e in opened]) == [
        True,
        True,
        False,
    ]
    assert opened[2][0].row is None
    run(batch, [row for row, _ in opened[:2]])
    assert [tokens(row) for row, _ in opened[:2]] == [solo[0], solo[1]]


def test_rows_that_sit_out_steps_keep_their_tokens(
    decoder: StreamingDecoder, speaker: str, solo: dict[int, list[list[int]]]
) -> None:
    """Rows step on their own schedules (random subsets step, as the scheduler lets rows
    with audio to spare sit out): every row still gets its solo tokens."""
    batch = BatchedDecoder(decoder, max_batch=8, max_tokens=256)
    rows = [join(batch, TEXTS[s % len(TEXTS)], params(speaker, s)) for s in range(8)]
    chooser = random.Random(4)
    while live := [row for row in rows if not row.done]:
        stepping = [row for row in live if chooser.random() < 0.5] or live[:1]
        batch.step(stepping)
    for seed, row in enumerate(rows):
        assert tokens(row) == solo[seed]


def test_static_shapes_pad_rows_and_span_and_keep_the_tokens(
    decoder: StreamingDecoder, speaker: str, solo: dict[int, list[list[int]]]
) -> None:
    """The fixed-shape step a CUDA graph captures (rows and span rounded up to buckets,
    padded rows computed and dropped), run on the CPU: each row's solo tokens, and rows
    joining late and leaving early change nothing for the others."""
    batch = BatchedDecoder(decoder, max_batch=8, max_tokens=256, static_shapes=True)
    rows = [join(batch, TEXTS[s % len(TEXTS)], params(speaker, s)) for s in range(3)]
    for _ in range(5):
        batch.step(rows)
    batch.close(rows.pop(1))
    rows += [join(batch, TEXTS[s % len(TEXTS)], params(speaker, s)) for s in (3, 4)]
    run(batch, rows)
    for seed, row in zip((0, 2, 3, 4), rows, strict=True):
        assert tokens(row) == solo[seed]


def test_parity_sampling_gives_chattts_infer_tokens(chat: Any, speaker: str) -> None:
    """sampling="parity" (ChatTTS's warpers op for op) in a batch of three gives, for the
    row under test, the tokens ChatTTS's own infer samples for that seed."""
    reference = _chattts_generation(chat, speaker, 5, 60, 60)
    batch = BatchedDecoder(StreamingDecoder(chat), max_batch=4, max_tokens=256, sampling="parity")
    rows = [join(batch, TEXT, params(speaker, seed, 60)) for seed in (5, 6, 7)]
    run(batch, rows)
    assert torch.equal(rows[0].ids[: rows[0].steps], reference.ids[0])


def test_unseeded_rows_draw_apart(decoder: StreamingDecoder, speaker: str) -> None:
    """Unseeded rows of the same text draw their own noise: their tokens differ."""
    batch = BatchedDecoder(decoder, max_batch=2, max_tokens=256)
    rows = [join(batch, TEXTS[0], params(speaker, None)) for _ in range(2)]
    run(batch, rows)
    assert tokens(rows[0]) != tokens(rows[1])


def test_a_hurried_row_cuts_its_next_chunk_early(chat: Any, speaker: str) -> None:
    """A row whose listener is short of audio gets a chunk after first_chunk_steps new
    steps instead of at its (growing) boundary; the other row keeps its schedule."""
    # No lookahead or overlap held back: every window's audio goes out at once.
    options = ChatTTSSettings(
        first_chunk_steps=4, chunk_growth=4.0, max_chunk_steps=64, lookahead_frames=0,
        overlap_samples=0,
    )  # fmt: skip
    batch = BatchedDecoder(StreamingDecoder(chat, options), max_batch=2, max_tokens=256)
    hurried, calm = (join(batch, TEXTS[i], params(speaker, i, 30)) for i in range(2))
    chunks: dict[str, list[int]] = {"hurried": [], "calm": []}
    while not hurried.done:
        changed = batch.step([hurried, calm], [True, False])
        for name, row in (("hurried", hurried), ("calm", calm)):
            if row in changed and batch.take_audio(row):
                chunks[name].append(row.steps)
    assert chunks["calm"] == [4, 20, 30]  # 4, then 4 x 4, then the end
    assert chunks["hurried"] == [4, 8, 12, 16, 20, 24, 28, 30]


_READS = ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__")


@contextmanager
def counted_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every call that brings a tensor's value to the host (a device synchronisation on
    CUDA), by name, while the block runs."""
    calls: list[str] = []

    def counting(name: str) -> Any:
        original = getattr(torch.Tensor, name)

        def wrapper(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return original(self, *args, **kwargs)

        return wrapper

    with monkeypatch.context() as patch:
        for name in _READS:
            patch.setattr(torch.Tensor, name, counting(name))
        yield calls


def test_a_step_reads_the_device_once(
    decoder: StreamingDecoder, speaker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step of 16 rows brings one value set to the host (the end flags of every row
    together): no per-row reads; a step that vocodes adds only the vocoder's audio."""
    batch = BatchedDecoder(decoder, max_batch=16, max_tokens=256)
    rows = [join(batch, TEXTS[s % len(TEXTS)], params(speaker, s)) for s in range(16)]
    plain, vocoding = [], []
    while live := [row for row in rows if not row.done]:
        windows, calls = batch.vocoded_windows, batch.vocoder_calls
        with counted_reads(monkeypatch) as reads:
            batch.step(live)
        if batch.vocoded_windows == windows:
            plain.append(len(reads))
        else:  # each vocoder call brings its audio back (.cpu().numpy())
            vocoding.append(len(reads) - 2 * (batch.vocoder_calls - calls))
    assert plain and vocoding
    assert set(plain) == {1} and set(vocoding) == {1}


def test_stepping_a_row_not_in_the_batch_is_refused(
    decoder: StreamingDecoder, speaker: str
) -> None:
    """A row before its prefill, after close, or finished cannot step: a clear error."""
    batch = BatchedDecoder(decoder, max_batch=2, max_tokens=256)
    row, _ = batch.open(TEXTS[0], params(speaker, 1))
    with pytest.raises(ValueError, match="before prefill"):
        batch.step([row])
    done = join(batch, TEXTS[0], params(speaker, 1, 2))
    batch.step([done])
    assert done.done
    with pytest.raises(ValueError, match="finished"):
        batch.step([done])
    batch.close(done)
    with pytest.raises(ValueError, match="after close"):
        batch.step([done])


def test_rows_grow_the_tables_as_they_join(decoder: StreamingDecoder, speaker: str) -> None:
    """Tables start small and grow (rows, steps) as rows join, keeping earlier rows' state."""
    batch = BatchedDecoder(decoder, max_batch=16, max_tokens=256)
    first = join(batch, TEXTS[0], params(speaker, 0, 8))
    batch.step([first])
    before = tokens(first)
    rows = [join(batch, TEXTS[1], params(speaker, s, 30)) for s in range(1, 9)]
    assert batch.table.rows >= 9 and batch.table.max_steps >= 30
    assert tokens(first) == before
    run(batch, [first, *rows])
    assert np.all(batch.table.host_steps[:9] == [8] + [30] * 8)


def test_a_graph_failure_serves_on_without_graphs(
    decoder: StreamingDecoder,
    speaker: str,
    solo: dict[int, list[list[int]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """If capturing or replaying the step's CUDA graph raises, the error is logged once
    and the same fixed-shape step runs uncaptured: the rows keep their tokens."""

    class BrokenGraphs:
        def capture(self, *args: Any) -> Any:
            raise RuntimeError("operation not permitted when stream is capturing")

        run = capture

    batch = BatchedDecoder(decoder, max_batch=4, max_tokens=256, static_shapes=True)
    batch.graphs = BrokenGraphs()  # type: ignore[assignment]
    batch.prepare()
    assert batch.graphs is None
    batch.graphs = BrokenGraphs()  # type: ignore[assignment]
    rows = [join(batch, TEXTS[s % len(TEXTS)], params(speaker, s)) for s in range(2)]
    run(batch, rows)
    assert batch.graphs is None
    assert [tokens(row) for row in rows] == [solo[0], solo[1]]
    failures = [r for r in caplog.records if "CUDA graph capture failed" in r.getMessage()]
    assert len(failures) == 2 and all(r.exc_info for r in failures)
