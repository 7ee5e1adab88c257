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

from streaming.text import SPOKEN_CHARSET, PreparedText, Removal, prepare_text

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
    ("english-hyphenated", "well-known", "well known", [(4, "-")]),
    ("dash-is-a-pause", "Mr. Smith - the boss", "Mr. Smith, the boss", []),
    ("accented-latin-dropped", "café", "caf", [(3, "é")]),
    ("fullwidth-letters", "ＡＢＣ是字母", "ABC是字母", []),
    ("fullwidth-digits", "第１２３号", "第号", [(1, "１２３")]),
    ("control-tag-dropped", "好[laugh]的", "好的", [(1, "[laugh]")]),
    ("whitespace-collapsed", "  你好 \t\n 世界  ", "你好 世界", []),
    ("space-before-mark", "Hello , world .", "Hello, world.", []),
    ("ideographic-space", "你好\u3000世界", "你好 世界", []),
    ("zh-uses-fullwidth-marks", "OK好的, yes. 我们走", "OK好的， yes。 我们走", []),
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
    assert prepare_text(text) == PreparedText(
        spoken, tuple(Removal(start, chars) for start, chars in removed)
    )


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


@settings(max_examples=400, deadline=None)
@given(text=texts)
def test_every_character_accounted_for(text: str) -> None:
    """Non-blank input characters are each either spoken or in exactly one removal."""
    prepared = prepare_text(text)
    removed_at: set[int] = set()
    for removal in prepared.removed:
        assert removal.chars
        assert text[removal.start : removal.start + len(removal.chars)] == removal.chars
        positions = set(range(removal.start, removal.start + len(removal.chars)))
        assert not positions & removed_at
        removed_at |= positions
        assert not any(ch.isspace() for ch in removal.chars)
    starts = [r.start for r in prepared.removed]
    assert starts == sorted(starts)
    for before, after in zip(prepared.removed, prepared.removed[1:], strict=False):
        assert before.start + len(before.chars) < after.start  # adjacent runs are merged
    kept = [ch for i, ch in enumerate(text) if not ch.isspace() and i not in removed_at]
    spoken = [ch for ch in prepared.spoken if ch != " "]
    assert len(kept) == len(spoken)
    # By category: words map one to one (full-width letters fold), marks to marks.
    for source, said in zip(kept, spoken, strict=True):
        assert is_word_char(said) == (said not in "，。、,.")
        if is_word_char(said):
            assert said == source or ord(source) - 0xFEE0 == ord(said)
        else:
            assert not is_word_char(source)


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
    if not any(is_word_char(ch) or "Ａ" <= ch <= "ｚ" for ch in text):
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
    assert prepare_text(spoken) == PreparedText(spoken, ())
