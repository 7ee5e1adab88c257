"""chattts-stream's light client: the WebSocket client and the voice-agent plugins.

``StreamClient`` needs only ``websockets``; ``chattts_client.pipecat`` and
``chattts_client.livekit`` need their framework (the ``pipecat`` and ``livekit``
extras). None of it imports torch, ChatTTS or the server.
"""

from chattts_client.client import AudioFrame, ContextResult, Event, StreamClient
from chattts_client.timestamps import spoken_so_far

__all__ = ["AudioFrame", "ContextResult", "Event", "StreamClient", "spoken_so_far"]
