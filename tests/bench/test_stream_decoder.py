"""bench/stream_decoder.py runs (its smoke mode, as a subprocess) and reports every figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.smoke import ONE_THREAD, assert_all_finite, figure, run_bench


@pytest.mark.slow
def test_smoke_run_reports_every_comparison(tiny_checkpoint: Path) -> None:
    """First audio, whole-utterance cost, vocoder work, seams, KV caches and ONNX, measured."""
    report = run_bench(
        "stream_decoder.py", "--smoke", "--checkpoint", str(tiny_checkpoint), env=ONE_THREAD
    )
    assert_all_finite(report)
    assert (report["bench"], report["smoke"], report["checkpoint"]) == (
        "stream_decoder",
        True,
        "tiny",
    )
    # Our first chunk is first_chunk_steps in; ChatTTS's stream holds back 72 steps.
    assert figure(report, "first_audio.ours_steps") == report["settings"]["first_chunk_steps"]
    assert figure(report, "first_audio.chattts_stream_steps") == 72
    for name in ("chattts_stream_s", "ours_s", "ratio_time"):
        assert figure(report, f"first_audio.{name}") > 0
    length = report["lengths"]["1s"]
    assert length["same_length_as_one_shot"] is True
    for name in ("chattts_infer_s", "ours_stream_s", "ratio", "ours_decoded_per_emitted_frame",
                 "snr_db_vs_one_shot", "ours_seams.step_ratio_max", "chattts_stream.total_s",
                 "chattts_stream.seams.flux_ratio_median",
                 "context_sweep.generated_decoder.left_24_lookahead_8.snr_db"):  # fmt: skip
        assert figure(length, name) > 0, name
    for cache in ("dynamic", "static"):
        assert figure(report, f"gpt_cache.{cache}.ms_per_step") > 0
        assert report["gpt_cache"][cache]["same_tokens_as_dynamic"] is True
    assert figure(report, "onnx.torch_ms") > 0 and figure(report, "onnx.onnxruntime_ms") > 0
    assert figure(report, "onnx.snr_db_onnx_vs_torch") > 60
