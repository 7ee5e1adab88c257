"""HTTP routes, audio encoders and the OpenAI API (server/http/)."""
