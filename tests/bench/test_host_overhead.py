"""bench/host_overhead.py runs (its smoke mode, as a subprocess) and reports its figures."""

from __future__ import annotations

import pytest

from tests.bench.smoke import bench_module, figure, run_bench


def test_smoke_run_reports_step_costs_reads_and_projections() -> None:
    """On the checkpoint with ChatTTS's layer counts: the new step and the old one timed
    per batch size, one device read per new step against one per row before, the fitted
    costs and the projected GPU streams."""
    report = run_bench("host_overhead.py", "--smoke")
    assert (report["bench"], report["smoke"]) == ("host_overhead", True)
    assert (report["gpt_layers"], report["hidden"]) == (20, 64)
    new, old = report["batched"], report["legacy"]
    assert set(new["by_batch"]) == set(old["by_batch"]) == {"1", "4"}
    for row in [*new["by_batch"].values(), *old["by_batch"].values()]:
        assert figure(row, "cpu_ms") > 0 and figure(row, "wall_ms") > 0
    assert report["reads_per_step"] == new["reads_per_step"] == 1
    assert [old["by_batch"][n]["reads_per_step"] for n in ("1", "4")] == [1, 4]
    assert figure(report, "a_ms") > 0 and figure(report, "gpu_host_a_ms") > 0
    # The projection is the one its fitted host costs give: the report rounds them (a to
    # 3 decimals, b to 4, the operations to 1 and 2), so it lies between the projections
    # of the dearest and the cheapest costs that round so. How many streams that is
    # depends on this machine's speed and load.
    bench = bench_module("host_overhead.py")
    (a, b), (ops_a, ops_b) = new["gpu_host_eager_fit_ms"], new["ops_fit"]
    budget = bench.REALTIME_STEP_MS
    fewest = bench.projected_streams(a + 5e-4, b + 5e-5, (ops_a + 0.05, ops_b + 5e-3), budget)
    most = bench.projected_streams(a - 5e-4, b - 5e-5, (ops_a - 0.05, ops_b - 5e-3), budget)
    assert fewest <= report["projected_streams"] <= most and report["profile_ms"]
    # Four prompts in one forward dispatch far fewer operations than four forwards; one
    # prompt the same either way.
    prefill = report["prefill"]
    assert set(prefill) == {"1", "4"}
    assert prefill["1"]["together_ops"] == prefill["1"]["alone_ops"] > 0
    assert prefill["4"]["together_ops"] < prefill["4"]["alone_ops"] / 2
    assert figure(prefill["4"], "together_cpu_ms") > 0 and figure(prefill["4"], "ratio") > 0


@pytest.mark.parametrize(("a_ms", "b_ms"), [(2.0, 0.01), (0.5, 0.002), (15.0, 0.1), (25.0, 0.0)])
def test_the_projection_is_the_largest_batch_whose_step_fits(a_ms: float, b_ms: float) -> None:
    """The projected streams: the largest batch whose host step (``a + b * n``) and
    modelled device step together fit the budget; none when even one does not."""
    bench = bench_module("host_overhead.py")
    ops, budget = (1340.0, 0.5), bench.REALTIME_STEP_MS

    def step_ms(n: int) -> float:
        return a_ms + b_ms * n + bench.device_ms(n, ops)

    n = bench.projected_streams(a_ms, b_ms, ops, budget)
    assert n == 0 or step_ms(n) <= budget
    assert step_ms(n + 1) > budget
    assert (n == 0) is (a_ms > 20)
