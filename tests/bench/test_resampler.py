"""bench/resampler.py runs (its smoke mode, as a subprocess) and reports its figures."""

from __future__ import annotations

from tests.bench.smoke import ONE_THREAD, assert_all_finite, figure, run_bench


def test_smoke_run_times_both_products_and_finds_ours_independent_of_the_cuts() -> None:
    report = run_bench("resampler.py", "--smoke", env=ONE_THREAD)
    assert_all_finite(report)
    assert (report["bench"], report["smoke"]) == ("resampler", True)
    assert set(report["figures"]) == {"16000", "8000", "48000"}
    for rate in report["figures"]:
        assert figure(report, f"figures.{rate}.float64_samples_differing") == 0
        # The float32 product's count depends on the BLAS (here tens of thousands): any.
        assert figure(report, f"figures.{rate}.float32_samples_differing") >= 0
        for product in ("float64", "float32"):
            for chunks in ("40ms", "1000ms"):
                assert figure(report, f"figures.{rate}.{product}_{chunks}_cpu_ms_per_s") > 0
