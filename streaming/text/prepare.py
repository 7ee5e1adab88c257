"""``prepare_text``: the stages in order, from a segment to what the engine is given."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from streaming.punctuation import (
    CJK_CLAUSE_MARKS,
    CJK_SENTENCE_MARKS,
    CLOSERS,
    MARKS,
    OPENERS,
    PAUSE_SYMBOLS,
    STRAIGHT_QUOTES,
)
from streaming.text.align import normalized_spans
from streaming.text.codes import (
    code_rule,
    hotline_rule,
    key_rule,
    label_rule,
    model_rule,
    phone_rule,
    stock_rule,
)
from streaming.text.dates import date_rule, score_rule, time_rule
from streaming.text.dotted import abbreviation_rule, address_number_rule, name_rule
from streaming.text.formulas import formula_rule, subscript_rule
from streaming.text.markup import CONTROL_TAG, address_rule, list_rule, markup_rule, tag_rule
from streaming.text.mathtext import latex_rule, math_rule, operator_rule, product_rule
from streaming.text.numbers import amount_rule, bare_number_rule
from streaming.text.quantities import (
    fraction_rule,
    hyphen_rule,
    number_rule,
    ordinal_rule,
    pair_rule,
    per_rule,
    range_rule,
    unit_rule,
)
from streaming.text.render import reason_alone, removals, render, tidy
from streaming.text.repeats import Code, codes_read, remembered, said_again
from streaming.text.spans import Entries, Normalizer, SpanRule, Spans
from streaming.text.tokens import (
    REASON_CODE,
    RULE_LIBRARY,
    Kind,
    PreparedText,
    Removal,
    Token,
    classify,
    dropped,
    rewrite_tokens,
    spell_acronyms,
    word,
)

RULE_LEXICON = "lexicon"


def lexicon_rule(spans: Spans) -> Iterator[Token]:
    """The user's entries, before every other rule (a written form is said as given)."""
    if spans.lexicon is None:
        return
    for start, end, entry in spans.lexicon.matches(spans.original):
        yield word(start, end, entry.spoken, RULE_LEXICON, entry.origin)


# Exactly ChatTTS's keep set (Normalizer.reject_pattern, negated).
SPOKEN_CHARSET = re.compile(r"[\u4e00-\u9fffA-Za-z，。、,. ]")

# In order: the first rule to claim a character wins it. Math before money ($x$), codes
# before quantities, quantities with a unit or a measure before bare numbers.
_SPAN_RULES: tuple[SpanRule, ...] = (
    tag_rule,
    lexicon_rule,
    key_rule,
    markup_rule,
    latex_rule,
    address_rule,
    list_rule,
    abbreviation_rule,
    address_number_rule,
    formula_rule,
    subscript_rule,
    date_rule,
    time_rule,
    phone_rule,
    code_rule,
    stock_rule,
    hotline_rule,
    name_rule,
    label_rule,
    amount_rule,
    score_rule,
    product_rule,
    model_rule,
    math_rule,
    pair_rule,
    range_rule,
    ordinal_rule,
    unit_rule,
    fraction_rule,
    per_rule,
    hyphen_rule,
    number_rule,
    operator_rule,
)
# Without the library no number is read (digits are dropped and reported), as before.
_BARE_RULES: tuple[SpanRule, ...] = (
    tag_rule,
    lexicon_rule,
    markup_rule,
    address_rule,
    list_rule,
    bare_number_rule,
)
# Prose: CJK characters, blanks and Chinese prose's marks, with no digit, letter or other
# symbol. Of the rules only the user's entries and the named days (双十一) claim any of it;
# every other rule needs a digit, a letter or a symbol, so a prose segment skips them (half
# its cost). tests/streaming/test_text_prose.py tries each rule on prose made of every CJK
# word the rules' modules know: a rule that claims prose belongs here too.
_PROSE = re.compile(r"[\u4e00-\u9fff\s。！？…；，、：“”‘’（）「」『』《》【】—]*")
_PROSE_RULES: tuple[SpanRule, ...] = (lexicon_rule, code_rule)
_BARE_PROSE_RULES: tuple[SpanRule, ...] = (lexicon_rule,)
# Full-width digits and letters as ASCII, and full-width marks between two digits
# (３．１４, １２：３０): one character for one, so offsets stay the same.
_FULLWIDTH = str.maketrans(
    {
        chr(c): chr(c - 0xFEE0)
        for c in (*range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B))
    }
)
_FULLWIDTH_BETWEEN_DIGITS = re.compile(r"(?<=[0-9])[．：／－～，](?=[0-9])")
_MARKS_AS_ASCII = str.maketrans("．：／－～，", ".:/-~,")


# Characters of the previous segment looked at for cue words (the longest cue and its joiners).
_BEFORE_CHARS = 16


def _folded(text: str) -> str:
    folded = text.translate(_FULLWIDTH)
    return _FULLWIDTH_BETWEEN_DIGITS.sub(lambda m: m.group().translate(_MARKS_AS_ASCII), folded)


def strip_tags(text: str) -> str:
    """``text`` without control tags, a tag between two words leaving one blank."""
    stripped = CONTROL_TAG.sub(" ", text)
    return re.sub(r" {2,}", " ", stripped).strip()


def _rules(spans: Spans) -> tuple[SpanRule, ...]:
    """The span rules that may claim something in ``spans`` (in order)."""
    prose = _PROSE.fullmatch(spans.text) is not None
    if spans.normalizer is None:
        return _BARE_PROSE_RULES if prose else _BARE_RULES
    return _PROSE_RULES if prose else _SPAN_RULES


def _tokenize(spans: Spans, earlier: Iterable[Code] = ()) -> tuple[list[Token], tuple[Code, ...]]:
    """Tokens covering text in order (span rules win over the normaliser and characters),
    and the digit strings read digit by digit; a bare number that is one of them, or
    one of ``earlier``'s, is said as it was."""
    text = spans.original
    claimed: dict[int, Token] = {}
    covered = [False] * len(text)
    for rule in _rules(spans):
        for token in rule(spans):
            if token.end <= token.start or any(covered[token.start : token.end]):
                continue
            covered[token.start : token.end] = [True] * (token.end - token.start)
            claimed[token.start] = token
    codes = codes_read(spans.text, sorted(claimed.values(), key=lambda t: t.start))
    said_again(spans.text, claimed, remembered(earlier, codes))
    tokens: list[Token] = []
    i = 0
    while i < len(text):
        if covered[i]:
            token = claimed[i]
            if token.kind is Kind.WORD:
                tokens += rewrite_tokens(
                    token.start, token.end, token.text, token.rule, token.origin
                )
            else:
                tokens.append(token)
            i = token.end
            continue
        j = i
        while j < len(text) and not covered[j]:
            j += 1
        tokens += _plain_tokens(spans.text, i, j, spans.normalizer)
        i = j
    return spell_acronyms(tokens), codes


# Clause and sentence marks split a run before it goes to the normaliser: no reading
# crosses them, and the library's cost grows with the length of what it is given.
# ASCII marks only before a blank: "12:30", "3.5" and "1,000" are the normaliser's.
_CJK_BREAKS = "".join(sorted(CJK_SENTENCE_MARKS | CJK_CLAUSE_MARKS))
_CLAUSE_BREAK = re.compile(rf"[{_CJK_BREAKS}\n]|[,;!?](?=\s)")
# A run needs the normaliser only if it holds a digit or a character outside CJK,
# letters, blanks and punctuation; pure prose skips it (and its cost).
_PUNCTUATION = "".join(sorted(set(MARKS) | OPENERS | CLOSERS | STRAIGHT_QUOTES | PAUSE_SYMBOLS))
_NEEDS_NORMALIZER = re.compile(rf"[^\u4e00-\u9fffA-Za-z\s{re.escape(_PUNCTUATION)}]")


def needs_normalizer(text: str) -> bool:
    """Whether preparing ``text`` may read a number or a symbol (and so wants the library)."""
    return _NEEDS_NORMALIZER.search(text) is not None


_IDEOGRAPHS = re.compile(r"[\u4e00-\u9fff]+")


def _classified(text: str, start: int, end: int) -> list[Token]:
    """The tokens of ``text[start:end]`` character by character (:func:`classify`), but a
    run of ideographs as one word: each is a word of its own, whatever stands beside it,
    and every later stage reads a run of them the same either way."""
    tokens: list[Token] = []
    k = start
    for run in _IDEOGRAPHS.finditer(text, start, end):
        tokens += [classify(text, i) for i in range(k, run.start())]
        tokens.append(word(run.start(), run.end(), run.group()))
        k = run.end()
    tokens += [classify(text, i) for i in range(k, end)]
    return tokens


def _plain_tokens(text: str, start: int, end: int, normalizer: Normalizer | None) -> list[Token]:
    if normalizer is None:
        return _classified(text, start, end)
    tokens: list[Token] = []
    piece_start = start
    breaks = [m.end() for m in _CLAUSE_BREAK.finditer(text, start, end)]
    for piece_end in [*breaks, end]:
        run = text[piece_start:piece_end]
        if not run:
            continue
        if not _NEEDS_NORMALIZER.search(run):
            tokens += _classified(text, piece_start, piece_end)
        else:
            for span_start, span_end, said in normalized_spans(run, piece_start, normalizer):
                if said is None:
                    tokens += _classified(text, span_start, span_end)
                else:
                    tokens += rewrite_tokens(span_start, span_end, said, RULE_LIBRARY)
        piece_start = piece_end
    return tokens


def prepare_text(
    text: str,
    *,
    normalizer: Normalizer | None = None,
    allow_tags: bool = False,
    lexicon: Entries | None = None,
    before: str = "",
    codes: Iterable[Code] = (),
) -> PreparedText:
    """Prepare one segment for ChatTTS: what it can say, and what it cannot.

    ``spoken`` holds only :data:`SPOKEN_CHARSET` (and, with ``allow_tags``, control
    tags) and is a fixed point of ChatTTS's normaliser (its homophone replacement
    aside); it is "" when nothing in the text can be said. Every non-blank character
    of ``text`` is in exactly one :class:`Piece` span or one :class:`Removal`.
    ``normalizer`` reads numbers, dates, units and symbols (see the module docstring);
    ``lexicon``'s entries are applied before any other rule. ``before`` is the text of
    the stream before this segment: a cue word there still tells what a number is
    ("验证码：" then "826491" in the next segment); ``codes`` are the digit strings its
    segments before read digit by digit (their ``PreparedText.codes``): the same number
    bare here is said the same way.
    """
    context = _folded(before[-_BEFORE_CHARS:])
    spans = Spans(_folded(text), text, normalizer, allow_tags, lexicon, context)
    tokens, read = _tokenize(spans, codes)
    kept, dropped_tokens = tidy(tokens)
    if not any(token.kind is Kind.WORD for token in kept):
        everything = [
            t if t.kind is Kind.DROPPED else dropped(t.start, t.end, reason_alone(t))
            for t in tokens
        ]
        return PreparedText("", removals(text, everything), codes=read)
    pieces = render(text, kept)
    spoken = "".join(piece.spoken for piece in pieces)
    tags = tuple(token.text for token in kept if token.kind is Kind.TAG)
    return PreparedText(spoken, removals(text, dropped_tokens), tuple(pieces), tags, read)


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
