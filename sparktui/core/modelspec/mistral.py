"""Mistral-format checkpoints: params.json instead of config.json (consolidated.safetensors).
vLLM reads them with `--tokenizer-mode mistral --config-format mistral --load-format mistral`
and maps the keys as vllm/transformers_utils/configs/mistral.py does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# params.json key → config.json key
_KEYS = {
    "dim": "hidden_size",
    "n_layers": "num_hidden_layers",
    "head_dim": "head_dim",
    "hidden_dim": "intermediate_size",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "vocab_size": "vocab_size",
    "sliding_window": "sliding_window",
    "rope_theta": "rope_theta",
    "tied_embeddings": "tie_word_embeddings",
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "qk_nope_head_dim": "qk_nope_head_dim",
    "v_head_dim": "v_head_dim",
}
# vLLM's adapter assumes this when params.json names no length (mistral.py _remap_general_mistral_args)
DEFAULT_MAX_POSITION = 128_000


def config_from_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A config.json-shaped dict from a Mistral params.json."""
    config: dict[str, Any] = {"model_type": "mistral", "architectures": ["MistralForCausalLM"]}
    for key, target in _KEYS.items():
        if params.get(key) is not None:
            config[target] = params[key]
    window = params.get("sliding_window")
    if isinstance(window, list) and window:  # a repeating per-layer pattern; None = a global layer
        layers = int(params.get("n_layers") or 0)
        pattern = window * (layers // len(window))
        config["layer_types"] = ["full_attention" if w is None else "sliding_attention" for w in pattern]
        config["sliding_window"] = next((w for w in window if w), None)
    elif isinstance(window, int) and window:
        config["layer_types"] = ["sliding_attention"] * int(params.get("n_layers") or 0)
    length = params.get("max_position_embeddings", DEFAULT_MAX_POSITION)
    config["max_position_embeddings"] = length
    config["max_seq_len"] = params.get("max_seq_len", length)
    moe = params.get("moe")
    if isinstance(moe, Mapping):
        config["architectures"] = ["MixtralForCausalLM"]
        config["n_routed_experts"] = moe.get("num_experts")
        config["num_experts_per_tok"] = moe.get("num_experts_per_tok")
        if moe.get("expert_hidden_dim"):
            config["moe_intermediate_size"] = moe["expert_hidden_dim"]
        if moe.get("num_shared_experts"):
            config["n_shared_experts"] = moe["num_shared_experts"]
        if moe.get("first_k_dense_replace"):
            config["first_k_dense_replace"] = moe["first_k_dense_replace"]
    vision = params.get("vision_encoder")
    if isinstance(vision, Mapping):
        config["architectures"] = ["PixtralForConditionalGeneration"]
        config["vision_config"] = {
            "hidden_size": vision.get("hidden_size"),
            "intermediate_size": vision.get("intermediate_size"),
            "num_hidden_layers": vision.get("num_hidden_layers"),
            "patch_size": vision.get("patch_size"),
            "in_channels": vision.get("num_channels"),
            "spatial_merge_size": vision.get("spatial_merge_size"),
        }
    quant = params.get("quantization")
    if isinstance(quant, Mapping) and str(quant.get("qformat_weight", "")).lower().startswith("fp8"):
        config["quantization_config"] = {"quant_method": "fp8"}
    dtype = params.get("dtype") or params.get("torch_dtype")
    config["torch_dtype"] = str(dtype) if dtype else "bfloat16"
    return config
