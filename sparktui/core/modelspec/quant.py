"""Bytes per parameter from a checkpoint's quantization config (config.json quantization_config
or hf_quant_config.json): NVFP4, MXFP4, FP8, AWQ, GPTQ, compressed-tensors, modelopt mixed."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


def quant_info(config: Mapping[str, Any], hf_quant: Mapping[str, Any] | None) -> dict[str, Any]:
    """Normalise quantization_config / hf_quant_config.json into one dict."""
    q = dict(config.get("quantization_config") or {})
    if hf_quant:
        inner = hf_quant.get("quantization", hf_quant)
        q = {**q, **{k: v for k, v in inner.items()}, "quant_method": q.get("quant_method") or "modelopt"}
    return q


# bytes per parameter of quantized linear weights, scales included
def _int_bytes(bits: int, group: int | None) -> float:
    # packed ints + an fp16 scale and a packed zero point per group (AWQ / GPTQ)
    return bits / 8 + ((2 + bits / 8) / group if group and group > 0 else 0)


_ALGO_BYTES = {
    "FP8": 1.0,
    "FP8_PB_WO": 1.0,
    "FP8_BLOCK": 1.0,
    "NVFP4": 0.5 + 1 / 16,  # 4-bit + an fp8 scale per 16
    "W4A16_NVFP4": 0.5 + 1 / 16,
    "W4A8_NVFP4_FP8": 0.5 + 1 / 16,
    "MXFP4": 0.5 + 1 / 32,  # 4-bit + an e8m0 scale per 32
    "W4A8_AWQ": _int_bytes(4, 128),
    "W4A16_AWQ": _int_bytes(4, 128),
    "INT8": 1.0,
    "W8A8": 1.0,
}

# Which module names belong to which weight category (for exclude / per-layer quant maps).
# (Nemotron-H names every block `backbone.layers.N.mixer`: Mamba in_proj/out_proj, attention
# q/k/v/o_proj, experts, shared_experts, the router `mixer.gate`, LatentMoE fc1/fc2_latent_proj.)
_CATEGORY_PATTERNS = {
    "lm_head": re.compile(r"lm_head"),
    "embed": re.compile(r"embed_tokens|wte|embeddings$|\.embeddings\b"),
    "router": re.compile(r"(mlp|block_sparse_moe|mixer)\.gate$|router|shared_expert_gate"),
    "vision": re.compile(r"visual|vision|multi_modal_projector|mm_projector|audio"),
    "mtp": re.compile(r"(^|\.)mtp\."),
    "shared": re.compile(r"shared_expert(?!_gate)"),
    "latent": re.compile(r"latent_proj"),
    "experts": re.compile(r"experts"),
    "linear_attn": re.compile(r"linear_attn"),
    "conv": re.compile(r"conv1d"),  # Mamba's short convolution: never a quantized linear layer
    "mamba": re.compile(r"mixer\.(in_proj|out_proj)"),
    "attn": re.compile(r"self_attn|\.attn\.|mixer\.(q_proj|k_proj|v_proj|o_proj)"),
    "mlp": re.compile(r"mlp\.(gate_proj|up_proj|down_proj)|mixer\.(up_proj|down_proj)"),
}
LINEAR = ("attn", "linear_attn", "mamba", "mlp", "experts", "shared", "latent", "mtp")
CATEGORIES = (*LINEAR, "embed", "lm_head", "router", "vision", "conv", "other")
_LAYER_INDEX = re.compile(r"layers\.(\d+)\.")


def category(module: str) -> str | None:
    for cat, pattern in _CATEGORY_PATTERNS.items():
        if pattern.search(module):
            return cat
    return None


def bytes_per_param(
    q: Mapping[str, Any], dtype_bytes: int, layers_per_category: Mapping[str, int] | None = None
) -> tuple[str | None, dict[str, float]]:
    """(format name, bytes per parameter for each weight category). An exclusion list that names
    single layers ("backbone.layers.4.mixer.in_proj") keeps only those layers in the model dtype:
    the category's bytes are mixed by the share of its layers excluded (`layers_per_category`)."""
    plain = {cat: float(dtype_bytes) for cat in CATEGORIES}
    if not q:
        return None, plain
    method = str(q.get("quant_method") or "").lower()
    algo = str(q.get("quant_algo") or "").upper()
    result = dict(plain)

    def apply(fmt_bytes: float, cats: tuple[str, ...] = LINEAR) -> None:
        for cat in cats:
            result[cat] = fmt_bytes

    excluded = list(q.get("exclude_modules") or q.get("ignore") or q.get("modules_to_not_convert") or [])
    name: str | None
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = int(q.get("bits") or q.get("w_bit") or 4)
        group = q.get("group_size") or q.get("q_group_size") or 128
        apply(_int_bytes(bits, int(group)))
        name = f"{method.split('_')[0]} int{bits}"
    elif method == "mxfp4":
        apply(_ALGO_BYTES["MXFP4"], ("experts",))  # gpt-oss: only the experts are mxfp4
        name = "mxfp4"
    elif method == "fp8" or algo in ("FP8", "FP8_PB_WO", "FP8_BLOCK"):
        apply(1.0)
        name = "fp8"
    elif algo == "MIXED_PRECISION" or (method == "modelopt" and isinstance(q.get("quantized_layers"), Mapping)):
        layers = q.get("quantized_layers") or {}
        for module, info in layers.items():
            cat = category(module)
            fmt = str((info or {}).get("quant_algo", "")).upper()
            if cat and fmt in _ALGO_BYTES:
                result[cat] = _ALGO_BYTES[fmt]
        name = "mixed (" + "/".join(sorted({str((i or {}).get("quant_algo")) for i in layers.values()})) + ")"
        excluded = []
    elif algo in _ALGO_BYTES:
        apply(_ALGO_BYTES[algo])
        name = algo.lower()
    elif method in ("compressed-tensors", "compressed_tensors", "modelopt") and q.get("config_groups"):
        groups = list((q.get("config_groups") or {}).values())
        weights = (groups[0] or {}).get("weights") or {}
        bits = int(weights.get("num_bits") or 8)
        kind = weights.get("type", "int")
        group = weights.get("group_size")
        per = (0.5 + 1 / 16) if (bits == 4 and kind == "float") else _int_bytes(bits, group) if bits < 8 else 1.0
        apply(per)
        name = f"{'nvfp4' if kind == 'float' and bits == 4 else f'w{bits}'} ({method})"
    elif method in ("bitsandbytes",):
        apply(0.5 + 4 / 64)
        name = "bitsandbytes 4-bit"
    else:
        return method or None, plain
    excluded_layers: dict[str, set[int]] = {}
    whole: set[str] = set()
    for module in excluded:
        cat = category(str(module))
        if not cat:
            continue
        index = _LAYER_INDEX.search(str(module))
        if index is None or not layers_per_category or not layers_per_category.get(cat):
            whole.add(cat)
        else:
            excluded_layers.setdefault(cat, set()).add(int(index.group(1)))
    for cat in whole:
        result[cat] = float(dtype_bytes)
    for cat, indices in excluded_layers.items():
        if cat in whole or not layers_per_category:
            continue
        share = min(1.0, len(indices) / layers_per_category[cat])
        result[cat] = result[cat] * (1 - share) + dtype_bytes * share
    return name, result
