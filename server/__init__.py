"""chattts-stream: the server (FastAPI app, engines, CLI)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("chattts-stream")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
