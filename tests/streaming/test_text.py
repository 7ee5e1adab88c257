"""Tests for streaming.text: what of a segment ChatTTS is given, and what is reported dropped."""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.text import (
    SPOKEN_CHARSET,
    PreparedText,
    prepare_text,
    strip_tags,
)
from streaming.text.align import normalized_spans

# (id, text, spoken, removed as [(start, chars), ...])
CASES: list[tuple[str, str, str, list[tuple[int, str]]]] = [
    ("plain-zh", "你好世界", "你好世界", []),
    ("kept-marks", "你好，世界。", "你好，世界。", []),
    ("exclamation-to-stop", "太好了！", "太好了。", []),
    ("question-to-stop", "你好吗？", "你好吗。", []),
    ("colon-semicolon-to-comma", "注意：第一；第二", "注意，第一，第二", []),
    ("brackets-to-comma", "这是（注）说明", "这是，注，说明", []),
    ("title-marks-to-comma", "我读《红楼梦》了", "我读，红楼梦，了", []),
    ("leading-marks-dropped", "「你好」", "你好，", [(0, "「")]),
    ("repeated-stops", "真好。。。", "真好。", [(3, "。。")]),
    ("mixed-run-strongest-wins", "好，。吧", "好。吧", [(1, "，")]),
    ("mixed-run-strongest-kept", "好？！吧", "好。吧", [(2, "！")]),
    ("ellipsis", "等等……好", "等等。好", [(3, "…")]),
    ("enumeration-comma-kept", "苹果、香蕉", "苹果、香蕉", []),
    ("digits-dropped", "我有3个苹果", "我有个苹果", [(2, "3")]),
    ("decimal-dropped-whole", "价格是12.5元", "价格是元", [(3, "12.5")]),
    ("number-run-with-separators", "时间12:30，1,000人", "时间，人", [(2, "12:30"), (8, "1,000")]),
    ("quotes-dropped", "他说“好”", "他说好", [(2, "“"), (4, "”")]),
    ("emoji-dropped", "好的😀！", "好的。", [(2, "😀")]),
    ("english", "Hello, world! How are you?", "Hello, world. How are you.", []),
    ("english-apostrophe", "don't", "dont", [(3, "'")]),
    ("english-hyphenated", "well-known", "well known", []),
    ("snake-case", "snake_case", "snake case", []),
    ("dash-is-a-pause", "Mr. Smith - the boss", "Mr. Smith, the boss", []),
    ("accented-latin-folded", "café", "cafe", []),
    ("fullwidth-letters", "ＡＢＣ是字母", "A B C是字母", []),
    ("acronym-spelled", "用GPU算", "用G P U算", []),
    ("mixed-case-word-kept", "iPhone和GPUs", "iPhone和GPUs", []),
    ("symbol-read", "A&B", "A和B", []),
    ("greek-read", "α粒子", "阿尔法粒子", []),
    ("markdown-bold", "**重要**的事", "重要的事", [(0, "**"), (4, "**")]),
    ("markdown-heading", "## 标题", "标题", [(0, "##")]),
    ("markdown-bullet", "- 第一项", "第一项", [(0, "-")]),
    ("markdown-link", "看[文档](http://a.io/x)吧", "看文档吧", [(1, "["), (4, "](http://a.io/x)")]),
    ("markdown-code", "用`ls`命令", "用ls命令", [(1, "`"), (4, "`")]),
    ("markdown-fence", "```python", "", [(0, "```python")]),
    ("markdown-table-rule", "|---|:--:|", "", [(0, "|---|:--:|")]),
    # A leading pipe is dropped; the others are said as pauses, and reported.
    ("markdown-table-row", "| 名称 | 说明 |", "名称， 说明，", [(0, "|"), (5, "|"), (10, "|")]),
    ("less-than-is-a-reported-pause", "甲<乙", "甲，乙", [(1, "<")]),
    ("replacement-character-reported", "你\ufffd好", "你好", [(1, "\ufffd")]),
    (
        "url-host-read-long-path-removed",
        "见https://www.example.com/a/b/c/d?e=1。",
        "见example点com。",
        [(1, "https://www."), (24, "/a/b/c/d?e=1")],
    ),
    (
        "url-short-path-read-query-removed",
        "见https://www.example.com/a?b=1。",
        "见example点com斜杠 a。",
        [(1, "https://www."), (26, "?b=1")],
    ),
    (
        "url-port-read",
        "开http://127.0.0.1:7860/ui",
        "开一二七点零点零点一冒号 七八六零斜杠 ui",
        [(1, "http://")],
    ),
    ("url-without-scheme-path-read", "见a.io/docs。", "见a点io斜杠 docs。", []),
    ("email-read", "写信到a@b.cn", "写信到a 艾特 b点cn", []),
    ("citation-dropped", "结论[1]。", "结论。", [(2, "[1]")]),
    ("id-digit-by-digit", "号码123456789012", "号码一二三四五六七八九零一二", []),
    ("version-read", "v1.2.3版", "v一点二点三版", []),
    ("fullwidth-digits", "第１２３号", "第号", [(1, "１２３")]),
    ("control-tag-dropped", "好[laugh]的", "好的", [(1, "[laugh]")]),
    ("whitespace-collapsed", "  你好 \t\n 世界  ", "你好 世界", []),
    ("space-before-mark", "Hello , world .", "Hello, world.", []),
    ("ideographic-space", "你好\u3000世界", "你好 世界", []),
    ("zh-uses-fullwidth-marks", "OK好的, yes. 我们走", "O K好的， yes。 我们走", []),
    ("en-uses-ascii-marks", "Hi，我。Bye now", "Hi,我.Bye now", []),
    ("extension-a-dropped", "㐀好", "好", [(0, "㐀")]),
    ("nothing-to-say-digits", "123", "", [(0, "123")]),
    ("nothing-to-say-marks", "。！？", "", [(0, "。！？")]),
    ("nothing-to-say-mixed", " 😀 ， 42 ", "", [(1, "😀"), (3, "，"), (5, "42")]),
    ("empty", "", "", []),
    ("blank", " \n\t", "", []),
]


@pytest.mark.parametrize(
    ("text", "spoken", "removed"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_table(text: str, spoken: str, removed: list[tuple[int, str]]) -> None:
    """Each row prepares to exactly the listed spoken text and removals."""
    prepared = prepare_text(text)
    assert prepared.spoken == spoken
    assert [(r.start, r.chars) for r in prepared.removed] == removed


# -- ChatTTS's own normaliser, rebuilt from its source --------------------------------
# Importing ChatTTS pulls in torch (~10 s), so its tables are read from norm.py instead.


def chattts_norm_source() -> str:
    spec = importlib.util.find_spec("ChatTTS")
    if spec is None or spec.origin is None:
        pytest.skip("ChatTTS is not installed")
    return (Path(spec.origin).parent / "norm.py").read_text(encoding="utf-8")


@functools.cache
def chattts_tables() -> tuple[str, dict[str, str], dict[str, str]]:
    """(reject pattern, character_simplifier, halfwidth_2_fullwidth) from norm.py."""
    tree = ast.parse(chattts_norm_source())
    found: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute):
            found[node.targets[0].attr] = node.value

    def maketrans_dict(name: str) -> dict[str, str]:
        call = found[name]
        assert isinstance(call, ast.Call)
        table = ast.literal_eval(call.args[0])
        assert isinstance(table, dict)
        return table

    reject = found["reject_pattern"]
    assert isinstance(reject, ast.Call)
    pattern = ast.literal_eval(reject.args[0])
    assert isinstance(pattern, str)
    return pattern, maketrans_dict("character_simplifier"), maketrans_dict("halfwidth_2_fullwidth")


@functools.cache
def chattts_normalizer() -> Callable[[str], str]:
    """ChatTTS's Normalizer.__call__ with no normaliser registered and no homophones."""
    pattern, simplifier, half_to_full = chattts_tables()
    reject = re.compile(pattern)
    simplify = str.maketrans(simplifier)
    widen = str.maketrans(half_to_full)

    def normalize(text: str) -> str:
        cjk = len(re.findall(r"[\u4e00-\u9fff]", text))
        if cjk > len(re.findall(r"\b[A-Za-z]+\b", text)):
            text = text.translate(widen)
        if reject.search(text):
            text = reject.sub("", text.translate(simplify))
        return text

    return normalize


def test_charset_is_chattts_keep_set() -> None:
    """SPOKEN_CHARSET accepts exactly the characters ChatTTS's reject pattern keeps."""
    pattern, _, _ = chattts_tables()
    reject = re.compile(pattern)
    for code in range(0x10000):
        ch = chr(code)
        assert bool(SPOKEN_CHARSET.fullmatch(ch)) == (reject.fullmatch(ch) is None), repr(ch)


def test_marks_mapped_like_chattts() -> None:
    """Every mark ChatTTS maps to a comma or a stop is spoken as that same pause."""
    _, simplifier, _ = chattts_tables()
    for mark, target in simplifier.items():
        spoken = prepare_text(f"好{mark}的").spoken
        if target in "，,":
            assert spoken == "好，的", mark
        else:
            assert spoken == "好。的", mark


# -- properties ----------------------------------------------------------------------

ALPHABET = (
    "你好世界中文天气"
    "。！？；…，、：“”‘’（）「」『』《》【】—"
    "abcXYZ"
    "ＡＢ０１"
    "0123456789"
    ".,!?;:'\"-/()[]_<>"
    "   \n\t\u3000"
    "😀é㐀"
)  # fmt: skip
texts = st.text(alphabet=st.sampled_from(ALPHABET), max_size=120)


def is_word_char(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff" or (ch.isascii() and ch.isalpha())


def check_accounting(text: str, prepared: PreparedText) -> None:
    """Pieces and removals partition the non-blank input; pieces spell the spoken text."""
    owner: dict[int, str] = {}
    for removal in prepared.removed:
        assert removal.chars
        assert text[removal.start : removal.start + len(removal.chars)] == removal.chars
        assert not any(ch.isspace() for ch in removal.chars)
        for i in range(removal.start, removal.start + len(removal.chars)):
            assert i not in owner, (i, owner[i])
            owner[i] = "removed"
    starts = [r.start for r in prepared.removed]
    assert starts == sorted(starts)
    assert "".join(piece.spoken for piece in prepared.pieces) == prepared.spoken
    for piece in prepared.pieces:
        assert text[piece.start : piece.end] == piece.source
        for i in range(piece.start, piece.end):
            if not text[i].isspace():
                assert i not in owner, (i, owner[i])
                owner[i] = "spoken"
    missing = [i for i, ch in enumerate(text) if not ch.isspace() and i not in owner]
    assert not missing, [text[i] for i in missing]


@settings(max_examples=400, deadline=None)
@given(text=texts)
def test_every_character_accounted_for(text: str) -> None:
    """Non-blank input characters are each either in one spoken piece or in one removal."""
    check_accounting(text, prepare_text(text))


def digit_reader(text: str) -> str:
    """A stand-in normaliser: digits read one by one, "%" moved first (a reordering)."""
    out = "".join(
        "零一二三四五六七八九"[int(ch)] if ch.isdigit() and ch.isascii() else ch for ch in text
    )
    return re.sub(r"([零一二三四五六七八九]+)%", r"百分之\1", out)


@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_accounted_for_with_a_normaliser(text: str) -> None:
    """With a normaliser that rewrites and reorders, every character is still accounted for."""
    prepared = prepare_text(text, normalizer=digit_reader)
    check_accounting(text, prepared)
    assert all(SPOKEN_CHARSET.fullmatch(ch) for ch in prepared.spoken)


def test_normaliser_rewrites_are_aligned() -> None:
    """A rewritten span maps back to exactly the input characters it replaced."""
    spans = list(normalized_spans("共3个，占50%", 10, digit_reader))
    assert spans == [
        (10, 11, None),
        (11, 12, "三"),
        (12, 15, None),
        (15, 18, "百分之五零"),
    ]


def test_library_rewrites_are_named() -> None:
    """What the library reads (a symbol no rule claims) is a rewrite named after it."""
    prepared = prepare_text("单位℃", normalizer=lambda text: text.replace("℃", "摄氏度"))
    assert [(p.source, p.spoken, p.rule) for p in prepared.rewrites] == [("℃", "摄氏度", "wetext")]


def test_normaliser_changes_to_ideographs_are_undone() -> None:
    """A normaliser that deletes an interjection or simplifies a character is overruled."""

    def meddler(text: str) -> str:
        return text.replace("啊", "").replace("這", "这").replace("1", "一")

    prepared = prepare_text("好啊的這个1", normalizer=meddler)
    assert prepared.spoken == "好啊的這个一"
    assert prepared.removed == ()


def test_removal_reasons() -> None:
    """Each removal says why: markup, url, emoji, tag, punctuation, number, unspeakable."""
    prepared = prepare_text("**好**😀[laugh]见http://a.io/x?y。。5¤")
    assert [(r.chars, r.reason) for r in prepared.removed] == [
        ("**", "markup"),
        ("**", "markup"),
        ("😀", "emoji"),
        ("[laugh]", "tag"),
        ("http://", "url"),
        ("?y", "url"),
        ("。", "punctuation"),
        ("5", "number"),
        ("¤", "unspeakable"),
    ]


def test_control_tags_pass_when_allowed() -> None:
    """With allow_tags, control tags stay in place in spoken text and are listed."""
    prepared = prepare_text("好[uv_break]的[laugh]。[break_3]", allow_tags=True)
    assert prepared.spoken == "好[uv_break]的[laugh]。[break_3]"
    assert prepared.tags == ("[uv_break]", "[laugh]", "[break_3]")
    assert prepared.removed == ()
    alone = prepare_text("[laugh]", allow_tags=True)
    assert (alone.spoken, [r.reason for r in alone.removed]) == ("", ["tag"])


def test_unknown_bracket_words_are_not_tags() -> None:
    """Only ChatTTS's own tags are tags; other bracketed words are read."""
    prepared = prepare_text("[hello]好", allow_tags=True)
    assert prepared.tags == ()
    assert prepared.spoken == "hello,好"  # one English word to one ideograph: English marks


def test_strip_tags() -> None:
    """Engines that cannot take tags strip them."""
    assert strip_tags("Hi [laugh] there[uv_break]") == "Hi there"
    assert strip_tags("你好[lbreak]") == "你好"


@settings(max_examples=400, deadline=None)
@given(text=texts)
def test_spoken_is_clean(text: str) -> None:
    """Spoken text uses only ChatTTS's charset, has no edge or double blanks, says something."""
    spoken = prepare_text(text).spoken
    assert all(SPOKEN_CHARSET.fullmatch(ch) for ch in spoken)
    assert spoken == spoken.strip()
    assert "  " not in spoken
    assert not re.search(r"[，。、,.] ?[，。、,.]", spoken)
    assert spoken == "" or any(is_word_char(ch) for ch in spoken)
    assert spoken == "" or spoken[0] not in "，。、,."
    # Words, full-width letters, accented letters and (long) digit runs can be said.
    if not any(is_word_char(ch) or "Ａ" <= ch <= "ｚ" or ch in "é" or ch.isdigit() for ch in text):
        assert spoken == ""


@settings(max_examples=400, deadline=None)
@given(text=texts)
def test_spoken_passes_chattts_unchanged(text: str) -> None:
    """ChatTTS's normaliser leaves spoken text exactly as it is."""
    spoken = prepare_text(text).spoken
    assert chattts_normalizer()(spoken) == spoken


@settings(max_examples=200, deadline=None)
@given(text=texts)
def test_idempotent(text: str) -> None:
    """Preparing already prepared text changes nothing and removes nothing."""
    spoken = prepare_text(text).spoken
    again = prepare_text(spoken)
    assert (again.spoken, again.removed) == (spoken, ())
