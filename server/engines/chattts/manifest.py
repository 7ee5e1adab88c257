"""A ChatTTS model directory's manifest, read once, without torch.

A generated (random-weight) checkpoint carries ``chattts-stream.json`` beside ChatTTS's
files (:mod:`server.engines.chattts.checkpoint` writes it); the real weights carry none.
Start-up reads it once (:meth:`ModelDirectory.read`) to learn whether the weights are
random before the engine loads, and the load uses the same reading: a manifest that
cannot be read is reported by the load, as a load failure, not by start-up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streaming.errors import TTSError

__all__ = ["MANIFEST_FORMAT", "MANIFEST_NAME", "ModelDirectory", "ModelLoadError", "read_manifest"]

MANIFEST_NAME = "chattts-stream.json"
MANIFEST_FORMAT = 1


class ModelLoadError(TTSError):
    """A model directory cannot be loaded: missing, incomplete, or rejected by ChatTTS."""

    code = "model_load_failed"


def read_manifest(model_dir: str | Path) -> dict[str, Any] | None:
    """Return the parsed manifest of ``model_dir``, or ``None`` when it has none."""
    manifest_path = Path(model_dir) / MANIFEST_NAME
    if not manifest_path.is_file():
        return None
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"unreadable manifest {manifest_path}: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ModelLoadError(f"manifest {manifest_path} is not format {MANIFEST_FORMAT}")
    return manifest


@dataclass(frozen=True)
class ModelDirectory:
    """A model directory with its manifest as read once (None: it has none), or why it
    could not be read (kept for the load to raise)."""

    path: Path
    manifest: dict[str, Any] | None = None
    problem: ModelLoadError | None = None

    @classmethod
    def read(cls, path: str | Path) -> ModelDirectory:
        """Read ``path``'s manifest now; never raises (see :meth:`checked_manifest`)."""
        try:
            return cls(Path(path), read_manifest(path))
        except ModelLoadError as exc:
            return cls(Path(path), problem=exc)

    @property
    def random_weights(self) -> bool:
        """A generated checkpoint (its manifest says so); False for real weights."""
        return bool(self.manifest and self.manifest.get("random_weights"))

    def checked_manifest(self) -> dict[str, Any] | None:
        """The manifest, or :class:`ModelLoadError` when it could not be read."""
        if self.problem is not None:
            raise self.problem
        return self.manifest
