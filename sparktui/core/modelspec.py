"""What a model is, for the fit engine: its KV-cache layers and its weight bytes.

Read offline only, never downloaded: a local model folder (config.json, hf_quant_config.json,
safetensors headers or index), the local Hugging Face cache by repo id, or the built-in catalog
(real configs of models people run on a DGX Spark, see model_catalog.json).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from sparktui.core.vllm_rules import checkpoint_kv_quant
from sparktui.errors import UserError

# Layer kinds, as vLLM's KV cache specs see them.
FULL = "full"  # full attention: K and V for every token
SLIDING = "sliding"  # sliding-window attention: at most the window
MLA = "mla"  # multi-head latent attention: one latent (kv_lora_rank + rope dims) per token
MAMBA = "mamba"  # linear attention / Mamba (Gated DeltaNet): a fixed state per sequence

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1}

CATALOG_FILE = Path(__file__).with_name("model_catalog.json")


@dataclass(frozen=True)
class LayerGroup:
    """`count` layers that hold the same KV-cache state."""

    kind: str
    count: int
    num_kv_heads: int = 0
    head_size: int = 0
    head_size_v: int = 0
    sliding_window: int | None = None
    # Gated DeltaNet state (kind MAMBA): conv state conv_dim × (conv_kernel - 1), and the
    # recurrent state value_heads × head_v × head_k, in `ssm_dtype` (None = model dtype).
    conv_dim: int = 0
    conv_kernel: int = 0
    value_heads: int = 0
    head_k: int = 0
    head_v: int = 0
    ssm_dtype: str | None = None
    draft: bool = False  # an MTP / draft layer, used only with speculative decoding

    def kv_bytes_per_token(self, kv_bytes: int, tp: int = 1) -> int:
        """Bytes one token takes in one layer of this group (0 for a fixed state)."""
        if self.kind == MAMBA:
            return 0
        heads = 1 if self.kind == MLA else max(1, self.num_kv_heads // tp)
        return heads * (self.head_size + self.head_size_v) * kv_bytes

    def state_bytes(self, dtype_bytes: int, tp: int = 1, num_spec: int = 0) -> int:
        """Bytes of one sequence's fixed state in one layer (MAMBA only)."""
        if self.kind != MAMBA:
            return 0
        ssm_bytes = DTYPE_BYTES.get(self.ssm_dtype or "", dtype_bytes)
        conv = (self.conv_dim // tp) * (self.conv_kernel - 1 + num_spec) * dtype_bytes
        ssm = (self.value_heads // tp) * self.head_v * self.head_k * ssm_bytes
        return conv + ssm

    def describe(self, kv_bytes: int, tp: int = 1) -> str:
        n = f"{self.count} {'draft ' if self.draft else ''}"
        if self.kind == MAMBA:
            return (
                f"{n}linear-attention layers: fixed state per sequence "
                f"(conv {self.conv_dim}×{self.conv_kernel - 1} + {self.value_heads}×{self.head_v}×{self.head_k})"
            )
        if self.kind == MLA:
            return (
                f"{n}MLA layers × 1 latent × {self.head_size} (kv_lora_rank + rope) × {kv_bytes} B"
                f" = {self.count * self.kv_bytes_per_token(kv_bytes, tp):,} B/token"
            )
        heads = max(1, self.num_kv_heads // tp)
        what = "full-attention" if self.kind == FULL else f"sliding-window ({self.sliding_window} tokens)"
        kv = (
            "2 (K,V)"
            if self.head_size_v == self.head_size
            else f"({self.head_size}+{self.head_size_v})/{self.head_size}"
        )
        return (
            f"{n}{what} layers × {heads} KV heads × {self.head_size} head_dim × {kv_bytes} B × {kv}"
            f" = {self.count * self.kv_bytes_per_token(kv_bytes, tp):,} B/token"
        )


@dataclass(frozen=True)
class ModelSpec:
    name: str
    source: str  # where it was read from, for messages
    architecture: str = ""
    model_type: str = ""
    dtype: str = "bfloat16"
    num_layers: int = 0
    hidden_size: int = 0
    intermediate_size: int = 0  # dense MLP width (per active expert path for the activation estimate)
    vocab_size: int = 0
    num_attention_heads: int = 0
    max_position_embeddings: int = 0
    layers: tuple[LayerGroup, ...] = ()
    mtp_layers: tuple[LayerGroup, ...] = ()
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    quantization: str | None = None  # fp8, nvfp4, mxfp4, awq, gptq, int8, int4, mixed
    checkpoint_kv_cache_dtype: str | None = None  # "fp8" when the checkpoint asks for it
    checkpoint_quant_method: str | None = None  # the quantization method vLLM reads it from (vllm_rules)
    param_count: int = 0
    weights_bytes: int = 0
    weights_source: str = ""
    mtp_weights_bytes: int = 0
    params_by_category: tuple[tuple[str, int], ...] = ()  # for online quantization (--quantization fp8)
    notes: tuple[str, ...] = ()

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)

    @property
    def is_hybrid(self) -> bool:
        return len({g.kind for g in self.layers}) > 1

    def kv_bytes_per_token(self, kv_bytes: int | None = None, tp: int = 1) -> int:
        kv_bytes = kv_bytes or self.dtype_bytes
        return sum(g.count * g.kv_bytes_per_token(kv_bytes, tp) for g in self.layers)


# --------------------------------------------------------------------------- config.json → spec


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("text_config", "llm_config", "language_config"):
        sub = config.get(key)
        if isinstance(sub, Mapping) and sub.get("num_hidden_layers"):
            return sub
    return config


def _dtype(config: Mapping[str, Any], text: Mapping[str, Any]) -> str:
    raw = str(
        text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    )
    raw = raw.replace("torch.", "")
    # vLLM's dtype "auto" serves float32 checkpoints in bfloat16.
    return "bfloat16" if raw in ("float32", "float") else raw


def _layer_kinds(text: Mapping[str, Any], n_layers: int) -> list[str]:
    """Per-layer attention kind names as the config spells them."""
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) >= n_layers:
        return [str(t) for t in layer_types[:n_layers]]
    interval = text.get("full_attention_interval")
    if interval and text.get("linear_num_value_heads"):  # Qwen3-Next without layer_types
        return ["full_attention" if (i + 1) % int(interval) == 0 else "linear_attention" for i in range(n_layers)]
    pattern = text.get("sliding_window_pattern")
    if pattern and text.get("sliding_window"):  # gemma-2/3 style: every Nth layer is global
        return ["full_attention" if (i + 1) % int(pattern) == 0 else "sliding_attention" for i in range(n_layers)]
    window = text.get("sliding_window")
    if (
        window
        and text.get("use_sliding_window", True)
        and text.get("model_type") not in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
    ):
        return ["sliding_attention"] * n_layers
    return ["full_attention"] * n_layers


def _attention_groups(text: Mapping[str, Any]) -> tuple[list[LayerGroup], list[LayerGroup]]:
    n_layers = int(text["num_hidden_layers"])
    heads = int(text.get("num_attention_heads") or 0)
    kv_heads = int(text.get("num_key_value_heads") or heads or 1)
    hidden = int(text.get("hidden_size") or 0)
    head_dim = text.get("head_dim") or text.get("kv_channels")
    if not head_dim:
        if not heads:
            raise UserError("config.json has neither head_dim nor num_attention_heads; cannot size the KV cache")
        head_dim = hidden // heads
    head_dim = int(head_dim)

    if text.get("kv_lora_rank"):
        latent = int(text["kv_lora_rank"]) + int(text.get("qk_rope_head_dim") or 0)
        main = [LayerGroup(MLA, n_layers, 1, latent, 0)]
        n_mtp = int(text.get("num_nextn_predict_layers") or 0)
        mtp = [LayerGroup(MLA, n_mtp, 1, latent, 0, draft=True)] if n_mtp else []
        return main, mtp

    counts: dict[LayerGroup, int] = {}
    full = LayerGroup(FULL, 0, kv_heads, head_dim, head_dim)
    global_full = full
    if text.get("global_head_dim"):  # gemma-4: global layers have their own geometry
        g_heads = int(text.get("num_global_key_value_heads") or kv_heads)
        g_dim = int(text["global_head_dim"])
        global_full = LayerGroup(FULL, 0, g_heads, g_dim, g_dim)
    for kind in _layer_kinds(text, n_layers):
        if kind in ("linear_attention", "mamba", "linear"):
            group = LayerGroup(
                MAMBA,
                0,
                conv_dim=int(text["linear_key_head_dim"]) * int(text["linear_num_key_heads"]) * 2
                + int(text["linear_value_head_dim"]) * int(text["linear_num_value_heads"]),
                conv_kernel=int(text.get("linear_conv_kernel_dim") or 4),
                value_heads=int(text["linear_num_value_heads"]),
                head_k=int(text["linear_key_head_dim"]),
                head_v=int(text["linear_value_head_dim"]),
                ssm_dtype=text.get("mamba_ssm_dtype"),
            )
        elif kind in ("sliding_attention", "sliding", "local_attention", "chunked_attention"):
            group = replace(full, kind=SLIDING, sliding_window=int(text["sliding_window"]))
        else:
            group = global_full
        counts[group] = counts.get(group, 0) + 1
    main = [replace(g, count=c) for g, c in counts.items()]
    n_mtp = int(text.get("mtp_num_hidden_layers") or text.get("num_nextn_predict_layers") or 0)
    mtp = [replace(full, count=n_mtp, draft=True)] if n_mtp else []
    return main, mtp


# --------------------------------------------------------------------------- quantization


def _quant_info(config: Mapping[str, Any], hf_quant: Mapping[str, Any] | None) -> dict[str, Any]:
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
_CATEGORY_PATTERNS = {
    "lm_head": re.compile(r"lm_head"),
    "embed": re.compile(r"embed_tokens|wte"),
    "router": re.compile(r"(mlp|block_sparse_moe)\.gate$|router|shared_expert_gate"),
    "vision": re.compile(r"visual|vision"),
    "mtp": re.compile(r"(^|\.)mtp\."),
    "shared": re.compile(r"shared_expert(?!_gate)"),
    "experts": re.compile(r"experts"),
    "linear_attn": re.compile(r"linear_attn"),
    "attn": re.compile(r"self_attn|\.attn\."),
    "mlp": re.compile(r"mlp\.(gate_proj|up_proj|down_proj)"),
}
_LINEAR = ("attn", "linear_attn", "mlp", "experts", "shared", "mtp")


def _category(module: str) -> str | None:
    for cat, pattern in _CATEGORY_PATTERNS.items():
        if pattern.search(module):
            return cat
    return None


def _bytes_per_param(q: Mapping[str, Any], dtype_bytes: int) -> tuple[str | None, dict[str, float]]:
    """(format name, bytes per parameter for each weight category)."""
    plain = {cat: float(dtype_bytes) for cat in (*_LINEAR, "embed", "lm_head", "router", "vision", "other")}
    if not q:
        return None, plain
    method = str(q.get("quant_method") or "").lower()
    algo = str(q.get("quant_algo") or "").upper()
    result = dict(plain)

    def apply(fmt_bytes: float, cats: tuple[str, ...] = _LINEAR) -> None:
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
            cat = _category(module)
            layer_algo = str((info or {}).get("quant_algo", "")).upper()
            if cat and layer_algo in _ALGO_BYTES:
                result[cat] = _ALGO_BYTES[layer_algo]
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
        fmt = (0.5 + 1 / 16) if (bits == 4 and kind == "float") else _int_bytes(bits, group) if bits < 8 else 1.0
        apply(fmt)
        name = f"{'nvfp4' if kind == 'float' and bits == 4 else f'w{bits}'} ({method})"
    elif method in ("bitsandbytes",):
        apply(0.5 + 4 / 64)
        name = "bitsandbytes 4-bit"
    else:
        return method or None, plain
    for module in excluded:
        cat = _category(str(module))
        if cat:
            result[cat] = float(dtype_bytes)
    return name, result


# --------------------------------------------------------------------------- parameter count


def _param_counts(config: Mapping[str, Any], text: Mapping[str, Any], layers: list[LayerGroup]) -> dict[str, int]:
    """Parameters per weight category, computed from the architecture."""
    h = int(text.get("hidden_size") or 0)
    vocab = int(text.get("vocab_size") or config.get("vocab_size") or 0)
    n_layers = int(text["num_hidden_layers"])
    heads = int(text.get("num_attention_heads") or 0)
    counts = {cat: 0 for cat in (*_LINEAR, "embed", "lm_head", "router", "vision", "other")}
    counts["embed"] = vocab * h
    tied = text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
    counts["lm_head"] = 0 if tied else vocab * h
    counts["other"] = h * (2 * n_layers + 1)  # norms

    head_dim = int(text.get("head_dim") or (h // heads if heads else 0))
    for g in layers:
        if g.draft:
            continue
        if g.kind == MLA:
            q_rank = int(text.get("q_lora_rank") or 0)
            nope = int(text.get("qk_nope_head_dim") or 128)
            rope = int(text.get("qk_rope_head_dim") or 64)
            v_dim = int(text.get("v_head_dim") or 128)
            kv_rank = int(text["kv_lora_rank"])
            q = (h * q_rank + q_rank * heads * (nope + rope)) if q_rank else h * heads * (nope + rope)
            per = q + h * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) + heads * v_dim * h
            counts["attn"] += g.count * per
        elif g.kind == MAMBA:
            key_dim = g.head_k * int(text["linear_num_key_heads"])
            value_dim = g.head_v * g.value_heads
            per = h * (2 * key_dim + 2 * value_dim + 2 * g.value_heads) + g.conv_dim * g.conv_kernel + value_dim * h
            counts["linear_attn"] += g.count * per
        else:
            q_heads = heads
            per = h * q_heads * g.head_size + 2 * h * g.num_kv_heads * g.head_size + q_heads * g.head_size * h
            if text.get("model_type", "").startswith("qwen3_5") or text.get("model_type") == "qwen3_next":
                per += h * q_heads * g.head_size  # gated attention: q_proj also yields the gate
            counts["attn"] += g.count * per
    del head_dim

    experts = int(text.get("num_experts") or text.get("num_local_experts") or text.get("n_routed_experts") or 0)
    inter = int(text.get("intermediate_size") or 0)
    if experts:
        moe_inter = int(text.get("moe_intermediate_size") or inter)
        dense_first = int(text.get("first_k_dense_replace") or 0)
        mlp_only = len(text.get("mlp_only_layers") or [])
        moe_layers = n_layers - dense_first - mlp_only
        counts["experts"] = moe_layers * experts * 3 * h * moe_inter
        counts["router"] = moe_layers * experts * h
        shared = int(text.get("shared_expert_intermediate_size") or 0)
        if not shared and text.get("n_shared_experts"):
            shared = int(text["n_shared_experts"]) * moe_inter
        if shared:
            counts["shared"] = moe_layers * 3 * h * shared
        counts["mlp"] = (dense_first + mlp_only) * 3 * h * inter
        if text.get("model_type") == "gemma4_text" and text.get("enable_moe_block"):
            counts["mlp"] += moe_layers * 3 * h * inter  # gemma-4 keeps a dense MLP beside the experts
    else:
        counts["mlp"] = n_layers * 3 * h * inter

    vision = config.get("vision_config")
    if isinstance(vision, Mapping) and vision.get("hidden_size"):
        vh = int(vision["hidden_size"])
        vi = int(vision.get("intermediate_size") or 4 * vh)
        depth = int(vision.get("depth") or vision.get("num_hidden_layers") or 0)
        merge = int(vision.get("spatial_merge_size") or 1)
        out = int(vision.get("out_hidden_size") or h)
        patch = int(vision.get("patch_size") or 14)
        counts["vision"] = (
            depth * (4 * vh * vh + 2 * vh * vi)
            + (vh * merge * merge) ** 2
            + vh * merge * merge * out
            + int(vision.get("in_channels") or 3) * int(vision.get("temporal_patch_size") or 1) * patch * patch * vh
        )
    return counts


def _mtp_params(text: Mapping[str, Any], mtp: list[LayerGroup], per_layer_params: float) -> int:
    n = sum(g.count for g in mtp)
    h = int(text.get("hidden_size") or 0)
    # one decoder layer plus the projection that joins embedding and hidden state
    return int(n * (per_layer_params + 2 * h * h))


# --------------------------------------------------------------------------- safetensors


def safetensors_bytes(path: Path) -> tuple[int, int]:
    """(total tensor bytes, bytes of MTP / next-n tensors) from one file's header only."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        if length <= 0 or length > 100 * 1024 * 1024:
            raise UserError(f"{path}: not a safetensors file (header length {length})")
        header = json.loads(handle.read(length))
    total = mtp = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        total += end - start
        if name.startswith("mtp.") or ".mtp." in name:
            mtp += end - start
    return total, mtp


def _weights_from_folder(folder: Path) -> tuple[int, int, str] | None:
    files = sorted(folder.glob("*.safetensors"))
    if files:
        total = mtp = 0
        for f in files:
            t, m = safetensors_bytes(f)
            total, mtp = total + t, mtp + m
        return total - mtp, mtp, f"safetensors headers ({len(files)} file{'s' if len(files) > 1 else ''})"
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        data = json.loads(index.read_text())
        size = (data.get("metadata") or {}).get("total_size")
        if size:
            return int(size), 0, "model.safetensors.index.json total_size"
    return None


# --------------------------------------------------------------------------- building a spec


def spec_from_config(
    config: Mapping[str, Any],
    *,
    name: str,
    source: str,
    hf_quant: Mapping[str, Any] | None = None,
    weights: tuple[int, int, str] | None = None,
) -> ModelSpec:
    """A ModelSpec from a parsed config.json (and hf_quant_config.json, and known weight bytes)."""
    text = _text_config(config)
    if not text.get("num_hidden_layers"):
        raise UserError(f"{source}: config.json has no num_hidden_layers; is this a language model's config?")
    try:
        layers, mtp = _attention_groups(text)
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{source}: config.json is missing or has a bad value for {exc}") from None
    dtype = _dtype(config, text)
    dtype_bytes = DTYPE_BYTES.get(dtype, 2)
    q = _quant_info(config, hf_quant)
    kv_quant = checkpoint_kv_quant(config, hf_quant)
    quant_name, per_param = _bytes_per_param(q, dtype_bytes)
    counts = _param_counts(config, text, layers)
    params = sum(counts.values())
    est = sum(counts[cat] * per_param.get(cat, dtype_bytes) for cat in counts)
    n_layers = int(text["num_hidden_layers"])
    per_layer = (sum(counts[c] for c in _LINEAR) + counts["router"]) / max(1, n_layers)
    mtp_bytes = int(_mtp_params(text, mtp, per_layer) * dtype_bytes) if mtp else 0
    # vLLM also keeps a rotary cos/sin cache of max_position × rotary_dim in the model dtype.
    max_pos = int(text.get("max_position_embeddings") or config.get("max_position_embeddings") or 0)
    rope_dim = int(text.get("qk_rope_head_dim") or text.get("head_dim") or 0) or (
        int(text.get("hidden_size") or 0) // max(1, int(text.get("num_attention_heads") or 1))
    )
    rope_cache = max_pos * rope_dim * dtype_bytes
    # vLLM's MXFP4 MoE kernels (Marlin, TRT-LLM) pad the experts: hidden to 256, intermediate to
    # 128 (fused_moe/oracle/mxfp4.py); gpt-oss loads ~9% bigger than its checkpoint.
    padding = 0
    if quant_name == "mxfp4" and counts["experts"]:
        h = int(text.get("hidden_size") or 0)
        inter = int(text.get("moe_intermediate_size") or text.get("intermediate_size") or 0)
        ratio = (-(-h // 256) * 256) * (-(-inter // 128) * 128) / (h * inter)
        padding = int(counts["experts"] * per_param["experts"] * (ratio - 1))
    if weights:
        weights_bytes, ckpt_mtp, weights_source = weights
        weights_bytes += rope_cache + padding
        mtp_bytes = ckpt_mtp or mtp_bytes
    else:
        weights_bytes = int(est) + rope_cache + padding
        weights_source = f"estimated from {params / 1e9:.2f} B parameters ({quant_name or dtype})"
    if padding:
        weights_source += f", + {padding / 2**30:.2f} GiB MXFP4 kernel padding"
    experts = int(text.get("num_experts") or text.get("num_local_experts") or text.get("n_routed_experts") or 0)
    arch = (config.get("architectures") or text.get("architectures") or [""])[0]
    return ModelSpec(
        name=name,
        source=source,
        architecture=arch,
        model_type=str(text.get("model_type") or config.get("model_type") or ""),
        dtype=dtype,
        num_layers=n_layers,
        hidden_size=int(text.get("hidden_size") or 0),
        intermediate_size=int(text.get("intermediate_size") or 0),
        vocab_size=int(text.get("vocab_size") or config.get("vocab_size") or 0),
        num_attention_heads=int(text.get("num_attention_heads") or 0),
        max_position_embeddings=max_pos,
        layers=tuple(layers),
        mtp_layers=tuple(mtp),
        num_experts=experts,
        experts_per_token=int(text.get("num_experts_per_tok") or text.get("top_k_experts") or 0),
        moe_intermediate_size=int(text.get("moe_intermediate_size") or 0),
        shared_expert_intermediate_size=int(text.get("shared_expert_intermediate_size") or 0),
        quantization=quant_name,
        checkpoint_kv_cache_dtype=kv_quant[1],
        checkpoint_quant_method=kv_quant[0],
        param_count=params,
        weights_bytes=weights_bytes,
        weights_source=weights_source,
        mtp_weights_bytes=mtp_bytes,
        params_by_category=tuple(sorted(counts.items())),
    )


def online_quantized(spec: ModelSpec, method: str | None) -> ModelSpec:
    """The spec as vLLM loads it with `--quantization fp8` on an unquantized checkpoint:
    linear layers in 1 byte per parameter, the rest as stored. Other methods need a
    quantized checkpoint, which the spec already describes."""
    if not method or method.lower() != "fp8" or spec.quantization or not spec.params_by_category:
        return spec
    counts = dict(spec.params_by_category)
    saved = sum(counts.get(cat, 0) for cat in _LINEAR) * (spec.dtype_bytes - 1)
    return replace(
        spec,
        weights_bytes=spec.weights_bytes - saved,
        quantization="fp8 (online)",
        weights_source=spec.weights_source + ", linear layers quantized to fp8 at load",
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def spec_from_folder(folder: Path, name: str | None = None) -> ModelSpec:
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise UserError(f"{folder} has no config.json; point --model at the folder that holds the model's config.json")
    config = _read_json(config_path)
    hf_quant_path = folder / "hf_quant_config.json"
    hf_quant = _read_json(hf_quant_path) if hf_quant_path.is_file() else None
    return spec_from_config(
        config,
        name=name or str(folder),
        source=f"folder {folder}",
        hf_quant=hf_quant,
        weights=_weights_from_folder(folder),
    )


# --------------------------------------------------------------------------- lookup


def hub_dirs(env: Mapping[str, str] | None = None) -> list[Path]:
    """Where the Hugging Face cache may be, in the order huggingface_hub uses."""
    env = os.environ if env is None else env
    dirs = []
    if env.get("HF_HUB_CACHE"):
        dirs.append(Path(env["HF_HUB_CACHE"]).expanduser())
    if env.get("HF_HOME"):
        dirs.append(Path(env["HF_HOME"]).expanduser() / "hub")
    dirs.append(Path(env.get("HOME", "~")).expanduser() / ".cache" / "huggingface" / "hub")
    seen: list[Path] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def _hub_snapshot(repo_id: str, dirs: list[Path]) -> Path | None:
    folder_name = "models--" + repo_id.replace("/", "--")
    for hub in dirs:
        repo = hub / folder_name
        if not repo.is_dir():
            continue
        ref = repo / "refs" / "main"
        if ref.is_file():
            snap = repo / "snapshots" / ref.read_text().strip()
            if (snap / "config.json").is_file():
                return snap
        snaps = [s for s in (repo / "snapshots").glob("*") if (s / "config.json").is_file()]
        if snaps:
            return max(snaps, key=lambda s: s.stat().st_mtime)
    return None


@lru_cache(maxsize=1)
def _catalog() -> dict[str, Any]:
    catalog: dict[str, Any] = json.loads(CATALOG_FILE.read_text())
    return catalog


def catalog_names() -> list[str]:
    return sorted(_catalog()["models"])


def _catalog_entry(model: str) -> tuple[str, dict[str, Any]] | None:
    catalog = _catalog()
    wanted = model.strip().lower()
    for repo_id, entry in catalog["models"].items():
        names = [repo_id, repo_id.split("/")[-1], *entry.get("aliases", [])]
        if wanted in (n.lower() for n in names):
            return repo_id, entry
    return None


def spec_from_catalog(model: str) -> ModelSpec | None:
    found = _catalog_entry(model)
    if not found:
        return None
    repo_id, entry = found
    weights = None
    if entry.get("weights_bytes"):
        weights = (int(entry["weights_bytes"]), 0, entry.get("weights_source", "published total_size"))
    spec = spec_from_config(
        entry["config"], name=repo_id, source="built-in catalog", hf_quant=entry.get("hf_quant_config"), weights=weights
    )
    if entry.get("note"):
        spec = replace(spec, notes=(entry["note"],))
    return spec


@lru_cache(maxsize=64)
def _load_cached(model: str, dirs: tuple[Path, ...]) -> ModelSpec:
    path = Path(model).expanduser()
    if path.is_dir():
        return spec_from_folder(path.resolve(), name=model)
    if model.startswith(("/", "./", "../", "~")):
        raise UserError(f"model folder {model} does not exist; give the path of a folder that holds config.json")
    if model.count("/") == 1:
        snap = _hub_snapshot(model, list(dirs))
        if snap is not None:
            spec = spec_from_folder(snap, name=model)
            return replace(spec, source=f"Hugging Face cache {snap}")
    known = spec_from_catalog(model)
    if known is not None:
        return known
    where = ", ".join(str(d) for d in dirs)
    raise UserError(
        f"unknown model {model!r}: it is not a local folder, not in the Hugging Face cache "
        f"(looked in {where}), and not in sparktui's catalog. Fix: pass the path of a local model "
        f"folder that has config.json, download it first (huggingface-cli download {model}), or use "
        f"a catalog name such as {', '.join(catalog_names()[:4])} (`sparktui fit --list-models` lists all)"
    )


def load_model_spec(model: str, env: Mapping[str, str] | None = None) -> ModelSpec:
    """The spec of `model`: a folder path, a repo id in the local HF cache, or a catalog name."""
    if not model or not model.strip():
        raise UserError("no model given: pass --model with a folder path, a Hugging Face repo id or a catalog name")
    return _load_cached(model.strip(), tuple(hub_dirs(env)))
