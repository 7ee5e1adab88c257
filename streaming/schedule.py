"""Scheduling policy: which segment the engine works on next. Pure, no clock of its own.

Every job carries a *playback deadline*: the time (``time.monotonic()`` seconds) at which
its listener's playback reaches the start of its audio; a stream that has not started
playing, or whose listener already ran dry, is due now. Each piece of audio the engine
makes for a job pushes its deadline later by that audio's duration. The engine serves
earliest deadline first (EDF): a new stream's first audio comes after one chunk of the
others, and a stream with seconds of audio buffered yields to one about to run dry.
Ties go to the job submitted first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

__all__ = ["Scheduled", "admit", "most_urgent", "playback_deadline", "urgency"]


class Scheduled(Protocol):
    """What the policy reads of a job."""

    @property
    def deadline(self) -> float:
        """When playback reaches the job's first sample (monotonic seconds)."""
        ...

    @property
    def samples(self) -> int:
        """Samples the engine has made for it so far."""
        ...

    @property
    def order(self) -> int:
        """Submission order, for ties."""
        ...


T = TypeVar("T", bound=Scheduled)


def playback_deadline(
    now_s: float, playback_started_s: float | None, samples_sent: int, sample_rate_hz: int
) -> float:
    """When a real-time player of a stream runs out of the audio sent so far.

    Assumes playback started with the first frame (``playback_started_s``) and never
    stalled; a stream that has not started, or whose listener already ran dry, is due
    ``now_s``.
    """
    if playback_started_s is None:
        return now_s
    return max(now_s, playback_started_s + samples_sent / sample_rate_hz)


def urgency(job: Scheduled, sample_rate_hz: int | None = None) -> tuple[float, int]:
    """Sort key: when playback needs the job's next audio, then submission order.

    Without ``sample_rate_hz`` the audio made so far is not counted (a job not started).
    """
    produced_s = job.samples / sample_rate_hz if sample_rate_hz else 0.0
    return (job.deadline + produced_s, job.order)


def admit(waiting: list[T], active: int, limit: int) -> list[T]:
    """Take the jobs to start now out of ``waiting``, most urgent first.

    ``active`` jobs are in flight and at most ``limit`` may be; ``waiting`` keeps the rest.
    """
    room = max(0, limit - active)
    chosen = sorted(waiting, key=urgency)[:room]
    for job in chosen:
        waiting.remove(job)
    return chosen


def most_urgent(active: Sequence[T], sample_rate_hz: int) -> T:
    """The job in flight whose listener needs audio soonest (``active`` is not empty)."""
    return min(active, key=lambda job: urgency(job, sample_rate_hz))
