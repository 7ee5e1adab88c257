"""Settings: flags over environment over defaults, validation, and what reaches the engine."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from pathlib import Path

import pytest

from server.config import Settings
from server.config_input import add_arguments, build_settings
from server.config_reference import reference_markdown
from server.declaration import GROUPS, SettingSpec, specs
from server.engines.chattts.settings import ChatTTSSettings
from server.state import engine_choice
from tests.settings import environment_names


def parse(argv: list[str], environ: dict[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return build_settings(parser.parse_args(argv), environ or {})


def test_flags_win_over_environment_over_defaults() -> None:
    """A flag beats its TTS_* variable, which beats the default."""
    env = {"TTS_FIRST_CHUNK_STEPS": "8", "TTS_TOP_K": "5"}
    settings = parse(["--first-chunk-steps", "16"], env)
    chattts = settings.chattts
    assert (chattts.first_chunk_steps, chattts.top_k, chattts.top_p) == (
        16,
        5,
        Settings().chattts.top_p,
    )


def _other_value(spec: SettingSpec) -> str:
    """A valid value, as a flag writes it, that is not the setting's default."""
    if spec.choices:
        return next(choice for choice in spec.choices if choice != spec.default)
    if isinstance(spec.default, bool):
        return str(not spec.default).lower()
    if isinstance(spec.default, float):
        return str(spec.default / 2 if spec.default else 1.0)
    if isinstance(spec.default, int):
        return str(spec.default + 1)
    return "127.0.0.2" if "host" in spec.name else "other"


# What a setting needs beside it to be accepted (the static cache is the unbatched one).
_COMPANIONS = {
    "gpt_cache": ["--max-batch", "1"],
    "cuda_graphs": ["--max-batch", "1", "--gpt-cache", "static"],
}


@pytest.mark.parametrize(
    "spec", [s for s in specs(Settings) if len(s.path) > 1], ids=lambda spec: spec.name
)
def test_every_setting_of_a_bundle_reaches_it(spec: SettingSpec) -> None:
    """A flag and a variable of a setting held in a bundle (Settings.chattts, .heap, ...)
    land in that bundle: no bundle is left out when the settings are built."""
    value, companions = _other_value(spec), _COMPANIONS.get(spec.name, [])
    for settings in (parse([*companions, spec.flag, value]), parse(companions, {spec.env: value})):
        found = settings
        for name in spec.path:
            found = getattr(found, name)
        assert found == spec.parse(value) != spec.default, spec.name


def test_chattts_flags_reach_the_engine_options() -> None:
    """Decoder and sampling flags land in the ChatTTSSettings the engine is built with."""
    options = engine_choice(parse(["--decoder", "chattts", "--lookahead-frames", "4"])).chattts
    assert options.decoder == "chattts" and options.lookahead_frames == 4


def test_every_setting_is_declared_once_with_its_flag_and_variable() -> None:
    """Flags and TTS_* variables derive from the declarations: one each, none shared."""
    all_specs = list(specs(Settings))
    flags = [spec.flag for spec in all_specs]
    assert len(flags) == len(set(flags))
    option_fields = {f.name for f in dataclasses.fields(ChatTTSSettings) if f.metadata["cli"]}
    assert option_fields <= {spec.name for spec in all_specs if spec.path[0] == "chattts"}
    assert all(spec.help and spec.group in GROUPS for spec in all_specs)
    assert environment_names() >= {"TTS_MAX_NEW_TOKEN", "TTS_MAX_CONTEXTS", "TTS_TOKENS"}


def test_settings_reference_is_current() -> None:
    """docs/settings.md is what the declarations generate (python -m server.config_reference)."""
    reference = Path(__file__).resolve().parents[2] / "docs" / "settings.md"
    assert reference.read_text(encoding="utf-8") == reference_markdown(Settings), (
        "regenerate: .venv/bin/python -m server.config_reference > docs/settings.md"
    )


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
        (["--gpt-cache", "static"], "gpt_cache static is the unbatched decoder's cache"),
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


@pytest.mark.parametrize(
    ("argv", "environ", "named"),
    [
        ([], {"TTS_MAX_BATCH": "-1"}, ["max_batch"]),
        (["--max-contexts", "0"], {}, ["max_contexts"]),
        (["--port", "70000"], {}, ["port"]),
        (["--log-level", "bogus"], {}, ["log_level"]),
        (["--first-segment-min-chars", "0"], {}, ["first_segment_min_chars", "segment_max_chars"]),
        (["--max-new-token", "0"], {}, ["max_new_token"]),
        (["--gpt-cache", "static", "--decoder", "chattts"], {}, ["gpt_cache", "decoder"]),
        (
            ["--gpt-cache", "static", "--gpt-cache-tokens", "2048"],
            {},
            ["gpt_cache_tokens", "max_new_token"],
        ),
        ([], {"TTS_MAX_CONTEXTS": "many"}, ["max_contexts"]),
    ],
)
def test_a_refusal_names_each_setting_by_its_flag_and_variable(
    argv: list[str], environ: dict[str, str], named: list[str]
) -> None:
    """Whether it came from a flag or a variable, the message names both for each setting."""
    with pytest.raises(SystemExit) as refused:
        parse(argv, environ)
    message = str(refused.value)
    for name in named:
        assert "--" + name.replace("_", "-") in message, message
        assert "TTS_" + name.upper() in message, message


def test_a_batch_row_too_short_for_max_new_token_is_refused() -> None:
    """With batching on, a KV cache row that cannot hold max_new_token new tokens is a
    start-up refusal, not a prefill failure on every long segment; without it, fine."""
    with pytest.raises(SystemExit, match="gpt_cache_tokens must exceed max_new_token"):
        parse(["--max-new-token", "3000"], {})
    assert parse(["--max-new-token", "3000", "--max-batch", "1"], {}).chattts.max_new_token == 3000


def test_bad_environment_value_names_the_variable() -> None:
    """A malformed TTS_* value stops start-up naming the variable."""
    with pytest.raises(SystemExit, match="TTS_MAX_CONTEXTS"):
        parse([], {"TTS_MAX_CONTEXTS": "many"})


def test_the_engine_defaults_are_the_settings_defaults() -> None:
    """The server's ChatTTS defaults are the engine's own: one declaration, no drift."""
    from server.engines.chattts.engine import ChatTTSEngine

    parameter = inspect.signature(ChatTTSEngine.__init__).parameters["options"]
    assert parameter.default is None  # None: ChatTTSSettings()
    assert Settings().chattts == ChatTTSSettings()


def test_static_cache_settings_reach_the_engine() -> None:
    """--gpt-cache static with --cuda-graphs reaches ChatTTSEngine; 0 slots means one per
    segment the worker interleaves."""
    options = engine_choice(
        parse(["--gpt-cache", "static", "--cuda-graphs", "true", "--max-active-segments", "3",
               "--max-batch", "1"])
    ).chattts  # fmt: skip
    assert options.gpt_cache == "static" and options.cuda_graphs is True
    assert options.gpt_cache_slots == 3
    env = {"TTS_GPT_CACHE_SLOTS": "5", "TTS_GPT_CACHE_TOKENS": "1024", "TTS_MAX_NEW_TOKEN": "900"}
    options = engine_choice(parse([], env)).chattts
    assert (options.gpt_cache_slots, options.gpt_cache_tokens) == (5, 1024)


def test_unknown_variables_are_the_tts_ones_nothing_reads() -> None:
    """Misspelt TTS_* names come with the closest setting; settings, the token and setup
    variables, Kubernetes' service links and other prefixes are not named."""
    from server.config_input import unknown_variables

    environ = {
        "TTS_MAX_STREAM": "1", "TTS_VOICE_STORE": "redis://x", "TTS_WHATEVER": "s3cret",
        "TTS_MAX_STREAMS": "2", "TTS_TOKENS": "a", "TTS_TOKEN_FILE": "f", "TTS_PYTHON": "p",
        "TTS_REDIS_SERVICE_HOST": "10.0.0.1", "TTS_REDIS_PORT_6379_TCP_ADDR": "10.0.0.1",
        "MAX_STREAMS": "3",
    }  # fmt: skip
    assert unknown_variables(environ) == [
        ("TTS_MAX_STREAM", "TTS_MAX_STREAMS"),
        ("TTS_VOICE_STORE", "TTS_VOICES_STORE"),
        ("TTS_WHATEVER", None),
    ]


def _numeric_specs() -> list[SettingSpec]:
    return [spec for spec in specs(Settings) if spec.parse in (int, float)]


def test_every_numeric_setting_declares_its_bounds() -> None:
    """Each number a flag or a TTS_* variable sets, the ChatTTS ones too, says in its
    declaration which values it may take (the refusal and its message derive from it)."""
    numeric = _numeric_specs()
    assert len(numeric) > 40  # the server's and the engine's
    assert [spec.name for spec in numeric if spec.bounds is None] == []


def _out_of_bounds(spec: SettingSpec) -> list[str]:
    """A value just past each bound of ``spec`` that is a number (not another setting)."""
    assert spec.bounds is not None
    values: list[float] = []
    if isinstance(spec.bounds.gt, (int, float)):
        values.append(spec.bounds.gt)
    elif isinstance(spec.bounds.ge, (int, float)):
        values.append(spec.bounds.ge - 1)
    if isinstance(spec.bounds.le, (int, float)):
        values.append(spec.bounds.le + 1)
    return [str(spec.parse(value)) for value in values]


@pytest.mark.parametrize("spec", _numeric_specs(), ids=lambda spec: spec.name)
def test_a_value_out_of_its_declared_bounds_is_refused_by_flag_and_variable(
    spec: SettingSpec,
) -> None:
    """Past each declared bound, the command line's flag and the TTS_* variable are both
    refused, in a message that says what the setting must be and names both."""
    from server.cli import parse as parse_command_line

    assert spec.bounds is not None
    for value in _out_of_bounds(spec):
        expected = f"{spec.name} must {spec.bounds.text()}"
        with pytest.raises(SystemExit) as by_flag:
            build_settings(parse_command_line(["serve", spec.flag, value]), {})
        with pytest.raises(SystemExit) as by_variable:
            build_settings(parse_command_line(["serve"]), {spec.env: value})
        for refused in (by_flag, by_variable):
            message = str(refused.value)
            assert expected in message, message
            assert spec.flag in message and spec.env in message, message


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--port", "65536"], "port must be between 0 and 65535"),
        (["--admission-headroom", "0"], "admission_headroom must be in (0, 1]"),
        (["--admission-headroom", "1.5"], "admission_headroom must be in (0, 1]"),
        (["--top-p", "0"], "top_p must be in (0, 1]"),
        (["--top-k", "0"], "top_k must be positive"),
        (
            ["--gpt-cache-slots", "-1"],
            "gpt_cache_slots must not be negative (0: max_active_segments)",
        ),
        (["--ws-idle-timeout-s", "-1"], "ws_idle_timeout_s must not be negative (0: never)"),
        (
            ["--first-segment-min-chars", "12", "--segment-max-chars", "10"],
            "first_segment_min_chars must be between 1 and segment_max_chars",
        ),
    ],
)
def test_a_bound_reads_as_it_is_declared(argv: list[str], problem: str) -> None:
    """Ranges, what 0 means, and a bound that is another setting, in the refusal's words."""
    with pytest.raises(SystemExit) as refused:
        parse(argv)
    assert problem in str(refused.value)


def test_values_on_their_bounds_are_accepted() -> None:
    """A bound is where refusal starts, not before: 0 where 0 means something, 1 for a
    share of capacity, a first segment as long as the longest, the highest port."""
    settings = parse(
        ["--max-streams", "0", "--admission-headroom", "1", "--port", "65535",
         "--first-segment-min-chars", "80", "--segment-max-chars", "80", "--top-p", "1"]
    )  # fmt: skip
    assert (settings.max_streams, settings.admission_headroom, settings.port) == (0, 1.0, 65535)
    assert settings.first_segment_min_chars == settings.segment_max_chars == 80
    assert settings.chattts.top_p == 1.0
