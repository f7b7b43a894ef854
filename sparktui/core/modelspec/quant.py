"""Bytes per parameter from a checkpoint's quantization config (config.json quantization_config
or hf_quant_config.json): NVFP4, MXFP4, FP8, AWQ, GPTQ, compressed-tensors, modelopt mixed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktui.core.modelspec.weight_format import ALGO_BYTES, int_bytes


def quant_info(config: Mapping[str, Any], hf_quant: Mapping[str, Any] | None) -> dict[str, Any]:
    """Normalise quantization_config / hf_quant_config.json into one dict."""
    q = dict(config.get("quantization_config") or {})
    if hf_quant:
        inner = hf_quant.get("quantization", hf_quant)
        q = {**q, **{k: v for k, v in inner.items()}, "quant_method": q.get("quant_method") or "modelopt"}
    return q


# Weight categories of param_counts. Which modules of a category are quantized, and in which
# format, is weight_format's (per module, from the quantization config); this gives the format's name
# and the bytes of a checkpoint whose config names no modules.
LINEAR = ("attn", "linear_attn", "mamba", "mlp", "experts", "shared", "latent", "mtp")
CATEGORIES = (*LINEAR, "embed", "per_layer_embed", "lm_head", "router", "vision", "conv", "other")


def bytes_per_param(q: Mapping[str, Any], dtype_bytes: int) -> tuple[str | None, dict[str, float]]:
    """(format name, bytes per parameter for each weight category) with every linear module in the
    format; build.py then weighs each module as weight_format says it loads."""
    plain = {cat: float(dtype_bytes) for cat in CATEGORIES}
    if not q:
        return None, plain
    method = str(q.get("quant_method") or "").lower()
    algo = str(q.get("quant_algo") or "").upper()
    result = dict(plain)

    def apply(fmt_bytes: float, cats: tuple[str, ...] = LINEAR) -> None:
        for cat in cats:
            result[cat] = fmt_bytes

    name: str | None
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = int(q.get("bits") or q.get("w_bit") or 4)
        group = q.get("group_size") or q.get("q_group_size") or 128
        apply(int_bytes(bits, int(group)))
        name = f"{method.split('_')[0]} int{bits}"
    elif method == "mxfp4":
        apply(ALGO_BYTES["MXFP4"], ("experts",))  # gpt-oss: only the experts are mxfp4
        name = "mxfp4"
    elif method == "fp8" or algo in ("FP8", "FP8_PB_WO", "FP8_BLOCK"):
        apply(1.0)
        name = "fp8"
    elif algo == "MIXED_PRECISION" or (method == "modelopt" and isinstance(q.get("quantized_layers"), Mapping)):
        layers = q.get("quantized_layers") or {}
        name = "mixed (" + "/".join(sorted({str((i or {}).get("quant_algo")) for i in layers.values()})) + ")"
    elif algo in ALGO_BYTES:
        apply(ALGO_BYTES[algo])
        name = algo.lower()
    elif method in ("compressed-tensors", "compressed_tensors", "modelopt") and q.get("config_groups"):
        groups = list((q.get("config_groups") or {}).values())
        weights = (groups[0] or {}).get("weights") or {}
        bits = int(weights.get("num_bits") or 8)
        kind = weights.get("type", "int")
        group = weights.get("group_size")
        per = (0.5 + 1 / 16) if (bits == 4 and kind == "float") else int_bytes(bits, group) if bits < 8 else 1.0
        apply(per)
        name = f"{'nvfp4' if kind == 'float' and bits == 4 else f'w{bits}'} ({method})"
    elif method in ("bitsandbytes",):
        apply(0.5 + 4 / 64)
        name = "bitsandbytes 4-bit"
    else:
        return method or None, plain
    return name, result
