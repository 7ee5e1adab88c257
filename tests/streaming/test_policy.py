"""The scheduling policy: playback deadlines, urgency, admission, the next job to advance."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from streaming.policy import (
    STEPS_PER_AUDIO_SECOND,
    BatchSettings,
    PromptCosts,
    StepCosts,
    capacity,
    first_by,
    most_urgent,
    plan_step,
    planned_step,
    playback_deadline,
    seat,
    urgency,
)

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
SEATINGS = [
    ([("a", 3.0, 0), ("b", 1.0, 1), ("c", 2.0, 2)], 0, 2, ["b", "c"], ["a"]),
    ([("a", 3.0, 0), ("b", 1.0, 1)], 2, 2, [], ["a", "b"]),  # full
    ([("a", 3.0, 0), ("b", 1.0, 1)], 3, 2, [], ["a", "b"]),  # over (limit lowered)
    ([("a", 1.0, 1), ("b", 1.0, 0)], 0, 1, ["b"], ["a"]),  # tie: submitted first
    ([], 0, 8, [], []),
]


@pytest.mark.parametrize(("waiting", "active", "limit", "seated", "left"), SEATINGS)
def test_seating_takes_the_most_urgent_up_to_the_limit(
    waiting: list[tuple[str, float, int]],
    active: int,
    limit: int,
    seated: list[str],
    left: list[str],
) -> None:
    """Waiting jobs start in urgency order while fewer than ``limit`` are in flight."""
    jobs = [Job(name, deadline, order=order) for name, deadline, order in waiting]
    assert [job.name for job in seat(jobs, active, limit)] == seated
    assert [job.name for job in jobs] == left


def test_the_stream_closest_to_running_dry_is_advanced() -> None:
    """Of the jobs in flight, the one whose listener needs audio soonest goes next."""
    buffered = Job("buffered", deadline=10.0, samples=3 * RATE, order=0)  # due at 13
    new = Job("new", deadline=11.0, order=1)  # due at 11
    late = Job("late", deadline=10.5, samples=RATE, order=2)  # due at 11.5
    assert most_urgent([buffered, new, late], RATE).name == "new"


@dataclass
class Row:
    name: str
    deadline: float
    samples: int = 0
    order: int = 0


def rows(*specs: tuple[str, float, int]) -> list[Row]:
    """(name, deadline, seconds of audio made) each."""
    return [
        Row(name, deadline, seconds * RATE, order)
        for order, (name, deadline, seconds) in enumerate(specs)
    ]


# (rows at now=10, policy, stepped names)
PLANS = [
    # Everyone close to running dry: all step, most urgent first.
    (rows(("a", 10.0, 1), ("b", 10.0, 0), ("c", 10.5, 0)), BatchSettings(), ["b", "c", "a"]),
    # One far ahead (5 s buffered) sits out while another is about to run dry.
    (rows(("ahead", 10.0, 5), ("new", 10.0, 0)), BatchSettings(), ["new"]),
    # Everyone far ahead: all step (a batch shares the cost; nobody waits for it).
    (rows(("a", 10.0, 5), ("b", 10.0, 4)), BatchSettings(), ["b", "a"]),
    # Sitting out off: all step.
    (
        rows(("ahead", 10.0, 5), ("new", 10.0, 0)),
        BatchSettings(sit_out_ahead_s=0),
        ["new", "ahead"],
    ),
    # More rows than the batch: the most urgent max_batch.
    (rows(("a", 12.0, 0), ("b", 10.0, 0), ("c", 11.0, 0)), BatchSettings(max_batch=2), ["b", "c"]),
]


@pytest.mark.parametrize(("candidates", "policy", "stepped"), PLANS)
def test_plan_step(candidates: list[Row], policy: BatchSettings, stepped: list[str]) -> None:
    """Rows near running dry step; rows far ahead sit out only while another is needy."""
    assert [row.name for row in plan_step(candidates, 10.0, RATE, policy)] == stepped


def test_a_new_streams_first_chunk_is_not_starved_by_a_full_batch() -> None:
    """However many streams are buffered well ahead, a new one (due now) steps at once,
    in a batch of only the needy: its first audio does not wait for the others."""
    buffered = [Row(f"r{i}", 10.0, 3 * RATE, i) for i in range(15)]
    plan = plan_step([*buffered, Row("new", 10.0, 0, 99)], 10.0, RATE, BatchSettings(max_batch=16))
    assert [row.name for row in plan] == ["new"]


@pytest.mark.parametrize("seed", range(40))
def test_a_planned_step_is_the_rule_row_by_row(seed: int) -> None:
    """planned_step works each row's urgency out once: its rows are the most urgent
    max_batch (ties in submission order, then as given), less those sitting out, and
    each row's hurry is BatchSettings.hurries, for rows near and far from running dry."""
    rng = random.Random(seed)
    now = 10.0
    candidates = [
        Row(f"r{i}", now + rng.choice([-0.5, 0.0, 0.3, 1.5]), rng.choice([0, 1, 2, 3]) * RATE // 2,
            rng.randrange(8))  # repeated orders: ties
        for i in range(rng.randrange(1, 30))
    ]  # fmt: skip
    policy = BatchSettings(
        max_batch=rng.choice([1, 4, 64]),
        sit_out_ahead_s=rng.choice([0.0, 2.0]),
        hurry_below_s=rng.choice([0.0, 1.0]),
    )
    ordered = sorted(candidates, key=lambda row: urgency(row, RATE))[: policy.max_batch]
    needy = [row for row in ordered if urgency(row, RATE)[0] - now < policy.sit_out_ahead_s]
    expected = needy if policy.sit_out_ahead_s > 0 and needy else ordered
    rows, hurry = planned_step(candidates, now, RATE, policy)
    assert [row.name for row in rows] == [row.name for row in expected]
    assert hurry == [policy.hurries(row, now, RATE) for row in expected]
    assert plan_step(candidates, now, RATE, policy) == rows


def test_step_costs_fit_a_line_and_capacity_follows() -> None:
    """Step cost a + b*batch is learnt from steps seen; capacity is the largest batch that
    keeps 46.875 steps per second within the headroom."""
    costs = StepCosts(smoothing=1.0)
    assert costs.estimate(4) is None and capacity(costs, 64) is None
    costs.observe(1, 0.010 + 0.00015)
    assert costs.estimate(8) == pytest.approx(8 * 0.01015)  # one size: no batching saving assumed
    for batch in (2, 8, 32):
        costs.observe(batch, 0.010 + 0.00015 * batch)
    assert costs.estimate(64) == pytest.approx(0.010 + 0.00015 * 64)
    budget = 0.8 / STEPS_PER_AUDIO_SECOND  # 17.1 ms
    assert capacity(costs, 256) == int((budget - 0.010) / 0.00015)
    assert capacity(costs, 16) == 16  # capped by the batch limit
    slow = StepCosts()
    slow.observe(1, 0.05)
    assert capacity(slow, 16) == 0  # slower than real time even alone


def test_a_time_shared_engines_capacity_is_its_throughput() -> None:
    """An engine that does not batch, with one long step then many short ones per segment
    (the fallback voice): capacity is headroom over the real-time factor of all its work,
    not what the typical (short) step suggests; unmeasured until 2 s of audio were made."""
    costs = StepCosts()
    for _segment in range(20):
        costs.observe(1, 0.020, audio_s=0.1)  # the synthesis, with the first chunk
        for _chunk in range(49):
            costs.observe(1, 0.00002, audio_s=0.1)
    rtf = (0.020 + 49 * 0.00002) / 5.0
    assert costs.rtf() == pytest.approx(rtf, rel=0.05)
    assert capacity(costs, 1, 0.8, time_shared=True) == pytest.approx(0.8 / rtf, rel=0.05)
    early = StepCosts()
    early.observe(1, 0.2, audio_s=0.1)
    assert capacity(early, 1, 0.8, time_shared=True) is None


@pytest.mark.parametrize("n", [1, 2, 5, 50])
def test_first_by_is_the_head_of_the_sorted_rows_ties_in_order(n: int) -> None:
    """One or several, the rows a step takes are those sorting first (ties: the earlier)."""
    jobs = [Job(f"j{i}", deadline=float(i % 3), order=i // 2) for i in range(12)]
    key = lambda job: urgency(job, RATE)  # noqa: E731
    assert first_by(jobs, n, key) == sorted(jobs, key=key)[:n]
    assert first_by([], n, key) == []


def test_an_estimate_follows_every_new_step() -> None:
    """The fitted line is kept between steps, never past one: each observation, a new
    size or a new cost for a size seen, shows in the next estimate."""
    costs = StepCosts(smoothing=1.0)
    costs.observe(1, 0.010)
    assert costs.estimate(4) == pytest.approx(0.040)
    costs.observe(1, 0.020)  # the same size, a new cost
    assert costs.estimate(4) == pytest.approx(0.080)
    costs.observe(8, 0.020)  # a second size: now a line, flat through both
    assert costs.estimate(4) == pytest.approx(0.020)
    costs.observe(8, 0.034)
    assert costs.estimate(15) == pytest.approx(0.020 + 0.002 * 14)


@pytest.mark.parametrize("seed", range(20))
def test_capacity_is_the_largest_batch_within_budget(seed: int) -> None:
    """Capacity by bisection equals trying every batch size, over random step costs."""
    rng = random.Random(seed)
    costs = StepCosts(smoothing=rng.choice([0.1, 1.0]))
    a, b = rng.uniform(0.0, 0.016), rng.uniform(0.0, 0.0005)  # a budget of 16 ms a step
    for _ in range(rng.randint(1, 6)):
        batch = rng.randint(1, 64)
        costs.observe(batch, (a + b * batch) * rng.uniform(0.8, 1.2), 0.02 * batch)
    max_batch = rng.choice([1, 7, 16, 64, 300])
    budget = 0.8 * costs.audio_per_row_step()
    fits = [b for b in range(1, max_batch + 1) if (costs.estimate(b) or 0.0) <= budget]
    assert capacity(costs, max_batch, 0.8) == (max(fits) if fits else 0)


def test_a_prompts_cost_falls_at_once_and_rises_by_a_share() -> None:
    """A faster forward sets its size's figure; a slower one moves it a quarter of the
    way; what a prompt adds is the slope between neighbouring sizes."""
    costs = PromptCosts()
    costs.observe(4, 0.010)
    assert costs.per_prompt(4) is None and costs.ride_along(4, 0.25)  # alone: a probe
    costs.observe(8, 0.018)
    assert costs.per_prompt(8) == pytest.approx(0.002)
    costs.observe(8, 0.010)  # faster: taken at once
    assert costs.seconds[8] == 0.010 and costs.per_prompt(8) == 0.0
    costs.observe(8, 0.014)  # slower: a quarter of the way
    assert costs.seconds[8] == pytest.approx(0.011)
    assert costs.per_prompt(8) == pytest.approx(0.00025)
    # Doubling 8 adds 8 x 0.25 ms = 2 ms of a fixed cost of 9.25 ms: within a quarter.
    assert costs.ride_along(8, 0.25) and not costs.ride_along(8, 0.2)


def test_a_stale_smaller_size_gives_way_to_the_larger_one() -> None:
    """A smaller size dearer than this one (a cold first forward) says nothing of what a
    prompt adds: the slope to the next larger size counts."""
    costs = PromptCosts()
    costs.observe(1, 0.150)  # cold
    costs.observe(2, 0.024)
    assert costs.per_prompt(2) == 0.0  # only a smaller one known, and dearer
    costs.observe(4, 0.048)
    assert costs.per_prompt(2) == pytest.approx(0.012)
    assert not costs.ride_along(2, 0.25)


def test_a_size_not_seen_for_a_while_is_forgotten() -> None:
    """After ``memory`` forwards of other sizes a size's figure is gone: it cannot hold
    the decision, and the size is probed anew."""
    costs = PromptCosts(memory=3)
    costs.observe(2, 0.030)  # prompts were dear then
    for _ in range(3):
        costs.observe(1, 0.010)
    assert costs.per_prompt(1) == pytest.approx(0.020)  # still remembered
    costs.observe(1, 0.010)
    assert 2 not in costs.seconds and costs.per_prompt(1) is None
    assert costs.ride_along(1, 0.25)


def test_a_full_table_seats_nobody_without_looking_at_the_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Asked every engine round: while every row is taken the waiting jobs are not
    sorted (no urgency worked out); once a row frees, the most urgent is seated."""
    import streaming.policy as policy

    looked: list[str] = []

    def counting(job: Job, sample_rate_hz: int | None = None) -> tuple[float, int]:
        looked.append(job.name)
        return urgency(job, sample_rate_hz)

    monkeypatch.setattr(policy, "urgency", counting)
    jobs = [Job(f"j{i}", deadline=float(100 - i), order=i) for i in range(300)]
    assert seat(jobs, 8, 8) == [] and seat(jobs, 9, 8) == []
    assert looked == [] and len(jobs) == 300
    assert [job.name for job in seat(jobs, 7, 8)] == ["j299"]
    assert len(looked) == 300 and len(jobs) == 299
