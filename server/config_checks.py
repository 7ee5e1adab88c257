"""What cannot work: a setting out of its declared bounds or choices, settings that
cannot work together, a lexicon file that cannot be read; refused at start-up in one
line that names each setting's flag and variable (:func:`refusal`)."""

from __future__ import annotations

import re

from server.config import Settings
from server.declaration import bound_problems, choice_problems, specs
from streaming.text import Lexicon, LexiconError

__all__ = ["lexicon_problems", "refusal", "validate"]


#: A setting's name in a problem: any name with an underscore, or a one-word name that
#: starts the problem or follows "needs" ("gpt_cache static needs decoder ours").
_SETTING_NAME = re.compile(r"(?:^|(?<=needs ))[a-z]+\b|\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")


def refusal(problems: list[str]) -> str:
    """The start-up refusal for ``problems`` (each naming settings by field name), each
    followed by the flag and the variable of every setting it names."""
    by_name = {spec.name: spec for spec in specs(Settings)}
    named_problems = []
    for problem in problems:
        names = dict.fromkeys(m.group() for m in _SETTING_NAME.finditer(problem))
        named = [by_name[n] for n in names if n in by_name]
        if named and "--" not in problem:  # a problem that names its flags stays as it is
            problem += " (" + "; ".join(f"{spec.flag}, {spec.env}" for spec in named) + ")"
        named_problems.append(problem)
    return "invalid settings: " + "; ".join(named_problems)


def validate(settings: Settings) -> None:
    """Refuse settings that cannot work, with a message naming the setting.

    The ChatTTS settings check themselves when they are built (:class:`ChatTTSSettings`).
    """
    problems = choice_problems(settings) + bound_problems(settings)
    problems += _combination_problems(settings)
    if problems:
        raise SystemExit(refusal(problems))


def _combination_problems(settings: Settings) -> list[str]:
    """What is wrong with settings together (bounds and choices are declared)."""
    problems = []
    if settings.engine == "chattts" and settings.model_dir is None:
        problems.append("engine chattts needs --model-dir (or TTS_MODEL_DIR)")
    chattts = settings.chattts
    batching = settings.max_batch > 1 and chattts.decoder == "ours"
    if batching and chattts.gpt_cache == "static":
        problems.append(
            "gpt_cache static is the unbatched decoder's cache, and max_batch above 1 turns "
            "batching on, whose decoder keeps its own cache: set max_batch 1 for the static "
            "cache (and cuda_graphs), or keep batching and leave gpt_cache dynamic "
            "(batch_cuda_graphs is batching's CUDA-graph option)"
        )
    if batching and chattts.gpt_cache_tokens <= chattts.max_new_token:
        problems.append(
            f"gpt_cache_tokens must exceed max_new_token with max_batch above 1 (a batch row "
            f"holds a segment's prompt and its {chattts.max_new_token} new tokens)"
        )
    if settings.voices_store is not None and not settings.voices_store.startswith(
        ("redis://", "rediss://", "unix://")
    ):
        problems.append("voices_store must be a redis://, rediss:// or unix:// URL")
    if settings.lexicon is not None:
        problems += lexicon_problems(settings)
    return problems


def lexicon_problems(settings: Settings) -> list[str]:
    """What is wrong with the lexicon file (the first bad line, named), if anything."""
    assert settings.lexicon is not None
    try:
        text = settings.lexicon.read_text(encoding="utf-8")
        Lexicon.parse(text, source=str(settings.lexicon), limits=settings.lexicon_limits)
    except (OSError, UnicodeDecodeError) as exc:
        return [f"lexicon: cannot read {settings.lexicon}: {exc} (--lexicon, TTS_LEXICON)"]
    except LexiconError as exc:
        return [f"lexicon: {exc} (--lexicon, TTS_LEXICON)"]
    return []
