"""bench/gpu_batch.py runs (its smoke mode, as a subprocess): on the CPU here, on CUDA where
there is a GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.bench.smoke import ONE_THREAD, ROOT, assert_all_finite, figure, run_bench

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(
                not torch.cuda.is_available(), reason="no CUDA device: the CPU run covers the logic"
            ),
        ],
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_smoke_run_ramps_the_batch_and_derives_a_capacity(
    tiny_checkpoint: Path, device: str
) -> None:
    """Each batch size is timed (memory too on CUDA), then the admission capacity follows."""
    report = run_bench(
        "gpu_batch.py", "--smoke", "--device", device, "--checkpoint", str(tiny_checkpoint),
        env=ONE_THREAD,
    )  # fmt: skip
    assert_all_finite(report)
    assert (report["bench"], report["smoke"]) == ("gpu_batch", True)
    dtypes = ["float32", "bfloat16"] if device == "cuda" else ["float32"]
    assert [key for key in report if key in ("float32", "bfloat16")] == dtypes
    for dtype in dtypes:
        ramp = report[dtype]
        assert list(ramp["by_batch"]) == ["1", "2"]
        for size in ("1", "2"):
            for name in (
                "step_ms",
                "vocoder_ms_per_audio_s",
                "realtime_streams",
                "ttfa_estimate_ms",
            ):
                assert figure(ramp, f"by_batch.{size}.{name}") > 0
            assert ("memory_mb" in ramp["by_batch"][size]) == (device == "cuda")
        assert isinstance(ramp["capacity_streams"], int) and ramp["capacity_streams"] >= 0
        assert figure(ramp, "ttfa_ms_at_capacity") > 0
        assert list(ramp["prompts"]) == ["1", "2"]  # joining rows started, both ways
        for size in ("1", "2"):
            for name in ("alone_ms", "together_ms", "ratio"):
                assert figure(ramp, f"prompts.{size}.{name}") > 0


def test_without_cuda_it_says_so_and_how_to_run_anyway() -> None:
    """Asked for CUDA where there is none, it exits 3 with one line naming the way out."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = subprocess.run(
        [sys.executable, "bench/gpu_batch.py"], cwd=ROOT, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 3
    assert "no CUDA device" in done.stdout and "--device cpu" in done.stdout
