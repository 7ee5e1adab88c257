"""How the engine's scheduler starts segments and steps them (docs/settings.md, group engine)."""

from __future__ import annotations

from dataclasses import dataclass

from server.declaration import bound_problems, option

__all__ = ["SchedulingSettings"]


@dataclass(frozen=True)
class SchedulingSettings:
    """Prompts of joining segments between two steps, and the steps of an engine that
    does not batch (server.runtime.scheduler, server.engines.interleave)."""

    prefills_per_step: int = option(
        8,
        "batching: prompts of joining segments run between two steps at most; more than "
        "one only while they and the step take less than the audio a step makes, or, run "
        "together, while each adds little to their forward",
        group="engine",
        gt=0,
    )
    prefill_together: bool = option(
        True,
        "batching: the prompts joining in one round run as one forward, padded to the "
        "longest (8 prompts: a fifth of the operations a GPU launches for 8 forwards); "
        "false: a forward each",
        group="engine",
    )
    interleave_slice_ms: float = option(
        1.0,
        "an engine that does not batch (espeak): a step takes one segment's chunks while "
        "it has run less than this, so ready audio goes in one round (0: a chunk a step)",
        group="engine",
        ge=0,
        le=100,
    )

    def __post_init__(self) -> None:
        problems = bound_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
