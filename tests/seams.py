"""Seam measures for tests: :mod:`harness.seams`, which the benchmarks share."""

from __future__ import annotations

from harness.seams import SeamReport, measure_seams

__all__ = ["SeamReport", "measure_seams"]
