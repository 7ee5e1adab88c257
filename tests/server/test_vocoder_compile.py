"""--compile-vocoder: ChatTTS's Decoder and the Vocos backbone under torch.compile compile
(the view ChatTTS makes in inference mode no longer breaks it), and a compilation that
fails anyway falls back to the eager modules with one warning, never a failed request."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch

from server.config import Settings
from server.engines.chattts.settings import ChatTTSSettings
from server.engines.chattts.vocoding import Vocoder
from tests.live import TIMEOUT_S, run_live_server

LOGGER = "server.engines.chattts.vocoding"


def hidden_states(chat: Any, steps: int, seed: int = 0) -> torch.Tensor:
    """GPT hidden states as the speech path hands them over: made in inference mode."""
    generator = torch.Generator().manual_seed(seed)
    with torch.inference_mode():
        return torch.randn(steps, chat.config.gpt.hidden_size, generator=generator)


def compile_that_fails(real: Callable[..., Any]) -> Callable[..., Any]:
    """torch.compile whose compiled code raises at its first call, as a backend that
    cannot compile the graph does (BackendCompilerFailed comes at the first call)."""

    def fake(target: Any, **kwargs: Any) -> Callable[..., Any]:
        def compiled(*args: Any) -> Any:
            raise RuntimeError("the backend could not compile the graph")

        return compiled

    return fake


def compile_with(backend: str, real: Callable[..., Any]) -> Callable[..., Any]:
    def patched(target: Any, **kwargs: Any) -> Any:
        return real(target, **{**kwargs, "backend": backend})

    return patched


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_a_failed_compile_speaks_through_the_eager_modules_with_one_warning(
    chat: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Compiled code that raises at its first call: vocode (one window, then a batch of
    windows) gives the eager vocoder's samples exactly; one WARNING line for Decoder and
    Vocos together, naming the failure and the flag."""
    eager = Vocoder(chat, ChatTTSSettings())
    monkeypatch.setattr(torch, "compile", compile_that_fails(torch.compile))
    compiled = Vocoder(chat, ChatTTSSettings(compile_vocoder=True))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for steps in (40, 56):
            hiddens = hidden_states(chat, steps)
            np.testing.assert_array_equal(compiled.vocode(hiddens), eager.vocode(hiddens))
        windows = [hidden_states(chat, 30, seed) for seed in range(3)]
        for got, want in zip(
            compiled.vocode_many(windows), eager.vocode_many(windows), strict=True
        ):
            np.testing.assert_array_equal(got, want)
    (warning,) = warnings_of(caplog)
    assert "could not compile the graph" in warning and "--compile-vocoder false" in warning


def test_a_compile_failing_inside_torch_leaves_the_eager_modules_working_at_once(
    chat: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The failure the H200 met, on the CPU: the decorated forwards compiled as they are
    (AOT autograd fails on the view made in inference mode). The very call that failed
    is answered by the eager modules, with the eager samples (torch leaves a dispatch key
    set behind such a failure, which would fail every eager call on the thread until the
    caller's inference mode ended), and one warning names the failure."""
    real = torch.compile

    def as_decorated(target: Any, **kwargs: Any) -> Any:
        module = target.args[0] if hasattr(target, "args") else target  # undo the unwrapping
        return real(module, **{**kwargs, "backend": "aot_eager"})

    eager = Vocoder(chat, ChatTTSSettings())
    monkeypatch.setattr(torch, "compile", as_decorated)
    torch._dynamo.reset()
    compiled = Vocoder(chat, ChatTTSSettings(compile_vocoder=True))
    hiddens = hidden_states(chat, 40)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        np.testing.assert_array_equal(compiled.vocode(hiddens), eager.vocode(hiddens))
        np.testing.assert_array_equal(compiled.vocode(hiddens), eager.vocode(hiddens))
    (warning,) = warnings_of(caplog)
    assert "inference tensor" in warning or "UntypedStorage" in warning, warning


def test_the_vocoder_compiles_in_spite_of_chattts_inference_mode(
    chat: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The real torch.compile through AOT autograd (backend aot_eager: the stage where
    torch 2.11-2.13 fail on a view made in inference mode, as the H200 did with
    inductor), on hidden states made in inference mode: no fallback, no warning, and the
    samples of the eager vocoder, for windows of two lengths and a batch."""
    eager = Vocoder(chat, ChatTTSSettings())
    monkeypatch.setattr(torch, "compile", compile_with("aot_eager", torch.compile))
    torch._dynamo.reset()
    compiled = Vocoder(chat, ChatTTSSettings(compile_vocoder=True))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for steps in (40, 56):
            hiddens = hidden_states(chat, steps)
            np.testing.assert_allclose(compiled.vocode(hiddens), eager.vocode(hiddens), atol=1e-5)
        windows = [hidden_states(chat, 30, seed) for seed in range(3)]
        for got, want in zip(
            compiled.vocode_many(windows), eager.vocode_many(windows), strict=True
        ):
            np.testing.assert_allclose(got, want, atol=1e-5)
    assert warnings_of(caplog) == []
    assert compiled._decoder.compiled and compiled._backbone.compiled  # type: ignore[union-attr]


def test_a_server_whose_vocoder_compile_fails_answers_every_request(
    tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """--compile-vocoder with compilation failing: the server starts, warms up and speaks
    (200, audio) on the eager modules; the failure is one WARNING line in its log."""
    monkeypatch.setattr(torch, "compile", compile_that_fails(torch.compile))
    settings = Settings(engine="chattts", model_dir=tiny_checkpoint)

    def factory() -> tuple[object, bool, None]:
        from server.engines.chattts.engine import ChatTTSEngine

        options = ChatTTSSettings(device="cpu", compile_vocoder=True, max_new_token=48,
                                 min_new_token=48)  # fmt: skip
        return ChatTTSEngine(tiny_checkpoint, options), False, None

    with (
        caplog.at_level(logging.WARNING, logger=LOGGER),
        run_live_server(
            settings,
            engine=factory,  # type: ignore[arg-type]
        ) as live,
    ):
        for _ in range(2):
            answer = httpx.post(live.base_url + "/v1/tts", json={"text": "你好。", "format": "pcm"},
                                timeout=TIMEOUT_S)  # fmt: skip
            assert answer.status_code == 200 and len(answer.content) > 24000
    assert len(warnings_of(caplog)) == 1
