"""Fenced code blocks span segments: their bodies are reported as code, not read aloud."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.segment import Segmenter
from streaming.text import REASON_CODE, CodeFences, code_body

TEXT = "说明如下：\n```python\nprint(1)\nx = [a for a in b]\n```\n以上就是代码。"


def segments_of(text: str) -> list[str]:
    segmenter = Segmenter()
    return [s.text for s in [*segmenter.push(text), *segmenter.flush()]]


def test_segments_between_fences_are_code() -> None:
    """Only the segments wholly between an opening and a closing fence are code."""
    fences = CodeFences()
    marks = [(text.strip(), fences.is_code(text)) for text in segments_of(TEXT)]
    assert marks == [
        ("说明如下：", False),
        ("```python", False),
        ("print(1)", True),
        ("x = [a for a in b]", True),
        ("```", False),
        ("以上就是代码。", False),
    ]


@pytest.mark.parametrize(
    ("segments", "expected"),
    [
        (["a", "b"], [False, False]),
        (["```", "code", "```", "prose"], [False, True, False, False]),
        (["~~~", "code", "~~~", "prose"], [False, True, False, False]),
        (["```", "code"], [False, True]),  # an unclosed block runs to the end
        (["```\n```", "prose"], [False, False]),  # opened and closed in one segment
        (["text ``` inline", "prose"], [False, False]),  # not at a line start
    ],
)
def test_fence_table(segments: list[str], expected: list[bool]) -> None:
    """Fences count only at a line start; an even number in one segment leaves the state."""
    fences = CodeFences()
    assert [fences.is_code(text) for text in segments] == expected


@given(st.text(alphabet=st.sampled_from("ab [](){}=中文 \t\n"), max_size=60))
def test_code_body_reports_every_non_blank_character(text: str) -> None:
    """A code segment speaks nothing and reports each non-blank character once, as code."""
    prepared = code_body(text)
    assert prepared.spoken == ""
    assert all(r.reason == REASON_CODE for r in prepared.removed)
    assert "".join(r.chars for r in prepared.removed) == "".join(text.split())
    assert all(text[r.start : r.start + len(r.chars)] == r.chars for r in prepared.removed)
