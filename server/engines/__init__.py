"""Speech engines behind one small interface (:class:`server.engines.base.Engine`)."""
