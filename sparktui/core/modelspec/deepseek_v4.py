"""DeepSeek V4's weights, as vLLM 0.32 builds the model (vllm/models/deepseek_v4/attention.py
DeepseekV4Attention, DeepseekV4Indexer; compressor.py DeepseekCompressor; quant_config.py
DeepseekV4FP8Config). Its attention is not MLA's: per layer a fused q_a / kv projection
(hidden → q_lora_rank + head_dim), wq_b (q_lora_rank → heads × head_dim), and a grouped output
wo_a (heads × head_dim / o_groups → o_groups × o_lora_rank) and wo_b (→ hidden). A layer with
compress_ratio > 1 has a compressor (hidden → 2 × coff × head_dim, coff 2 for ratio 4) built without
quantization; a ratio-4 layer also an indexer (wq_b: q_lora_rank → index_heads × index_head_dim,
quantized; weights_proj hidden → index_heads and its own compressor at index_head_dim, not).
Experts are MXFP4 when the config's expert_dtype is fp4 (the default), FP8 blocks otherwise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def is_deepseek_v4(text: Mapping[str, Any]) -> bool:
    return str(text.get("model_type") or "").startswith("deepseek_v4")


def compress_ratios(text: Mapping[str, Any], n_layers: int) -> list[int]:
    ratios = [int(r or 0) for r in (text.get("compress_ratios") or [])][:n_layers]
    return ratios + [0] * (n_layers - len(ratios))


def attention_params(text: Mapping[str, Any], ratio: int) -> tuple[int, int]:
    """(quantized, unquantized) attention parameters of one layer with this compress ratio."""
    h = int(text.get("hidden_size") or 0)
    heads = int(text.get("num_attention_heads") or 0)
    hd = int(text.get("head_dim") or 512)
    q_rank = int(text.get("q_lora_rank") or 0)
    o_rank = int(text.get("o_lora_rank") or 0)
    groups = int(text.get("o_groups") or 1)
    quantized = h * (q_rank + hd) + q_rank * heads * hd + (heads * hd // groups) * groups * o_rank + groups * o_rank * h
    plain = 0
    if ratio > 1:
        coff = 2 if ratio == 4 else 1
        plain += h * 2 * coff * hd + ratio * coff * hd  # the compressor's projection and its position bias
    if ratio == 4:
        index_heads = int(text.get("index_n_heads") or 0)
        index_hd = int(text.get("index_head_dim") or 0)
        quantized += q_rank * index_heads * index_hd
        plain += h * index_heads + h * 2 * 2 * index_hd + 4 * 2 * index_hd  # weights_proj, its compressor
    return quantized, plain


def params(text: Mapping[str, Any], n_layers: int) -> dict[str, int]:
    """Parameters per weight category: attn (quantized), other (the compressors and the indexers'
    weights_proj, which vLLM builds with quant_config=None), experts, shared, router."""
    h = int(text.get("hidden_size") or 0)
    experts = int(text.get("n_routed_experts") or 0)
    inter = int(text.get("moe_intermediate_size") or 0)
    shared = int(text.get("n_shared_experts") or 0) * inter
    out = {"attn": 0, "other": 0, "experts": 0, "shared": 0, "router": 0}
    for ratio in compress_ratios(text, n_layers):
        quantized, plain = attention_params(text, ratio)
        out["attn"] += quantized
        out["other"] += plain
        out["experts"] += experts * 3 * h * inter
        out["shared"] += 3 * h * shared
        out["router"] += experts * h
    return out
