"""Attention layers of dense and MoE decoders (Llama, Qwen, Mistral, gpt-oss, Gemma): which layers
are full and which sliding-window, their KV geometry, and the attention parameter count."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sparktui.core.modelspec import gemma, hybrid
from sparktui.core.modelspec.spec import FULL, MAMBA, SLIDING, LayerGroup

LINEAR_KINDS = ("linear_attention", "mamba", "linear")
SLIDING_KINDS = ("sliding_attention", "sliding", "local_attention", "chunked_attention")


def head_dim(text: Mapping[str, Any]) -> int:
    """Read `head_dim` from the config when present; hidden / heads only when it is not."""
    value = text.get("head_dim") or text.get("kv_channels")
    if value:
        return int(value)
    heads = int(text.get("num_attention_heads") or 0)
    if not heads:
        raise ValueError("head_dim (the config has neither head_dim nor num_attention_heads)")
    return int(text.get("hidden_size") or 0) // heads


def dflash_window(text: Mapping[str, Any]) -> int | None:
    """A DFlash drafter's forced sliding window (vllm/model_executor/models/qwen3_dflash.py
    _resolve_layer_attention: dflash_config.use_swa makes every layer sliding unless layer_types
    already has sliding ones; the window is swa_window_size, else sliding_window)."""
    dflash = text.get("dflash_config")
    if not isinstance(dflash, Mapping) or not dflash.get("use_swa"):
        return None
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and any(t == "sliding_attention" for t in layer_types):
        return None
    window = dflash.get("swa_window_size") or text.get("sliding_window")
    return int(window) if window else None


def layer_kinds(text: Mapping[str, Any], n_layers: int) -> list[str]:
    """Per-layer attention kind names as the config spells them."""
    if dflash_window(text):
        return ["sliding_attention"] * n_layers
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) >= n_layers:
        return [str(t) for t in layer_types[:n_layers]]
    interval = text.get("full_attention_interval")
    if interval and text.get("linear_num_value_heads"):  # Qwen3-Next without layer_types
        return ["full_attention" if (i + 1) % int(interval) == 0 else "linear_attention" for i in range(n_layers)]
    from_pattern = gemma.pattern_kinds(text, n_layers)
    if from_pattern:
        return from_pattern
    window = text.get("sliding_window")
    if (
        window
        and text.get("use_sliding_window", True)
        and text.get("model_type") not in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
    ):
        return ["sliding_attention"] * n_layers
    return ["full_attention"] * n_layers


def groups(text: Mapping[str, Any], n_layers: int) -> tuple[list[LayerGroup], list[LayerGroup]]:
    heads = int(text.get("num_attention_heads") or 0)
    kv_heads = int(text.get("num_key_value_heads") or heads or 1)
    dim = head_dim(text)
    full = LayerGroup(FULL, 0, kv_heads, dim, dim)
    global_full = gemma.global_group(text, kv_heads, dim) or full
    # Gemma's KV-shared layers (the last num_kv_shared_layers) read earlier layers' cache.
    owners = n_layers - gemma.kv_shared_layers(text)
    counts: dict[LayerGroup, int] = {}
    for kind in layer_kinds(text, n_layers)[: max(0, owners)]:
        if kind in LINEAR_KINDS:
            group = hybrid.linear_group(text)
        elif kind in SLIDING_KINDS:
            window = dflash_window(text) or int(text["sliding_window"])
            group = replace(full, kind=SLIDING, sliding_window=window)
        else:
            group = global_full
        counts[group] = counts.get(group, 0) + 1
    main = [replace(g, count=c) for g, c in counts.items()]
    n_mtp = int(text.get("mtp_num_hidden_layers") or text.get("num_nextn_predict_layers") or 0)
    mtp = [replace(full, count=n_mtp, draft=True)] if n_mtp else []
    return main, mtp


def attention_params(text: Mapping[str, Any], g: LayerGroup) -> int:
    """q, k, v and o projections of one full / sliding layer."""
    h = int(text.get("hidden_size") or 0)
    q_heads = int(text.get("num_attention_heads") or 0)
    kv = 1 if (gemma.k_eq_v(text) and g.kind == FULL and text.get("global_head_dim")) else 2
    per = h * q_heads * g.head_size + kv * h * g.num_kv_heads * g.head_size + q_heads * g.head_size * h
    model_type = str(text.get("model_type") or "")
    if model_type.startswith("qwen3_5") or model_type == "qwen3_next":
        per += h * q_heads * g.head_size  # gated attention: q_proj also yields the gate
    return per


def is_state(g: LayerGroup) -> bool:
    return g.kind == MAMBA
