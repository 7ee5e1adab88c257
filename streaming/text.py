"""What of a segment is spoken: the text the engine is given, and what was dropped.

ChatTTS 0.2.5 (``ChatTTS/norm.py``) keeps only ``[\\u4e00-\\u9fffA-Za-z，。、,. ]``: it
maps a few marks to a comma or a stop and silently deletes everything else, digits
included (``我有3个苹果`` is said ``我有个苹果``). :func:`prepare_text` turns a segment
into text made only of that set (plus control tags, when allowed), so the engine's own
normaliser finds nothing to change, and accounts for every input character: each one
is either spoken (as itself, or as part of a rewritten span such as ``12.5`` ->
``十二点五``) or reported in a :class:`Removal` with its position and a reason.

The work is a pipeline over :class:`_Token` (a source span and what it becomes):

1. span rules, ours, in order (first claim wins): control tags, markdown syntax, URLs
   and e-mail addresses, money and percentages (:mod:`streaming.amounts`), and the
   number forms the text-normalisation library gets wrong (long digit strings,
   versions, thousands separators, bare ranges, ``COVID-19``);
2. the text normaliser (injected: WeNet's WeTextProcessing in the server, see
   ``server/textnorm.py``) on each remaining run that holds a digit or a symbol. It
   returns text without an alignment, so its output is aligned back to the input with
   :class:`difflib.SequenceMatcher`: unchanged characters keep their positions, changed
   spans become rewrites of the input span they replace;
3. character rules: acronyms spelled out, symbols read (``&`` -> ``和``), accents
   folded, marks mapped to ChatTTS's pauses, the rest dropped (emoji, other symbols);
4. ``_tidy`` (one pause per run of marks, no stray blanks) and ``_render``.

Without a normaliser (``normalizer=None``) digits are dropped and reported, as ChatTTS
would drop them silently; the server always passes one.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum

from streaming.amounts import counting, find_amounts
from streaming.punctuation import (
    CJK_CLAUSE_MARKS,
    CJK_SENTENCE_MARKS,
    CLOSERS,
    MARKS,
    OPENERS,
    PAUSE_SYMBOLS,
    STRAIGHT_QUOTES,
    WORD_JOINERS,
    Said,
    said_as,
)

__all__ = [
    "CONTROL_TAG",
    "SPOKEN_CHARSET",
    "Normalizer",
    "Piece",
    "PreparedText",
    "Removal",
    "prepare_text",
    "strip_tags",
]

# Exactly ChatTTS's keep set (Normalizer.reject_pattern, negated).
SPOKEN_CHARSET = re.compile(r"[\u4e00-\u9fffA-Za-z，。、,. ]")

# ChatTTS's control tokens as users write them in text: [uv_break], [lbreak], [laugh],
# and the numbered families [break_N], [laugh_N], [oral_N], [speed_N].
CONTROL_TAG = re.compile(
    r"\[(?:uv_break|v_break|lbreak|laugh|(?:break|laugh|oral|speed)_\d{1,2})\]"
)

#: A text normaliser: text in, speakable text out, no alignment (the library's shape).
Normalizer = Callable[[str], str]

# Removal reasons, as reported to clients.
REASON_UNSPEAKABLE = "unspeakable"  # no reading for it (a symbol, a rare script)
REASON_EMOJI = "emoji"
REASON_MARKUP = "markup"  # markdown syntax, removed on purpose
REASON_URL = "url"  # the scheme, path and query of a URL (its host is read)
REASON_TAG = "tag"  # a control tag while control tags are not allowed
REASON_PUNCTUATION = "punctuation"  # a mark in a run of marks, or before any word
REASON_NUMBER = "number"  # digits, when no normaliser is configured
REASON_CODE = "code"  # the body of a fenced code block: not read aloud, on purpose
REASON_PAUSE = "pause"  # a symbol (< > |) read as a pause: the symbol itself is not said
REASON_INVALID = "invalid_unicode"  # U+FFFD: a lone surrogate or undecodable input


@dataclass(frozen=True)
class Removal:
    """A run of dropped characters; ``start`` is an offset in the prepared text."""

    start: int
    chars: str
    reason: str = REASON_UNSPEAKABLE


@dataclass(frozen=True)
class Piece:
    """A span of the input ``[start, end)`` and what is spoken for it.

    Pieces are in input order; their ``spoken`` texts joined give ``PreparedText.spoken``.
    A blank or a pause between words may have an empty span (``start == end``). Runs of
    characters spoken as they are form one piece.
    """

    start: int
    end: int
    source: str
    spoken: str


@dataclass(frozen=True)
class PreparedText:
    """``spoken`` for the engine; ``removed`` lists every dropped non-blank character.

    ``pieces`` maps input spans to what is said for them (the preview shows them);
    ``tags`` are the control tags passed to the engine inside ``spoken``.
    """

    spoken: str
    removed: tuple[Removal, ...]
    pieces: tuple[Piece, ...] = ()
    tags: tuple[str, ...] = ()

    @property
    def rewrites(self) -> tuple[Piece, ...]:
        """Pieces read as other words than written (numbers, acronyms, symbols...)."""
        return tuple(
            p
            for p in self.pieces
            if p.source != p.spoken and any(_is_word_char(ch) for ch in p.spoken)
        )


def strip_tags(text: str) -> str:
    """``text`` without control tags, a tag between two words leaving one blank."""
    stripped = CONTROL_TAG.sub(" ", text)
    return re.sub(r" {2,}", " ", stripped).strip()


class _Kind(Enum):
    WORD = "word"  # spoken text: a CJK ideograph, a letter, or a rewrite of a span
    TAG = "tag"  # a control tag passed through
    BLANK = "blank"
    GAP = "gap"  # a non-blank character read as a word break ("well-known", "snake_case")
    # Pauses, weakest first: their order decides which survives a run of marks.
    ENUMERATION = "enumeration"  # 、
    COMMA = "comma"
    STOP = "stop"
    DROPPED = "dropped"


_PAUSE_STRENGTH = {_Kind.ENUMERATION: 0, _Kind.COMMA: 1, _Kind.STOP: 2}
_PAUSES = frozenset(_PAUSE_STRENGTH)
_SAID_KINDS = {Said.STOP: _Kind.STOP, Said.COMMA: _Kind.COMMA, Said.ENUMERATION: _Kind.ENUMERATION}


@dataclass(frozen=True)
class _Token:
    start: int  # source span [start, end)
    end: int
    kind: _Kind
    text: str = ""  # what is spoken for a WORD or TAG
    reason: str = REASON_UNSPEAKABLE  # why a DROPPED token is dropped


_FULLWIDTH_OFFSET = 0xFEE0  # "Ａ" - "A"

# Symbols with a reading, for what the normaliser leaves alone (it reads them itself
# next to numbers: "1+1=2", "3×4", "25℃", "50%").
_SYMBOL_READINGS = {
    "&": "和", "＆": "和", "+": "加", "＋": "加", "=": "等于", "＝": "等于",
    "×": "乘", "÷": "除以", "±": "正负", "≈": "约等于", "≠": "不等于", "≤": "小于等于",
    "≥": "大于等于", "→": "到", "⇒": "到", "←": "从", "%": "百分号", "％": "百分号",
    "‰": "千分号", "℃": "摄氏度", "℉": "华氏度", "°": "度", "@": "艾特", "#": "井号",
    "＃": "井号", "$": "美元", "¥": "元", "￥": "元", "€": "欧元", "£": "英镑",
    "α": "阿尔法", "β": "贝塔", "γ": "伽马", "δ": "德尔塔", "ε": "艾普西龙", "θ": "西塔",
    "λ": "兰姆达", "μ": "缪", "π": "派", "σ": "西格玛", "φ": "斐", "ω": "欧米伽",
    "Δ": "德尔塔", "Σ": "西格玛", "Ω": "欧米伽", "①": "一", "②": "二", "③": "三",
    "④": "四", "⑤": "五", "⑥": "六", "⑦": "七", "⑧": "八", "⑨": "九", "⑩": "十",
    "Ⅰ": "一", "Ⅱ": "二", "Ⅲ": "三", "Ⅳ": "四", "Ⅴ": "五", "Ⅵ": "六", "Ⅶ": "七",
    "Ⅷ": "八", "Ⅸ": "九", "Ⅹ": "十", "½": "二分之一", "¼": "四分之一", "¾": "四分之三",
    "²": "平方", "³": "立方", "㎡": "平方米", "㎞": "公里", "㎏": "千克", "㎝": "厘米",
    "㎜": "毫米", "㎎": "毫克", "㎖": "毫升",
}  # fmt: skip
_DIGIT_READINGS = dict(zip("0123456789", "零一二三四五六七八九", strict=True))

# A span rule finds spans in the text and says what each becomes.
_SpanRule = Callable[[str, "Normalizer | None", bool], Iterator[_Token]]


def _dropped(start: int, end: int, reason: str) -> _Token:
    return _Token(start, end, _Kind.DROPPED, "", reason)


def _word(start: int, end: int, text: str) -> _Token:
    return _Token(start, end, _Kind.WORD, text)


def _read_digits(digits: str) -> str:
    """Digit by digit: "110101" -> "一一零一零一"; other characters kept."""
    return "".join(_DIGIT_READINGS.get(ch, ch) for ch in digits)


def _normalize_or_drop(
    start: int, end: int, text: str, normalizer: Normalizer | None, suffix: str = ""
) -> _Token:
    """A WORD reading ``text`` alone through the normaliser; dropped when there is none."""
    if normalizer is None:
        return _dropped(start, end, REASON_NUMBER)
    return _word(start, end, normalizer(text) + suffix)


# -- span rules ------------------------------------------------------------------------


def _tag_rule(text: str, normalizer: Normalizer | None, allow_tags: bool) -> Iterator[_Token]:
    for match in CONTROL_TAG.finditer(text):
        if allow_tags:
            yield _Token(match.start(), match.end(), _Kind.TAG, match.group())
        else:
            yield _dropped(match.start(), match.end(), REASON_TAG)


# Markdown: fences with their language, inline code ticks, emphasis, citation marks,
# and line markers (heading, quote, bullet, table rule, horizontal rule).
_MARKUP = re.compile(
    r"```[\w+#.-]*|`|\*{1,3}|_{2,3}|~~|\[\^?\d{1,3}\]"
    r"|^[ \t]*(?:#{1,6}(?=[ \t])|>+|[-*+•](?=[ \t]))"
    r"|^[ \t]*\|?(?:[ \t]*:?-{3,}:?[ \t]*\|?)+[ \t]*$"
    r"|^[ \t]*(?:[-*_][ \t]*){3,}$",
    re.MULTILINE,
)
# [text](url) and ![alt](url): the text is read, the rest is markup.
_LINK = re.compile(r"(!?\[)([^\]\n]*)(\]\([^)\s]*\))")
# An ordered-list item's number at the start of a line, before the item's text on that
# line ("1. 打开", "2) 点击", "3、 输入"): read as the number and a comma ("一，打开"),
# not as a sentence end ("一。"). A number ending a line ("总数是\n42.") is left alone.
_LIST_NUMBER = re.compile(r"^[ \t]*(\d{1,3})([.)．）、])(?=[ \t]+\S)", re.MULTILINE)


def _markup_rule(text: str, normalizer: Normalizer | None, allow_tags: bool) -> Iterator[_Token]:
    for match in _LINK.finditer(text):
        yield _dropped(match.start(1), match.end(1), REASON_MARKUP)
        yield _dropped(match.start(3), match.end(3), REASON_MARKUP)
    for match in _MARKUP.finditer(text):
        if match.end() > match.start():
            yield _dropped(match.start(), match.end(), REASON_MARKUP)
    for match in _LIST_NUMBER.finditer(text):
        yield _normalize_or_drop(match.start(1), match.end(1), match.group(1), normalizer)
        yield _Token(match.start(2), match.end(2), _Kind.COMMA)


_URL = re.compile(
    r"(?P<prefix>(?:https?|ftp)://(?:www\.)?|www\.)"
    r"(?P<host>[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)"
    r"(?P<rest>(?::\d+)?(?:[/?#][^\s<>\"'，。、；！？）】」》\u4e00-\u9fff]*)?)"
)
_EMAIL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")


def _read_address(address: str) -> str:
    """A host or mailbox: letters kept, digits read one by one, "." as 点, "@" as 艾特."""
    out: list[str] = []
    for ch in address:
        if ch == ".":
            out.append("点")
        elif ch == "@":
            out.append(" 艾特 ")
        elif ch in _DIGIT_READINGS:
            out.append(_DIGIT_READINGS[ch])
        elif ch.isascii() and ch.isalpha():
            out.append(ch)
        else:
            out.append(" ")
    return re.sub(r" {2,}", " ", "".join(out)).strip()


def _address_rule(text: str, normalizer: Normalizer | None, allow_tags: bool) -> Iterator[_Token]:
    for match in _URL.finditer(text):
        rest_end = match.end("rest")
        while rest_end > match.start("rest") and text[rest_end - 1] in ".,;:!?)]}'\"":
            rest_end -= 1  # a sentence mark after the URL is not part of it
        yield _dropped(match.start("prefix"), match.end("prefix"), REASON_URL)
        yield _word(match.start("host"), match.end("host"), _read_address(match.group("host")))
        if rest_end > match.start("rest"):
            yield _dropped(match.start("rest"), rest_end, REASON_URL)
    for match in _EMAIL.finditer(text):
        yield _word(match.start(), match.end(), _read_address(match.group()))


# Number forms WeTextProcessing 1.2.0 reads wrongly, each checked against it:
# - 12+ digits (IDs, card numbers): it reads part as a quantity -> digit by digit;
# - versions "v1.2.3": "v一.二点三" -> "v一点二点三";
# - thousands separators "100,000": "一百,零零零" -> the number without commas;
# - a bare range "10-20": read as a date (十月二十日) -> "十到二十" (dates stay its job);
# - a word, a hyphen, digits ("COVID-19", "GPT-4"): "负十九" -> a word break;
# - money and percentages: see streaming/amounts.py (a span rule of its own).
_LONG_DIGITS = re.compile(r"(?<![\d.])\d{12,}[Xx]?(?![\d.])")
_VERSION = re.compile(r"(?<![A-Za-z0-9_.])[vV]?\d+(?:\.\d+){2,}(?![A-Za-z0-9_.])")
_THOUSANDS = re.compile(r"(?<![\d,.])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])")
_RANGE = re.compile(
    r"(?<![A-Za-z0-9_.\-/:])(\d+(?:\.\d+)?)[ \t]?[-–—~～][ \t]?(\d+(?:\.\d+)?)"
    r"(%|％|℃|°C|[a-zA-Z]{1,3}\b)?(?![\d.\-/:])"
)
_NUMBER = re.compile(r"[0-9０-９]+(?:[.,:/\-．：／－][0-9０-９]+)*")
# A fraction alone: in context the library may move its reading ("约1/3" -> "三分之约一").
_FRACTION = re.compile(r"(?<![\d/.:])\d+/\d+(?![\d/.:])")
# Also a hyphen before a number glued to letters in a name ("Llama-3.1-8B": 减八B).
_WORD_HYPHEN_DIGIT = re.compile(
    r"(?<=[A-Za-z])-(?=\d)|(?<=[A-Za-z0-9])-(?=\d+(?:\.\d+)?[A-Za-z]+(?![A-Za-z0-9]))"
)


def _number_rule(text: str, normalizer: Normalizer | None, allow_tags: bool) -> Iterator[_Token]:
    for match in _LONG_DIGITS.finditer(text):
        yield _word(match.start(), match.end(), _read_digits(match.group().upper()))
    for match in _VERSION.finditer(text):
        version = match.group()
        head = version[0] if version[0] in "vV" else ""
        if not head and re.fullmatch(r"(?:19|20)\d\d\.\d{1,2}\.\d{1,2}", version):
            continue  # "2024.10.01": a date
        spoken = head + "点".join(_read_digits(part) for part in version[len(head) :].split("."))
        yield _word(match.start(), match.end(), spoken)
    if normalizer is None:
        # Numbers are dropped whole, separators included, so "12.5" leaves no "。".
        for match in _NUMBER.finditer(text):
            yield _dropped(match.start(), match.end(), REASON_NUMBER)
    for match in _FRACTION.finditer(text):
        yield _normalize_or_drop(match.start(), match.end(), match.group(), normalizer)
    for match in _THOUSANDS.finditer(text):
        yield _normalize_or_drop(
            match.start(), match.end(), match.group().replace(",", ""), normalizer
        )
    for match in _RANGE.finditer(text):
        low, high, unit = match.group(1), match.group(2), match.group(3) or ""
        if len(low) == 4 and low[:2] in ("19", "20") and len(high) <= 2 and not unit:
            continue  # "2024-10": a year and a month, the normaliser's date rule
        if low.startswith("0") or len(high) > 6:
            continue  # "010-12345678": a phone number, the normaliser's
        if normalizer is None:
            yield _dropped(match.start(), match.end(), REASON_NUMBER)
            continue
        said = normalizer(f"{low}{unit}") + "到" + normalizer(f"{high}{unit}")
        yield _word(match.start(), match.end(), said)
    for match in _WORD_HYPHEN_DIGIT.finditer(text):
        yield _Token(match.start(), match.end(), _Kind.GAP)


def _amount_rule(text: str, normalizer: Normalizer | None, allow_tags: bool) -> Iterator[_Token]:
    """Money and percentages (``¥199元``, ``$5–10``, ``-3.2%``): see streaming.amounts.

    Without a normaliser no number can be read: the number rule drops the digits.
    """
    if normalizer is None:
        return
    for amount in find_amounts(text, counting(normalizer)):
        yield _word(amount.start, amount.end, amount.said)


_SPAN_RULES: tuple[_SpanRule, ...] = (
    _tag_rule,
    _markup_rule,
    _address_rule,
    _amount_rule,
    _number_rule,
)

# -- the normaliser, aligned -----------------------------------------------------------

# A run needs the normaliser only if it holds a digit or a character outside CJK,
# letters, blanks and punctuation; pure prose skips it (and its cost).
_PUNCTUATION = "".join(sorted(set(MARKS) | OPENERS | CLOSERS | STRAIGHT_QUOTES))
_NEEDS_NORMALIZER = re.compile(rf"[^\u4e00-\u9fffA-Za-z\s{re.escape(_PUNCTUATION)}]")
_CJK_ONLY = re.compile(r"[\u4e00-\u9fff\s]*")
# Equal runs this short between two changes are taken into the change (the library
# reorders "50km/h" into "每小时五十公里"), so no input character looks deleted.
_MAX_ABSORBED_EQUAL = 2


def _normalized_tokens(
    run: str, offset: int, normalizer: Normalizer
) -> Iterator[tuple[int, int, str | None]]:
    """(start, end, rewrite) spans covering ``run``: rewrite None keeps the characters.

    Changes that touch only ideographs are undone: the library also deletes
    interjections (啊, 呃) and erhua (儿) and simplifies traditional characters, which
    this server does not want; reading numbers and symbols is what it is asked for.
    """
    said = normalizer(run)
    if said == run:
        yield offset, offset + len(run), None
        return
    matcher = difflib.SequenceMatcher(None, run, said, autojunk=False)
    ops: list[tuple[str, int, int, int, int]] = []
    for op in matcher.get_opcodes():
        kind = op[0]
        if kind != "equal" and ops and ops[-1][0] != "equal":
            ops[-1] = ("replace", ops[-1][1], op[2], ops[-1][3], op[4])
        elif (
            kind != "equal"
            and len(ops) >= 2
            and ops[-1][2] - ops[-1][1] <= _MAX_ABSORBED_EQUAL
            and any(
                o[0] == "delete" and not _CJK_ONLY.fullmatch(run[o[1] : o[2]])
                for o in (op, ops[-2])
            )
        ):
            ops.pop()  # the short equal run
            before = ops.pop()
            ops.append(("replace", before[1], op[2], before[3], op[4]))
        else:
            ops.append(op)
    ops = _attach_insertions(ops)
    for tag, i1, i2, j1, j2 in ops:
        source = run[i1:i2]
        # A same-length or shorter change of ideographs is the library simplifying or
        # deleting them; a longer one carries a reading moved there (keep it).
        if tag == "equal" or (_CJK_ONLY.fullmatch(source) and j2 - j1 <= i2 - i1):
            yield offset + i1, offset + i2, None
        else:
            yield offset + i1, offset + i2, said[j1:j2]


def _attach_insertions(
    ops: list[tuple[str, int, int, int, int]],
) -> list[tuple[str, int, int, int, int]]:
    """Give each pure insertion a source: the neighbouring input character it reads."""
    out: list[tuple[str, int, int, int, int]] = []
    pending: int | None = None  # output start of a leading insertion with no source yet
    for tag, i1, i2, j1, j2 in ops:
        if i1 == i2:  # an insertion: joins the change or character before it
            if not out:
                pending = j1
                continue
            ptag, p1, p2, q1, q2 = out.pop()
            if ptag == "equal" and p2 - p1 > 1:
                out.append(("equal", p1, p2 - 1, q1, q2 - 1))
                p1, q1 = p2 - 1, q2 - 1
            out.append(("replace", p1, p2, q1, j2))
        elif pending is not None:  # a leading insertion joins what follows it
            if tag == "equal" and i2 - i1 > 1:
                out.append(("replace", i1, i1 + 1, pending, j1 + 1))
                out.append(("equal", i1 + 1, i2, j1 + 1, j2))
            else:
                out.append(("replace", i1, i2, pending, j2))
            pending = None
        else:
            out.append((tag, i1, i2, j1, j2))
    return out


# -- character rules -------------------------------------------------------------------


def _fold_width(ch: str) -> str:
    """Full-width ASCII letters to ASCII; every other character unchanged."""
    if "Ａ" <= ch <= "Ｚ" or "ａ" <= ch <= "ｚ":
        return chr(ord(ch) - _FULLWIDTH_OFFSET)
    return ch


def _is_word_char(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff" or (ch.isascii() and ch.isalpha())


def _fold_accents(ch: str) -> str:
    """Accented letters to ASCII ("é" -> "e", "ß" -> "ss"); "" when there is none."""
    decomposed = unicodedata.normalize("NFKD", ch)
    ascii_letters = "".join(c for c in decomposed if c.isascii() and c.isalpha())
    return {"ß": "ss", "æ": "ae", "Æ": "AE", "ø": "o", "Ø": "O", "œ": "oe"}.get(ch, ascii_letters)


def _is_emoji(ch: str) -> bool:
    code = ord(ch)
    return (
        0x1F000 <= code <= 0x1FAFF
        or 0x2600 <= code <= 0x27BF
        or code in (0x200D, 0xFE0F, 0x20E3)
        or 0x1F1E6 <= code <= 0x1F1FF
    )


def _classify(text: str, i: int) -> _Token:
    ch = _fold_width(text[i])
    if ch.isspace():
        return _Token(i, i + 1, _Kind.BLANK)
    if _is_word_char(ch):
        return _word(i, i + 1, ch)
    if ch in WORD_JOINERS:
        before = _fold_width(text[i - 1]) if i else ""
        after = _fold_width(text[i + 1]) if i + 1 < len(text) else ""
        if before.isascii() and before.isalnum() and after.isascii() and after.isalpha():
            # "well-known", "snake_case": ChatTTS would say "well, known".
            return _Token(i, i + 1, _Kind.GAP)
    if ch in "'’" and 0 < i < len(text) - 1 and text[i - 1].isalpha() and text[i + 1].isalpha():
        return _dropped(i, i + 1, REASON_PUNCTUATION)  # "it's" is said "its"
    said = said_as(ch)
    if said is Said.DROPPED:
        return _dropped(i, i + 1, REASON_UNSPEAKABLE)
    if said is not None and said is not Said.GAP:
        # A pause symbol's pause is kept; the symbol itself is reported (see _tidy).
        reason = REASON_PAUSE if ch in PAUSE_SYMBOLS else REASON_UNSPEAKABLE
        return _Token(i, i + 1, _SAID_KINDS[said], reason=reason)
    if ch in _SYMBOL_READINGS:
        return _word(i, i + 1, _SYMBOL_READINGS[ch])
    if ch.isalpha() and (folded := _fold_accents(ch)):
        return _word(i, i + 1, folded)
    if ch == "\ufffd":
        return _dropped(i, i + 1, REASON_INVALID)
    if _is_emoji(ch):
        return _dropped(i, i + 1, REASON_EMOJI)
    if "0" <= ch <= "9" or "０" <= ch <= "９":
        return _dropped(i, i + 1, REASON_NUMBER)
    return _dropped(i, i + 1, REASON_UNSPEAKABLE)


def _rewrite_tokens(start: int, end: int, said: str) -> list[_Token]:
    """What a rewritten span becomes: its words and pauses, in order.

    The first word carries the span, so the span is accounted for once; the other
    words and pauses are zero-width. A span rewritten to marks only is one pause.
    """
    classified = [_classify(said, k) for k in range(len(said))]
    pauses = [t.kind for t in classified if t.kind in _PAUSES]
    if not any(t.kind is _Kind.WORD for t in classified):
        if pauses:
            return [_Token(start, end, max(pauses, key=lambda kind: _PAUSE_STRENGTH[kind]))]
        return [_dropped(start, end, REASON_UNSPEAKABLE)]
    tokens: list[_Token] = []
    words: list[str] = []
    spanned = False

    def close_words() -> None:
        nonlocal spanned
        text = re.sub(r" {2,}", " ", "".join(words)).strip()
        words.clear()
        if text:
            span = (end, end) if spanned else (start, end)
            tokens.append(_word(*span, text))
            spanned = True

    for token in classified:
        if token.kind is _Kind.WORD:
            words.append(token.text)
        elif token.kind in (_Kind.BLANK, _Kind.GAP):
            words.append(" ")
        elif token.kind in _PAUSES:
            close_words()
            tokens.append(_Token(end if spanned else start, end if spanned else start, token.kind))
    close_words()
    return tokens


_ACRONYM = re.compile(r"(?<![A-Za-z])[A-Z]{2,}(?![A-Za-z])")


def _spell_acronyms(tokens: list[_Token]) -> list[_Token]:
    """All-caps runs of letters ("GPU") are spelled: a zero-width blank between letters.

    Dropped tokens are skipped when looking for runs: they are not heard.
    """
    heard = [k for k, t in enumerate(tokens) if t.kind is not _Kind.DROPPED]
    letters = "".join(
        t.text if t.kind is _Kind.WORD and len(t.text) == 1 and t.text.isascii() else "\0"
        for t in (tokens[k] for k in heard)
    )
    spaced_after: set[int] = set()
    for match in _ACRONYM.finditer(letters):
        spaced_after.update(heard[m] for m in range(match.start(), match.end() - 1))
    out: list[_Token] = []
    for k, token in enumerate(tokens):
        out.append(token)
        if k in spaced_after:
            out.append(_Token(token.end, token.end, _Kind.BLANK))
    return out


def _tokenize(text: str, normalizer: Normalizer | None, allow_tags: bool) -> list[_Token]:
    """Tokens covering text in order; span rules win over the normaliser and characters."""
    claimed: dict[int, _Token] = {}
    covered = [False] * len(text)
    for rule in _SPAN_RULES:
        for token in rule(text, normalizer, allow_tags):
            if token.end <= token.start or any(covered[token.start : token.end]):
                continue
            covered[token.start : token.end] = [True] * (token.end - token.start)
            claimed[token.start] = token
    tokens: list[_Token] = []
    i = 0
    while i < len(text):
        if covered[i]:
            token = claimed[i]
            if token.kind is _Kind.WORD:
                tokens += _rewrite_tokens(token.start, token.end, token.text)
            else:
                tokens.append(token)
            i = token.end
            continue
        j = i
        while j < len(text) and not covered[j]:
            j += 1
        tokens += _plain_tokens(text, i, j, normalizer)
        i = j
    return _spell_acronyms(tokens)


# Clause and sentence marks split a run before it goes to the normaliser: no reading
# crosses them, and the library's cost grows with the length of what it is given.
# ASCII marks only before a blank: "12:30", "3.5" and "1,000" are the normaliser's.
_CJK_BREAKS = "".join(sorted(CJK_SENTENCE_MARKS | CJK_CLAUSE_MARKS))
_CLAUSE_BREAK = re.compile(rf"[{_CJK_BREAKS}\n]|[,;!?](?=\s)")


def _plain_tokens(text: str, start: int, end: int, normalizer: Normalizer | None) -> list[_Token]:
    if normalizer is None:
        return [_classify(text, k) for k in range(start, end)]
    tokens: list[_Token] = []
    piece_start = start
    breaks = [m.end() for m in _CLAUSE_BREAK.finditer(text, start, end)]
    for piece_end in [*breaks, end]:
        run = text[piece_start:piece_end]
        if not run:
            continue
        if not _NEEDS_NORMALIZER.search(run):
            tokens += [_classify(text, k) for k in range(piece_start, piece_end)]
        else:
            for span_start, span_end, said in _normalized_tokens(run, piece_start, normalizer):
                if said is None:
                    tokens += [_classify(text, k) for k in range(span_start, span_end)]
                else:
                    tokens += _rewrite_tokens(span_start, span_end, said)
        piece_start = piece_end
    return tokens


# -- tidy and render -------------------------------------------------------------------


def _tidy(tokens: list[_Token]) -> tuple[list[_Token], list[_Token]]:
    """(kept tokens, dropped tokens): one pause per run of marks, no stray blanks.

    A run of marks and blanks between two words keeps its strongest mark ("。。。" and
    "！？" become one stop, "，。" a stop); marks before the first word are dropped.
    A run of blanks survives as one blank, and only between a word or kept mark and
    the next word. A gap ("-" in "well-known") is the blank it stands for when kept.
    """
    kept: list[_Token] = []
    dropped: list[_Token] = []
    pause: _Token | None = None
    blank: _Token | None = None
    seen_word = False

    def drop(token: _Token, reason: str = REASON_PUNCTUATION) -> None:
        if token.kind is _Kind.DROPPED:
            dropped.append(token)
        else:
            dropped.append(_dropped(token.start, token.end, reason))

    def keep_pause(token: _Token) -> None:
        if token.reason == REASON_PAUSE:  # a symbol said as a pause: report the symbol
            dropped.append(_dropped(token.start, token.end, REASON_PAUSE))
            token = _Token(token.end, token.end, token.kind)
        kept.append(token)

    for token in tokens:
        kind = token.kind
        if kind is _Kind.DROPPED:
            dropped.append(token)
        elif kind is _Kind.BLANK or kind is _Kind.GAP:
            if blank is None:
                blank = token
            elif kind is _Kind.GAP:
                drop(token)
        elif kind is _Kind.WORD or kind is _Kind.TAG:
            if pause is not None:
                keep_pause(pause)
            if seen_word and blank is not None:
                kept.append(blank)
            elif blank is not None and blank.kind is _Kind.GAP:
                drop(blank)
            kept.append(token)
            seen_word = True
            pause = blank = None
        elif not seen_word:
            drop(token)
        elif pause is None or _PAUSE_STRENGTH[kind] > _PAUSE_STRENGTH[pause.kind]:
            if pause is not None:
                drop(pause)
            if blank is not None and blank.kind is _Kind.GAP:
                drop(blank)
            pause, blank = token, None  # no blank before a mark
        else:
            drop(token)
    if pause is not None:
        keep_pause(pause)
    if blank is not None and blank.kind is _Kind.GAP:
        drop(blank)
    return kept, dropped


# ChatTTS's own language guess (Normalizer._detect_language): in "zh" text it turns
# ASCII ",." into "，。", so the marks are written the way it would leave them.
_CJK_CHAR = re.compile(r"[\u4e00-\u9fff]")
_ENGLISH_WORD = re.compile(r"\b[A-Za-z]+\b")
# A spelled acronym ("G P T" for "GPT-4o") is one word, not one a letter: counted
# letter by letter it outvotes a short Chinese clause (GPT-4o很强 said with ".").
_SPELLED_LETTER = re.compile(r"(?<![A-Za-z])([A-Z]) (?=[A-Z](?![A-Za-z]))")
_ZH_MARKS = {_Kind.ENUMERATION: "、", _Kind.COMMA: "，", _Kind.STOP: "。"}
_EN_MARKS = {_Kind.ENUMERATION: "、", _Kind.COMMA: ",", _Kind.STOP: "."}


def _render(text: str, kept: list[_Token]) -> list[Piece]:
    # Detected on the spoken text as ChatTTS would see it (marks and tags as breaks).
    words = "".join(token.text if token.kind is _Kind.WORD else " " for token in kept)
    words = _SPELLED_LETTER.sub(r"\1", words)
    is_chinese = len(_CJK_CHAR.findall(words)) > len(_ENGLISH_WORD.findall(words))
    marks = _ZH_MARKS if is_chinese else _EN_MARKS
    pieces: list[Piece] = []
    for token in kept:
        if token.kind in (_Kind.WORD, _Kind.TAG):
            said = token.text
        elif token.kind in (_Kind.BLANK, _Kind.GAP):
            said = " "
        else:
            said = marks[token.kind]
        source = text[token.start : token.end]
        last = pieces[-1] if pieces else None
        if (
            last is not None
            and source == said
            and last.source == last.spoken
            and last.end == token.start
            and last.end > last.start
        ):
            pieces[-1] = Piece(last.start, token.end, last.source + source, last.spoken + said)
        else:
            pieces.append(Piece(token.start, token.end, source, said))
    return pieces


def _removals(text: str, tokens: list[_Token]) -> tuple[Removal, ...]:
    """Dropped non-blank characters as runs of adjacent source characters, by reason."""
    runs: list[list[object]] = []  # [start, end, reason]
    for token in sorted(tokens, key=lambda token: token.start):
        for i in range(token.start, token.end):
            if text[i].isspace():
                continue
            if runs and runs[-1][1] == i and runs[-1][2] == token.reason:
                runs[-1][1] = i + 1
            else:
                runs.append([i, i + 1, token.reason])
    return tuple(
        Removal(int(str(start)), text[int(str(start)) : int(str(end))], str(reason))
        for start, end, reason in runs
    )


def prepare_text(
    text: str, *, normalizer: Normalizer | None = None, allow_tags: bool = False
) -> PreparedText:
    """Prepare one segment for ChatTTS: what it can say, and what it cannot.

    ``spoken`` holds only :data:`SPOKEN_CHARSET` (and, with ``allow_tags``, control
    tags) and is a fixed point of ChatTTS's normaliser (its homophone replacement
    aside); it is "" when nothing in the text can be said. Every non-blank character
    of ``text`` is in exactly one :class:`Piece` span or one :class:`Removal`.
    ``normalizer`` reads numbers, dates, units and symbols (see the module docstring).
    """
    tokens = _tokenize(text, normalizer, allow_tags)
    kept, dropped = _tidy(tokens)
    if not any(token.kind is _Kind.WORD for token in kept):
        everything = [
            t if t.kind is _Kind.DROPPED else _dropped(t.start, t.end, _reason_alone(t))
            for t in tokens
        ]
        return PreparedText("", _removals(text, everything))
    pieces = _render(text, kept)
    spoken = "".join(piece.spoken for piece in pieces)
    tags = tuple(token.text for token in kept if token.kind is _Kind.TAG)
    return PreparedText(spoken, _removals(text, dropped), tuple(pieces), tags)


def _reason_alone(token: _Token) -> str:
    """Why a token is dropped when nothing in its segment can be said."""
    if token.kind is _Kind.TAG:
        return REASON_TAG
    if token.kind in _PAUSES:
        return REASON_PUNCTUATION
    return REASON_UNSPEAKABLE


# A Markdown code fence opens or closes at the start of a line.
_CODE_FENCE = re.compile(r"^[ \t]*(?:```|~~~)", re.MULTILINE)
_NON_BLANK_RUN = re.compile(r"\S+")


class CodeFences:
    """Which segments of one text stream are the body of a fenced code block.

    Segments are cut without regard to fences, so a block spans several; feed every
    segment of the stream in order to :meth:`is_code`. A segment holding a fence line is
    left to :func:`prepare_text` (which drops the fence markup); one wholly between an
    opening and a closing fence is code, which is not read aloud.
    """

    def __init__(self) -> None:
        self._open = False

    def is_code(self, text: str) -> bool:
        fences = len(_CODE_FENCE.findall(text))
        body = self._open and fences == 0
        if fences % 2:
            self._open = not self._open
        return body


def code_body(text: str) -> PreparedText:
    """A segment inside a code block: nothing spoken, every non-blank run reported as code."""
    return PreparedText(
        "", tuple(Removal(m.start(), m.group(), REASON_CODE) for m in _NON_BLANK_RUN.finditer(text))
    )
