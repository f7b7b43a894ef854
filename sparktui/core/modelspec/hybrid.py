"""Hybrid models whose linear layers keep a fixed state per sequence instead of per-token KV:
Qwen3-Next / Qwen3.5 / Qwen3.6 (Gated DeltaNet `linear_attention` layers) and Nemotron-H
(Mamba2 `M` layers in `hybrid_override_pattern`, with `*` attention, `E` MoE and `-` MLP blocks).
State shapes: vllm/model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sparktui.core.modelspec.spec import FULL, MAMBA, LayerGroup
from sparktui.errors import UserError

NEMOTRON_BLOCKS = {"M": "mamba", "*": "attention", "E": "moe", "-": "mlp"}


def gdn_group(text: Mapping[str, Any]) -> LayerGroup:
    """One Gated DeltaNet layer (Qwen3-Next / Qwen3.5 / Qwen3.6 `linear_attention`)."""
    key_heads = int(text["linear_num_key_heads"])
    value_heads = int(text["linear_num_value_heads"])
    head_k = int(text["linear_key_head_dim"])
    head_v = int(text["linear_value_head_dim"])
    return LayerGroup(
        MAMBA,
        0,
        conv_dim=head_k * key_heads * 2 + head_v * value_heads,
        conv_kernel=int(text.get("linear_conv_kernel_dim") or 4),
        value_heads=value_heads,
        head_k=head_k,
        head_v=head_v,
        ssm_dtype=text.get("mamba_ssm_dtype"),
    )


def gdn_params(text: Mapping[str, Any], g: LayerGroup) -> int:
    h = int(text.get("hidden_size") or 0)
    key_dim = g.head_k * int(text["linear_num_key_heads"])
    value_dim = g.head_v * g.value_heads
    return h * (2 * key_dim + 2 * value_dim + 2 * g.value_heads) + g.conv_dim * g.conv_kernel + value_dim * h


def is_nemotron_h(text: Mapping[str, Any]) -> bool:
    return bool(text.get("hybrid_override_pattern") or text.get("layers_block_type")) and bool(
        text.get("mamba_num_heads") or text.get("ssm_state_size")
    )


def nemotron_blocks(text: Mapping[str, Any]) -> list[str]:
    """Per-layer block names: mamba, attention, moe, mlp."""
    listed = text.get("layers_block_type")
    if isinstance(listed, list) and listed:
        return [str(b) for b in listed]
    pattern = str(text.get("hybrid_override_pattern") or "")
    unknown = sorted({c for c in pattern if c not in NEMOTRON_BLOCKS})
    if unknown:
        raise ValueError(f"hybrid_override_pattern (characters {''.join(unknown)!r} are not M, *, E or -)")
    return [NEMOTRON_BLOCKS[c] for c in pattern]


def nemotron_mtp_blocks(text: Mapping[str, Any]) -> list[str]:
    listed = text.get("mtp_layers_block_type")
    if isinstance(listed, list) and listed:
        blocks = [str(b) for b in listed]
    else:
        pattern = str(text.get("mtp_hybrid_override_pattern") or "")
        blocks = [NEMOTRON_BLOCKS.get(c, "mlp") for c in pattern]
    steps = int(text.get("num_nextn_predict_layers") or 1) if blocks else 0
    return blocks * steps


def mamba2_group(text: Mapping[str, Any]) -> LayerGroup:
    heads = int(text["mamba_num_heads"])
    head_dim = int(text["mamba_head_dim"])
    state = int(text["ssm_state_size"])
    groups = int(text.get("n_groups") or 1)
    return LayerGroup(
        MAMBA,
        0,
        conv_dim=heads * head_dim + 2 * groups * state,
        conv_kernel=int(text.get("conv_kernel") or 4),
        value_heads=heads,
        head_k=state,
        head_v=head_dim,
        # vLLM's NemotronHForCausalLMConfig: the config's mamba_ssm_cache_dtype, else float32
        ssm_dtype=str(text.get("mamba_ssm_cache_dtype") or "float32"),
        state_kind="mamba2",
    )


def has_mamba2_fields(text: Mapping[str, Any]) -> bool:
    """Mamba2 layers named as GraniteMoeHybrid (Granite-4.0-H) and Falcon-H1 name them."""
    return all(text.get(k) for k in ("mamba_n_heads", "mamba_d_head", "mamba_d_state"))


def mamba2_fields_group(text: Mapping[str, Any]) -> LayerGroup:
    """One Mamba2 layer of Granite-4.0-H or Falcon-H1: vllm/model_executor/models/granitemoehybrid.py and
    falcon_h1.py get_mamba_state_shape_from_config → MambaStateShapeCalculator.mamba2_state_shape, over
    the inner width mamba2_inner gives; the state in
    the model's dtype (no per-model override, unlike Nemotron-H)."""
    heads = int(text["mamba_n_heads"])
    head_dim = int(text["mamba_d_head"])
    state = int(text["mamba_d_state"])
    groups = int(text.get("mamba_n_groups") or 1)
    return LayerGroup(
        MAMBA,
        0,
        conv_dim=mamba2_inner(text) + 2 * groups * state,
        conv_kernel=int(text.get("mamba_d_conv") or 4),
        value_heads=heads,
        head_k=state,
        head_v=head_dim,
        state_kind="mamba2",
    )


# transformers' FalconH1Config (4.57 to 5.x): mamba_d_ssm defaults to 1024 when config.json leaves it out
FALCON_H1_D_SSM_DEFAULT = 1024


def mamba2_inner(text: Mapping[str, Any]) -> int:
    """The Mamba2 mixer's inner width: mamba_d_ssm (Falcon-H1), where null means mamba_expand × hidden_size
    (falcon_h1.py); a Falcon-H1 config without the key gets its config class's default, as vLLM reads it
    through transformers; Granite-4.0-H has no such field (mamba_expand × hidden_size)."""
    if text.get("mamba_d_ssm"):
        return int(text["mamba_d_ssm"])
    if "mamba_d_ssm" not in text and text.get("model_type") == "falcon_h1":
        return FALCON_H1_D_SSM_DEFAULT
    return int(float(text.get("mamba_expand") or 2) * int(text["hidden_size"]))


def mamba2_params(text: Mapping[str, Any], g: LayerGroup) -> int:
    """One Mamba2 mixer's parameters (MambaMixer2: in_proj to z, x, B, C and dt; conv1d; out_proj; A, D,
    dt_bias and the gated norm), as nemotron_params counts Nemotron-H's."""
    h = int(text.get("hidden_size") or 0)
    groups = int(text.get("mamba_n_groups") or text.get("n_groups") or 1)
    inner = g.conv_dim - 2 * groups * g.head_k
    return h * (2 * inner + 2 * groups * g.head_k + g.value_heads) + g.conv_dim * g.conv_kernel + inner * h \
        + 3 * g.value_heads + inner  # fmt: skip


def linear_group(text: Mapping[str, Any]) -> LayerGroup:
    """A layer_types 'linear_attention' / 'mamba' layer: Gated DeltaNet (linear_* fields) or Mamba2
    (mamba_n_heads, mamba_d_head, mamba_d_state)."""
    if text.get("linear_num_key_heads"):
        return gdn_group(text)
    if has_mamba2_fields(text):
        return mamba2_fields_group(text)
    raise UserError(
        f"{text.get('model_type') or 'this model'}: layer_types lists linear or Mamba layers, but the config has "
        "neither Gated-DeltaNet fields (linear_num_key_heads, linear_key_head_dim, ...) nor Mamba2 fields "
        "(mamba_n_heads, mamba_d_head, mamba_d_state): their state per sequence is not modelled for this "
        "architecture, so the fit cannot size its KV cache"
    )


def is_parallel_hybrid(text: Mapping[str, Any]) -> bool:
    """Falcon-H1: every layer runs attention and a Mamba2 mixer side by side."""
    return text.get("model_type") == "falcon_h1" and has_mamba2_fields(text)


def parallel_groups(text: Mapping[str, Any], head_dim: int) -> tuple[list[LayerGroup], list[LayerGroup]]:
    """Falcon-H1's layers as vLLM builds them (falcon_h1.py FalconH1ParallelHybrid: self_attn and a
    mamba branch, the SSM under its own layer index): n full-attention layers and n Mamba2 layers."""
    n = int(text["num_hidden_layers"])
    kv_heads = int(text.get("num_key_value_heads") or text.get("num_attention_heads") or 1)
    return [LayerGroup(FULL, n, kv_heads, head_dim, head_dim), replace(mamba2_fields_group(text), count=n)], []


def nemotron_groups(text: Mapping[str, Any], head_dim: int) -> tuple[list[LayerGroup], list[LayerGroup]]:
    blocks = nemotron_blocks(text)
    kv_heads = int(text.get("num_key_value_heads") or text.get("num_attention_heads") or 1)
    attention = blocks.count("attention")
    mamba = blocks.count("mamba")
    main: list[LayerGroup] = []
    if mamba:
        main.append(replace(mamba2_group(text), count=mamba))
    if attention:
        main.append(LayerGroup(FULL, attention, kv_heads, head_dim, head_dim))
    mtp_attention = nemotron_mtp_blocks(text).count("attention")
    mtp = [LayerGroup(FULL, mtp_attention, kv_heads, head_dim, head_dim, draft=True)] if mtp_attention else []
    return main, mtp


def nemotron_params(text: Mapping[str, Any], blocks: list[str], head_dim: int) -> dict[str, int]:
    """Parameters per weight category of Nemotron-H blocks (vllm/model_executor/models/nemotron_h.py):
    MLPs and experts are relu² up/down pairs (no gate); LatentMoE runs experts in moe_latent_size."""
    h = int(text.get("hidden_size") or 0)
    heads = int(text.get("num_attention_heads") or 0)
    kv_heads = int(text.get("num_key_value_heads") or heads or 1)
    m_heads = int(text.get("mamba_num_heads") or 0)
    m_dim = int(text.get("mamba_head_dim") or 0)
    inner = m_heads * m_dim
    state = int(text.get("ssm_state_size") or 0)
    groups = int(text.get("n_groups") or 1)
    kernel = int(text.get("conv_kernel") or 4)
    conv_dim = inner + 2 * groups * state
    raw_inter = text.get("intermediate_size") or 0
    inters = [int(x) for x in raw_inter] if isinstance(raw_inter, list) else [int(raw_inter)]
    experts = int(text.get("n_routed_experts") or 0)
    moe_inter = int(text.get("moe_intermediate_size") or 0)
    latent = int(text.get("moe_latent_size") or 0)
    expert_width = latent or h
    shared = int(text.get("moe_shared_expert_intermediate_size") or 0) * int(text.get("n_shared_experts") or 0)
    out = {"attn": 0, "mamba": 0, "mlp": 0, "experts": 0, "shared": 0, "latent": 0, "router": 0}
    mlp_index = 0
    for block in blocks:
        if block == "mamba":
            out["mamba"] += h * (2 * inner + 2 * groups * state + m_heads) + conv_dim * kernel + inner * h
            out["mamba"] += 3 * m_heads + inner  # A, D, dt_bias, gated norm
        elif block == "attention":
            out["attn"] += 2 * h * heads * head_dim + 2 * h * kv_heads * head_dim
        elif block == "mlp":
            width = inters[mlp_index] if mlp_index < len(inters) else inters[-1]
            mlp_index += 1
            out["mlp"] += 2 * h * width
        elif block == "moe":
            out["experts"] += experts * 2 * expert_width * moe_inter
            out["router"] += experts * h + experts
            out["shared"] += 2 * h * shared
            if latent:
                out["latent"] += 2 * h * latent
    return out
