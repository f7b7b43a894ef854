"""Gemma 2 / 3 / 4: interleaved sliding-window and global layers, Gemma 4's own geometry for its
global layers (global_head_dim, num_global_key_value_heads, attention_k_eq_v), and KV sharing
(the last num_kv_shared_layers layers reuse earlier layers' KV and hold none of their own;
vllm/model_executor/models/gemma4.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktui.core.modelspec.spec import FULL, LayerGroup


def global_group(text: Mapping[str, Any], kv_heads: int, head_dim: int) -> LayerGroup | None:
    """Gemma 4's global layers, when they have a geometry of their own."""
    if not text.get("global_head_dim"):
        return None
    heads = int(text.get("num_global_key_value_heads") or kv_heads)
    dim = int(text["global_head_dim"])
    return LayerGroup(FULL, 0, heads, dim, dim)


def kv_shared_layers(text: Mapping[str, Any]) -> int:
    return int(text.get("num_kv_shared_layers") or 0)


def k_eq_v(text: Mapping[str, Any]) -> bool:
    """Global layers ship k_proj only (vLLM loads it into both K and V: the cache is unchanged)."""
    return bool(text.get("attention_k_eq_v"))


def pattern_kinds(text: Mapping[str, Any], n_layers: int) -> list[str] | None:
    """Gemma 2/3 without layer_types: every `sliding_window_pattern`-th layer is global."""
    pattern = text.get("sliding_window_pattern")
    if pattern and text.get("sliding_window"):
        return ["full_attention" if (i + 1) % int(pattern) == 0 else "sliding_attention" for i in range(n_layers)]
    if str(text.get("model_type") or "").startswith("gemma2") and text.get("sliding_window"):
        return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)]
    return None
