"""A checkpoint's linear weight modules, by the names its quantization config uses and their sizes:
what weight_format's per-module rules are matched against, so a config that excludes single
modules (layer 4's Mamba in_proj, every attention layer, the MTP head) is weighed module by module.

Names follow the checkpoints: Nemotron-H `backbone.layers.N.mixer.*` (vllm/model_executor/models/
nemotron_h.py), the rest `model.layers.N.*`, or `model.language_model.layers.N.*` under a
multimodal wrapper (a config with text_config). The sizes feed shares within a weight category;
the category totals stay those of build.param_counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktui.core.modelspec import deepseek_v4, dense, gemma, hybrid, kimi, laguna, mla, moe, nas
from sparktui.core.modelspec.spec import FULL, MAMBA, SLIDING, LayerGroup
from sparktui.core.modelspec.weight_format import WeightFormats
from sparktui.core.record import record


@record
class Module:
    """One linear weight module of a checkpoint and its parameter count."""

    name: str  # as the checkpoint (and its quantization config) names it
    category: str  # quant.CATEGORIES
    params: int


def linear_modules(config: Mapping[str, Any], text: Mapping[str, Any], layers: list[LayerGroup]) -> list[Module]:
    """The linear modules of the main model (the MTP head and the vision tower are weighed apart)."""
    out = [Module("lm_head", "lm_head", 1)]
    if hybrid.is_nemotron_h(text):
        return out + _nemotron(text)
    if deepseek_v4.is_deepseek_v4(text):
        return out + _deepseek_v4(text)
    if nas.is_nemotron_nas(text):
        return out + _nas(text)
    if kimi.is_kimi_linear(text):
        return out + _kimi(text, layers)
    prefix = "model.language_model.layers" if isinstance(config.get("text_config"), Mapping) else "model.layers"
    n_layers = int(text["num_hidden_layers"])
    kinds = dense.layer_kinds(text, n_layers)
    owners = [g for g in layers if not g.draft and g.kind != MAMBA and not g.elem_bytes]
    sliding = next((g for g in owners if g.kind == SLIDING), None)
    full = next((g for g in owners if g.kind != SLIDING), sliding)
    gdn = next((g for g in layers if g.kind == MAMBA and not g.draft), None)
    is_moe = moe.moe_layer_flags(text, n_layers)
    for i in range(n_layers):
        p = f"{prefix}.{i}"
        if mla.is_mla(text):
            out += _mla(text, p)
        elif kinds[i] in dense.LINEAR_KINDS:
            if gdn is not None and gdn.state_kind == "gdn":  # Mamba2 mixers are weighed by category only
                out += _gdn(text, gdn, p)
        else:
            group = sliding if kinds[i] in dense.SLIDING_KINDS and sliding else full
            if group is not None and laguna.is_laguna(text):
                parts = laguna.projections(text, i, group.num_kv_heads, group.head_size)
                out += [Module(f"{p}.self_attn.{name}", "attn", n) for name, n in parts]
            elif group is not None:
                out += _attention(text, group, p)
        out += _feed_forward(text, p, is_moe=is_moe[i])
    return out


def _attention(text: Mapping[str, Any], g: LayerGroup, p: str) -> list[Module]:
    """q, k, v, o as dense.attention_params counts them (gated q for Qwen3.5 / Qwen3-Next; Gemma 4's
    global layers read v from k)."""
    h = int(text.get("hidden_size") or 0)
    q_heads = int(text.get("num_attention_heads") or 0)
    model_type = str(text.get("model_type") or "")
    gated = model_type.startswith("qwen3_5") or model_type == "qwen3_next"
    k_is_v = gemma.k_eq_v(text) and g.kind == FULL and bool(text.get("global_head_dim"))
    kv = h * g.num_kv_heads * g.head_size
    sides = [
        ("q_proj", h * q_heads * g.head_size * (2 if gated else 1)),
        ("k_proj", kv),
        ("v_proj", 0 if k_is_v else kv),
        ("o_proj", q_heads * g.head_size * h),
    ]
    return [Module(f"{p}.self_attn.{name}", "attn", n) for name, n in sides if n > 0]


def _nas(text: Mapping[str, Any]) -> list[Module]:
    """A NAS-pruned Llama's layers: attention and MLP only where its block_configs has them."""
    h = int(text.get("hidden_size") or 0)
    dim = dense.head_dim(text)
    out = []
    for i, (kv_heads, width) in enumerate(nas.per_layer(text, int(text["num_hidden_layers"]))):
        p = f"model.layers.{i}"
        if kv_heads:
            out += _attention(text, LayerGroup(FULL, 1, kv_heads, dim, dim), p)
        out += [Module(f"{p}.mlp.{name}", "mlp", h * width) for name in ("gate_proj", "up_proj", "down_proj") if width]
    return out


def _mla(text: Mapping[str, Any], p: str) -> list[Module]:
    return [Module(f"{p}.self_attn.{name}", "attn", n) for name, n in mla.MlaDims.of(text).projections()]


def _gdn(text: Mapping[str, Any], g: LayerGroup, p: str) -> list[Module]:
    h = int(text.get("hidden_size") or 0)
    key_dim = g.head_k * int(text["linear_num_key_heads"])
    value_dim = g.head_v * g.value_heads
    if str(text.get("model_type") or "") == "qwen3_next":
        parts = [("in_proj_qkvz", h * (2 * key_dim + 2 * value_dim)), ("in_proj_ba", h * 2 * g.value_heads)]
    else:  # Qwen3.5 / 3.6 split the projections (vllm/model_executor/models/qwen3_5.py)
        parts = [
            ("in_proj_qkv", h * (2 * key_dim + value_dim)),
            ("in_proj_z", h * value_dim),
            ("in_proj_b", h * g.value_heads),
            ("in_proj_a", h * g.value_heads),
        ]
    parts += [("out_proj", value_dim * h), ("conv1d", g.conv_dim * g.conv_kernel)]
    return [Module(f"{p}.linear_attn.{name}", "linear_attn", n) for name, n in parts]


def _feed_forward(text: Mapping[str, Any], p: str, *, is_moe: bool) -> list[Module]:
    h = int(text.get("hidden_size") or 0)
    inter = _first_int(text.get("intermediate_size"))
    block = "block_sparse_moe" if str(text.get("model_type") or "") == "mixtral" else "mlp"
    dense_mlp = [Module(f"{p}.mlp.{name}", "mlp", h * inter) for name in ("gate_proj", "up_proj", "down_proj")]
    if not is_moe:
        return dense_mlp
    experts = moe.num_experts(text)
    moe_inter = int(text.get("moe_intermediate_size") or inter)
    out = [Module(f"{p}.{block}.experts", "experts", experts * 3 * h * moe_inter)]
    shared = int(text.get("shared_expert_intermediate_size") or 0)
    name = "shared_expert"
    if not shared and text.get("n_shared_experts"):
        shared, name = int(text["n_shared_experts"]) * moe_inter, "shared_experts"
    if shared:
        out += [
            Module(f"{p}.mlp.{name}.{proj}", "shared", h * shared) for proj in ("gate_proj", "up_proj", "down_proj")
        ]
    if text.get("model_type") == "gemma4_text" and text.get("enable_moe_block"):
        out += dense_mlp  # gemma-4 keeps a dense MLP beside the experts
    return out


def _nemotron(text: Mapping[str, Any]) -> list[Module]:
    """Nemotron-H blocks, sized as hybrid.nemotron_params counts them."""
    h = int(text.get("hidden_size") or 0)
    heads = int(text.get("num_attention_heads") or 0)
    kv_heads = int(text.get("num_key_value_heads") or heads or 1)
    hd = dense.head_dim(text)
    m_heads = int(text.get("mamba_num_heads") or 0)
    inner = m_heads * int(text.get("mamba_head_dim") or 0)
    state = int(text.get("ssm_state_size") or 0)
    groups = int(text.get("n_groups") or 1)
    conv_dim = inner + 2 * groups * state
    raw_inter = text.get("intermediate_size") or 0
    inters = [int(x) for x in raw_inter] if isinstance(raw_inter, list) else [int(raw_inter)]
    moe_inter = int(text.get("moe_intermediate_size") or 0)
    latent = int(text.get("moe_latent_size") or 0)
    shared = int(text.get("moe_shared_expert_intermediate_size") or 0) * int(text.get("n_shared_experts") or 0)
    experts = int(text.get("n_routed_experts") or 0)
    out: list[Module] = []
    mlp_index = 0
    for i, block in enumerate(hybrid.nemotron_blocks(text)):
        p = f"backbone.layers.{i}.mixer"
        if block == "mamba":
            out += [
                Module(f"{p}.in_proj", "mamba", h * (2 * inner + 2 * groups * state + m_heads)),
                Module(f"{p}.out_proj", "mamba", inner * h),
                Module(f"{p}.conv1d", "mamba", conv_dim * int(text.get("conv_kernel") or 4)),
            ]
        elif block == "attention":
            out += [
                Module(f"{p}.q_proj", "attn", h * heads * hd),
                Module(f"{p}.k_proj", "attn", h * kv_heads * hd),
                Module(f"{p}.v_proj", "attn", h * kv_heads * hd),
                Module(f"{p}.o_proj", "attn", heads * hd * h),
            ]
        elif block == "mlp":
            width = inters[mlp_index] if mlp_index < len(inters) else inters[-1]
            mlp_index += 1
            out += [Module(f"{p}.up_proj", "mlp", h * width), Module(f"{p}.down_proj", "mlp", width * h)]
        elif block == "moe":
            out.append(Module(f"{p}.experts", "experts", experts * 2 * (latent or h) * moe_inter))
            if shared:
                out += [Module(f"{p}.shared_experts.{n}", "shared", h * shared) for n in ("up_proj", "down_proj")]
            if latent:
                out += [Module(f"{p}.{n}", "latent", h * latent) for n in ("fc1_latent_proj", "fc2_latent_proj")]
    return out


def _kimi(text: Mapping[str, Any], layers: list[LayerGroup]) -> list[Module]:
    """Kimi-Linear by its checkpoint's names (vLLM 0.32 vllm/models/kimi_k3/nvidia/model.py KimiDecoderLayer,
    KimiMoE, KimiMLP; layers/mamba/gdn/kimi_gdn_linear_attn.py): a KDA layer's self_attn q/k/v/b/f_a_proj
    (which vLLM loads into in_proj_qkvgfab, packed_modules_mapping), f_b, g_a, g_b and o_proj, as
    kimi.kda_params counts them; an MLA layer's as mla.py names them; layers before first_k_dense_replace
    a dense mlp.gate/up/down_proj, the rest block_sparse_moe.experts and block_sparse_moe.shared_experts.
    The short convolutions take no quant_config (conv1d loads unquantized): left to their category."""
    h = int(text.get("hidden_size") or 0)
    g = next(x for x in layers if x.kind == MAMBA and x.state_kind == "kda")
    width = g.value_heads * g.head_v
    kda_parts = [
        *((name, h * width) for name in ("q_proj", "k_proj", "v_proj")),
        ("b_proj", h * g.value_heads),
        ("f_a_proj", h * g.head_v),
        ("f_b_proj", g.head_v * width),
        ("g_a_proj", h * g.head_v),
        ("g_b_proj", g.head_v * width),
        ("o_proj", width * h),
    ]
    listed = {int(i) for i in text["linear_attn_config"]["kda_layers"]}
    inter = _first_int(text.get("intermediate_size"))
    moe_inter = int(text.get("moe_intermediate_size") or inter)
    shared = int(text.get("num_shared_experts") or 0) * moe_inter
    experts = moe.num_experts(text)
    first_moe, every = int(text.get("first_k_dense_replace") or 0), int(text.get("moe_layer_freq") or 1)
    out: list[Module] = []
    for i in range(int(text["num_hidden_layers"])):
        p = f"model.layers.{i}"
        if i + 1 in listed:  # KimiLinearConfig.is_kda_layer
            out += [Module(f"{p}.self_attn.{name}", "linear_attn", n) for name, n in kda_parts]
        else:
            out += _mla(text, p)
        if experts and i >= first_moe and i % every == 0:  # KimiDecoderLayer.is_moe_layer
            out.append(Module(f"{p}.block_sparse_moe.experts", "experts", experts * 3 * h * moe_inter))
            out += [
                Module(f"{p}.block_sparse_moe.shared_experts.{proj}", "shared", h * shared)
                for proj in ("gate_proj", "up_proj", "down_proj")
                if shared
            ]
        else:
            out += [Module(f"{p}.mlp.{proj}", "mlp", h * inter) for proj in ("gate_proj", "up_proj", "down_proj")]
    return out


def _deepseek_v4(text: Mapping[str, Any]) -> list[Module]:
    """DeepSeek V4's quantized modules (its checkpoint names them layers.N.attn.* / layers.N.ffn.*)."""
    h = int(text.get("hidden_size") or 0)
    inter = int(text.get("moe_intermediate_size") or 0)
    experts = int(text.get("n_routed_experts") or 0)
    shared = int(text.get("n_shared_experts") or 0) * inter
    n_layers = int(text["num_hidden_layers"])
    out: list[Module] = []
    for i, ratio in enumerate(deepseek_v4.compress_ratios(text, n_layers)):
        p = f"layers.{i}"
        out.append(Module(f"{p}.attn.wq_b", "attn", deepseek_v4.attention_params(text, ratio)[0]))
        out.append(Module(f"{p}.ffn.experts", "experts", experts * 3 * h * inter))
        out += [Module(f"{p}.ffn.shared_experts.{w}", "shared", h * shared) for w in ("w1", "w2", "w3")]
    return out


def _first_int(value: Any) -> int:
    if isinstance(value, list):
        return int(max(value)) if value else 0
    return int(value or 0)


def category_bytes(modules: list[Module], formats: WeightFormats) -> dict[str, float]:
    """Bytes per parameter of each weight category, each module weighed in the format it loads in."""
    weighed: dict[str, list[float]] = {}
    for m in modules:
        total = weighed.setdefault(m.category, [0.0, 0.0])
        total[0] += m.params * formats.bytes_per_param(m.name)
        total[1] += m.params
    return {cat: b / n for cat, (b, n) in weighed.items() if n}
