"""bench/host_overhead.py runs (its smoke mode, as a subprocess) and reports its figures."""

from __future__ import annotations

from tests.bench.smoke import figure, run_bench


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
    assert report["projected_streams"] >= 1 and report["profile_ms"]
    # Four prompts in one forward dispatch far fewer operations than four forwards; one
    # prompt the same either way.
    prefill = report["prefill"]
    assert set(prefill) == {"1", "4"}
    assert prefill["1"]["together_ops"] == prefill["1"]["alone_ops"] > 0
    assert prefill["4"]["together_ops"] < prefill["4"]["alone_ops"] / 2
    assert figure(prefill["4"], "together_cpu_ms") > 0 and figure(prefill["4"], "ratio") > 0
