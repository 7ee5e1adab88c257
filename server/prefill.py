"""How a batching engine starts the segments that join it (docs/settings.md, group engine)."""

from __future__ import annotations

from dataclasses import dataclass

from server.declaration import bound_problems, option

__all__ = ["PrefillSettings"]


@dataclass(frozen=True)
class PrefillSettings:
    """Prompts of joining segments between two steps (server.runtime.scheduler)."""

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

    def __post_init__(self) -> None:
        problems = bound_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
