"""docs/settings.md: every setting with its flag, variable, default and help, by group.

``python -m server.config_reference > docs/settings.md`` writes it; a test keeps it current.
"""

from __future__ import annotations

from server.declaration import GROUPS, SettingSpec, specs

__all__ = ["reference_markdown"]


def reference_markdown(cls: type) -> str:
    """docs/settings.md: every setting with its flag, variable, default and help, by group."""
    lines = [
        "# Settings",
        "",
        "Every setting is a flag of `chattts-stream serve` and a `TTS_*` environment variable",
        "(flags win over the environment, which wins over the default). This page is generated",
        "from the declarations in `server/config.py` and `server/engines/chattts/settings.py`",
        "(`.venv/bin/python -m server.config_reference > docs/settings.md`); a test keeps it current.",
        "Tokens are not settings here: `--token-file` / `TTS_TOKEN_FILE` and `TTS_TOKENS`.",
        "A `TTS_*` variable that is none of these (a misspelt one) is named in a warning at",
        "start, with the closest setting's variable, and ignored; values are never logged.",
        "Settings that cannot work together stop start-up with one line naming each flag and",
        "variable (`--gpt-cache static` needs `--max-batch 1`).",
    ]
    by_group: dict[str, list[SettingSpec]] = {}
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


if __name__ == "__main__":
    from server.config import Settings

    print(reference_markdown(Settings), end="")
