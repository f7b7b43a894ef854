"""poolside's Laguna (LagunaForCausalLM, vllm/model_executor/models/laguna.py; the same in vLLM 0.25.1
and 0.32): each layer's attention has its own query head count (num_attention_heads_per_layer) over
the shared KV heads, and an output gate g_proj; which layers are routed experts is mlp_layer_types.
The KV cache is a plain full / sliding layout (layer_types, sliding_window) and reads as dense.groups
reads it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def is_laguna(text: Mapping[str, Any]) -> bool:
    return str(text.get("model_type") or "") == "laguna"


def with_layout(text: Mapping[str, Any]) -> Mapping[str, Any]:
    """The per-layer lists transformers' LagunaConfig.__post_init__ fills when a config leaves them
    out (vLLM reads the config through it): every layer full attention, layer 0 dense and the rest
    experts, num_attention_heads on every layer."""
    n = int(text.get("num_hidden_layers") or 0)
    if not is_laguna(text) or not n:
        return text
    filled = {
        "layer_types": ["full_attention"] * n,
        "mlp_layer_types": ["dense"] + ["sparse"] * (n - 1),
        "num_attention_heads_per_layer": [int(text.get("num_attention_heads") or 0)] * n,
    }
    return {**text, **{k: v for k, v in filled.items() if text.get(k) is None}}


def q_heads(text: Mapping[str, Any], layer: int) -> int:
    per = text.get("num_attention_heads_per_layer")
    return int(per[layer]) if isinstance(per, list) and layer < len(per) else int(text.get("num_attention_heads") or 0)


def widest_heads(text: Mapping[str, Any], n_layers: int) -> int:
    """The most query heads of any layer: the widest attention stage of the forward pass."""
    return max((q_heads(text, i) for i in range(n_layers)), default=0)


def gate_width(text: Mapping[str, Any], heads: int, head_dim: int) -> int:
    """g_proj's outputs: one per head when gating is True or "per-head", else one per head channel;
    none without gating (LagunaAttention.__init__)."""
    gating = text.get("gating")
    if not gating:
        return 0
    return heads if gating is True or gating == "per-head" else heads * head_dim


def projections(text: Mapping[str, Any], layer: int, kv_heads: int, head_dim: int) -> list[tuple[str, int]]:
    """One layer's attention projections and their parameter counts."""
    h = int(text.get("hidden_size") or 0)
    heads = q_heads(text, layer)
    kv = h * kv_heads * head_dim
    parts = [
        ("q_proj", h * heads * head_dim),
        ("k_proj", kv),
        ("v_proj", kv),
        ("o_proj", heads * head_dim * h),
        ("g_proj", h * gate_width(text, heads, head_dim)),
    ]
    return [(name, n) for name, n in parts if n > 0]


def moe_flags(text: Mapping[str, Any], n_layers: int) -> list[bool]:
    """Per layer, whether it is routed experts: mlp_layer_types 'sparse' and the model has experts
    (LagunaDecoderLayer.is_moe_layer)."""
    types = text.get("mlp_layer_types") or ["dense"] + ["sparse"] * (n_layers - 1)
    return [i < len(types) and types[i] == "sparse" for i in range(n_layers)]


# Laguna's DFlash drafter (vllm/model_executor/models/laguna_dflash.py), built only with a Laguna target
DRAFTER = "DFlashLagunaForCausalLM"
