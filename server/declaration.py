"""How a setting is declared: once, as a dataclass field with its help, group, bounds.

:func:`option` is a ``dataclasses.field`` whose metadata carries the help text, the group
it is listed under, for a number the values it may take (``gt``, ``ge``, ``le``: above,
at least, at most; a bound may name another setting of the same bundle) and, for a closed
set of values, its choices. Everything else about a setting is derived from that one
declaration by :func:`specs`: its command-line flag (``--max-new-token`` for
``max_new_token``), its environment variable (``TTS_MAX_NEW_TOKEN``), how a string
becomes its value (from the field's type), its line in ``docs/settings.md``
(:mod:`server.config_reference`), and the refusal of a value out of its bounds
(:func:`bound_problems`). A field holding another bundle of settings
(``Settings.chattts``) contributes that bundle's settings, under the same flat names.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "GROUPS",
    "Bounds",
    "SettingSpec",
    "bound_problems",
    "choice_problems",
    "nested",
    "option",
    "parse_bool",
    "specs",
]

#: Groups in the order ``--help`` and the docs list them, with their titles.
GROUPS: dict[str, str] = {
    "server": "server: where and how it listens",
    "engine": "engine: which voice, on what, and what happens when it fails",
    "voices": "voices: where named voices are kept (a folder, or Redis for a fleet)",
    "chattts": "ChatTTS: sampling, streaming decoder, precision, KV cache",
    "connections": "connections: how many, how long they may wait, idle or drain",
    "limits": "limits: what one client may ask for, and how long work may take",
    "audio": "audio: segmentation, frames and segment joins",
    "text": "text: what is read aloud",
    "cache": "cache: phrases spoken before",
    "observability": "observability: logs and metrics",
}


#: A bound: a number, or the name of another setting of the same bundle.
Bound = float | str | None


@dataclass(frozen=True)
class Bounds:
    """The values a numeric setting may take: above ``gt``, at least ``ge``, at most
    ``le``; ``zero`` says what 0 means where it means something (" (0: never)")."""

    gt: Bound = None
    ge: Bound = None
    le: Bound = None
    zero: str = ""

    def problem(self, name: str, value: float, settings: Any) -> str | None:
        """Why ``value`` is out of bounds for setting ``name`` (None: it is not)."""
        gt, ge, le = (_bound_value(b, settings) for b in (self.gt, self.ge, self.le))
        if (
            (gt is None or value > gt)
            and (ge is None or value >= ge)
            and (le is None or value <= le)
        ):
            return None
        return f"{name} must {self.text()}"

    def text(self) -> str:
        """What the bounds ask for, in words ("be positive", "be between 1 and 8")."""
        if self.le is not None and self.gt is not None:
            return f"be in ({_shown(self.gt)}, {_shown(self.le)}]"
        if self.le is not None:
            low = "" if self.ge is None else f"between {_shown(self.ge)} and "
            return f"be {low or 'at most '}{_shown(self.le)}"
        if self.gt == 0:
            return "be positive"
        if self.gt is not None:
            return f"be above {_shown(self.gt)}"
        if self.ge == 0:
            return f"not be negative{self.zero}"
        return f"be at least {_shown(self.ge)}"


def _bound_value(bound: Bound, settings: Any) -> float | None:
    return getattr(settings, bound) if isinstance(bound, str) else bound


def _shown(bound: Bound) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def option(
    default: Any,
    help: str,
    *,
    group: str,
    choices: tuple[str, ...] | None = None,
    cli: bool = True,
    gt: Bound = None,
    ge: Bound = None,
    le: Bound = None,
    zero: str = "",
) -> Any:
    """Declare a setting: its default, one line of help, its group, for a number its
    bounds (``gt``: above, ``ge``: at least, ``le``: at most, each a number or another
    setting's name; ``zero``: what 0 means, for the refusal), maybe its choices.

    ``cli=False`` keeps it off the command line and the environment (values set only by
    code: tests, benchmarks).
    """
    if group not in GROUPS:
        raise ValueError(f"unknown option group {group!r}")
    bounds = Bounds(gt, ge, le, zero) if (gt, ge, le) != (None, None, None) else None
    metadata = {"help": help, "group": group, "choices": choices, "cli": cli, "bounds": bounds}
    return dataclasses.field(default=default, metadata=metadata)


def nested(cls: type) -> Any:
    """A field holding another bundle of settings; its settings keep their own names."""
    return dataclasses.field(default_factory=cls, metadata={"nested": True})


def parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {value!r}")


@dataclass(frozen=True)
class SettingSpec:
    """One setting as the command line, the environment and the docs see it."""

    name: str
    #: Attribute path from the root settings object, e.g. ("chattts", "temperature").
    path: tuple[str, ...]
    parse: Callable[[str], Any]
    default: Any
    help: str
    group: str
    choices: tuple[str, ...] | None
    #: The values a number may take (None: not a number).
    bounds: Bounds | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "TTS_" + self.name.upper()

    @property
    def default_text(self) -> str:
        """The default as it is written in a flag or a variable."""
        if self.default is None:
            return "none"
        if isinstance(self.default, bool):
            return str(self.default).lower()
        return str(self.default)

    @property
    def metavar(self) -> str | None:
        if self.parse is parse_bool:
            return "BOOL"
        if self.choices:
            return "{" + ",".join(self.choices) + "}"
        return {int: "N", float: "X", Path: "PATH"}.get(self.parse, "TEXT")  # type: ignore[call-overload]


def _parser(annotation: Any) -> Callable[[str], Any]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"cannot parse a setting of type {annotation!r}")
        annotation = args[0]
    if annotation is bool:
        return parse_bool
    if annotation in (str, int, float, Path):
        parse: Callable[[str], Any] = annotation
        return parse
    raise TypeError(f"cannot parse a setting of type {annotation!r}")


def specs(cls: type, path: tuple[str, ...] = ()) -> Iterator[SettingSpec]:
    """Every command-line setting of the settings dataclass ``cls``, in declaration order."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if field.metadata.get("nested"):
            yield from specs(hints[field.name], (*path, field.name))
            continue
        if not field.metadata.get("cli", False):
            continue
        yield SettingSpec(
            name=field.name,
            path=(*path, field.name),
            parse=_parser(hints[field.name]),
            default=field.default,
            help=field.metadata["help"],
            group=field.metadata["group"],
            choices=field.metadata["choices"],
            bounds=field.metadata["bounds"],
        )


def choice_problems(settings: Any) -> list[str]:
    """A problem for each field of ``settings`` (a dataclass) whose value is not a choice."""
    problems = []
    for field in dataclasses.fields(settings):
        choices = field.metadata.get("choices")
        value = getattr(settings, field.name)
        if choices and value not in choices:
            listed = ", ".join(choices[:-1]) + " or " + choices[-1]
            problems.append(f"{field.name} must be {listed}, not {value!r}")
    return problems


def bound_problems(settings: Any) -> list[str]:
    """A problem for each field of ``settings`` (a dataclass) out of its bounds."""
    problems = []
    for field in dataclasses.fields(settings):
        bounds = field.metadata.get("bounds")
        if bounds is not None:
            problem = bounds.problem(field.name, getattr(settings, field.name), settings)
            if problem is not None:
                problems.append(problem)
    return problems
