"""Precision of ChatTTS's modules: half-precision GPT casts and INT8 linear layers."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch

logger = logging.getLogger(__name__)

__all__ = ["DTYPES", "cast_gpt", "quantize_linear"]

#: The option names of the dtypes a GPT or Decoder may run in.
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def cast_gpt(model: Any, dtype: torch.dtype) -> None:
    """Cast ChatTTS's ``LlamaModel`` to ``dtype`` in place, its rotary frequencies excepted.

    ``Module.to`` casts every floating buffer, the rotary embedding's ``inv_freq``
    included: in bfloat16 its 8-bit mantissa turns position 2559 by up to a radian.
    The rotary forward computes in float32 from it anyway, so it stays float32 (as a
    model loaded in half precision by transformers keeps it).
    """
    rotary = model.rotary_emb
    frequencies = {
        name: getattr(rotary, name).detach().float().clone()
        for name in ("inv_freq", "original_inv_freq")
        if isinstance(getattr(rotary, name, None), torch.Tensor)
    }
    if any(t.dtype != torch.float32 for t in (getattr(rotary, n) for n in frequencies)):
        logger.warning("the GPT's rotary frequencies were already cast; precision is lost")
    model.to(dtype=dtype)
    for name, tensor in frequencies.items():
        setattr(rotary, name, tensor)


def quantize_linear(model: Any) -> None:
    """INT8 weights for the linear layers of ``model`` (ChatTTS's GPT, or its vocoder), in place.

    CPU: PyTorch's dynamic quantisation (int8 weights, activations quantised per call),
    the only INT8 path that paid on these CPUs (docs/batching.md); torch marks it
    deprecated in favour of torchao, whose int8 weight-only kernels were no faster here.
    CUDA: torchao's ``Int8WeightOnlyConfig`` (needs the torchao package). The embeddings
    and ChatTTS's output heads stay in float (the GPT's), as do convolutions (the
    vocoder's: its ConvNeXt blocks' pointwise layers are the linears).
    """
    device = next(model.parameters()).device
    if device.type == "cuda":
        try:
            from torchao.quantization import Int8WeightOnlyConfig, quantize_
        except ImportError as exc:  # pragma: no cover - CUDA hosts only
            raise RuntimeError("gpt_quantization int8 on CUDA needs torchao installed") from exc
        quantize_(model, Int8WeightOnlyConfig())  # pragma: no cover
        return  # pragma: no cover
    with warnings.catch_warnings():
        # "deprecated ... migrate to torchao": still the fastest CPU path (measured).
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", "torch.quantize_per_tensor", UserWarning)
        torch.ao.quantization.quantize_dynamic(
            model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True
        )
