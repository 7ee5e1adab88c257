"""ChatTTS (server/engines/chattts/) on the tiny random-weight checkpoint."""
