"""bench/capacity.py runs (its smoke mode, as a subprocess) and reports its figures."""

from __future__ import annotations

import pytest

from tests.bench.smoke import figure, run_bench

pytestmark = pytest.mark.live


def test_smoke_run_reports_each_design_with_the_gpu_preset() -> None:
    """At most two streams: every design's server started, its trials ran and a capacity
    is reported, on the gpu preset's modelled step."""
    report = run_bench("capacity.py", "--smoke", "--prefill-ms", "1.5")
    assert (report["bench"], report["smoke"], report["engine"]) == ("capacity", True, "modelled")
    assert figure(report, "a_ms") > 0 and figure(report, "b_ms") > 0
    assert report["prefill_ms"] == 1.5
    assert set(report["capacity"]) == {"seed", "interleave", "batched"}
    assert {trial["design"] for trial in report["trials"]} == set(report["capacity"])
    assert all(0 <= n <= 2 for n in report["capacity"].values())
    for trial in report["trials"]:  # each side's CPU, to tell which one ran out of core
        # The server's comes from /proc in 10 ms ticks: a trial of two streams may read none.
        assert trial["server_cpu_ms_per_stream"] >= 0 and trial["client_cpu_ms_per_stream"] > 0
        assert 0 <= trial["server_cores"] <= 2 and 0 < trial["client_cores"] <= 2
        # and how late each side's event loop ran at worst (the server's from its metric)
        assert 0 < trial["server_loop_lag_max_ms"] <= 5000  # some tick fell due in it
        assert isinstance(trial["server_loop_ticks_over_50ms"], int)
        assert trial["client_loop_ticks"] > 0  # the clients' timer ran through the trial
        assert 0 <= trial["client_loop_lag_max_ms"] <= trial["seconds"] * 1000
        if trial["design"] != "seed":  # streams on WebSockets: how long each took to open
            assert 0 < trial["setup_ms_p50"] <= trial["setup_ms_max"] <= trial["seconds"] * 1000
        else:
            assert trial["setup_ms_p50"] is trial["setup_ms_max"] is None
    assert sum(trial["server_cpu_ms_per_stream"] for trial in report["trials"]) > 0
    # The batched design's joining segments' prompts went in forwards of one or two.
    batched = [trial for trial in report["trials"] if trial["design"] == "batched"]
    assert batched and all(1 <= trial["prompts_a_forward"] <= 2 for trial in batched)
    for trial in batched:  # the engine stepped and prefilled during each trial
        steps, forwards = trial["engine_steps_a_second"], trial["engine_forwards_a_second"]
        assert steps > 0 and forwards > 0
        # Each forward is followed by its round's step (one round may straddle a reading).
        assert forwards * trial["seconds"] <= steps * trial["seconds"] + 1.5


def test_worst_loop_lag_is_the_bucket_of_the_latest_tick() -> None:
    """Between two readings of the server's histogram: the bucket its latest tick fell
    in, and the ticks later than 50 ms; none late, none ticked, and past the last bound."""
    from harness.bench_server import loop_lag_buckets, worst_loop_lag

    def page(counts: dict[str, int]) -> str:
        return "\n".join(
            f'tts_event_loop_lag_seconds_bucket{{le="{le}"}} {n}.0' for le, n in counts.items()
        )

    before = loop_lag_buckets(page({"0.002": 5, "0.05": 5, "0.2": 5, "+Inf": 5}))
    assert before == {0.002: 5.0, 0.05: 5.0, 0.2: 5.0, float("inf"): 5.0}
    after = loop_lag_buckets(page({"0.002": 12, "0.05": 14, "0.2": 16, "+Inf": 16}))
    assert worst_loop_lag(before, after) == (0.2, 2)
    assert worst_loop_lag(before, before) == (0.0, 0)
    quick = loop_lag_buckets(page({"0.002": 9, "0.05": 9, "0.2": 9, "+Inf": 9}))
    assert worst_loop_lag(before, quick) == (0.002, 0)
    stuck = loop_lag_buckets(page({"0.002": 5, "0.05": 5, "0.2": 5, "+Inf": 6}))
    assert worst_loop_lag(before, stuck) == (float("inf"), 1)


def test_a_histograms_totals_and_the_prompts_a_forward() -> None:
    """A histogram's sum and count read from a /metrics page (zeros when absent), and the
    prompts a forward between two pages (none without a forward between them)."""
    from harness.bench_server import histogram_totals, prompts_a_forward, sample_value

    def page(total: float, count: float) -> str:
        return (
            'tts_engine_prefill_rows_bucket{le="1.0"} 3.0\n'
            f"tts_engine_prefill_rows_sum {total}\n"
            f"tts_engine_prefill_rows_count {count}\n"
            "tts_engine_prefill_rows_created 1.7e+09\n"
            "tts_engine_steps_total 12.0\n"
        )

    assert histogram_totals(page(14.0, 5.0), "tts_engine_prefill_rows") == (14.0, 5.0)
    assert histogram_totals(page(14.0, 5.0), "tts_engine_step_seconds") == (0.0, 0.0)
    assert sample_value(page(14.0, 5.0), "tts_engine_steps_total") == 12.0
    assert sample_value(page(14.0, 5.0), "tts_engine_steps") == 0.0  # a prefix is not a name
    assert prompts_a_forward(page(14.0, 5.0), page(46.0, 9.0)) == 8.0
    assert prompts_a_forward(page(14.0, 5.0), page(14.0, 5.0)) is None
