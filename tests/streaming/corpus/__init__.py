"""The corpus's rows (the ``*.tsv`` files here) and how they are read and scored:
:mod:`harness.corpus`, which the benchmarks share."""

from __future__ import annotations

from harness.corpus import CORPUS_DIR, Row, heard, is_heard_right, load

__all__ = ["CORPUS_DIR", "Row", "heard", "is_heard_right", "load"]
