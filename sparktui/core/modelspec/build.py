"""A ModelSpec from a model's own files: config.json (or Mistral's params.json), the quantization
config, and the weight bytes its safetensors headers or index give."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from sparktui.core.modelspec import (
    checked,
    deepseek_v4,
    dense,
    gemma,
    hybrid,
    kimi,
    laguna,
    mimo,
    mistral,
    mla,
    moe,
    nas,
    rope,
)
from sparktui.core.modelspec.defaults import MODEL_TYPE_DEFAULTS, with_defaults
from sparktui.core.modelspec.encoder import encoder_of
from sparktui.core.modelspec.limits import check_numbers
from sparktui.core.modelspec.modules import category_bytes, linear_modules
from sparktui.core.modelspec.quant import CATEGORIES, LINEAR, bytes_per_param, quant_info
from sparktui.core.modelspec.spec import DTYPE_BYTES, MAMBA, SLIDING, LayerGroup, ModelSpec
from sparktui.core.modelspec.weight_format import weight_formats
from sparktui.core.modelspec.weights import (
    CACHE_SETTING,
    NOT_USED,
    headers_of_folder,
    stored_by_category,
    weights_from_folder,
)
from sparktui.core.vllm_kv_dtypes import checkpoint_modelopt_algo
from sparktui.core.vllm_rules import checkpoint_kv_quant
from sparktui.errors import UserError
from sparktui.files import Untrusted, is_special, read_regular, warn_untrusted

# vllm/transformers_utils/model_arch_config_convertor.py derive_max_model_len_and_key
MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# RoPE types whose max_position_embeddings is already scaled (vllm/config/model.py)
_SCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("text_config", "llm_config", "language_config"):
        sub = config.get(key)
        if isinstance(sub, Mapping) and (sub.get("num_hidden_layers") or sub.get("model_type") in MODEL_TYPE_DEFAULTS):
            return with_defaults(sub)
    return with_defaults(config)


# Every dtype a checkpoint's config may name (torch's names; vLLM's aliases half/float; fp8)
TORCH_DTYPES = frozenset(
    {"bfloat16", "float16", "half", "float32", "float", "float64", "double", "fp8", "int8", "uint8", "int16"}
    | {"int32", "int64", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"}
)


def _dtype(config: Mapping[str, Any], text: Mapping[str, Any]) -> str:
    raw = str(
        text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    )
    raw = raw.replace("torch.", "")
    # vLLM's dtype "auto" serves float32 checkpoints in bfloat16.
    return "bfloat16" if raw in ("float32", "float") else raw


def _rope_parameters(text: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    rope = text.get("rope_parameters") or text.get("rope_scaling")
    if not isinstance(rope, Mapping) or not rope:
        return []
    nested = [v for v in rope.values() if isinstance(v, Mapping)]
    return nested if nested and len(nested) == len(rope) else [rope]


def max_len_limit(text: Mapping[str, Any]) -> tuple[int, str]:
    """(longest --max-model-len vLLM accepts, the key it comes from); (0, "") when unknown.
    vllm/config/model.py _get_and_verify_max_len: the smallest of the length keys, times a
    RoPE scaling factor unless the type is already scaled (or the model is Gemma 3)."""
    found = [(int(text[k]), k) for k in MAX_LEN_KEYS if isinstance(text.get(k), (int, float)) and text[k]]
    if not found:
        return 0, ""
    limit, key = min(found)
    if text.get("model_max_length"):
        limit, key = int(text["model_max_length"]), "model_max_length"
    if "gemma3" not in str(text.get("model_type") or ""):
        factor = 1.0
        for rp in _rope_parameters(text):
            kind = rp.get("rope_type") or rp.get("type") or "default"
            if kind not in _SCALED_ROPE and isinstance(rp.get("factor"), (int, float)):
                factor = float(rp["factor"])
        if factor > 0 and factor != 1.0:
            limit = int(limit * factor)
            key = f"{key} × rope factor {factor:g}"
    return limit, key


def layer_groups(text: Mapping[str, Any]) -> tuple[list[LayerGroup], list[LayerGroup]]:
    n_layers = int(text["num_hidden_layers"])
    if kimi.is_kimi_linear(text):
        return kimi.groups(text, n_layers)
    if mla.is_mla(text):
        return mla.groups(text, n_layers)
    if hybrid.is_nemotron_h(text):
        return hybrid.nemotron_groups(text, dense.head_dim(text))
    if hybrid.is_parallel_hybrid(text):
        return hybrid.parallel_groups(text, dense.head_dim(text))
    if mimo.is_mimo_v2(text):
        return mimo.groups(text, n_layers)
    if nas.is_nemotron_nas(text):
        return nas.groups(text, n_layers, dense.head_dim(text))
    return dense.groups(text, n_layers)


def _vision_params(config: Mapping[str, Any], h: int) -> int:
    vision = config.get("vision_config")
    if not (isinstance(vision, Mapping) and vision.get("hidden_size")):
        return 0
    vh = int(vision["hidden_size"])
    vi = int(vision.get("intermediate_size") or 4 * vh)
    depth = int(vision.get("depth") or vision.get("num_hidden_layers") or 0)
    merge = int(vision.get("spatial_merge_size") or 1)
    out = int(vision.get("out_hidden_size") or h)
    patch = int(vision.get("patch_size") or 14)
    return (
        depth * (4 * vh * vh + 2 * vh * vi)
        + (vh * merge * merge) ** 2
        + vh * merge * merge * out
        + int(vision.get("in_channels") or 3) * int(vision.get("temporal_patch_size") or 1) * patch * patch * vh
    )


def param_counts(config: Mapping[str, Any], text: Mapping[str, Any], layers: list[LayerGroup]) -> dict[str, int]:
    """Parameters per weight category, computed from the architecture."""
    h = int(text.get("hidden_size") or 0)
    vocab = int(text.get("vocab_size") or config.get("vocab_size") or 0)
    n_layers = int(text["num_hidden_layers"])
    counts = {cat: 0 for cat in CATEGORIES}
    counts["embed"] = vocab * h
    tied = text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
    out_vocab = int(text.get("draft_vocab_size") or config.get("draft_vocab_size") or vocab)  # EAGLE3 drafters
    counts["lm_head"] = 0 if tied else out_vocab * h
    counts["other"] = h * (2 * n_layers + 1)  # norms
    counts["vision"] = _vision_params(config, h)
    if hybrid.is_nemotron_h(text):
        blocks = hybrid.nemotron_blocks(text)
        for cat, n in hybrid.nemotron_params(text, blocks, dense.head_dim(text)).items():
            counts[cat] += n
        counts["other"] = h * (len(blocks) + 1)  # one norm per block
        return counts
    if deepseek_v4.is_deepseek_v4(text):
        for cat, n in deepseek_v4.params(text, n_layers).items():
            counts[cat] += n
        return counts
    for g in layers:
        if g.draft:
            continue
        if g.kind == "mla":
            if not g.elem_bytes:  # the indexer's cache rides on the MLA layers: no weights of its own here
                counts["attn"] += g.count * mla.params_per_layer(text)
        elif g.kind == MAMBA and g.state_kind == "mamba2":
            counts["mamba"] += g.count * hybrid.mamba2_params(text, g)
        elif g.kind == MAMBA and g.state_kind == "kda":
            counts["linear_attn"] += g.count * kimi.kda_params(text, g)
        elif g.kind == MAMBA:
            counts["linear_attn"] += g.count * hybrid.gdn_params(text, g)
        elif not laguna.is_laguna(text):
            counts["attn"] += g.count * dense.attention_params(text, g)
    if laguna.is_laguna(text):  # each layer's own query heads and gate
        kinds = dense.layer_kinds(text, n_layers)
        for i, kind in enumerate(kinds):
            own = [x for x in layers if not x.draft and (x.kind == SLIDING) == (kind in dense.SLIDING_KINDS)]
            if own:
                counts["attn"] += sum(n for _, n in laguna.projections(text, i, own[0].num_kv_heads, own[0].head_size))
    if nas.is_nemotron_nas(text):  # each layer's MLP has its own width (or none)
        counts["mlp"] += nas.mlp_params(text, n_layers)
    else:
        for cat, n in moe.mlp_counts(text, n_layers).items():
            counts[cat] += n
    counts["attn"] += gemma.kv_shared_attention_params(text)
    table, linear, norms = gemma.per_layer_embedding_params(text)
    counts["per_layer_embed"], counts["mlp"], counts["other"] = table, counts["mlp"] + linear, counts["other"] + norms
    return counts


def _mtp_params(text: Mapping[str, Any], mtp: list[LayerGroup], per_layer_params: float) -> int:
    n = sum(g.count for g in mtp)
    h = int(text.get("hidden_size") or 0)
    # one decoder layer plus the projection that joins embedding and hidden state
    return int(n * (per_layer_params + 2 * h * h))


def spec_from_config(
    config: Mapping[str, Any],
    *,
    name: str,
    source: str,
    hf_quant: Mapping[str, Any] | None = None,
    weights: tuple[int, int, str] | None = None,
) -> ModelSpec:
    """A ModelSpec from a parsed config.json (and hf_quant_config.json, and known weight bytes)."""
    if not isinstance(config, Mapping):
        raise UserError(f"{source}: config.json is not a JSON object")
    check_numbers(config, source)
    text = text_config(config)
    if not text.get("num_hidden_layers"):
        raise UserError(f"{source}: config.json has no num_hidden_layers; is this a language model's config?")
    try:
        return _build(config, text, name=name, source=source, hf_quant=hf_quant, weights=weights)
    except UserError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, ZeroDivisionError) as exc:
        what = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise UserError(f"{source}: config.json is missing or has a bad value for {what}") from None


def _build(
    config: Mapping[str, Any],
    text: Mapping[str, Any],
    *,
    name: str,
    source: str,
    hf_quant: Mapping[str, Any] | None,
    weights: tuple[int, int, str] | None,
) -> ModelSpec:
    layers, mtp = layer_groups(text)
    dtype = _dtype(config, text)
    if dtype not in TORCH_DTYPES:  # before any arithmetic: an unknown dtype has no size
        raise UserError(
            f"{source}: torch_dtype is {dtype[:40]!r}; expected a torch dtype such as bfloat16, float16 or "
            "float32. Fix that field of the model's config (or point --model at a model whose config.json is intact)"
        )
    dtype_bytes = DTYPE_BYTES.get(dtype, 2)
    q = quant_info(config, hf_quant)
    kv_quant = checkpoint_kv_quant(config, hf_quant)
    quant_name, per_param = bytes_per_param(q, dtype_bytes)
    formats = weight_formats(config, hf_quant)
    modules = linear_modules(config, text, layers) if formats.quantized else []
    if formats.quantized:  # each linear module in the format it loads in (excluded ones unquantized)
        per_param.update(category_bytes(modules, formats))
    counts = param_counts(config, text, layers)
    params = sum(counts.values())
    est = sum(counts[cat] * per_param.get(cat, dtype_bytes) for cat in counts)
    n_layers = int(text["num_hidden_layers"])
    per_layer = (sum(counts[c] for c in LINEAR) + counts["router"]) / max(1, n_layers)
    mtp_bytes = int(_mtp_params(text, mtp, per_layer) * dtype_bytes) if mtp else 0
    # vLLM also keeps its rotary cos/sin caches beside the weights (modelspec/rope.py)
    max_pos = int(text.get("max_position_embeddings") or config.get("max_position_embeddings") or 0)
    rope_elements, mrope_elements = rope.rope_cache_elements(text, max_pos)
    rope_cache = rope_elements * dtype_bytes
    # Gemma 4's k_eq_v layers: vLLM allocates a V slot the checkpoint does not carry
    v_slot = int(gemma.v_slot_params(text, layers) * per_param.get("attn", dtype_bytes))
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
        weights_bytes += rope_cache + padding + v_slot
        mtp_bytes = ckpt_mtp or mtp_bytes
    else:
        weights_bytes = int(est) + rope_cache + padding + v_slot
        weights_source = f"estimated from {params / 1e9:.2f} B parameters ({quant_name or dtype})"
    if padding:
        weights_source += f", + {padding / 2**30:.2f} GiB MXFP4 kernel padding"
    arch = (config.get("architectures") or text.get("architectures") or [""])[0]
    nvfp4_moe = _nvfp4_experts(text, modules, formats) if formats.quantized else ()
    limit, limit_key = max_len_limit(text)
    moe_layers, mlp_layers = feed_forward_layers(text, n_layers)
    # layers with a dense MLP instead of experts (not Nemotron-H's blocks, not gemma-4's MLP beside them)
    dense_split = (0, 0) if hybrid.is_nemotron_h(text) or mlp_layers >= n_layers else moe.dense_layers(text, n_layers)
    notes = [n for n in (mla.indexer_note(text), _unmodelled_note(text), checked.unchecked_note(str(arch))) if n]
    return ModelSpec(
        name=name,
        source=source,
        architecture=str(arch),
        model_type=str(text.get("model_type") or config.get("model_type") or ""),
        dtype=dtype,
        num_layers=n_layers,
        hidden_size=int(text.get("hidden_size") or 0),
        intermediate_size=max(nas.intermediate_sizes(text, n_layers), default=0)
        if nas.is_nemotron_nas(text)
        else _first_int(text.get("intermediate_size")),
        vocab_size=int(text.get("vocab_size") or config.get("vocab_size") or 0),
        num_attention_heads=laguna.widest_heads(text, n_layers)
        if laguna.is_laguna(text)
        else int(text.get("num_attention_heads") or 0),
        output_gate_width=laguna.gate_width(text, laguna.widest_heads(text, n_layers), dense.head_dim(text))
        if laguna.is_laguna(text)
        else 0,
        max_position_embeddings=max_pos,
        layers=tuple(layers),
        mtp_layers=tuple(mtp),
        compress_ratios=tuple(int(r or 0) for r in text.get("compress_ratios") or ())
        if deepseek_v4.is_deepseek_v4(text)
        else (),
        kv_dims=deepseek_v4.kv_dims(text),
        num_experts=moe.num_experts(text),
        experts_per_token=int(
            text.get("num_experts_per_tok") or text.get("num_experts_per_token") or text.get("top_k_experts") or 0
        ),
        balanced_router=moe.balanced_router(text),
        moe_layers=moe_layers,
        mlp_layers=mlp_layers,
        moe_intermediate_size=int(text.get("moe_intermediate_size") or 0),
        shared_expert_intermediate_size=moe.shared_intermediate(text),
        dense_layers_first=dense_split[0],
        dense_layers_later=dense_split[1],
        mla_widths=mla.activation_widths(text) if mla.is_mla(text) and not deepseek_v4.is_deepseek_v4(text) else (0, 0),
        quantization=quant_name,
        checkpoint_kv_cache_dtype=kv_quant[1],
        checkpoint_quant_method=kv_quant[0],
        modelopt_algo=checkpoint_modelopt_algo(config, hf_quant),
        # compressed-tensors' should_ignore_layer is the check that refuses a split (utils.py)
        kda_split_shards=kimi.split_fused_shards(text, n_layers, formats.is_excluded)
        if kimi.is_kimi_linear(text) and formats.method == "compressed-tensors"
        else (),
        param_count=params,
        weights_bytes=weights_bytes,
        weights_source=weights_source,
        mtp_weights_bytes=mtp_bytes,
        params_by_category=tuple(sorted(counts.items())),
        bytes_by_category=tuple(sorted((cat, int(n * per_param.get(cat, dtype_bytes))) for cat, n in counts.items())),
        notes=tuple(notes),
        max_len_limit=limit,
        max_len_key=limit_key,
        multimodal=bool(counts["vision"]) or any(k in config for k in ("vision_config", "audio_config")),
        draft_vocab_size=int(text.get("draft_vocab_size") or config.get("draft_vocab_size") or 0),
        logit_softcap=float(text.get("final_logit_softcapping") or 0.0),
        remote_code=bool(config.get("auto_map")),
        config_model_type=str(config.get("model_type") or ""),
        encoder=encoder_of(config, text) if counts["vision"] else None,
        aux_hidden_layers=_aux_hidden_layers(config, str(arch)),
        nvfp4_moe=nvfp4_moe,
        mrope_cache_bytes=mrope_elements * dtype_bytes,
        rope_cache_bytes=rope_cache,
    )


def _nvfp4_experts(
    text: Mapping[str, Any], modules: list[Any], formats: Any
) -> tuple[int, int, int, int, bool] | tuple[()]:
    """(MoE layers whose routed experts load as NVFP4, experts, hidden, intermediate, gated), or ():
    what vLLM's CUTLASS NVFP4 MoE kernels pad (fit_settings.nvfp4_moe_padding). Nemotron-H's relu²
    experts have no gate."""
    layers = sum(1 for m in modules if m.category == "experts" and formats.format_of(m.name) == "NVFP4")
    experts = moe.num_experts(text)
    inter = int(text.get("moe_intermediate_size") or 0)
    if not (layers and experts and inter):
        return ()
    return layers, experts, int(text.get("hidden_size") or 0), inter, not hybrid.is_nemotron_h(text)


def _aux_hidden_layers(config: Mapping[str, Any], arch: str) -> int:
    """How many target hidden states an EAGLE3 / DFlash drafter reads (0 for other models): its
    dflash_config.target_layer_ids or eagle_config.eagle_aux_hidden_state_layer_ids, else vLLM's three
    (llm_base_proposer.py / models/llama_eagle3.py: layers 2, n / 2 and n - 3)."""
    for key, ids in (("dflash_config", "target_layer_ids"), ("eagle_config", "eagle_aux_hidden_state_layer_ids")):
        section = config.get(key)
        if isinstance(section, Mapping) and isinstance(section.get(ids), list):
            return len(section[ids])
    return 3 if "eagle3" in arch.lower() else 0


def feed_forward_layers(text: Mapping[str, Any], n_layers: int) -> tuple[int, int]:
    """(layers with routed experts, layers with a dense MLP)."""
    if hybrid.is_nemotron_h(text):
        blocks = hybrid.nemotron_blocks(text)
        return blocks.count("moe"), blocks.count("mlp")
    if not moe.num_experts(text):
        return 0, n_layers
    moe_layers = sum(moe.moe_layer_flags(text, n_layers))
    if text.get("model_type") == "gemma4_text" and text.get("enable_moe_block"):
        return moe_layers, n_layers  # gemma-4 keeps a dense MLP beside the experts
    return moe_layers, n_layers - moe_layers


def _unmodelled_note(text: Mapping[str, Any]) -> str | None:
    if str(text.get("model_type") or "").startswith("deepseek_v4"):
        return (
            "DeepSeek V4's KV cache is planned as vLLM 0.32 plans it on a Spark (SM12x, fp8_ds_mla): per layer "
            "a 128-token sliding-window latent cache, compressed latents and compressor states for "
            "compress_ratio 4 / 128 layers, indexer keys for ratio 4, in vLLM's packed groups, whole on every "
            "tensor-parallel rank (modelspec/deepseek_v4.py kv_buckets, kv_groups). Checked against one real "
            "TP=2 start-up (tokens within 0.02% of its log given its KV memory). Approximate: other GPUs' "
            "layouts (bf16 rows, 512 B alignment), a drafter's layer count other than the spec's MTP layers "
            "(DSpark has 3); the memory outside weights and KV for this family is not checked against a start-up"
        )
    return None


def _first_int(value: Any) -> int:
    if isinstance(value, list):
        return int(max(value)) if value else 0
    return int(value or 0)


def online_quantized(spec: ModelSpec, method: str | None) -> ModelSpec:
    """The spec as vLLM loads it with `--quantization fp8` on an unquantized checkpoint:
    linear layers in 1 byte per parameter, the rest as stored. Other methods need a
    quantized checkpoint, which the spec already describes."""
    if not method or method.lower() != "fp8" or spec.quantization or not spec.params_by_category:
        return spec
    counts = dict(spec.params_by_category)
    saved = sum(counts.get(cat, 0) for cat in LINEAR) * (spec.dtype_bytes - 1)
    stored = dict(spec.bytes_by_category)
    for cat in LINEAR:
        if cat in stored:
            stored[cat] = counts.get(cat, 0)
    return replace(
        spec,
        weights_bytes=spec.weights_bytes - saved,
        bytes_by_category=tuple(sorted(stored.items())),
        quantization="fp8 (online)",
        weights_source=spec.weights_source + ", linear layers quantized to fp8 at load",
    )


# config.json is a few KiB, a ModelOpt map of every quantized layer a few MiB: a larger file is none
# of them (and read whole, a multi-GiB one would take that much memory)
MODEL_JSON_LIMIT = 64 << 20


def read_json(path: Path, *, cached: bool = False) -> dict[str, Any]:
    """A model folder's JSON file (config.json, params.json, hf_quant_config.json) as a dict;
    UserError naming it when it is no regular file (a FIFO: read_regular never waits on one),
    larger than MODEL_JSON_LIMIT or not a JSON object. `cached`: a file of the Hub fetch's cache,
    files.Untrusted when another user owns or may write it (or in its folder)."""
    try:
        raw = read_regular(path, MODEL_JSON_LIMIT, path.name, own=cached, setting=CACHE_SETTING)
        data = json.loads(raw.decode())
    except FileNotFoundError:
        raise UserError(f"cannot read {path}: no such file") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not valid JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise UserError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def _config_json(path: Path, cached: bool) -> dict[str, Any]:
    try:
        return read_json(path, cached=cached)
    except Untrusted as exc:  # no config, no model to fit: this error is the one message
        raise UserError(f"{exc}; {NOT_USED}") from None


def _hf_quant(path: Path, cached: bool) -> dict[str, Any] | None:
    if not (path.is_file() or is_special(path)):
        return None
    try:
        return read_json(path, cached=cached)
    except Untrusted as exc:
        warn_untrusted(exc, NOT_USED)
        return None


def model_config(folder: Path, *, cached: bool = False) -> tuple[dict[str, Any], str]:
    """(config.json-shaped dict, file it came from): config.json, else a Mistral params.json.
    `cached`: the folder is the Hub fetch's cache, whose config is refused (UserError) when another
    user owns or may write it; a local folder is the user's own choice, read as it is."""
    config_path = folder / "config.json"
    if config_path.is_file() or is_special(config_path):  # a FIFO or folder there is named, not passed over
        return _config_json(config_path, cached), "config.json"
    params_path = folder / "params.json"
    if params_path.is_file() or is_special(params_path):
        return mistral.config_from_params(_config_json(params_path, cached)), "params.json"
    raise UserError(
        f"{folder} has neither config.json nor params.json; point --model at the folder that holds the "
        "model's config.json (or a Mistral-format params.json)"
    )


def spec_from_folder(folder: Path, name: str | None = None, *, cached: bool = False) -> ModelSpec:
    """`cached`: the folder is the Hub fetch's cache (runtime.hub): a file of it another user owns or
    may write (or in a folder others may write in) is not used, as weights.read_cached says."""
    config, file = model_config(folder, cached=cached)
    hf_quant_path = folder / "hf_quant_config.json"
    hf_quant = _hf_quant(hf_quant_path, cached)
    spec = spec_from_config(
        config,
        name=name or str(folder),
        source=f"folder {folder}" + ("" if file == "config.json" else f" ({file})"),
        hf_quant=hf_quant,
        weights=weights_from_folder(folder, cached=cached),
    )
    return with_stored_bytes(spec, *stored_by_category(headers_of_folder(folder)))


def with_stored_bytes(spec: ModelSpec, stored: Mapping[str, int], dtypes: Mapping[str, set[str]]) -> ModelSpec:
    """`spec` with each weight category's bytes as the safetensors headers store them (dtype × shape of
    every tensor, scales included) rather than as the quantization config implies: a checkpoint that
    keeps a layer in bf16 its config does not exclude (or packs one it does) is read as it is. The
    speed estimate reads these bytes; the MTP head stays apart, as weights_from_folder counts it."""
    if not stored:
        return spec
    by_bytes = dict(spec.bytes_by_category)
    for cat, n in stored.items():
        if cat != "mtp":
            by_bytes[cat] = n
    formats = ", ".join(f"{cat} {'+'.join(sorted(dtypes[cat]))}" for cat in sorted(dtypes) if cat in LINEAR)
    return replace(
        spec,
        bytes_by_category=tuple(sorted(by_bytes.items())),
        notes=(*spec.notes, f"per-layer weight bytes from the safetensors headers ({formats})"),
    )
