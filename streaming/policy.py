"""Scheduling policy: which segment the engine works on next. Pure, no clock of its own.

Every job carries a *playback deadline*: the time (``time.monotonic()`` seconds) at which
its listener's playback reaches the start of its audio; a stream that has not started
playing, or whose listener already ran dry, is due now. Each piece of audio the engine
makes for a job pushes its deadline later by that audio's duration. The engine serves
earliest deadline first (EDF): a new stream's first audio comes after one chunk of the
others, and a stream with seconds of audio buffered yields to one about to run dry.
Ties go to the job submitted first.

An engine that batches advances many utterances in one step. Then the policy also
decides which rows step (:func:`plan_step`): all of them, since a batch shares most of a
step's cost, except that rows already far ahead of their listener sit out while any
row is close to running dry, so that under overload the streams nearest to an underrun
(new ones waiting for their first audio among them) get the faster, smaller steps.
:class:`StepCosts` learns what a step costs by batch size, and :func:`capacity` turns that
into how many real-time streams the engine can carry: the number admission control
holds new contexts to. :class:`PromptCosts` learns what a forward of joining rows' prompts
costs by how many it holds, and so whether more prompts ride along nearly free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

__all__ = [
    "STEPS_PER_AUDIO_SECOND",
    "BatchSettings",
    "PromptCosts",
    "Scheduled",
    "StepCosts",
    "capacity",
    "first_by",
    "most_urgent",
    "plan_step",
    "planned_step",
    "playback_deadline",
    "seat",
    "slack",
    "urgency",
]

#: GPT steps per second of ChatTTS audio (24 kHz, 2 mel frames of 256 samples a step):
#: a stream is real time while it gets this many steps a second.
STEPS_PER_AUDIO_SECOND = 46.875


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


def first_by(items: Sequence[T], n: int, key: Callable[[T], tuple[float, int]]) -> list[T]:
    """``sorted(items, key=key)[:n]``; for one, a pass instead of a sort (an engine that
    does not batch steps one row at a time out of every row it has open: 113 against
    231 us for 1,000 rows)."""
    if n == 1:
        return [min(items, key=key)] if items else []
    return sorted(items, key=key)[:n]


def seat(waiting: list[T], active: int, limit: int) -> list[T]:
    """Take the jobs that get a row now out of ``waiting``, most urgent first.

    ``active`` jobs are in flight and at most ``limit`` may be; ``waiting`` keeps the rest.
    With no room nothing is looked at (the engine thread asks every round; while its
    rows are full the queue need not be sorted).
    """
    room = max(0, limit - active)
    if not room or not waiting:
        return []
    chosen = sorted(waiting, key=urgency)[:room]
    for job in chosen:
        waiting.remove(job)
    return chosen


def most_urgent(active: Sequence[T], sample_rate_hz: int) -> T:
    """The job in flight whose listener needs audio soonest (``active`` is not empty)."""
    return min(active, key=lambda job: urgency(job, sample_rate_hz))


def slack(job: Scheduled, now_s: float, sample_rate_hz: int) -> float:
    """Seconds of audio the job's listener has left before it needs this job's next audio."""
    return urgency(job, sample_rate_hz)[0] - now_s


@dataclass(frozen=True)
class BatchSettings:
    """How a batching engine's rows are seated, prefilled and stepped."""

    #: Most utterances in one step (and in the engine's KV cache).
    max_batch: int = 16
    #: Prompts run between two steps at most: a joining utterance stalls the others
    #: for at most this many prefills.
    prefills_per_step: int = 1
    #: Those prompts run as one forward (a batcher with ``prefill_many``), not one each.
    prefill_together: bool = False
    #: A row with this much audio ahead of its listener sits out while another is
    #: closer to running dry (0: every row steps every time).
    sit_out_ahead_s: float = 2.0
    #: A row with less audio ahead than this hurries: its next chunk is cut as soon as a
    #: minimal one is ready (growing chunks would otherwise outrun a loaded engine).
    hurry_below_s: float = 1.0

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.prefills_per_step < 1:
            raise ValueError("max_batch and prefills_per_step must be at least 1")
        if self.sit_out_ahead_s < 0 or self.hurry_below_s < 0:
            raise ValueError("sit_out_ahead_s and hurry_below_s must not be negative")

    def hurries(self, row: Scheduled, now_s: float, sample_rate_hz: int) -> bool:
        """Whether ``row``'s listener is short enough of audio to take its next chunk early."""
        return slack(row, now_s, sample_rate_hz) < self.hurry_below_s


def plan_step(
    rows: Sequence[T], now_s: float, sample_rate_hz: int, policy: BatchSettings
) -> list[T]:
    """The rows to advance in the next batched step, most urgent first.

    Every row steps while none is within ``sit_out_ahead_s`` of running dry, or when
    sitting out is off; otherwise the rows that far ahead wait for this step.
    """
    return planned_step(rows, now_s, sample_rate_hz, policy)[0]


def planned_step(
    rows: Sequence[T], now_s: float, sample_rate_hz: int, policy: BatchSettings
) -> tuple[list[T], list[bool]]:
    """:func:`plan_step`'s rows and, for each, whether it hurries
    (:meth:`BatchSettings.hurries`), each row's urgency worked out once: a step of a few
    hundred rows asked for it three times a row (the order, sitting out, hurrying), a
    Python call each, on the engine thread under the GIL."""
    # (when its next audio is due, submission order, index): ties keep the input's order
    # as the sort by urgency does.
    keyed = sorted(
        (row.deadline + row.samples / sample_rate_hz, row.order, index)
        for index, row in enumerate(rows)
    )[: policy.max_batch]
    if policy.sit_out_ahead_s > 0:  # slack(row) = due - now, as slack() has it
        keyed = [key for key in keyed if key[0] - now_s < policy.sit_out_ahead_s] or keyed
    return [rows[key[2]] for key in keyed], [key[0] - now_s < policy.hurry_below_s for key in keyed]


@dataclass
class StepCosts:
    """What one step costs, learnt by batch size (an EMA of seconds per size), and how
    much audio a row gets from a step (the running mean over every row-step).

    :meth:`estimate` fits ``a + b * batch`` through the sizes seen (least squares, both
    terms kept non-negative); with one size seen, it assumes no saving from batching
    beyond it (cost proportional to the batch), which errs towards refusing. Until a
    step has made audio, a row-step is taken to make one GPT step's worth
    (:data:`STEPS_PER_AUDIO_SECOND`). The fit is made once per observation, not per
    estimate: admission and the scheduler ask for estimates far more often than steps
    end.
    """

    smoothing: float = 0.1
    seconds: dict[int, float] = field(default_factory=dict)
    samples: dict[int, int] = field(default_factory=dict)
    audio_s: float = 0.0
    row_steps: int = 0
    #: Work and audio summed over recent steps, each step's weight falling by ``decay``
    #: per step after it: the real-time factor of an engine whose steps differ widely
    #: (one long step, then many short ones), where an average of step costs misleads.
    decay: float = 0.999
    work_s: float = 0.0
    made_s: float = 0.0
    #: Audio to have seen before :meth:`rtf` is trusted.
    min_audio_s: float = 2.0
    #: Steps observed; the fitted line below is the one for this count.
    observations: int = 0
    _line: tuple[int, float, float, int] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def observe(self, batch: int, seconds: float, audio_s: float | None = None) -> None:
        """A step of ``batch`` rows took ``seconds`` and made ``audio_s`` of audio in all."""
        old = self.seconds.get(batch)
        self.seconds[batch] = seconds if old is None else old + self.smoothing * (seconds - old)
        self.samples[batch] = self.samples.get(batch, 0) + 1
        self.observations += 1
        if audio_s is not None:
            self.audio_s += audio_s
            self.row_steps += batch
            self.work_s = self.work_s * self.decay + seconds
            self.made_s = self.made_s * self.decay + audio_s

    def rtf(self) -> float | None:
        """Seconds of work per second of audio made, over recent steps; None until
        ``min_audio_s`` of audio has been seen."""
        if self.audio_s < self.min_audio_s or self.made_s <= 0:
            return None
        return self.work_s / self.made_s

    def audio_per_row_step(self) -> float:
        """Seconds of audio one row gets from one step."""
        if self.audio_s <= 0 or not self.row_steps:
            return 1 / STEPS_PER_AUDIO_SECOND
        return self.audio_s / self.row_steps

    def estimate(self, batch: int) -> float | None:
        """Seconds per step at ``batch``; None before any step was seen."""
        line = self._line
        if line is None or line[0] != self.observations:
            line = self._fit()
            if line is None:
                return None
        _, intercept, slope, only_size = line
        if only_size:  # one size seen: cost in proportion above it
            return intercept * max(1.0, batch / only_size)
        return intercept + slope * batch

    def _fit(self) -> tuple[int, float, float, int] | None:
        """``(observations, intercept, slope, only_size)``: the least-squares line through
        the sizes seen, or with one size, ``(…, its cost, 0, the size)``. Kept until the
        next observation (one taken while fitting makes the kept line stale: refitted at
        the next estimate)."""
        seen = self.observations
        points = sorted(self.seconds.items())
        if not points:
            return None
        if len(points) == 1:
            ((size, cost),) = points
            line = (seen, cost, 0.0, size)
        else:
            n = len(points)
            mean_b = sum(b for b, _ in points) / n
            mean_t = sum(t for _, t in points) / n
            var = sum((b - mean_b) ** 2 for b, _ in points)
            slope = max(0.0, sum((b - mean_b) * (t - mean_t) for b, t in points) / var)
            line = (seen, max(0.0, mean_t - slope * mean_b), slope, 0)
        self._line = line
        return line


@dataclass
class PromptCosts:
    """What a forward of joining rows' prompts costs by how many prompts it holds, and
    so what one more prompt adds.

    Each size keeps one figure: a forward faster than it lowers it at once, a slower one
    raises it by ``rise`` of the difference. Noise in a busy host's timings (waits for
    the GIL or for a core) only ever adds time, so a size's figure stays near what its
    forwards cost with little noise, where judging from single forwards reads that noise
    as prompts costing milliseconds; forwards that really became dearer (longer prompts,
    a CPU engine) still show in it from the first. A size not seen in ``memory`` forwards
    is forgotten: a stale figure (a cold first forward, prompts that were dearer) cannot
    hold the forwards' size where it is, and a size known to no figure is probed anew.
    """

    rise: float = 0.25
    memory: int = 8
    seconds: dict[int, float] = field(default_factory=dict)
    #: The forward count at which each size was last seen.
    seen: dict[int, int] = field(default_factory=dict)
    forwards: int = 0

    def observe(self, size: int, seconds: float) -> None:
        """A forward of ``size`` prompts took ``seconds``."""
        self.forwards += 1
        for stale in [n for n, at in self.seen.items() if self.forwards - at > self.memory]:
            del self.seconds[stale], self.seen[stale]
        old = self.seconds.get(size)
        self.seconds[size] = (
            seconds if old is None or seconds < old else old + self.rise * (seconds - old)
        )
        self.seen[size] = self.forwards

    def per_prompt(self, size: int) -> float | None:
        """Seconds one more prompt adds to a forward of ``size``: the slope to the nearest
        smaller size known or, where that does not rise (its figure stale), to the nearest
        larger one; None while ``size`` is the only one known."""
        here = self.seconds.get(size)
        if here is None:
            return None
        smaller = max((n for n in self.seconds if n < size), default=None)
        larger = min((n for n in self.seconds if n > size), default=None)
        if smaller is not None:
            slope = (here - self.seconds[smaller]) / (size - smaller)
            if slope > 0 or larger is None:
                return max(0.0, slope)
        if larger is not None:
            return max(0.0, (self.seconds[larger] - here) / (larger - size))
        return None

    def ride_along(self, size: int, share: float) -> bool:
        """Whether doubling a forward of ``size`` prompts adds at most ``share`` of its
        fixed cost (what it costs less its prompts); unknown yet: yes, a probe."""
        per_prompt = self.per_prompt(size)
        if per_prompt is None:
            return True
        fixed_s = max(0.0, self.seconds[size] - per_prompt * (size - 1))
        return per_prompt * size <= share * fixed_s


def capacity(
    costs: StepCosts, max_batch: int, headroom: float = 0.8, *, time_shared: bool = False
) -> int | None:
    """How many real-time streams the engine carries (0 when not even one); None before
    enough was measured.

    A batching engine keeps a row in every step until its segment ends, so it carries
    the largest batch whose step makes a row's audio in ``headroom`` of that audio's
    duration. A ``time_shared`` engine (one that does not batch: its segments take turns,
    a chunk at a time) carries as many streams as its throughput allows: ``headroom``
    over its real-time factor, however many segments that takes (a fast engine serves
    many more streams than it has segments in flight).
    """
    if time_shared:
        rtf = costs.rtf()
        if rtf is None:
            return None
        return int(headroom / rtf) if rtf > 0 else None
    if costs.estimate(1) is None:
        return None
    budget = headroom * costs.audio_per_row_step()
    # A step's estimated cost never falls as the batch grows, so the batches within
    # budget are 1..best: found by bisection, not by trying every size.
    low, high = 0, max_batch  # low fits (0 trivially); above high is out of range
    while low < high:
        middle = (low + high + 1) // 2
        cost = costs.estimate(middle)
        if cost is not None and cost <= budget:
            low = middle
        else:
            high = middle - 1
    return low
