"""Seam measures: is the audio at chunk joins rougher than the audio inside chunks?

Two measures, each reported as the join figure over the median inside chunks (1.0: a
join looks like any other place; a click scores far above 1):

- sample step: ``|x[j] - x[j-1]|`` at the first sample ``j`` of each chunk, against the
  median of ``|x[n] - x[n-1]|`` over all other samples;
- spectral flux: the L2 distance between the log-magnitude spectrum of the STFT frame
  centred on the join and that of the frame half a frame earlier, against the median
  of the same distance over all frame pairs half a frame apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["SeamReport", "measure_seams"]


@dataclass(frozen=True)
class SeamReport:
    """Join figures relative to the median inside chunks (see the module docstring)."""

    joins: int
    step_ratio_median: float
    step_ratio_max: float
    flux_ratio_median: float
    flux_ratio_max: float


def measure_seams(
    audio: np.ndarray, join_samples: Sequence[int], *, frame_samples: int = 512
) -> SeamReport:
    """Measure ``audio`` at ``join_samples`` (first sample index of each chunk after the first).

    Joins too close to either end for a full STFT frame each side are skipped for flux.
    """
    x = np.asarray(audio, dtype=np.float64)
    joins = sorted(j for j in join_samples if 0 < j < x.size)
    if not joins:
        return SeamReport(0, float("nan"), float("nan"), float("nan"), float("nan"))
    steps = np.abs(np.diff(x))  # steps[n - 1] is the step into sample n
    inside = np.ones(steps.size, dtype=bool)
    inside[np.asarray(joins) - 1] = False
    step_ref = float(np.median(steps[inside])) or 1e-12
    join_steps = steps[np.asarray(joins) - 1] / step_ref

    hop = frame_samples // 2
    window = np.hanning(frame_samples)
    starts = np.arange(0, x.size - frame_samples + 1, hop)

    def log_spectrum(start: int) -> np.ndarray:
        spectrum = np.abs(np.fft.rfft(x[start : start + frame_samples] * window))
        result: np.ndarray = np.log(spectrum + 1e-6)
        return result

    spectra = np.stack([log_spectrum(int(s)) for s in starts]) if starts.size >= 2 else None
    flux_ratios: list[float] = []
    if spectra is not None:
        flux = np.linalg.norm(np.diff(spectra, axis=0), axis=1)
        flux_ref = float(np.median(flux)) or 1e-12
        for j in joins:
            if j - frame_samples < 0 or j + hop > x.size:
                continue
            across = np.linalg.norm(log_spectrum(j - hop) - log_spectrum(j - frame_samples))
            flux_ratios.append(float(across) / flux_ref)
    flux_arr = np.asarray(flux_ratios) if flux_ratios else np.asarray([float("nan")])
    return SeamReport(
        joins=len(joins),
        step_ratio_median=float(np.median(join_steps)),
        step_ratio_max=float(np.max(join_steps)),
        flux_ratio_median=float(np.median(flux_arr)),
        flux_ratio_max=float(np.max(flux_arr)),
    )
