"""The text-normalisation library's output aligned back to the input it was given.

The library (WeNet's WeTextProcessing in the server) returns text without an alignment,
so its output is aligned with :class:`difflib.SequenceMatcher`: unchanged characters
keep their positions, changed spans become rewrites of the input span they replace.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Sequence

from streaming.text.spans import Normalizer

_CJK_ONLY = re.compile(r"[\u4e00-\u9fff\s]*")
# Equal runs this short between two changes are taken into the change (the library
# reorders "50km/h" into "每小时五十公里"), so no input character looks deleted.
_MAX_ABSORBED_EQUAL = 2

_Op = tuple[str, int, int, int, int]


def normalized_spans(
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
    ops = _attach_insertions(_merge_changes(run, matcher.get_opcodes()))
    for tag, i1, i2, j1, j2 in ops:
        source = run[i1:i2]
        # A same-length or shorter change of ideographs is the library simplifying or
        # deleting them; a longer one carries a reading moved there (keep it).
        if tag == "equal" or (_CJK_ONLY.fullmatch(source) and j2 - j1 <= i2 - i1):
            yield offset + i1, offset + i2, None
        else:
            yield offset + i1, offset + i2, said[j1:j2]


def _merge_changes(run: str, opcodes: Sequence[tuple[str, int, int, int, int]]) -> list[_Op]:
    """Adjacent changes as one, and short equal runs between changes taken into them."""
    ops: list[_Op] = []
    for op in opcodes:
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
    return ops


def _attach_insertions(ops: list[_Op]) -> list[_Op]:
    """Give each pure insertion a source: the neighbouring input character it reads."""
    out: list[_Op] = []
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
