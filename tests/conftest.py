"""Shared fixtures. Add new ones below; heavy imports stay inside the fixtures so that
suites which do not use them (tests/streaming/) never import torch or ChatTTS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from server.engines.chattts.settings import ChatTTSSettings

if TYPE_CHECKING:
    from server.engines.chattts.engine import ChatTTSEngine
    from server.engines.select import EngineFactory


@pytest.fixture(autouse=True, scope="session")
def _voices_in_a_temporary_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Servers the tests start keep their created voices in a temporary directory, not
    in the user's ~/.local/share (a test that checks persistence passes its own)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
    yield
    patch.undo()


#: GPT steps per synthesis for the shared engine: min = max makes every run the same
#: length (random weights end at random), 72 steps = 3 chunks of 24 = ~1.5 s of audio.
CHATTTS_TEST_STEPS = 72


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight ChatTTS checkpoint with tiny dimensions (seed 0), written once.

    Read-only by convention: a test that damages files copies it first.
    """
    from server.engines.chattts.checkpoint import write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("chattts-tiny"), size="tiny", seed=0)


@pytest.fixture(scope="session")
def chattts_engine(tiny_checkpoint: Path) -> Iterator[ChatTTSEngine]:
    """One warmed CPU ChatTTSEngine on the tiny checkpoint, fixed-length runs, shared."""
    from server.engines.chattts.engine import ChatTTSEngine

    engine = ChatTTSEngine(
        tiny_checkpoint,
        ChatTTSSettings(
            device="cpu", max_new_token=CHATTTS_TEST_STEPS, min_new_token=CHATTTS_TEST_STEPS
        ),
    )
    engine.warm_up()
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def chat(tiny_checkpoint: Path) -> Iterator[Any]:
    """A ChatTTS ``Chat`` on the tiny checkpoint, loaded through the production path, one
    per test module (tests that cast or damage the model load their own)."""
    from server.engines.chattts.checkpoint import load_chat

    chat = load_chat(tiny_checkpoint, device="cpu")
    yield chat
    chat.unload()


def sample_speaker(chat: Any, seed: int = 3) -> str:
    """A ChatTTS speaker string sampled with ``seed``, leaving the global RNG as it was."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        voice: str = chat.sample_random_speaker()
    return voice


@pytest.fixture(scope="module")
def speaker(chat: Any) -> str:
    """A fixed sampled ChatTTS speaker string (seed 3)."""
    return sample_speaker(chat)


def fixed_length_chattts(checkpoint: Path, steps: int = CHATTTS_TEST_STEPS) -> EngineFactory:
    """An engine factory for run_live_server: ChatTTS on CPU, every segment ``steps`` long."""

    def factory() -> tuple[ChatTTSEngine, bool, None]:
        from server.engines.chattts.engine import ChatTTSEngine

        engine = ChatTTSEngine(
            checkpoint, ChatTTSSettings(device="cpu", max_new_token=steps, min_new_token=steps)
        )
        return engine, False, None

    return factory
