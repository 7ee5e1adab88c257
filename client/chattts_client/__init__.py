"""chattts-stream's light client: the WebSocket client and the voice-agent plugins.

``StreamClient`` needs only ``websockets``; ``chattts_client.pipecat`` and
``chattts_client.livekit`` need their framework (the ``pipecat`` and ``livekit``
extras). None of it imports torch, ChatTTS or the server. The errors it raises are in
:mod:`chattts_client.errors` (the tree is drawn there) and importable from here.
"""

from chattts_client.client import AudioFrame, ContextResult, Event, StreamClient
from chattts_client.errors import (
    AuthError,
    BusyError,
    ContextError,
    LimitError,
    NotReadyError,
    ProtocolError,
    RequestError,
    ResumeError,
    TTSClientError,
    UnavailableError,
    error_from_event,
)
from chattts_client.policy import ResumePolicy
from chattts_client.timestamps import spoken_so_far

__all__ = [
    "AudioFrame",
    "AuthError",
    "BusyError",
    "ContextError",
    "ContextResult",
    "Event",
    "LimitError",
    "NotReadyError",
    "ProtocolError",
    "RequestError",
    "ResumeError",
    "ResumePolicy",
    "StreamClient",
    "TTSClientError",
    "UnavailableError",
    "error_from_event",
    "spoken_so_far",
]
