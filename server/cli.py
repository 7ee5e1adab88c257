"""Command line: ``chattts-stream serve | preview | make-checkpoint | download-weights |
healthcheck``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from server import __version__, logs
from server.config import Settings
from server.config_input import add_arguments, build_settings, unknown_variables

if TYPE_CHECKING:
    from server.lifecycle import DrainingServer
    from server.state import AppState

logger = logging.getLogger(__name__)

WEIGHTS_REPO = "2Noise/ChatTTS"
#: The settings ``preview`` reads (its flags; every TTS_* variable still applies).
PREVIEW_SETTINGS = (
    "segment_max_chars", "first_segment_min_chars", "allow_control_tags", "text_cache_dir",
    "lexicon", "max_lexicon_entries", "max_lexicon_written_chars", "max_lexicon_spoken_chars",
)  # fmt: skip


class _Compact(argparse.HelpFormatter):
    """One line per flag where it fits: flags in a 34-column margin, 110 columns wide."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=34, width=110)


class _CommandLine(argparse.ArgumentParser):
    """The top-level parser: every usage error also lists the commands, with their help."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        lines = [f"{self.prog}: error: {message}", "commands:"]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                width = max(len(choice.dest) for choice in action._choices_actions)
                lines += [f"  {c.dest:<{width}}  {c.help}" for c in action._choices_actions]
        lines.append(f"Each command's flags: {self.prog} COMMAND --help")
        self.exit(2, "\n".join(lines) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _CommandLine(
        prog="chattts-stream",
        description="Streaming Chinese TTS server on ChatTTS: text deltas in over a WebSocket, PCM audio out.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # Not required: main() says which is missing, or which option is unknown, itself
    # (argparse would only say "the following arguments are required: command").
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=argparse.ArgumentParser
    )
    serve = commands.add_parser(
        "serve",
        help="run the server",
        usage="%(prog)s [flags]",
        formatter_class=_Compact,
        description="Run the HTTP + WebSocket server. Each flag's default is in brackets; "
        "each also reads an environment variable, TTS_ and its name in capitals (--max-batch: "
        "TTS_MAX_BATCH). All of them: docs/settings.md.",
    )
    add_arguments(serve)
    preview = commands.add_parser(
        "preview",
        help="print the segments of a text as the server would speak them (no audio)",
        description="Segment and normalise a text exactly as the server would, and print the "
        "segments as JSON: spoken text, removed characters, rewrites, control tags.",
    )
    preview.add_argument("text", help='text to preview ("-" reads standard input)')
    preview.add_argument(
        "--mode",
        choices=("stream", "http"),
        default="stream",
        help="segment like the WebSocket (stream) or like POST /v1/tts (http)",
    )
    add_arguments(preview, only=PREVIEW_SETTINGS)
    checkpoint = commands.add_parser(
        "make-checkpoint",
        help="write a random-weight ChatTTS checkpoint (for tests and benchmarks: its audio is noise)",
    )
    checkpoint.add_argument("path", help="directory to write")
    checkpoint.add_argument(
        "--full", action="store_true", help="ChatTTS's real dimensions (~1.1 GB) instead of tiny"
    )
    checkpoint.add_argument("--seed", type=int, default=0)
    health = commands.add_parser(
        "healthcheck",
        help="exit 0 when the server on this host answers /health (the image's HEALTHCHECK)",
        description="GET /health on this host at the port the settings give (--port or "
        "TTS_PORT), so a container's health check follows the port it was started with.",
    )
    health.add_argument("--port", type=int, default=None, help="default: TTS_PORT, else 8000")
    health.add_argument("--timeout-s", type=float, default=3.0)
    download = commands.add_parser(
        "download-weights",
        help=f"download the real ChatTTS weights from Hugging Face ({WEIGHTS_REPO}); needs internet access",
    )
    download.add_argument("path", help="directory to write (then: serve --model-dir PATH)")
    return parser


def serve(settings: Settings) -> int:

    from server.app import create_app
    from server.lifecycle import DrainingServer, uvicorn_config

    logs.configure(settings.log_level, settings.log_format)
    for name, close in unknown_variables(os.environ):
        hint = f" (did you mean {close}?)" if close else ""
        logger.warning("environment variable %s is not a setting%s: ignored", name, hint)
    app = create_app(settings)
    config = uvicorn_config(app, settings)
    state = app.state.tts
    server = DrainingServer(config, state)
    threading.Thread(
        target=_exit_if_no_engine, args=(server, state), name="engine-watch", daemon=True
    ).start()
    engine = state.engine_choice.name
    where = f" from {settings.model_dir}" if engine == "chattts" else ""
    # With --port 0 the system picks the port: uvicorn's "running on" line names it.
    address = f"http://{settings.host}:{settings.port}" if settings.port else "a free port"
    logger.info("listening on %s; loading the %s engine%s", address, engine, where)
    server.run()
    if state.worker.status.state == "failed":
        hint = (
            "; --fallback-on-load-failure true would serve the fallback voice instead"
            if engine == "chattts"
            else ""
        )
        logger.critical(
            "exiting: no engine could be loaded (%s)%s", state.worker.status.detail, hint
        )
        return 1
    return 0


def _exit_if_no_engine(server: DrainingServer, state: AppState) -> None:
    """A server without an engine serves nothing: stop it so the supervisor sees a failure."""
    while not server.should_exit:
        if state.worker.wait_ready(timeout_s=0.5) or state.worker.status.state == "failed":
            break
    if state.worker.status.state == "failed":
        server.should_exit = True


def preview(settings: Settings, text: str, mode: str) -> int:
    import json

    from server.state import lexicon_file
    from server.textnorm import TextFrontend

    for name, close in unknown_variables(os.environ):
        hint = f" (did you mean {close}?)" if close else ""
        print(f"chattts-stream preview: {name} is not a setting{hint}: ignored", file=sys.stderr)
    if text == "-":
        text = sys.stdin.read()
    frontend = TextFrontend(
        allow_control_tags=settings.allow_control_tags,
        cache_dir=settings.text_cache_dir,
        lexicon=lexicon_file(settings),
    )
    segments = frontend.preview(text, settings.speech.segmenter_settings(whole_text=mode == "http"))
    body = {"mode": mode, "segments": [segment.to_json() for segment in segments]}
    print(json.dumps(body, ensure_ascii=False, indent=2))
    return 0


def download_weights(path: str) -> int:
    """Fetch exactly the nine files ``Chat.load(source="custom")`` checks (~1 GB).

    A failure (no network, no such repository, a full disk) is one line on stderr and
    exit status 1, not the library's tracebacks."""

    # Their progress bars and retry warnings would bury the one line that matters.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    logging.getLogger("huggingface_hub").setLevel(logging.CRITICAL)
    from huggingface_hub import snapshot_download

    from server.engines.chattts.checkpoint import ASSET_FILES

    try:
        target = snapshot_download(
            repo_id=WEIGHTS_REPO, local_dir=path, allow_patterns=list(ASSET_FILES)
        )
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(
            f"chattts-stream download-weights: cannot download {WEIGHTS_REPO} from Hugging Face "
            f"({type(exc).__name__}: {reason[:200]}); check the network, or download them on a "
            "machine with internet access and copy them here: docs/operations.md#model-weights",
            file=sys.stderr,
        )
        return 1
    print(f"ChatTTS weights in {target}; run: chattts-stream serve --model-dir {target}")
    return 0


def healthcheck(port: int | None, timeout_s: float) -> int:
    import urllib.request

    port = port or build_settings(None, os.environ).port
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout_s) as answer:
            ok = answer.status == 200
    except OSError as exc:
        print(f"unhealthy: http://127.0.0.1:{port}/health: {exc}", file=sys.stderr)
        return 1
    return 0 if ok else 1


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command and its flags; a usage error exits 2 saying what is wrong."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if args.command is None:
        parser.error(f"unknown option {unknown[0]}" if unknown else "no command given")
    if unknown:
        (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        command = commands.choices[args.command]
        command.error(f"unrecognized arguments: {' '.join(unknown)} (see {command.prog} --help)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.command == "serve":
        return serve(build_settings(args))
    if args.command == "preview":
        return preview(build_settings(args), args.text, args.mode)
    if args.command == "make-checkpoint":
        logs.quiet_dependencies()  # transformers' progress bars, before it is imported
        from server.engines.chattts.checkpoint import main as checkpoint_main

        forwarded = [args.path, "--seed", str(args.seed), *(["--full"] if args.full else [])]
        return checkpoint_main(forwarded)
    if args.command == "download-weights":
        return download_weights(args.path)
    if args.command == "healthcheck":
        return healthcheck(args.port, args.timeout_s)
    return 2


if __name__ == "__main__":
    sys.exit(main())
