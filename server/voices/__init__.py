"""Named voices: a name for how a context sounds, kept in a store, usable from every route.

A voice belongs to one engine (``chattts`` or ``espeak``, the fallback voice) and fixes
its speaker: for ChatTTS a speaker string, the speaker a seed samples, or a reference
clip's encoding with its transcript; for espeak one of its variants. It may also fix
the sampling seed and ChatTTS's sampling settings. Each engine ships the same preset
names, OpenAI's own (``alloy``, ``echo``, ...), so clients that only know those names
work unchanged; presets cannot be changed or deleted.

Voices a user creates are kept by a store (:mod:`server.voices.store`): JSON files under
``--voices-dir`` for one replica, or Redis (``--voices-store redis://...``) shared by
every replica of a fleet. A ``voice`` field anywhere (WebSocket ``start``, ``/v1/tts``,
``/v1/audio/speech``) is first looked up by name, then taken as the engine's raw voice
(a speaker string, a variant); an unknown one gets an error listing the names there are.

    voice.py        Voice, the presets, the stored record
    store.py        the VoiceStore interface, DirectoryStore
    redis_store.py  RedisStore
    registry.py     VoiceRegistry (presets + a store), Voices (bound to the engines)

The composition root (server.state) builds the store the settings name and hands it in.
"""

from __future__ import annotations

from server.voices.registry import VoiceRegistry, Voices
from server.voices.store import DirectoryStore, VoiceStore
from server.voices.voice import FALLBACK_ENGINE, PRESET_NAMES, Voice, default_voices_dir

__all__ = [
    "FALLBACK_ENGINE",
    "PRESET_NAMES",
    "DirectoryStore",
    "Voice",
    "VoiceRegistry",
    "VoiceStore",
    "Voices",
    "default_voices_dir",
]
