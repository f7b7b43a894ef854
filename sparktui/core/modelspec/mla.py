"""Multi-head latent attention (DeepSeek V2/V3/R1, Kimi K2, GLM-4.5-style MLA): one latent of
kv_lora_rank + qk_rope_head_dim per token per layer, shared by every head (not split by TP).
DeepSeek V3.2's sparse-attention indexer keeps its own small per-token key cache beside it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktui.core.modelspec.spec import MLA, LayerGroup


def is_mla(text: Mapping[str, Any]) -> bool:
    return bool(text.get("kv_lora_rank"))


def groups(text: Mapping[str, Any], n_layers: int) -> tuple[list[LayerGroup], list[LayerGroup]]:
    latent = int(text["kv_lora_rank"]) + int(text.get("qk_rope_head_dim") or 0)
    main = [LayerGroup(MLA, n_layers, 1, latent, 0)]
    n_mtp = int(text.get("num_nextn_predict_layers") or 0)
    mtp = [LayerGroup(MLA, n_mtp, 1, latent, 0, draft=True)] if n_mtp else []
    return main, mtp


def params_per_layer(text: Mapping[str, Any]) -> int:
    h = int(text.get("hidden_size") or 0)
    heads = int(text.get("num_attention_heads") or 0)
    q_rank = int(text.get("q_lora_rank") or 0)
    nope = int(text.get("qk_nope_head_dim") or 128)
    rope = int(text.get("qk_rope_head_dim") or 64)
    v_dim = int(text.get("v_head_dim") or 128)
    kv_rank = int(text["kv_lora_rank"])
    q = (h * q_rank + q_rank * heads * (nope + rope)) if q_rank else h * heads * (nope + rope)
    return q + h * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) + heads * v_dim * h


def indexer_note(text: Mapping[str, Any]) -> str | None:
    if text.get("index_topk") or text.get("index_head_dim"):
        return (
            "sparse-attention indexer (DeepSeek V3.2 style): its small per-token key cache is "
            "not modelled; KV tokens may be a few percent high"
        )
    return None
