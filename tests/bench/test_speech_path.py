"""bench/speech_path.py runs (its smoke mode, as a subprocess) against a git baseline."""

from __future__ import annotations

import pytest

from tests.bench.smoke import assert_all_finite, figure, run_bench


@pytest.mark.slow
def test_smoke_run_measures_an_utterance_here_and_at_the_baseline() -> None:
    """Both trees speak the server_overhead utterance: two segments, 2,130 ms of audio
    (1,680 of tone and the pauses after ， and 。), and each side's CPU is a figure."""
    report = run_bench("speech_path.py", "--smoke", "--baseline", "HEAD")
    assert_all_finite(report)
    assert (report["bench"], report["smoke"], report["baseline"]) == ("speech_path", True, "HEAD")
    assert (report["segments"], report["audio_ms"]) == (2, 2130)
    for side in ("ours", "before"):
        assert figure(report, f"us_per_utterance.{side}.best_us") > 0
        assert figure(report, f"us_per_utterance.{side}.median_us") >= figure(
            report, f"us_per_utterance.{side}.best_us"
        )
    assert figure(report, "ratio_vs_baseline") > 0


def test_a_bad_count_is_refused() -> None:
    with pytest.raises(AssertionError, match="--utterances"):
        run_bench("speech_path.py", "--utterances", "0")
