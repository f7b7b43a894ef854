"""Mixture-of-experts parameter counts (Qwen MoE, Mixtral, DeepSeek, gpt-oss, Gemma 4 MoE):
gated experts of three matrices, a router, optional shared experts and dense first layers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktui.core.modelspec import laguna


def num_experts(text: Mapping[str, Any]) -> int:
    return int(text.get("num_experts") or text.get("num_local_experts") or text.get("n_routed_experts") or 0)


# Routers vLLM builds with DeepSeek-V3's auxiliary-loss-free balancing bias (e_score_correction_bias added to
# the sigmoid scores before top-k): always for these model types (vLLM 0.21 models/nemotron_h.py NemotronHMoE,
# glm4_moe.py Glm4MoE), and for DeepSeek-style configs whose topk_method is "noaux_tc" (deepseek_v2.py
# DeepseekV2MoE, dots1.py, deepseek_v4.py). Training moves each expert's bias until every expert gets its share
# of a batch's picks, so a decode batch reads about as many distinct experts as uniform picks would.
# Kimi-Linear's KimiMoE gives its gate an e_score_correction_bias always (vllm/models/kimi_k3/nvidia/model.py).
BALANCED_ROUTER_TYPES = ("nemotron_h", "glm4_moe", "kimi_linear")


def balanced_router(text: Mapping[str, Any]) -> bool:
    """Whether the MoE router carries the load-balancing bias (BALANCED_ROUTER_TYPES, topk_method noaux_tc)."""
    if not num_experts(text):
        return False
    return str(text.get("model_type") or "") in BALANCED_ROUTER_TYPES or text.get("topk_method") == "noaux_tc"


def shared_intermediate(text: Mapping[str, Any]) -> int:
    """The shared expert's intermediate width, as vLLM builds it: Qwen2/3-MoE give it whole
    (shared_expert_intermediate_size); Nemotron-H as moe_shared_expert_intermediate_size × n_shared_experts
    (nemotron_h.py NemotronHMoE); DeepSeek V2/V3, GLM-4 MoE and Kimi-Linear as a count of experts of
    moe_intermediate_size (deepseek_v2.py DeepseekV2MoE, glm4_moe.py Glm4MoE: n_shared_experts;
    kimi_k3/nvidia/model.py KimiMoE: num_shared_experts). 0 for a model without one."""
    if not num_experts(text):
        return 0
    whole = int(text.get("shared_expert_intermediate_size") or 0)
    if whole:
        return whole
    count = int(text.get("n_shared_experts") or text.get("num_shared_experts") or 0)
    per_expert = int(text.get("moe_shared_expert_intermediate_size") or 0)
    if per_expert:
        return per_expert * (count or 1)
    return count * int(text.get("moe_intermediate_size") or 0)


def moe_layer_flags(text: Mapping[str, Any], n_layers: int) -> list[bool]:
    """Per decoder layer, whether its feed-forward block is routed experts (else a dense MLP of
    intermediate_size), as vLLM picks them: layer i is MoE when i ≥ first_k_dense_replace and i %
    moe_layer_freq == 0 (deepseek_v2.py DeepseekV2DecoderLayer; Kimi-Linear's config has both) and i is not
    in mlp_only_layers (qwen2_moe.py / qwen3_moe.py); MiMo-V2 gives moe_layer_freq as one flag per layer
    (mimo_v2.py is_moe_layer). All False for a model without experts."""
    if not num_experts(text):
        return [False] * n_layers
    if laguna.is_laguna(text):
        return laguna.moe_flags(text, n_layers)
    raw = text.get("moe_layer_freq")
    if isinstance(raw, list):
        return [i < len(raw) and bool(raw[i]) for i in range(n_layers)]
    first_k = int(text.get("first_k_dense_replace") or 0)
    freq = max(1, int(raw or 1))
    mlp_only = {int(i) for i in text.get("mlp_only_layers") or []}
    return [i >= first_k and i % freq == 0 and i not in mlp_only for i in range(n_layers)]


def dense_layers(text: Mapping[str, Any], n_layers: int) -> tuple[int, int]:
    """(dense-MLP layers before the first MoE layer, after it) of an MoE decoder (moe_layer_flags);
    (0, 0) for a model without experts."""
    if not num_experts(text):
        return 0, 0
    moe = moe_layer_flags(text, n_layers)
    if True not in moe:
        return n_layers, 0
    first = moe.index(True)
    return first, sum(1 for i in range(first, n_layers) if not moe[i])


def mlp_counts(text: Mapping[str, Any], n_layers: int) -> dict[str, int]:
    """experts, router, shared and dense mlp parameters of a decoder's feed-forward blocks."""
    h = int(text.get("hidden_size") or 0)
    experts = num_experts(text)
    inter = int(text.get("intermediate_size") or 0)
    out = {"experts": 0, "router": 0, "shared": 0, "mlp": 0}
    if not experts:
        out["mlp"] = n_layers * 3 * h * inter
        return out
    moe_inter = int(text.get("moe_intermediate_size") or inter)
    moe_layers = sum(moe_layer_flags(text, n_layers))
    out["experts"] = moe_layers * experts * 3 * h * moe_inter
    out["router"] = moe_layers * experts * h
    shared = int(text.get("shared_expert_intermediate_size") or 0)
    n_shared = text.get("n_shared_experts") or text.get("num_shared_experts")  # Kimi-Linear: num_shared_experts
    if not shared and n_shared:
        shared = int(n_shared) * moe_inter
    if shared:
        out["shared"] = moe_layers * 3 * h * shared
    out["mlp"] = (n_layers - moe_layers) * 3 * h * inter
    if text.get("model_type") == "gemma4_text" and text.get("enable_moe_block"):
        out["mlp"] += moe_layers * 3 * h * inter  # gemma-4 keeps a dense MLP beside the experts
    return out
