"""Tests for streaming.segment: where the incremental segmenter cuts, in any chunking."""

from __future__ import annotations

import itertools
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.segment import Segment, Segmenter, SegmenterSettings

# Late first cut by default, so that most rows show the sentence rules alone.
LATE = 1000

# (id, text, max_chars, first_min_chars, expected [(segment text, reason), ...])
CASES: list[tuple[str, str, int, int, list[tuple[str, str]]]] = [
    # Chinese sentence ends
    ("zh-stops", "你好。今天天气很好！你呢？", 80, LATE,
     [("你好。", "sentence"), ("今天天气很好！", "sentence"), ("你呢？", "sentence")]),
    ("zh-semicolon", "第一点；第二点", 80, LATE, [("第一点；", "sentence"), ("第二点", "flush")]),
    ("zh-ellipsis", "他想了想……说好吧", 80, LATE,
     [("他想了想……", "sentence"), ("说好吧", "flush")]),
    ("zh-single-ellipsis", "嗯…好", 80, LATE, [("嗯…", "sentence"), ("好", "flush")]),
    ("zh-repeated-marks", "真的吗？！！太好了", 80, LATE,
     [("真的吗？！！", "sentence"), ("太好了", "flush")]),
    ("zh-closing-quote", "他说：“我来了。”然后坐下。", 80, LATE,
     [("他说：“我来了。”", "sentence"), ("然后坐下。", "sentence")]),
    ("zh-corner-brackets", "「好。」『行！』", 80, LATE,
     [("「好。」", "sentence"), ("『行！』", "sentence")]),
    ("zh-paren-closer", "（完。）下一句", 80, LATE, [("（完。）", "sentence"), ("下一句", "flush")]),
    ("zh-comma-is-no-sentence-end", "今天，明天，后天。", 80, LATE,
     [("今天，明天，后天。", "sentence")]),
    # English sentence ends
    ("en-stops", "Hi there. How are you? Great!", 80, LATE,
     [("Hi there.", "sentence"), (" How are you?", "sentence"), (" Great!", "sentence")]),
    ("en-interrobang", "Really?! Yes.", 80, LATE, [("Really?!", "sentence"), (" Yes.", "sentence")]),
    ("en-quote-closer", 'He said "Stop." Then left.', 80, LATE,
     [('He said "Stop."', "sentence"), (" Then left.", "sentence")]),
    ("en-straight-quote-opens", '好。"下一句"', 80, LATE, [("好。", "sentence"), ('"下一句"', "flush")]),
    ("en-single-quote-closer", "She said 'no.' Fine.", 80, LATE,
     [("She said 'no.'", "sentence"), (" Fine.", "sentence")]),
    ("en-paren-closer", "(See above.) Next.", 80, LATE,
     [("(See above.)", "sentence"), (" Next.", "sentence")]),
    ("en-digit-before-stop", "It costs 5. Then more.", 80, LATE,
     [("It costs 5.", "sentence"), (" Then more.", "sentence")]),
    # '.' that is not a sentence end
    ("decimal", "Pi is 3.14 roughly. Ok", 80, LATE,
     [("Pi is 3.14 roughly.", "sentence"), (" Ok", "flush")]),
    ("zh-decimal", "价格是12.5元。好", 80, LATE, [("价格是12.5元。", "sentence"), ("好", "flush")]),
    ("version", "Use v1.2.3 now. Ok", 80, LATE, [("Use v1.2.3 now.", "sentence"), (" Ok", "flush")]),
    ("domain", "Go to example.com today. Ok", 80, LATE,
     [("Go to example.com today.", "sentence"), (" Ok", "flush")]),
    ("url-query", "See http://a.io/x?q=1! Ok", 80, LATE,
     [("See http://a.io/x?q=1!", "sentence"), (" Ok", "flush")]),
    ("title-abbreviation", "Mr. Smith and Dr. Who met. Ok", 80, LATE,
     [("Mr. Smith and Dr. Who met.", "sentence"), (" Ok", "flush")]),
    ("latin-abbreviation", "Fruit, e.g. apples, i.e. food. Ok", 80, LATE,
     [("Fruit, e.g. apples, i.e. food.", "sentence"), (" Ok", "flush")]),
    ("acronym", "The U.S. Army won. Ok", 80, LATE,
     [("The U.S. Army won.", "sentence"), (" Ok", "flush")]),
    ("initials", "J. K. Rowling wrote it. Ok", 80, LATE,
     [("J. K. Rowling wrote it.", "sentence"), (" Ok", "flush")]),
    ("pronoun-i-ends", "So did I. Then we left", 80, LATE,
     [("So did I.", "sentence"), (" Then we left", "flush")]),
    ("lowercase-continues", "Apples etc. and pears. Ok", 80, LATE,
     [("Apples etc. and pears.", "sentence"), (" Ok", "flush")]),
    ("etc-ends", "Apples etc. Then pears", 80, LATE,
     [("Apples etc.", "sentence"), (" Then pears", "flush")]),
    ("ellipsis-continues", "Wait... what happened? Ok", 80, LATE,
     [("Wait... what happened?", "sentence"), (" Ok", "flush")]),
    ("ellipsis-ends", "Wait... What? Ok", 80, LATE,
     [("Wait...", "sentence"), (" What?", "sentence"), (" Ok", "flush")]),
    ("ellipsis-glued", "Wait...what. Ok", 80, LATE, [("Wait...what.", "sentence"), (" Ok", "flush")]),
    ("english-then-chinese", "It is OK.然后我们走", 80, LATE,
     [("It is OK.", "sentence"), ("然后我们走", "flush")]),
    ("list-numbers", "1. First item\n2. Second", 80, LATE,
     [("1. First item", "sentence"), ("\n2. Second", "flush")]),
    ("zh-list-number", "1. 第一项", 80, LATE, [("1. 第一项", "flush")]),
    ("trailing-abbreviation-at-flush", "Ask Mr.", 80, LATE, [("Ask Mr.", "flush")]),
    ("trailing-stop-at-flush", "Done.", 80, LATE, [("Done.", "sentence")]),
    # newlines and whitespace
    ("newline", "第一行\n第二行", 80, LATE, [("第一行", "sentence"), ("\n第二行", "flush")]),
    ("blank-lines", "标题\n\n正文。", 80, LATE, [("标题", "sentence"), ("\n\n正文。", "sentence")]),
    ("crlf-and-trailing-blanks", "one  \r\ntwo", 80, LATE, [("one", "sentence"), ("  \r\ntwo", "flush")]),
    ("stop-then-newline", "好。\n再见", 80, LATE, [("好。", "sentence"), ("\n再见", "flush")]),
    ("leading-whitespace-joins", "  你好。  再见。  ", 80, LATE,
     [("  你好。", "sentence"), ("  再见。", "sentence"), ("  ", "flush")]),
    ("only-whitespace", " \n ", 80, LATE, [(" \n ", "flush")]),
    ("punctuation-only", "。。。", 80, LATE, [("。。。", "sentence")]),
    # the first segment of an utterance cuts early
    ("first-clause", "今天天气很好，我们去公园吧，好不好。", 80, 6,
     [("今天天气很好，", "clause"), ("我们去公园吧，好不好。", "sentence")]),
    ("first-clause-too-short", "你好，我是小明，很高兴。", 80, 6,
     [("你好，我是小明，", "clause"), ("很高兴。", "sentence")]),
    ("first-clause-english", "Well, I think so, yes. Ok", 80, 6,
     [("Well, I think so,", "clause"), (" yes.", "sentence"), (" Ok", "flush")]),
    ("first-clause-not-in-number", "Total 1,000 units, ok", 80, 6,
     [("Total 1,000 units,", "clause"), (" ok", "flush")]),
    ("first-clause-not-in-time", "Meet at 12:30 today: ok", 80, 6,
     [("Meet at 12:30 today:", "clause"), (" ok", "flush")]),
    ("first-clause-not-in-spaced-score", "比分 3 : 2，主队赢了", 80, 3,
     [("比分 3 : 2，", "clause"), ("主队赢了", "flush")]),
    ("first-clause-not-in-fullwidth-time", "10：00开始，请准时", 80, 3,
     [("10：00开始，", "clause"), ("请准时", "flush")]),
    ("first-clause-fullwidth-colon-after-digits", "共3：甲、乙、丙", 80, 2,
     [("共3：", "clause"), ("甲、乙、丙", "flush")]),
    ("first-clause-enumeration-comma", "苹果、香蕉、橘子和梨", 80, 4,
     [("苹果、香蕉、", "clause"), ("橘子和梨", "flush")]),
    # the length limit
    ("long-zh-clause", "我们明天早上去公园散步，然后中午一起吃饭再回家", 16, LATE,
     [("我们明天早上去公园散步，", "length"), ("然后中午一起吃饭再回家", "flush")]),
    ("long-zh-no-marks", "一二三四五六七八九十一二三四五", 10, LATE,
     [("一二三四五六七八九十", "length"), ("一二三四五", "flush")]),
    ("long-en-words", "the quick brown fox jumps over the lazy dog", 16, LATE,
     [("the quick brown", "length"), (" fox jumps over", "length"), (" the lazy dog", "flush")]),
    ("long-en-latest-comma", "one, two, three four five six", 16, LATE,
     [("one, two,", "length"), (" three four five", "length"), (" six", "flush")]),
    ("number-at-limit", "价格是12345.678元整", 9, LATE,
     [("价格是", "length"), ("12345.678", "length"), ("元整", "flush")]),
    ("decimal-straddles-limit", "总共12.5元", 4, LATE,
     [("总共", "length"), ("12.5", "length"), ("元", "flush")]),
    ("word-straddles-limit", "ab cdefg", 5, LATE,
     [("ab", "length"), (" ", "length"), ("cdefg", "flush")]),
    ("mixed-script-boundary", "中文English中文", 8, LATE, [("中文", "length"),
                                                          ("English中", "length"), ("文", "flush")]),
    # The host is one token (read example点com): the cut goes before it, not at its dot.
    ("url-too-long-splits-at-punctuation", "看https://a.com/b好", 12, LATE,
     [("看", "length"), ("https://", "length"), ("a.com/b好", "flush")]),
    ("number-too-long-splits-at-separator", "1234.5678", 6, LATE,
     [("1234.", "length"), ("5678", "flush")]),
    ("long-word-hard-cut", "abcdefghij", 4, LATE, [("abcd", "length"), ("efgh", "length"),
                                                    ("ij", "flush")]),
    ("sentence-longer-than-limit", "一二三四五六。七", 4, LATE,
     [("一二三四", "length"), ("五六。", "sentence"), ("七", "flush")]),
    # quotes and brackets stay whole; numbers, dates and times are not split
    ("zh-quote-kept-whole", "他说：“我来了。你呢？”然后走了。", 80, LATE,
     [("他说：“我来了。你呢？”", "sentence"), ("然后走了。", "sentence")]),
    ("paren-kept-whole", "他说（这个。那个）好", 80, LATE, [("他说（这个。那个）好", "flush")]),
    ("straight-quote-kept-whole", 'He said "Stop. Now." Then left.', 80, LATE,
     [('He said "Stop. Now."', "sentence"), (" Then left.", "sentence")]),
    ("first-clause-not-inside-brackets", "今天（周一，晴）天气很好，走吧", 80, 3,
     [("今天（周一，晴）天气很好，", "clause"), ("走吧", "flush")]),
    ("quote-moves-to-next-segment", "一二三四五“六七八九。”十", 8, LATE,
     [("一二三四五", "length"), ("“六七八九。”", "sentence"), ("十", "flush")]),
    ("quote-longer-than-limit-splits-at-sentence", "“一二三。四五六七八九", 8, LATE,
     [("“一二三。", "length"), ("四五六七八九", "flush")]),
    ("date-not-split", "今天是2024年10月1日星期二", 10, LATE,
     [("今天是", "length"), ("2024年10月1日", "length"), ("星期二", "flush")]),
    ("time-not-split", "会议在19点17分开始吧", 6, LATE,
     [("会议在", "length"), ("19点17分", "length"), ("开始吧", "flush")]),
    ("decimal-with-unit-not-split", "价格从12.5元涨到13.75元了", 8, LATE,
     [("价格从12.5元", "length"), ("涨到13.75元", "length"), ("了", "flush")]),
    ("apostrophe-is-no-quote", "It's fine. Don't worry.", 80, LATE,
     [("It's fine.", "sentence"), (" Don't worry.", "sentence")]),
]  # fmt: skip


def segment_all(
    text: str, config: SegmenterSettings, chunk_size: int | None = None
) -> list[Segment]:
    segmenter = Segmenter(config)
    if chunk_size is None:
        segments = segmenter.push(text)
    else:
        segments = []
        for i in range(0, len(text), chunk_size):
            segments += segmenter.push(text[i : i + chunk_size])
    return segments + segmenter.flush()


@pytest.mark.parametrize(
    ("text", "max_chars", "first_min", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
@pytest.mark.parametrize("chunk_size", [None, 1, 3])
def test_table(
    text: str,
    max_chars: int,
    first_min: int,
    expected: list[tuple[str, str]],
    chunk_size: int | None,
) -> None:
    """Each row cuts into exactly the listed segments, whether pushed whole or in chunks."""
    config = SegmenterSettings(max_chars=max_chars, first_min_chars=first_min)
    segments = segment_all(text, config, chunk_size)
    assert [(s.text, s.reason) for s in segments] == expected


def test_offsets_and_indices() -> None:
    """Segments carry their stream offsets and consecutive indices across pushes."""
    segmenter = Segmenter()
    segments = segmenter.push("你好。") + segmenter.push("再见。x") + segmenter.flush()
    assert [(s.index, s.start, s.end, s.text) for s in segments] == [
        (0, 0, 3, "你好。"),
        (1, 3, 6, "再见。"),
        (2, 6, 7, "x"),
    ]


def test_waits_for_the_character_after_a_dot() -> None:
    """A trailing "3." is held back until the next character says whether it is "3.5"."""
    segmenter = Segmenter()
    assert segmenter.push("价格是3.") == []
    assert segmenter.pending_text == "价格是3."
    assert segmenter.push("5元。好") == [Segment(0, "价格是3.5元。", 0, 8, "sentence")]
    assert segmenter.pending_text == "好"


def test_stop_waits_for_a_closer() -> None:
    """A terminator at the end of the buffer is held until a closer can be ruled out."""
    segmenter = Segmenter()
    assert segmenter.push("他说：“走。") == []
    assert [s.text for s in segmenter.push("”他")] == ["他说：“走。”"]


def test_flush_resets_first_segment() -> None:
    """After flush the next utterance may again cut early at a clause mark."""
    segmenter = Segmenter(SegmenterSettings(first_min_chars=4))
    first = segmenter.push("一二三四，五六七八，九十。") + segmenter.flush()
    assert [s.text for s in first] == ["一二三四，", "五六七八，九十。"]
    second = segmenter.push("一二三四，五六")
    assert [(s.text, s.reason) for s in second] == [("一二三四，", "clause")]


def test_flush_empty() -> None:
    """Flushing with nothing pending emits nothing."""
    segmenter = Segmenter()
    assert segmenter.flush() == []
    assert segmenter.push("") == []
    assert segmenter.pending_text == ""


def test_config_rejects_nonsense() -> None:
    """A limit below one character is refused at construction."""
    with pytest.raises(ValueError, match="max_chars"):
        SegmenterSettings(max_chars=0)
    with pytest.raises(ValueError, match="first_min_chars"):
        SegmenterSettings(first_min_chars=-1)


def test_long_paragraph_is_linear() -> None:
    """A few thousand characters pushed one at a time segment in well under a second."""
    unit = "这是一个没有标点符号的很长的句子而且它一直在继续 and some English words 3.14 "
    text = unit * 60  # about 4,000 characters
    started = time.perf_counter()
    segments = segment_all(text, SegmenterSettings(), chunk_size=1)
    elapsed = time.perf_counter() - started
    assert "".join(s.text for s in segments) == text
    assert elapsed < 1.0


def test_long_blank_run_after_dot() -> None:
    """A dot followed by a long run of spaces is decided without unbounded lookahead."""
    segmenter = Segmenter()
    assert segmenter.push("Hi Mr." + " " * 20) != []


# -- properties ----------------------------------------------------------------------

ALPHABET = (
    "你好世界中文天气很"
    "。！？；…，、：“”‘’（）「」『』"
    "abcXYZI"
    "0123456789"
    ".,!?;:'\"-/()"
    "   \n\t"
    "😀é"
)  # fmt: skip
texts = st.text(alphabet=st.sampled_from(ALPHABET), max_size=200)
# Words of letters or digits, so that abbreviations, decimals and URLs show up often.
tokens = st.sampled_from(
    ["Mr.", "e.g.", "U.S.", "3.14", "1,000", "12:30", "v1.2.3", "http://a.io/x?q=1", "...",
     "word", "你好", "。", "”", " ", "\n", ". ", "! ", "A", "a", "1.", "3 : 2", "10：00"]
)  # fmt: skip
token_texts = st.lists(st.one_of(tokens, st.sampled_from(ALPHABET)), max_size=80).map("".join)
any_text = st.one_of(texts, token_texts)
configs = st.builds(
    SegmenterSettings,
    max_chars=st.integers(min_value=1, max_value=40),
    first_min_chars=st.integers(min_value=0, max_value=10),
)


def chunked(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=300, deadline=None)
@given(text=any_text, config=configs, cuts=st.lists(st.integers(min_value=0), max_size=30))
def test_any_chunking_equals_one_push(
    text: str, config: SegmenterSettings, cuts: list[int]
) -> None:
    """Random chunks and 1-, 2-, 4-character chunks segment exactly like one push."""
    expected = segment_all(text, config)
    for size in (1, 2, 4):
        assert segment_all(text, config, size) == expected
    segmenter = Segmenter(config)
    segments: list[Segment] = []
    for chunk in chunked(text, cuts):
        segments += segmenter.push(chunk)
    assert segments + segmenter.flush() == expected


@settings(max_examples=300, deadline=None)
@given(text=any_text, config=configs, cuts=st.lists(st.integers(min_value=0), max_size=30))
def test_nothing_is_lost(text: str, config: SegmenterSettings, cuts: list[int]) -> None:
    """Emitted segments plus pending text equal the pushed text after every step."""
    segmenter = Segmenter(config)
    pushed = ""
    emitted = ""
    for chunk in chunked(text, cuts):
        pushed += chunk
        for segment in segmenter.push(chunk):
            assert segment.text == pushed[segment.start : segment.end]
            assert segment.start == len(emitted)
            emitted += segment.text
        assert emitted + segmenter.pending_text == pushed
    emitted += "".join(segment.text for segment in segmenter.flush())
    assert emitted == text
    assert segmenter.pending_text == ""


@settings(max_examples=300, deadline=None)
@given(text=any_text, config=configs)
def test_no_segment_exceeds_max_chars(text: str, config: SegmenterSettings) -> None:
    """No segment is empty or longer than max_chars."""
    for segment in segment_all(text, config, chunk_size=2):
        assert 0 < len(segment.text) <= config.max_chars


# Short balanced spans in running text: no segment may cut inside one.
quoted = st.sampled_from(
    ["“你好。你呢？”", "（注：见上。）", "「好！」", '"Hi. Yo."', "(a, b.)", "《书名》", "【注意。】",
     "‘好。’", "[1. 2.]"]
)  # fmt: skip
words = st.sampled_from(["你好", "天气", "。", "，", " ", "word", "3.14", "Mr.", "! ", "好。"])
quoted_texts = st.lists(st.one_of(quoted, words), max_size=40).map("".join)
SPANS = re.compile(
    r"“[^”]*”|（[^）]*）|「[^」]*」|\"[^\"]*\"|\([^)]*\)|《[^》]*》|【[^】]*】|‘[^’]*’|\[[^\]]*\]"
)


@settings(max_examples=300, deadline=None)
@given(
    text=quoted_texts,
    max_chars=st.integers(min_value=12, max_value=40),
    first_min=st.integers(min_value=0, max_value=10),
)
def test_quotes_and_brackets_stay_whole(text: str, max_chars: int, first_min: int) -> None:
    """No cut falls inside a quoted or bracketed span shorter than max_chars."""
    config = SegmenterSettings(max_chars=max_chars, first_min_chars=first_min)
    inside: set[int] = set()
    for match in SPANS.finditer(text):
        inside |= set(range(match.start() + 1, match.end()))
    for segment in segment_all(text, config, chunk_size=3)[:-1]:
        assert segment.end not in inside, (segment, text)


ASCII_RUN = re.compile(r"[!-~]+")
NUMBER = re.compile(r"[0-9]+(?:[.,:/-][0-9]+)*")


@settings(max_examples=300, deadline=None)
@given(text=any_text, config=configs)
def test_no_cut_inside_words_or_numbers(text: str, config: SegmenterSettings) -> None:
    """No boundary splits a letter run, a digit run or a number like 3.14 or 1,000.

    Only a token longer than max_chars may be split, so such texts are left out.
    """
    if any(len(m.group()) > config.max_chars for m in ASCII_RUN.finditer(text)):
        return
    inside = set()
    for m in NUMBER.finditer(text):
        inside |= set(range(m.start() + 1, m.end()))
    for segment in segment_all(text, config)[:-1]:
        cut = segment.end
        before, after = text[cut - 1], text[cut]
        assert not (before.isascii() and before.isalpha() and after.isascii() and after.isalpha())
        assert not (before.isdigit() and after.isdigit())
        assert cut not in inside


@pytest.mark.parametrize(
    ("text", "complete"),
    [
        ("说完了。", True),
        ("他说：“好了。”", True),
        ("真的吗？！", True),
        ("半句话", False),
        ("函数（x）", False),
        ("圆周率是3.", False),
        ("", False),
    ],
)
def test_holds_complete_sentence(text: str, complete: bool) -> None:
    """Pending text counts as a complete sentence only after a CJK end mark (and closers)."""
    segmenter = Segmenter()
    segmenter.push(text)
    assert segmenter.holds_complete_sentence is complete


# Tokens the text front-end reads as one (streaming/text/dotted.py, codes.py): a dot or
# a blank inside them is no place to cut.
TOKENS = [
    "No. 1", "No.1", "Mr. Smith", "Dr. Wang", "e.g.", "U.S.", "vs.", "etc.", "app.py",
    "README.md", "example.com", "a.b@example.com", "v1.2.3", "Python 3.12", "iOS 17.2",
    "192.168.1.1", "H.264", "3.2节", "RTX 4090", "+86 138 1234 5678", "Node.js",
]  # fmt: skip


def token_sentences() -> list[tuple[str, int, int]]:
    """(text, token start, token end): each token inside Chinese sentences."""
    out = []
    for token in TOKENS:
        for before, after in [
            ("好的，", " 是这样。"),
            ("我们用", "完成了。"),
            ("", "很常见。下一句"),
        ]:
            out.append((before + token + after, len(before), len(before) + len(token)))
    return out


@pytest.mark.parametrize(("text", "start", "end"), token_sentences())
def test_no_cut_inside_tokens_at_any_delta(text: str, start: int, end: int) -> None:
    """Streamed in two deltas split at every position, or one character at a time, the
    segments are those of one push, and none is cut inside the token."""
    config = SegmenterSettings(max_chars=80, first_min_chars=3)
    whole = [s.text for s in segment_all(text, config)]
    inside = set(range(start + 1, end))
    for segment in segment_all(text, config)[:-1]:
        assert segment.end not in inside, (text, segment)
    for split in range(len(text) + 1):
        segmenter = Segmenter(config)
        segments = [
            *segmenter.push(text[:split]),
            *segmenter.push(text[split:]),
            *segmenter.flush(),
        ]
        assert [s.text for s in segments] == whole, split
    assert [s.text for s in segment_all(text, config, chunk_size=1)] == whole


@pytest.mark.parametrize("token", TOKENS)
def test_length_cuts_go_around_tokens(token: str) -> None:
    """A segment cut for length is cut before or after a token, never inside it."""
    for filler in range(0, 24):
        text = "天" * filler + token + "地" * 30
        start, end = filler, filler + len(token)
        segments = segment_all(text, SegmenterSettings(max_chars=24, first_min_chars=3), 1)
        for segment in segments[:-1]:
            assert not start < segment.end < end, (text, segment)
