"""Kimi-Linear (model_type kimi_linear, KimiLinearForCausalLM): Kimi Delta Attention (KDA) layers that keep a
fixed state per sequence, and MLA layers that keep one latent per token, as vLLM 0.32 builds them
(vllm/models/kimi_k3/nvidia/model.py KimiDecoderLayer: layer i is KDA when config.is_kda_layer(i), that is
when i + 1 is in linear_attn_config.kda_layers; every other layer is MultiHeadLatentAttention, a latent of
kv_lora_rank + qk_rope_head_dim). A KDA layer's state (layers/mamba/gdn/kimi_gdn_linear_attn.py
KimiGatedDeltaNetAttention.get_state_shape / get_state_dtype → mamba_utils.py kda_state_shape /
kda_state_dtype): a conv state of q, k and v (3 × num_heads × head_dim channels) × (short_conv_kernel_size − 1)
in the model's dtype, and a recurrent state of num_heads × head_dim × head_dim in float32 (KDA's "auto")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sparktui.core.modelspec import mla
from sparktui.core.modelspec.spec import MAMBA, LayerGroup


def is_kimi_linear(text: Mapping[str, Any]) -> bool:
    kda = text.get("linear_attn_config")
    return text.get("model_type") == "kimi_linear" and isinstance(kda, Mapping) and bool(kda.get("kda_layers"))


def kda_layer_count(text: Mapping[str, Any], n_layers: int) -> int:
    """Layers KimiLinearConfig.is_kda_layer picks: 1-based numbers listed in kda_layers."""
    listed = {int(i) for i in text["linear_attn_config"]["kda_layers"]}
    return sum(1 for i in range(n_layers) if i + 1 in listed)


def kda_group(text: Mapping[str, Any], count: int) -> LayerGroup:
    kda = text["linear_attn_config"]
    heads, dim = int(kda["num_heads"]), int(kda["head_dim"])
    return LayerGroup(
        MAMBA,
        count,
        conv_dim=3 * heads * dim,
        conv_kernel=int(kda.get("short_conv_kernel_size") or 4),
        value_heads=heads,
        head_k=dim,
        head_v=dim,
        ssm_dtype="float32",
        state_kind="kda",
    )


def groups(text: Mapping[str, Any], n_layers: int) -> tuple[list[LayerGroup], list[LayerGroup]]:
    kda = kda_layer_count(text, n_layers)
    main, mtp = mla.groups(text, n_layers - kda) if n_layers > kda else ([], [])
    return [kda_group(text, kda), *main], mtp


def kda_params(text: Mapping[str, Any], g: LayerGroup) -> int:
    """One KDA layer's parameters (KimiGatedDeltaNetAttention: q, k, v and o projections of heads ×
    head_dim, the low-rank f (decay) and g (output gate) projections through head_dim, b_proj (one beta per
    head), three depthwise short convolutions, A_log, dt_bias and o_norm)."""
    h = int(text.get("hidden_size") or 0)
    width = g.value_heads * g.head_v
    low_rank = 2 * (h * g.head_v + g.head_v * width)
    return 4 * h * width + low_rank + h * g.value_heads + g.conv_dim * g.conv_kernel + g.value_heads + width + g.head_v


# the checkpoint's projections vLLM (0.27 on) loads as one in_proj_qkvgfab (kimi_k3/nvidia/model.py
# packed_modules_mapping)
FUSED_IN_PROJ = ("q_proj", "k_proj", "v_proj", "b_proj", "f_a_proj")


def split_fused_shards(
    text: Mapping[str, Any], n_layers: int, excluded: Callable[[str], bool]
) -> tuple[str, tuple[str, ...]] | tuple[()]:
    """The first KDA layer (its self_attn prefix) whose FUSED_IN_PROJ the exclusion list names only in part,
    and the shards it names; () when every KDA layer's are all excluded or all quantized."""
    listed = {int(i) for i in text["linear_attn_config"]["kda_layers"]}
    for i in range(n_layers):
        if i + 1 not in listed:
            continue
        p = f"model.layers.{i}.self_attn"
        named = tuple(n for n in FUSED_IN_PROJ if excluded(f"{p}.{n}"))
        if named and len(named) < len(FUSED_IN_PROJ):
            return p, named
    return ()
