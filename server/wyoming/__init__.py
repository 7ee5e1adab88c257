"""Home Assistant's Wyoming protocol (TTS), on a TCP port of its own (``--wyoming-port``).

- :mod:`server.wyoming.framing`: events read with bounds, written with a stall limit;
- :mod:`server.wyoming.info`: ``describe`` -> ``info`` (every voice, zh and en);
- :mod:`server.wyoming.streamed`: ``synthesize-start``/``-chunk``/``-stop`` as one
  utterance, spoken from its first segment on;
- :mod:`server.wyoming.handler`: one connection's events;
- :mod:`server.wyoming.server`: the listener, started and stopped with the app.

The protocol has no authentication: the port binds loopback unless ``--wyoming-host``
says otherwise (docs/home-assistant.md).
"""
