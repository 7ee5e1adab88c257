"""Segments prepared on the event loop (``--text-inline-max-chars``): the same reading as
through the front-end's thread, in order, and only where it cannot hold the loop up."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from server.config import Settings
from server.lexicon import LexiconFile
from server.textnorm import TextFrontend
from streaming.segment import Segmenter, SegmenterSettings
from streaming.text import PreparedText, needs_normalizer

# What LLMs write: plain clauses, numbers and codes between them, a code fence, English.
UTTERANCES = [
    "你好，欢迎使用流式语音合成。今天天气很好，我们出去走走吧！",
    "您的验证码是384756，请在5分钟内输入。如有疑问，请拨打4008123123。谢谢！",
    "第一步，打开设置；第二步，点击“关于本机”。然后……等它重启就好。",
    "代码如下：\n```python\nprint(1 + 2)\n```\n运行后输出3。好的，就这样。",
    "GPT-4o很强。它的价格是每百万token 5美元，比去年便宜了50%。对吧？",
    "Hello, this is a test. 这是一个测试，好吗？",
]


def segments_of(text: str) -> list[str]:
    segmenter = Segmenter(SegmenterSettings(max_chars=40, first_min_chars=3))
    return [segment.text for segment in [*segmenter.push(text), *segmenter.flush()]]


@pytest.fixture(scope="module")
def frontend() -> TextFrontend:
    front = TextFrontend()
    front.load()
    return front


async def prepare_all(frontend: TextFrontend, texts: list[str]) -> tuple[list[PreparedText], int]:
    """Every segment submitted at once, as the HTTP route does; (results, how many were
    ready at once)."""
    utterance = frontend.for_utterance()
    futures = [utterance.submit(text) for text in texts]
    at_once = sum(future.done() for future in futures)
    return [await future for future in futures], at_once


@pytest.mark.parametrize("text", UTTERANCES)
def test_the_loop_and_the_thread_read_alike(frontend: TextFrontend, text: str) -> None:
    """Inline or not, each segment reads the same (codes said the same way when they come
    back, fences, cue words), in order; plain short segments are ready at once."""
    texts = segments_of(text)
    frontend.inline_max_chars = 0
    threaded, code_at_once = asyncio.run(prepare_all(frontend, texts))  # code: no text to prepare
    frontend.inline_max_chars = 80
    inline, at_once = asyncio.run(prepare_all(frontend, texts))
    assert inline == threaded
    assert at_once >= code_at_once
    if not needs_normalizer(texts[0]):
        assert at_once > code_at_once  # a plain first clause: ready at once


def test_only_short_plain_segments_skip_the_thread_and_never_overtake(
    frontend: TextFrontend,
) -> None:
    """A number sends a segment to the thread (the normaliser is shared with it), as does
    a segment over the bound; a plain one after it waits its turn rather than being
    prepared before it."""
    frontend.inline_max_chars = 10
    threads: list[str] = []

    async def run() -> list[bool]:
        utterance = frontend.for_utterance()
        original = utterance.prepare_now

        def spy(text: str, before: str) -> PreparedText:
            threads.append(threading.current_thread().name)
            return original(text, before)

        utterance.prepare_now = spy  # type: ignore[method-assign]
        futures = [
            utterance.submit(text)
            for text in ("好的，", "我有3个苹果，", "谢谢。", "这是一句超过十个字的很长的话。")
        ]
        done = [future.done() for future in futures]
        results = [await future for future in futures]
        assert results[1].spoken == "我有三个苹果，"
        await asyncio.sleep(0)  # the futures' done callbacks run
        assert not utterance.in_thread
        # After the thread's work ends, a plain short segment is prepared at once again.
        assert utterance.submit("再见。").done()
        return done

    assert asyncio.run(run()) == [True, False, False, False]
    loop_thread = threads[0]
    assert threads[1:4] == [threads[1]] * 3 and threads[1] != loop_thread
    assert threads[4] == loop_thread


def test_a_lexicon_file_due_for_a_look_is_read_on_the_thread(tmp_path: Path) -> None:
    """The loop never reads the lexicon file: when a look is due (or a reload asked for)
    the segment goes to the thread, which applies the file's new entry."""
    path = tmp_path / "lexicon.txt"
    path.write_text("你好\t您好\n", encoding="utf-8")
    now = [0.0]
    limits = Settings().lexicon_limits
    lexicon = LexiconFile(path, limits, check_s=1.0, clock=lambda: now[0])
    front = TextFrontend(lexicon=lexicon, inline_max_chars=80)
    front.load()

    async def run() -> tuple[bool, str, bool, str]:
        utterance = front.for_utterance()
        first = utterance.submit("你好。")
        path.write_text("你好\t哈喽\n", encoding="utf-8")
        now[0] = 5.0  # a look at the file is due
        second = utterance.submit("你好。")
        return first.done(), (await first).spoken, second.done(), (await second).spoken

    ready, said, ready_again, said_again = asyncio.run(run())
    assert (ready, said) == (True, "您好。")
    assert (ready_again, said_again) == (False, "哈喽。")


def test_the_setting_reaches_the_front_end() -> None:
    """--text-inline-max-chars is the front-end's bound (80 by default; 0: the thread)."""
    from server.state import AppState

    assert Settings().text_inline_max_chars == 80
    state = AppState.build(Settings(engine="espeak", text_inline_max_chars=0))
    try:
        assert state.frontend.inline_max_chars == 0
    finally:
        state.frontend.close()
