"""ChatTTS checkpoints: a random-weight generator and the one production loading path.

A generated checkpoint has ChatTTS's exact asset layout (the nine files that
``Chat.load(source="custom")`` sha256-checks) plus a manifest, ``chattts-stream.json``,
holding the config overrides (model dimensions) and the files' hashes, because ChatTTS
checks files against ``chat.sha256_map`` and builds modules from ``chat.config``:

    {"format": 1, "random_weights": true, "size": "tiny", "seed": 0,
     "config": {"gpt": {"hidden_size": 64, ...}, ...},
     "sha256": {"asset/gpt/config.json": "…", ...}}

:func:`load_chat` applies a manifest when there is one (to the fresh ``Chat`` instance,
never to the package) and otherwise loads with ChatTTS's defaults, which is right for the
real weights from HF ``2Noise/ChatTTS``.

Random weights make noise, not speech; they exist so the real ChatTTS code path (and its
speed, which depends on the architecture, not on the weight values) runs offline.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import json
import logging
import string
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import ChatTTS
import numpy as np
import pybase16384 as b14
import torch
from ChatTTS.config import Config
from safetensors.torch import save_file
from tokenizers import AddedToken
from transformers import BertTokenizer, LlamaConfig, LlamaModel

from server.engines.chattts.manifest import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    ModelDirectory,
    ModelLoadError,
    read_manifest,
)

logger = logging.getLogger(__name__)

__all__ = [
    "ASSET_FILES",
    "MANIFEST_NAME",
    "ModelLoadError",
    "load_chat",
    "main",
    "read_manifest",
    "write_checkpoint",
]

#: The nine files ``Chat.load(source="custom")`` hashes, relative to the model directory.
ASSET_FILES: tuple[str, ...] = (
    "asset/Decoder.safetensors",
    "asset/DVAE.safetensors",
    "asset/Embed.safetensors",
    "asset/Vocos.safetensors",
    "asset/gpt/config.json",
    "asset/gpt/model.safetensors",
    "asset/tokenizer/special_tokens_map.json",
    "asset/tokenizer/tokenizer_config.json",
    "asset/tokenizer/tokenizer.json",
)

#: ChatTTS's control tokens, in ChatTTS's order: real checkpoints give them ids
#: 21128..21177 (``[Stts]`` = 21131, ``[spk_emb]`` = 21143, ``[speed_5]`` = 21173), and
#: refine output drops every id >= ``[break_0]``, so the order matters.
CONTROL_TOKENS: tuple[str, ...] = (
    "[Sasr]", "[Pasr]", "[Easr]", "[Stts]", "[Ptts]", "[Etts]",
    "[Sbreak]", "[Pbreak]", "[Ebreak]", "[uv_break]", "[v_break]",
    "[lbreak]", "[llbreak]", "[undefine]", "[laugh]", "[spk_emb]", "[empty_spk]",
    "[music]", "[pure]",
    *(f"[break_{i}]" for i in range(8)),
    *(f"[laugh_{i}]" for i in range(3)),
    *(f"[oral_{i}]" for i in range(10)),
    *(f"[speed_{i}]" for i in range(10)),
)  # fmt: skip

#: BERT-chinese's base vocabulary size; the control tokens come after it.
_BASE_VOCAB_SIZE = 21128
_BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_CJK_PUNCTUATION = "，。、！？：；“”‘’（）《》【】…—·～"

#: Dimensions of the "tiny" checkpoint. Fixed by ChatTTS: 100 mel channels (hard-coded in
#: DVAE), num_vq = G*R = 4, 626 audio tokens (5^4 codes + EOS), decoder idim = odim =
#: GPT hidden / 2 (each GPT step's hidden state becomes two mel frames), DVAE vq.dim =
#: 2 * its decoder idim, and a speaker statistic of 2 * GPT hidden float16 values.
_TINY_GPT_HIDDEN = 64
_TINY_OVERRIDES: dict[str, Any] = {
    "gpt": {
        "hidden_size": _TINY_GPT_HIDDEN,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
    },
    "embed": {"hidden_size": _TINY_GPT_HIDDEN},
    "decoder": {
        "idim": _TINY_GPT_HIDDEN // 2,
        "odim": _TINY_GPT_HIDDEN // 2,
        "hidden": 64,
        "n_layer": 2,
        "bn_dim": 32,
    },
    "dvae": {
        "encoder": {"idim": 32, "odim": 64, "hidden": 32, "n_layer": 1, "bn_dim": 16},
        "decoder": {"idim": 32, "odim": 32, "hidden": 32, "n_layer": 1, "bn_dim": 16},
        "vq": {"dim": 64},
    },
    "vocos": {
        "backbone": {"init_args": {"dim": 64, "intermediate_dim": 128, "num_layers": 1}},
        "head": {"init_args": {"dim": 64}},
    },
}


def _size_overrides(size: str) -> dict[str, Any]:
    if size == "full":
        return {}
    overrides = copy.deepcopy(_TINY_OVERRIDES)
    if size == "deep":  # ChatTTS's real layer counts on the tiny widths
        overrides["gpt"]["num_hidden_layers"] = 20
        overrides["decoder"]["n_layer"] = 12
        overrides["vocos"]["backbone"]["init_args"]["num_layers"] = 8
    return overrides


def write_checkpoint(
    path: str | Path, *, size: Literal["tiny", "deep", "full"] = "tiny", seed: int = 0
) -> Path:
    """Write a random-weight ChatTTS checkpoint plus its manifest under ``path``.

    ``"tiny"`` (GPT 64 hidden x 2 layers, ~12 MB) is for tests; ``"full"`` has ChatTTS's
    stock dimensions (GPT 768 x 20, ~1 GB) for honest speed benchmarks; ``"deep"`` has
    the tiny widths with ChatTTS's real layer counts (GPT 20, Decoder 12, Vocos 8), for
    measuring the host's work per step (bench/host_overhead.py). The same ``seed``
    writes the same weights. Returns ``path`` as a :class:`Path`.
    """
    if size not in ("tiny", "deep", "full"):
        raise ValueError(f"size must be 'tiny', 'deep' or 'full', not {size!r}")
    root = Path(path)
    overrides = _size_overrides(size)
    if size != "full":
        overrides["spk_stat"] = _random_speaker_stat(_TINY_GPT_HIDDEN, seed)
    config = apply_config_overrides(Config(), overrides)

    asset = root / "asset"
    (asset / "gpt").mkdir(parents=True, exist_ok=True)
    (asset / "tokenizer").mkdir(parents=True, exist_ok=True)

    # fork_rng: generating weights must not move the caller's global torch RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        _write_weights(asset, config)
    _write_tokenizer(asset / "tokenizer")
    _give_weights_the_default_mode(asset)

    manifest = {
        "format": MANIFEST_FORMAT,
        "random_weights": True,
        "size": size,
        "seed": seed,
        "config": overrides,
        "sha256": {name: _sha256(root / name) for name in ASSET_FILES},
    }
    (root / MANIFEST_NAME).write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    logger.info("wrote %s random-weight ChatTTS checkpoint (seed %s) to %s", size, seed, root)
    return root


def load_chat(
    model_dir: str | Path | ModelDirectory, *, device: str, compile: bool = False
) -> ChatTTS.Chat:
    """Load a ChatTTS model directory onto ``device``: the one production loading path.

    With a manifest (a generated checkpoint) its config overrides and hashes are applied
    to the new ``Chat`` instance; without one (the real weights from ``2Noise/ChatTTS``)
    ChatTTS's own defaults apply. Raises :class:`ModelLoadError` naming the path when the
    directory or a file is missing, or when ChatTTS refuses the files. A
    :class:`ModelDirectory` brings the manifest start-up read, which is not read again.
    """
    model = model_dir if isinstance(model_dir, ModelDirectory) else ModelDirectory.read(model_dir)
    root = model.path
    if not root.is_dir():
        raise ModelLoadError(f"model directory {root} does not exist")
    missing = [name for name in ASSET_FILES if not (root / name).is_file()]
    if missing:
        raise ModelLoadError(
            f"model directory {root} is missing {', '.join(str(root / m) for m in missing)}"
        )
    manifest = model.checked_manifest()

    chat = ChatTTS.Chat(logging.getLogger("ChatTTS"))
    if manifest is not None:
        try:
            chat.config = apply_config_overrides(chat.config, manifest.get("config", {}))
        except (TypeError, ValueError) as exc:
            raise ModelLoadError(f"bad config in {root / MANIFEST_NAME}: {exc}") from exc
        chat.sha256_map = {
            **chat.sha256_map,
            **{_sha256_key(name): digest for name, digest in manifest["sha256"].items()},
        }
        if manifest.get("random_weights"):
            logger.warning("%s has random weights: its audio is noise", root)
    started = time.perf_counter()
    if not chat.load(
        source="custom", custom_path=str(root), device=torch.device(device), compile=compile
    ):
        raise ModelLoadError(
            f"ChatTTS refused the model in {root} (a sha256 mismatch or an incomplete "
            "load; ChatTTS's log above names the file)"
        )
    logger.info(
        "loaded ChatTTS from %s on %s in %.2f s", root, device, time.perf_counter() - started
    )
    return chat


def apply_config_overrides(config: Any, overrides: Mapping[str, Any]) -> Any:
    """Return a deep copy of a ChatTTS ``Config`` with nested ``overrides`` applied.

    The copy matters: ``Config()``'s nested defaults are objects shared by every
    instance, so mutating them in place would leak into every other ``Chat``. Unknown
    keys raise :class:`ValueError` so a typo in a manifest cannot be silently ignored.
    """
    result = copy.deepcopy(config)
    _apply_in_place(result, overrides, "config")
    return result


def _apply_in_place(node: Any, overrides: Mapping[str, Any], where: str) -> None:
    for key, value in overrides.items():
        if not dataclasses.is_dataclass(node) or not hasattr(node, key):
            raise ValueError(f"unknown config key {where}.{key}")
        current = getattr(node, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, Mapping):
                raise TypeError(f"{where}.{key} needs a mapping, not {value!r}")
            _apply_in_place(current, value, f"{where}.{key}")
        elif isinstance(current, tuple):
            setattr(node, key, tuple(value))  # JSON has no tuples (VQ levels)
        else:
            setattr(node, key, value)


def _write_weights(asset: Path, config: Any) -> None:
    # Build ChatTTS's own modules from the config and save their state dicts, so the
    # keys and shapes are exactly what Chat.load() will ask for.
    from ChatTTS.model import DVAE, Embed
    from vocos import Vocos
    from vocos.pretrained import instantiate_class

    vocos = Vocos(
        feature_extractor=instantiate_class(
            args=(), init=dataclasses.asdict(config.vocos.feature_extractor)
        ),
        backbone=instantiate_class(args=(), init=dataclasses.asdict(config.vocos.backbone)),
        head=instantiate_class(args=(), init=dataclasses.asdict(config.vocos.head)),
    )
    _save(vocos, asset / "Vocos.safetensors")

    dvae = DVAE(
        decoder_config=dataclasses.asdict(config.dvae.decoder),
        encoder_config=dataclasses.asdict(config.dvae.encoder),
        vq_config=dataclasses.asdict(config.dvae.vq),
        dim=config.dvae.decoder.idim,
    )
    _save(dvae, asset / "DVAE.safetensors")

    decoder = DVAE(decoder_config=dataclasses.asdict(config.decoder), dim=config.decoder.idim)
    _save(decoder, asset / "Decoder.safetensors")

    embed = Embed(
        config.embed.hidden_size,
        config.embed.num_audio_tokens,
        config.embed.num_text_tokens,
        config.embed.num_vq,
    )
    _save(embed, asset / "Embed.safetensors")

    gpt = config.gpt
    llama_config = LlamaConfig(
        hidden_size=gpt.hidden_size,
        intermediate_size=gpt.intermediate_size,
        num_attention_heads=gpt.num_attention_heads,
        num_hidden_layers=gpt.num_hidden_layers,
        max_position_embeddings=gpt.max_position_embeddings,
        use_cache=gpt.use_cache,
        # ChatTTS deletes LlamaModel.embed_tokens after loading (tokens are embedded
        # through Embed.safetensors), so one row is enough and saves ~100 MB at full size.
        vocab_size=1,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    LlamaModel(llama_config).save_pretrained(asset / "gpt")


def _give_weights_the_default_mode(asset: Path) -> None:
    # safetensors writes its files 0600 whatever the umask, so a checkpoint written as
    # root is unreadable for the image's non-root user: give them the mode any new file
    # gets here (0644 under the usual umask 022), read off a probe file.
    probe = asset / ".mode-probe"
    probe.touch()
    try:
        mode = probe.stat().st_mode & 0o777
    finally:
        probe.unlink()
    for weights in asset.rglob("*.safetensors"):
        weights.chmod(mode)


def _save(module: torch.nn.Module, target: Path) -> None:
    state = {key: tensor.detach().contiguous() for key, tensor in module.state_dict().items()}
    save_file(state, str(target))


def _write_tokenizer(target: Path) -> None:
    vocab: list[str] = [*_BERT_SPECIALS]
    vocab += [chr(code) for code in range(0x4E00, 0xA000)]  # CJK Unified Ideographs
    # Lower case only: the tokenizer lower-cases; "##x" pieces let whole words tokenise.
    vocab += [*string.ascii_lowercase, *(f"##{c}" for c in string.ascii_lowercase)]
    vocab += [*string.digits, *(f"##{c}" for c in string.digits)]
    vocab += [*string.punctuation, *_CJK_PUNCTUATION]
    if len(vocab) > _BASE_VOCAB_SIZE:
        raise AssertionError(f"base vocabulary has {len(vocab)} > {_BASE_VOCAB_SIZE} entries")
    # Pad like BERT's [unusedN] so the control tokens get the real checkpoint's ids.
    vocab += [f"[unused{i}]" for i in range(_BASE_VOCAB_SIZE - len(vocab))]
    # In transformers 5 BertTokenizer is the tokenizers-backed class (BertTokenizerFast,
    # which ChatTTS loads with, is an alias); it silently ignores vocab_file=..., so
    # pass the vocabulary as a dict.
    tokenizer = BertTokenizer(vocab={token: i for i, token in enumerate(vocab)})
    # normalized=False: matched on the raw text, before lower-casing would break "[Stts]".
    tokenizer.add_tokens(
        [AddedToken(token, special=True, normalized=False) for token in CONTROL_TOKENS],
        special_tokens=True,
    )
    tokenizer.save_pretrained(str(target))
    # transformers 5 no longer writes special_tokens_map.json; ChatTTS hashes it anyway.
    special_tokens_map = {
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
        "pad_token": "[PAD]",
        "sep_token": "[SEP]",
        "unk_token": "[UNK]",
        "additional_special_tokens": list(CONTROL_TOKENS),
    }
    (target / "special_tokens_map.json").write_text(
        json.dumps(special_tokens_map, indent=2) + "\n", encoding="utf-8"
    )


def _random_speaker_stat(dim: int, seed: int) -> str:
    # ChatTTS's spk_stat: base16384 of float16 [std (dim), mean (dim)]; speakers are
    # sampled as randn(dim) * std + mean.
    rng = np.random.default_rng(seed)
    std = rng.uniform(0.5, 1.5, dim)
    mean = rng.normal(0.0, 0.1, dim)
    stat: str = b14.encode_to_string(np.concatenate([std, mean]).astype(np.float16).tobytes())
    return stat


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sha256_key(name: str) -> str:
    # ChatTTS's sha256_map key for a file: "asset/gpt/config.json" ->
    # "sha256_asset_gpt_config_json".
    return "sha256_" + name.replace("/", "_").replace(".", "_")


def main(argv: list[str] | None = None) -> int:
    """``python -m server.engines.chattts.checkpoint DIR [--full] [--seed N]``: write a checkpoint."""
    parser = argparse.ArgumentParser(
        prog="python -m server.engines.chattts.checkpoint",
        description="Write a random-weight ChatTTS checkpoint (noise, not speech) in "
        "ChatTTS's asset layout, for tests and speed benchmarks.",
    )
    parser.add_argument("directory", type=Path, help="where to write the checkpoint")
    parser.add_argument(
        "--full", action="store_true",
        help="ChatTTS's real dimensions (GPT 768 x 20 layers, ~1 GB) instead of tiny ones",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    root = write_checkpoint(args.directory, size="full" if args.full else "tiny", seed=args.seed)
    elapsed_s = time.perf_counter() - started
    total_bytes = sum((root / name).stat().st_size for name in ASSET_FILES)
    print(
        f"wrote a {'full' if args.full else 'tiny'} ChatTTS checkpoint (seed {args.seed}) "
        f"to {root} in {elapsed_s:.1f} s: {len(ASSET_FILES)} files, "
        f"{total_bytes / 1e6:.1f} MB, manifest {root / MANIFEST_NAME}"
    )
    print(
        "NOTE: the weights are random. This checkpoint runs ChatTTS's real code path at "
        "its real speed, but the audio it makes is noise, not speech."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
