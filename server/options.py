"""How a setting is declared: once, as a dataclass field with its help and group.

:func:`option` is a ``dataclasses.field`` whose metadata carries the help text, the group
it is listed under and, for a closed set of values, its choices. Everything else about a
setting is derived from that one declaration by :func:`specs`: its command-line flag
(``--max-new-token`` for ``max_new_token``), its environment variable
(``TTS_MAX_NEW_TOKEN``), how a string becomes its value (from the field's type), and its
line in ``docs/settings.md`` (:func:`reference_markdown`). A field holding another
options dataclass (``Settings.chattts``) contributes that class's settings, under the
same flat names.

``python -m server.config`` prints docs/settings.md.
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
    "OptionSpec",
    "choice_problems",
    "nested",
    "option",
    "parse_bool",
    "reference_markdown",
    "specs",
]

#: Groups in the order ``--help`` and the docs list them, with their titles.
GROUPS: dict[str, str] = {
    "server": "server: where and how it listens",
    "engine": "engine: which voice, on what, and what happens when it fails",
    "chattts": "ChatTTS: sampling, streaming decoder, precision, KV cache",
    "connections": "connections: how many, how long they may wait, idle or drain",
    "limits": "limits: what one client may ask for, and how long work may take",
    "audio": "audio: segmentation, frames and segment joins",
    "text": "text: what is read aloud",
    "cache": "cache: phrases spoken before",
    "observability": "observability: logs and metrics",
}


def option(
    default: Any,
    help: str,
    *,
    group: str,
    choices: tuple[str, ...] | None = None,
    cli: bool = True,
) -> Any:
    """Declare a setting: its default, one line of help, its group, maybe its choices.

    ``cli=False`` keeps it off the command line and the environment (values set only by
    code: tests, benchmarks).
    """
    if group not in GROUPS:
        raise ValueError(f"unknown option group {group!r}")
    metadata = {"help": help, "group": group, "choices": choices, "cli": cli}
    return dataclasses.field(default=default, metadata=metadata)


def nested(cls: type) -> Any:
    """A field holding another options dataclass; its settings keep their own names."""
    return dataclasses.field(default_factory=cls, metadata={"nested": True})


def parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {value!r}")


@dataclass(frozen=True)
class OptionSpec:
    """One setting as the command line, the environment and the docs see it."""

    name: str
    #: Attribute path from the root settings object, e.g. ("chattts", "temperature").
    path: tuple[str, ...]
    parse: Callable[[str], Any]
    default: Any
    help: str
    group: str
    choices: tuple[str, ...] | None

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


def specs(cls: type, path: tuple[str, ...] = ()) -> Iterator[OptionSpec]:
    """Every command-line setting of the options dataclass ``cls``, in declaration order."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if field.metadata.get("nested"):
            yield from specs(hints[field.name], (*path, field.name))
            continue
        if not field.metadata.get("cli", False):
            continue
        yield OptionSpec(
            name=field.name,
            path=(*path, field.name),
            parse=_parser(hints[field.name]),
            default=field.default,
            help=field.metadata["help"],
            group=field.metadata["group"],
            choices=field.metadata["choices"],
        )


def choice_problems(options: Any) -> list[str]:
    """A problem for each field of ``options`` (a dataclass) whose value is not a choice."""
    problems = []
    for field in dataclasses.fields(options):
        choices = field.metadata.get("choices")
        value = getattr(options, field.name)
        if choices and value not in choices:
            listed = ", ".join(choices[:-1]) + " or " + choices[-1]
            problems.append(f"{field.name} must be {listed}, not {value!r}")
    return problems


def reference_markdown(cls: type) -> str:
    """docs/settings.md: every setting with its flag, variable, default and help, by group."""
    lines = [
        "# Settings",
        "",
        "Every setting is a flag of `chattts-stream serve` and a `TTS_*` environment variable",
        "(flags win over the environment, which wins over the default). This page is generated",
        "from the declarations in `server/config.py` and `server/engines/*/options.py`",
        "(`.venv/bin/python -m server.config > docs/settings.md`); a test keeps it current.",
        "Tokens are not settings here: `--token-file` / `TTS_TOKEN_FILE` and `TTS_TOKENS`.",
        "A `TTS_*` variable that is none of these (a misspelt one) is named in a warning at",
        "start, with the closest setting's variable, and ignored; values are never logged.",
        "Settings that cannot work together stop start-up with one line naming each flag and",
        "variable (`--gpt-cache static` needs `--max-batch 1`).",
    ]
    by_group: dict[str, list[OptionSpec]] = {}
    for spec in specs(cls):
        by_group.setdefault(spec.group, []).append(spec)
    for group, title in GROUPS.items():
        if group not in by_group:
            continue
        lines += ["", f"## {title[0].upper()}{title[1:]}", ""]
        lines += ["| flag | environment | default | meaning |", "| --- | --- | --- | --- |"]
        for spec in by_group[group]:
            meaning = spec.help.replace("|", "\\|")
            if spec.choices:
                meaning += f" (one of: {', '.join(spec.choices)})"
            lines.append(f"| `{spec.flag}` | `{spec.env}` | `{spec.default_text}` | {meaning} |")
    return "\n".join(lines) + "\n"
