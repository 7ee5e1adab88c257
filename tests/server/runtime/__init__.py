"""The engine worker, scheduler, watchdog and speaker (server/runtime/)."""
