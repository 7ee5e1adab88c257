"""Prefills between two steps: beyond the first (up to prefills_per_step), only while
they and the step take less than the audio a step makes."""

from __future__ import annotations

import asyncio

import pytest

from server.engines.base import SynthesisRequest, VoiceSpec
from server.engines.modelled import ModelledEngine
from server.metrics import Metrics
from server.runtime.fallback import FallbackVoice
from server.runtime.jobs import Handoff, Job
from server.runtime.scheduler import Scheduler
from streaming.policy import BatchSettings, StepCosts

RATE_HZ = 24_000


class _Stub:
    name = "none"
    sample_rate_hz = RATE_HZ


def _round(prefill_s: float, step_s: float, prefills_per_step: int) -> tuple[int, int]:
    """A scheduler over a modelled engine: two rows speaking (their steps measured), then
    six joining at once; (rows prefilled by the next round, rows prefilled in all)."""
    loop = asyncio.new_event_loop()
    try:
        engine = ModelledEngine(step_a_s=step_s, step_b_s=0.0, prefill_s=prefill_s)
        batcher = engine.batcher(16)
        assert batcher is not None
        metrics, handoff = Metrics(), Handoff()
        scheduler = Scheduler(
            batcher,
            max_rows=16,
            rate_hz=RATE_HZ,
            policy=BatchSettings(max_batch=16, prefills_per_step=prefills_per_step),
            costs=StepCosts(),
            metrics=metrics,
            handoff=handoff,
            fallback=FallbackVoice(None, _Stub(), metrics, handoff),  # type: ignore[arg-type]
            progress=lambda: None,
        )
        request = SynthesisRequest("一句很长的话，说了很久很久。" * 4, VoiceSpec(seed=1))

        def add(order: int) -> None:
            job = Job(request, loop, handoff, deadline=0.0, order=order, playing=False,
                      on_end=lambda job: None)  # fmt: skip
            scheduler.add(job)

        for order in range(2):
            add(order)
        for _ in range(4):  # both prefilled (one a round at most here), then steps measured
            scheduler.run_once()
        speaking = sum(row.prefilled for row in scheduler.active.values())
        assert speaking == 2
        for order in range(2, 8):
            add(order)
        scheduler.run_once()
        return sum(row.prefilled for row in scheduler.active.values()) - speaking, speaking
    finally:
        loop.close()


def test_cheap_prefills_beside_a_short_step_join_together() -> None:
    """Steps of 2 ms and prefills of 0.5 ms (a step makes 21.3 ms of audio): every
    joining row that prefills_per_step allows is prefilled in one round."""
    joined, _ = _round(prefill_s=0.0005, step_s=0.002, prefills_per_step=4)
    assert joined == 4


def test_prefills_stop_where_the_round_would_outlast_a_steps_audio() -> None:
    """Steps of 1 ms and prefills of 8 ms (or more: sleeps overshoot on a busy machine):
    a round of the step and two prefills fits in 21.3 ms, a third never does, whatever
    prefills_per_step allows."""
    joined, _ = _round(prefill_s=0.008, step_s=0.001, prefills_per_step=6)
    assert 1 <= joined <= 2


@pytest.mark.parametrize("prefills_per_step", [1, 4])
def test_the_first_prefill_always_runs(prefills_per_step: int) -> None:
    """A prefill longer than a step's audio: still one joining row a round, never none."""
    joined, _ = _round(prefill_s=0.03, step_s=0.002, prefills_per_step=prefills_per_step)
    assert joined == 1
