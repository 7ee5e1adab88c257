"""What the tests know of the settings beyond their declarations."""

from __future__ import annotations

from server.config import Settings
from server.declaration import specs


def environment_names() -> set[str]:
    """Every ``TTS_*`` variable the server reads."""
    return {spec.env for spec in specs(Settings)} | {"TTS_TOKEN_FILE", "TTS_TOKENS"}
