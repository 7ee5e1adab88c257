"""The scheduling policy: playback deadlines, urgency, admission, the next job to advance."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from streaming.schedule import admit, most_urgent, playback_deadline, urgency

RATE = 24_000


@dataclass
class Job:
    name: str
    deadline: float
    samples: int = 0
    order: int = 0


# (now, playback started, samples sent, expected deadline)
DEADLINES = [
    (10.0, None, 0, 10.0),  # not playing yet: due now
    (10.0, 9.0, 48_000, 11.0),  # 2 s sent, 1 s played: 1 s left
    (10.0, 5.0, 24_000, 10.0),  # ran dry 4 s ago: due now, not in the past
    (10.0, 10.0, 0, 10.0),
]


@pytest.mark.parametrize(("now", "started", "sent", "deadline"), DEADLINES)
def test_playback_deadline(now: float, started: float | None, sent: int, deadline: float) -> None:
    """The deadline is when a real-time listener runs out of what was sent, never past now."""
    assert playback_deadline(now, started, sent, RATE) == deadline


def test_urgency_counts_audio_made_and_breaks_ties_by_order() -> None:
    """Audio already made pushes a job's deadline; equal deadlines go to the earlier job."""
    fresh = Job("fresh", deadline=5.0, order=2)
    ahead = Job("ahead", deadline=4.0, samples=2 * RATE, order=1)
    assert urgency(ahead, RATE) == (6.0, 1)
    assert urgency(ahead) == (4.0, 1)  # not started: audio made is not counted
    assert urgency(fresh, RATE) < urgency(ahead, RATE)
    assert urgency(Job("a", 5.0, order=1)) < urgency(Job("b", 5.0, order=2))


# (waiting as (name, deadline, order), active, limit, admitted names, left waiting)
ADMISSIONS = [
    ([("a", 3.0, 0), ("b", 1.0, 1), ("c", 2.0, 2)], 0, 2, ["b", "c"], ["a"]),
    ([("a", 3.0, 0), ("b", 1.0, 1)], 2, 2, [], ["a", "b"]),  # full
    ([("a", 3.0, 0), ("b", 1.0, 1)], 3, 2, [], ["a", "b"]),  # over (limit lowered)
    ([("a", 1.0, 1), ("b", 1.0, 0)], 0, 1, ["b"], ["a"]),  # tie: submitted first
    ([], 0, 8, [], []),
]


@pytest.mark.parametrize(("waiting", "active", "limit", "admitted", "left"), ADMISSIONS)
def test_admission_takes_the_most_urgent_up_to_the_limit(
    waiting: list[tuple[str, float, int]],
    active: int,
    limit: int,
    admitted: list[str],
    left: list[str],
) -> None:
    """Waiting jobs start in urgency order while fewer than ``limit`` are in flight."""
    jobs = [Job(name, deadline, order=order) for name, deadline, order in waiting]
    assert [job.name for job in admit(jobs, active, limit)] == admitted
    assert [job.name for job in jobs] == left


def test_the_stream_closest_to_running_dry_is_advanced() -> None:
    """Of the jobs in flight, the one whose listener needs audio soonest goes next."""
    buffered = Job("buffered", deadline=10.0, samples=3 * RATE, order=0)  # due at 13
    new = Job("new", deadline=11.0, order=1)  # due at 11
    late = Job("late", deadline=10.5, samples=RATE, order=2)  # due at 11.5
    assert most_urgent([buffered, new, late], RATE).name == "new"
