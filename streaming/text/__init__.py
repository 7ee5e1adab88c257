"""What of a segment is spoken: the text the engine is given, and what was dropped.

ChatTTS 0.2.5 (``ChatTTS/norm.py``) keeps only ``[\\u4e00-\\u9fffA-Za-z，。、,. ]``: it
maps a few marks to a comma or a stop and silently deletes everything else, digits
included (``我有3个苹果`` is said ``我有个苹果``). :func:`prepare_text` turns a segment
into text made only of that set (plus control tags, when allowed), so the engine's own
normaliser finds nothing to change, and accounts for every input character: each one
is either spoken (as itself, or as part of a rewritten span such as ``12.5`` ->
``十二点五``) or reported in a :class:`Removal` with its position and a reason.

The stages, one module each:

1. span rules, in order (first claim wins; :mod:`.spans` is what they are given, the
   order is ``prepare._SPAN_RULES``): control tags, the user's lexicon (:mod:`.lexicon`),
   Markdown and list numbers (:mod:`.markup`), inline LaTeX (:mod:`.mathtext`), URLs
   and e-mail, tokens with a dot (:mod:`.dotted`), years, dates, times and scores
   (:mod:`.dates`), digit strings (:mod:`.codes`: phones, codes, model numbers,
   labels), money and percentages (:mod:`.amounts`), and numbers with their units and
   measure words (:mod:`.quantities`), each read by :mod:`.readings` (二 or 两 by
   grammar) with the tables of :mod:`.tables`;
2. the text normaliser (injected: WeNet's WeTextProcessing in the server, see
   ``server/textnorm.py``) on each remaining run that holds a digit or a symbol, its
   output aligned back to the input (:mod:`.align`);
3. character rules (:mod:`.tokens`): acronyms spelled out, symbols read (``&`` -> ``和``,
   :mod:`.tables`), accents folded, marks mapped to ChatTTS's pauses, the rest dropped;
4. one pause per run of marks, the spoken pieces, the removals (:mod:`.render`).

Without a normaliser (``normalizer=None``) digits are dropped and reported, as ChatTTS
would drop them silently; the server always passes one.
"""

from __future__ import annotations

from streaming.text.lexicon import Entry, Lexicon, LexiconError, LexiconSettings
from streaming.text.markup import CONTROL_TAG
from streaming.text.prepare import (
    SPOKEN_CHARSET,
    CodeFences,
    code_body,
    needs_normalizer,
    prepare_text,
    strip_tags,
)
from streaming.text.spans import Normalizer
from streaming.text.tokens import (
    REASON_CODE,
    REASON_PAUSE,
    Piece,
    PreparedText,
    Removal,
)

__all__ = [
    "CONTROL_TAG",
    "REASON_CODE",
    "REASON_PAUSE",
    "SPOKEN_CHARSET",
    "CodeFences",
    "Entry",
    "Lexicon",
    "LexiconError",
    "LexiconSettings",
    "Normalizer",
    "Piece",
    "PreparedText",
    "Removal",
    "code_body",
    "needs_normalizer",
    "prepare_text",
    "strip_tags",
]
