"""Named voices and their stores (server/voices/)."""
