"""The Wyoming protocol for Home Assistant (server/wyoming/): framing, the handler, streams."""
