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
        "an engine that does not batch (espeak; ChatTTS with --max-batch 1 or --decoder "
        "chattts): a step goes on with the same segment's next chunks while it has run less "
        "than this, so audio made at once (espeak's, after its synthesis) is handed over in "
        "one more round, not one per 100 ms chunk; a step runs at most one chunk past it, "
        "and the other segments wait that much longer for their turn (0: one chunk a step)",
        group="engine",
        ge=0,
        le=100,
    )

    def __post_init__(self) -> None:
        problems = bound_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
