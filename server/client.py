"""The Python client, from the light client package (``client/``, ``chattts_client``).

Kept under this name for code written against it: ``from server.client import
StreamClient`` works as before.
"""

from chattts_client.client import AudioFrame, ContextResult, Event, StreamClient

__all__ = ["AudioFrame", "ContextResult", "Event", "StreamClient"]
