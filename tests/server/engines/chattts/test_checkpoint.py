"""The random-weight checkpoint generator and the production loader, on real ChatTTS."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

import ChatTTS
import pytest
from ChatTTS.config import Config
from transformers import BertTokenizer

from server.engines.chattts.checkpoint import (
    ASSET_FILES,
    CONTROL_TOKENS,
    MANIFEST_NAME,
    ModelLoadError,
    apply_config_overrides,
    load_chat,
    main,
    read_manifest,
    write_checkpoint,
)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def damaged_copy(tiny_checkpoint: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_checkpoint, tmp_path / "copy"))


def test_layout_is_chattts_asset_layout_plus_manifest(tiny_checkpoint: Path) -> None:
    """The nine files ChatTTS hashes exist under asset/, next to the manifest."""
    for name in ASSET_FILES:
        assert (tiny_checkpoint / name).is_file(), name
    assert (tiny_checkpoint / MANIFEST_NAME).is_file()
    total_bytes = sum((tiny_checkpoint / name).stat().st_size for name in ASSET_FILES)
    assert total_bytes < 20_000_000


def test_manifest_records_hashes_and_random_weights(tiny_checkpoint: Path) -> None:
    """The manifest holds each file's sha256, the dimensions, and random_weights: true."""
    manifest = read_manifest(tiny_checkpoint)
    assert manifest is not None
    assert manifest["random_weights"] is True
    assert manifest["sha256"] == {name: _sha256(tiny_checkpoint / name) for name in ASSET_FILES}
    assert manifest["config"]["gpt"]["hidden_size"] == 64


def test_same_seed_writes_same_weights(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """Writing with the same seed reproduces every file; another seed changes the weights."""
    same = read_manifest(write_checkpoint(tmp_path / "same", seed=0))
    other = read_manifest(write_checkpoint(tmp_path / "other", seed=1))
    original = read_manifest(tiny_checkpoint)
    assert same is not None and other is not None and original is not None
    assert same["sha256"] == original["sha256"]
    assert (
        other["sha256"]["asset/gpt/model.safetensors"]
        != (original["sha256"]["asset/gpt/model.safetensors"])
    )


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640)])
def test_every_file_gets_the_mode_a_new_file_gets(tmp_path: Path, umask: int, mode: int) -> None:
    """Weights are as readable as the manifest (0644 under umask 022: a non-root server
    user can load what root wrote), not 0600."""
    previous = os.umask(umask)
    try:
        root = write_checkpoint(tmp_path / "modes")
    finally:
        os.umask(previous)
    modes = {
        str(path.relative_to(root)): oct(path.stat().st_mode & 0o777)
        for path in root.rglob("*")
        if path.is_file()
    }
    assert len(modes) == len(ASSET_FILES) + 1
    assert modes == dict.fromkeys(modes, oct(mode))


def test_tokenizer_has_chattts_control_token_ids(tiny_checkpoint: Path) -> None:
    """Control tokens get the real checkpoint's ids and Chinese text has no [UNK]."""
    tokenizer = BertTokenizer.from_pretrained(tiny_checkpoint / "asset/tokenizer")
    assert len(tokenizer) == Config().gpt.num_text_tokens == 21178
    ids = tokenizer.convert_tokens_to_ids(list(CONTROL_TOKENS))
    assert ids == list(range(21128, 21178))
    assert tokenizer.convert_tokens_to_ids(["[Stts]", "[spk_emb]", "[speed_5]"]) == [
        21131, 21143, 21173,
    ]  # fmt: skip
    encoded = tokenizer(
        "[Stts][speed_5]今天天气很好，我们去公园。Hello ChatTTS[uv_break]", add_special_tokens=False
    )["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(encoded)
    assert "[UNK]" not in tokens
    assert tokens[:4] == ["[Stts]", "[speed_5]", "今", "天"]
    assert "[uv_break]" in tokens


def test_chattts_custom_load_accepts_checkpoint(tiny_checkpoint: Path) -> None:
    """ChatTTS's own Chat.load(source="custom") loads it given the manifest's config."""
    manifest = read_manifest(tiny_checkpoint)
    assert manifest is not None
    chat = ChatTTS.Chat()
    chat.config = apply_config_overrides(chat.config, manifest["config"])
    chat.sha256_map = {
        "sha256_" + name.replace("/", "_").replace(".", "_"): digest
        for name, digest in manifest["sha256"].items()
    }
    assert chat.load(source="custom", custom_path=str(tiny_checkpoint), device="cpu")
    assert chat.has_loaded(use_decoder=True)


def test_load_chat_returns_loaded_chat(tiny_checkpoint: Path) -> None:
    """load_chat gives a loaded Chat whose dimensions come from the manifest."""
    chat = load_chat(tiny_checkpoint, device="cpu")
    assert chat.has_loaded(use_decoder=True)
    assert chat.config.gpt.hidden_size == 64
    assert isinstance(chat.sample_random_speaker(), str)


def test_overrides_do_not_leak_into_other_configs() -> None:
    """Applying overrides never changes ChatTTS's shared nested Config defaults."""
    changed = apply_config_overrides(
        Config(), {"gpt": {"hidden_size": 8}, "dvae": {"vq": {"levels": [3, 3]}}}
    )
    assert changed.gpt.hidden_size == 8
    assert changed.dvae.vq.levels == (3, 3)
    assert Config().gpt.hidden_size == 768
    assert Config().dvae.vq.levels == (5, 5, 5, 5)
    assert dataclasses.asdict(Config()) == dataclasses.asdict(ChatTTS.Chat().config)


def test_unknown_override_key_is_rejected() -> None:
    """A misspelt manifest key raises instead of being silently ignored."""
    with pytest.raises(ValueError, match=r"config\.gpt\.hiden_size"):
        apply_config_overrides(Config(), {"gpt": {"hiden_size": 8}})


def test_missing_directory_raises(tmp_path: Path) -> None:
    """A model directory that does not exist raises ModelLoadError naming it."""
    missing = tmp_path / "nowhere"
    with pytest.raises(ModelLoadError, match=str(missing)):
        load_chat(missing, device="cpu")


@pytest.mark.parametrize(
    "name", ["asset/gpt/model.safetensors", "asset/tokenizer/special_tokens_map.json"]
)
def test_missing_file_raises_naming_it(damaged_copy: Path, name: str) -> None:
    """A missing asset file raises ModelLoadError naming that file's path."""
    (damaged_copy / name).unlink()
    with pytest.raises(ModelLoadError, match=str(damaged_copy / name)):
        load_chat(damaged_copy, device="cpu")


def test_corrupt_file_raises(damaged_copy: Path) -> None:
    """A file whose sha256 differs from the manifest makes ChatTTS refuse: ModelLoadError."""
    with (damaged_copy / "asset/Embed.safetensors").open("r+b") as file:
        file.seek(-1, 2)
        last = file.read(1)
        file.seek(-1, 2)
        file.write(bytes([last[0] ^ 0xFF]))
    with pytest.raises(ModelLoadError, match=str(damaged_copy)):
        load_chat(damaged_copy, device="cpu")


def test_without_manifest_chattts_defaults_apply(damaged_copy: Path) -> None:
    """Without a manifest the real checkpoint's hashes apply, so random weights are refused."""
    (damaged_copy / MANIFEST_NAME).unlink()
    with pytest.raises(ModelLoadError, match="refused"):
        load_chat(damaged_copy, device="cpu")


def test_bad_manifest_raises(damaged_copy: Path) -> None:
    """An unreadable manifest raises ModelLoadError naming it."""
    (damaged_copy / MANIFEST_NAME).write_text("{not json", encoding="utf-8")
    with pytest.raises(ModelLoadError, match=MANIFEST_NAME):
        load_chat(damaged_copy, device="cpu")


def test_cli_writes_checkpoint_and_says_it_is_noise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m server.engines.chattts.checkpoint DIR --seed N` writes a checkpoint and warns it is noise."""
    assert main([str(tmp_path / "cli"), "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "cli") in out
    assert "noise" in out
    manifest = json.loads((tmp_path / "cli" / MANIFEST_NAME).read_text(encoding="utf-8"))
    assert manifest["seed"] == 3 and manifest["size"] == "tiny"
