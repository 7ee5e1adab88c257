"""Engines (server/engines/): choice, the fallback voice."""
