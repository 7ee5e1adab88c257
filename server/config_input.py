"""The settings from the command line and the environment: flags over ``TTS_*``
environment variables over defaults, and the bearer tokens (:func:`build_settings`).

Every flag and variable derives from the declarations in :mod:`server.config`; a value
that does not parse, or that cannot work, stops start-up naming its flag and variable
(:mod:`server.config_checks`).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from server.config import Settings
from server.config_checks import refusal, validate
from server.declaration import GROUPS, specs

__all__ = ["add_arguments", "build_settings", "read_token_file", "unknown_variables"]


def read_token_file(path: Path) -> tuple[str, ...]:
    """One token per line; blank lines and lines starting with '#' are ignored."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return tuple(
        line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")
    )


def add_arguments(parser: argparse.ArgumentParser, only: Collection[str] | None = None) -> None:
    """Add every setting as a flag, in its group (``only``: just these settings, by
    name, and no --token-file); defaults are resolved in :func:`build_settings`."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for spec in specs(Settings):
        if only is not None and spec.name not in only:
            continue
        group = groups.get(spec.group)
        if group is None:
            group = groups[spec.group] = parser.add_argument_group(GROUPS[spec.group])
        group.add_argument(
            spec.flag,
            dest=spec.name,
            type=spec.parse,
            default=None,
            metavar=spec.metavar,
            help=f"{spec.help} [{spec.default_text}]",
        )
    if only is not None:
        return
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="file with one bearer token per line [env TTS_TOKEN_FILE; TTS_TOKENS takes a comma-separated list]",
    )


#: TTS_* variables that are not settings but are read: tokens here, scripts/setup.sh's.
_OTHER_VARIABLES = ("TTS_TOKEN_FILE", "TTS_TOKENS", "TTS_TORCH_SPEC", "TTS_PYTHON", "TTS_SKIP_APT")
# What Kubernetes injects for a Service whose name starts with "tts" (service links).
_SERVICE_LINK = re.compile(r"TTS_\w*(_SERVICE_HOST|_SERVICE_PORT\w*|_PORT_\d+_(TCP|UDP)\w*)")


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """The ``TTS_*`` variables of ``environ`` that nothing reads (misspelt, most likely:
    ``TTS_MAX_STREAM``), each with the closest variable that is a setting, if one is
    close. Names only: values may be secrets."""
    known = [spec.env for spec in specs(Settings)] + list(_OTHER_VARIABLES)
    unknown = []
    for name in sorted(environ):
        if not name.startswith("TTS_") or name in known or _SERVICE_LINK.fullmatch(name):
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        unknown.append((name, close[0] if close else None))
    return unknown


def build_settings(
    args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Flags over ``TTS_*`` environment variables over defaults; tokens from file and env."""
    environ = os.environ if environ is None else environ
    values: dict[tuple[str, ...], Any] = {}
    for spec in specs(Settings):
        raw_env = environ.get(spec.env)
        if raw_env is not None and raw_env != "":
            try:
                values[spec.path] = spec.parse(raw_env)
            except ValueError as exc:
                raise SystemExit(f"invalid {spec.env}={raw_env!r} ({spec.flag}): {exc}") from None
        flag_value = getattr(args, spec.name, None) if args is not None else None
        if flag_value is not None:
            values[spec.path] = flag_value
    tokens: list[str] = []
    token_file = getattr(args, "token_file", None) if args is not None else None
    if token_file is None and environ.get("TTS_TOKEN_FILE"):
        token_file = Path(environ["TTS_TOKEN_FILE"])
    if token_file is not None:
        try:
            tokens.extend(read_token_file(token_file))
        except OSError as exc:
            raise SystemExit(f"cannot read token file {token_file}: {exc}") from None
    if environ.get("TTS_TOKENS"):
        tokens.extend(t.strip() for t in environ["TTS_TOKENS"].split(",") if t.strip())
    try:
        # Each bundle of settings (Settings.chattts, .wyoming, ...) from its own values.
        defaults = Settings()
        bundles = {
            bundle.name: type(getattr(defaults, bundle.name))(
                **{path[1]: value for path, value in values.items() if path[0] == bundle.name}
            )
            for bundle in dataclasses.fields(Settings)
            if bundle.metadata.get("nested")
        }
    except ValueError as exc:
        raise SystemExit(refusal(str(exc).split("; "))) from None
    top = {path[0]: value for path, value in values.items() if len(path) == 1}
    settings = Settings(**top, **bundles, tokens=tuple(dict.fromkeys(tokens)))
    validate(settings)
    return settings
