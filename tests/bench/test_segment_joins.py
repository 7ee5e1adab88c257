"""bench/segment_joins.py runs (its smoke mode, as a subprocess) and reports every figure."""

from __future__ import annotations

import pytest

from tests.bench.smoke import ONE_THREAD, assert_all_finite, figure, run_bench


@pytest.mark.slow
def test_smoke_run_measures_plain_and_shaped_joins_for_both_engines() -> None:
    """espeak and ChatTTS, two segments each: shaped joins start and end at exactly zero."""
    report = run_bench("segment_joins.py", "--smoke", env=ONE_THREAD)
    assert_all_finite(report)
    assert (report["bench"], report["smoke"]) == ("segment_joins", True)
    assert [r["engine"] for r in report["results"]] == ["espeak", "chattts"]
    for result in report["results"]:
        assert result["segments"] == 2 and figure(result, "audio_s") > 0
        for way in ("plain", "shaped"):
            for name in ("edge_amplitude_over_rms", "step_ratio_median", "step_ratio_max",
                         "near_join_step_over_p99", "flux_ratio_median"):  # fmt: skip
                figure(result, f"{way}.joins.{name}")
            for name in ("lead_ms_median", "trail_ms_median", "loudness_spread_db"):
                figure(result, f"{way}.{name}")
        shaped = result["shaped"]
        assert shaped["first_and_last_samples_zero"] is True
        assert shaped["joins"]["edge_amplitude_over_rms"] == 0 == shaped["joins"]["step_ratio_max"]
        assert shaped["pauses_ms"] == [150]  # the first segment ends with ，
        assert figure(result, "joiner_cpu_ms_per_audio_s") > 0
    # ChatTTS's stream stops mid-waveform: plainly joined, its segments are cut.
    assert figure(report["results"][1], "plain.joins.edge_amplitude_over_rms") > 0.1
