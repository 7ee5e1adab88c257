"""One replica with the modelled engine, as its own process: what bench/fleet.py runs N of.

The real server (``create_app`` with the settings the CLI would build) served by the
real lifecycle (``server.lifecycle.DrainingServer``: SIGTERM drains, SIGKILL is a
crash), its engine a :class:`~server.engines.modelled.ModelledEngine` whose GPT step of
a batch of n costs ``a + b * n`` (slept: a replica costs these cores little, so several
fit on a small machine while each behaves like one accelerator).

    .venv/bin/python bench/replica.py --port 8101 --a-ms 10 --b-ms 0.7
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from server import logs
from server.app import create_app
from server.config import Settings
from server.engines.modelled import ModelledEngine
from server.lifecycle import DrainingServer, uvicorn_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--a-ms", type=float, required=True, help="fixed cost of a GPT step")
    parser.add_argument("--b-ms", type=float, required=True, help="cost per utterance in a step")
    parser.add_argument(
        "--max-streams", type=int, default=100_000, help="admission's limit (default: none)"
    )
    parser.add_argument("--drain-timeout-s", type=float, default=30.0)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    engine = ModelledEngine(step_a_s=args.a_ms / 1000, step_b_s=args.b_ms / 1000)

    def factory() -> Any:
        return engine, False, None

    settings = Settings(
        engine="espeak",  # the fallback voice's settings; the modelled engine speaks
        host=args.host,
        port=args.port,
        max_batch=256,
        max_streams=args.max_streams,
        max_connections=4096,
        fallback_on_synthesis_failure=False,
        drain_timeout_s=args.drain_timeout_s,
        log_level=args.log_level,
    )
    logs.configure(settings.log_level, settings.log_format)
    app = create_app(settings, engine=factory)
    server = DrainingServer(uvicorn_config(app, settings), app.state.tts)
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
