"""bench/batch_step.py runs (its smoke mode, as a subprocess) and reports its figures."""

from __future__ import annotations

from tests.bench.smoke import figure, run_bench


def test_smoke_run_reports_real_time_streams_per_setting() -> None:
    """On the tiny checkpoint: step cost and real-time streams for float32, the INT8 GPT
    and the INT8 GPT with vocoder, by batch size, and the comparisons."""
    report = run_bench("batch_step.py", "--smoke")
    assert (report["bench"], report["smoke"]) == ("batch_step", True)
    settings = {"float32", "int8", "int8+vocoder"}
    assert set(report["realtime_streams_best"]) == set(report["step_ms"]) == settings
    for setting in settings:
        assert set(report["step_ms"][setting]) == {"1", "2"}
        assert figure(report["realtime_streams_best"], setting) > 0
    assert report["realtime_streams"] == max(report["realtime_streams_best"].values())
    assert 0 < figure(report["int8"], "logit_cosine") <= 1.0001
    assert figure(report["vocoder_batching_ms"], "one_call_ms") > 0
