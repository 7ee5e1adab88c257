"""How the engine worker runs its engine: the settings' engine group, as one object."""

from __future__ import annotations

from dataclasses import dataclass, field

from streaming.policy import BatchSettings

__all__ = ["WorkerSettings"]


@dataclass(frozen=True)
class WorkerSettings:
    """How the engine worker runs its engine (from the settings' engine group)."""

    warm_up: bool = True
    #: After this long without work the engine frees cached memory.
    idle_release_s: float = 60.0
    #: Segments in flight at once on an engine that interleaves (not streams: a stream
    #: has one segment in flight at a time, and fast engines finish theirs in moments).
    max_active: int = 8
    #: The batching policy; max_batch 1 turns batching off (segments interleave).
    policy: BatchSettings = field(default_factory=lambda: BatchSettings(max_batch=1))
    #: Fraction of the engine's measured capacity that admission fills.
    headroom: float = 0.8
    #: Work in flight with no progress for this long means the engine is stuck (0: never).
    stall_timeout_s: float = 30.0
    #: One wake-up of a busy event loop for several rounds' audio (runtime.jobs.Handoff).
    coalesce_wakeups: bool = True
    #: An engine that does not batch: a step takes the same segment's chunks while it
    #: has run less than this (server.engines.interleave; 0: one chunk a step).
    interleave_slice_s: float = 0.001
