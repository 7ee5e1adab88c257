"""Settings: flags over environment over defaults, validation, and what reaches the engine."""

from __future__ import annotations

import argparse
import inspect

import pytest

from server.config import Settings, add_arguments, build_settings
from server.engines.select import chattts_options


def parse(argv: list[str], environ: dict[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return build_settings(parser.parse_args(argv), environ or {})


def test_flags_win_over_environment_over_defaults() -> None:
    """A flag beats its TTS_* variable, which beats the default."""
    env = {"TTS_FIRST_CHUNK_STEPS": "8", "TTS_TOP_K": "5"}
    settings = parse(["--first-chunk-steps", "16"], env)
    assert (settings.first_chunk_steps, settings.top_k, settings.top_p) == (16, 5, Settings().top_p)


def test_chattts_options_are_engine_parameters() -> None:
    """Every decoder/sampling setting passed to ChatTTSEngine is one of its keyword arguments."""
    from server.engines.chattts import ChatTTSEngine

    parameters = inspect.signature(ChatTTSEngine.__init__).parameters
    options = chattts_options(parse(["--decoder", "chattts", "--lookahead-frames", "4"]))
    assert set(options) <= set(parameters)
    assert options["decoder"] == "chattts" and options["lookahead_frames"] == 4


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--decoder", "fast"], "decoder must be ours or chattts"),
        (["--gpt-dtype", "int8"], "gpt_dtype must be float32, float16 or bfloat16"),
        (["--vocoder-backend", "tensorrt"], "vocoder_backend must be torch or onnx"),
        (["--gpt-cache", "paged"], "gpt_cache must be dynamic or static"),
        (["--cuda-graphs", "true"], "cuda_graphs needs gpt_cache static"),
        (["--gpt-cache-tokens", "1"], "gpt_cache_tokens must be at least 2"),
        (["--gpt-cache-slots", "-1"], "gpt_cache_slots must not be negative"),
        (
            ["--gpt-cache", "static", "--gpt-cache-tokens", "2048"],
            "gpt_cache_tokens must exceed max_new_token",
        ),
        (["--gpt-cache", "static", "--decoder", "chattts"], "gpt_cache static needs decoder ours"),
        (
            ["--gpt-cache", "static", "--cuda-graphs", "true", "--device", "cpu"],
            "cuda_graphs needs a CUDA device",
        ),
        (["--chunk-growth", "0.5"], "chunk_growth must be at least 1"),
        (["--max-contexts", "0"], "max_contexts must be positive"),
        (["--drain-timeout-s", "-1"], "drain_timeout_s must not be negative"),
        (["--engine", "chattts"], "engine chattts needs --model-dir"),
    ],
)
def test_invalid_settings_are_refused_by_name(argv: list[str], problem: str) -> None:
    """A setting that cannot work stops start-up with a message naming it."""
    with pytest.raises(SystemExit, match=problem):
        parse(argv)


def test_bad_environment_value_names_the_variable() -> None:
    """A malformed TTS_* value stops start-up naming the variable."""
    with pytest.raises(SystemExit, match="TTS_MAX_CONTEXTS"):
        parse([], {"TTS_MAX_CONTEXTS": "many"})


def test_settings_defaults_match_the_engine_defaults() -> None:
    """The server's decoder and sampling defaults are the engine's own (no drift between them)."""
    from server.engines.chattts import ChatTTSEngine

    parameters = inspect.signature(ChatTTSEngine.__init__).parameters
    defaults = chattts_options(Settings())
    differing = {
        name: (value, parameters[name].default)
        for name, value in defaults.items()
        if name != "device" and value != parameters[name].default
    }
    assert differing == {}


def test_static_cache_settings_reach_the_engine() -> None:
    """--gpt-cache static with --cuda-graphs reaches ChatTTSEngine; 0 slots means one per
    segment the worker interleaves."""
    options = chattts_options(
        parse(["--gpt-cache", "static", "--cuda-graphs", "true", "--max-active-segments", "3"])
    )
    assert options["gpt_cache"] == "static" and options["cuda_graphs"] is True
    assert options["gpt_cache_slots"] == 3
    env = {"TTS_GPT_CACHE_SLOTS": "5", "TTS_GPT_CACHE_TOKENS": "1024", "TTS_MAX_NEW_TOKEN": "900"}
    options = chattts_options(parse([], env))
    assert (options["gpt_cache_slots"], options["gpt_cache_tokens"]) == (5, 1024)
