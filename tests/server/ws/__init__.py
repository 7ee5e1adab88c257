"""The WebSocket stream (server/ws/): sessions, contexts, protocol errors."""
