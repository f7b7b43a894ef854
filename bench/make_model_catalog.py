"""Regenerate sparktui/core/model_catalog.json from the real configs in tests/fixtures.

    python bench/make_model_catalog.py [FIXTURES_DIR]

The package never reads tests/fixtures at run time; this script copies what the fit engine needs
(config keys, compacted quantization maps, published weight totals) into the package.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "sparktui" / "core" / "model_catalog.json"

# Other names people use for the same architecture (the fixtures hold a stand-in).
ALIASES = {
    "meta-llama/Meta-Llama-3.1-8B": [
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3.1-8B-Instruct",
    ],
    "meta-llama/Meta-Llama-3.1-70B": [
        "meta-llama/Llama-3.1-70B",
        "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Meta-Llama-3.1-70B-Instruct",
    ],
    "Qwen/Qwen2.5-7B": ["Qwen/Qwen2.5-7B-Instruct"],
}
NOTES = {
    "meta-llama/Meta-Llama-3.1-8B": "config of the base model; -Instruct has the same dimensions",
    "meta-llama/Meta-Llama-3.1-70B": "config of the base model; -Instruct has the same dimensions",
    "Qwen/Qwen2.5-7B": "config of the base model; -Instruct has the same dimensions",
}
# model.safetensors.index.json metadata.total_size, from model-configs/SOURCES.md
WEIGHTS = {
    "meta-llama/Meta-Llama-3.1-8B": 16060522496,
    "meta-llama/Meta-Llama-3.1-70B": 141107412992,
    "meta-llama/Llama-3.3-70B-Instruct": 141107412992,
    "openai/gpt-oss-120b": 65248815744,
}

# config keys the fit engine reads; everything else is dropped to keep the package small
KEEP = {
    # DeepSeek V4's own layout (modelspec/deepseek_v4.py)
    "compress_ratios",
    "o_lora_rank",
    "o_groups",
    "index_n_heads",
    "expert_dtype",
    "architectures",
    "model_type",
    # the repo's own classes: --trust-remote-code where vLLM cannot read the model_type itself
    # (model_flags, vllm_native_configs)
    "auto_map",
    "torch_dtype",
    "dtype",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "moe_intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "kv_channels",
    "vocab_size",
    "final_logit_softcapping",
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "top_k_experts",
    "n_shared_experts",
    "shared_expert_intermediate_size",
    "first_k_dense_replace",
    "mlp_only_layers",
    "sliding_window",
    "use_sliding_window",
    "sliding_window_pattern",
    "layer_types",
    "full_attention_interval",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "num_nextn_predict_layers",
    "mtp_num_hidden_layers",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "mamba_ssm_dtype",
    "max_position_embeddings",
    "tie_word_embeddings",
    "global_head_dim",
    "num_global_key_value_heads",
    "attention_k_eq_v",
    "enable_moe_block",
    "quantization_config",
    "text_config",
    "vision_config",
    # the model's own length limit (vLLM's _get_and_verify_max_len)
    "rope_scaling",
    "rope_parameters",
    # the rotary width of the rope caches (modelspec/rope.py)
    "partial_rotary_factor",
    "rotary_pct",
    "rotary_emb_fraction",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
    # Nemotron-H (Mamba2) hybrids
    "hybrid_override_pattern",
    "layers_block_type",
    "mtp_hybrid_override_pattern",
    "mtp_layers_block_type",
    "mamba_num_heads",
    "mamba_head_dim",
    "ssm_state_size",
    "n_groups",
    "conv_kernel",
    "mamba_ssm_cache_dtype",
    "moe_latent_size",
    "moe_shared_expert_intermediate_size",
    # Gemma KV sharing, DeepSeek V3.2 indexer, EAGLE drafters
    "num_kv_shared_layers",
    "hidden_size_per_layer_input",  # Gemma 4's per-layer embeddings (modelspec/gemma.py)
    "vocab_size_per_layer_input",
    "index_topk",
    "index_head_dim",
    "index_topk_freq",
    "index_topk_pattern",
    "index_skip_topk_offset",
    "draft_vocab_size",
    "dflash_config",
}
VISION_KEEP = {
    "hidden_size",
    "intermediate_size",
    "depth",
    "num_hidden_layers",
    "spatial_merge_size",
    "out_hidden_size",
    "patch_size",
    "in_channels",
    "temporal_patch_size",
}


def _category_key(module: str) -> str:
    """A module name with layer numbers removed, so one entry stands for every layer."""
    return re.sub(r"\.\d+\.", ".N.", module)


def compact_quant(q: dict) -> dict:
    # quantized_layers stays whole: vLLM looks each module up in it (ModelOptMixedPrecisionConfig
    # ._resolve_quant_algo), and one entry per category would stand for layers it does not name
    q = dict(q)
    for key in ("exclude_modules", "ignore", "modules_to_not_convert"):
        if isinstance(q.get(key), list):
            # kept per module: weight_format matches each module against them as vLLM does
            q[key] = sorted({str(m) for m in q[key]})
    groups = q.get("config_groups")
    # a ModelOpt config's groups repeat its quantized_layers (weight_format reads those); a
    # compressed-tensors config's targets are matched per module and stay whole
    if isinstance(groups, dict) and str(q.get("quant_method") or "").startswith("modelopt"):
        q["config_groups"] = {
            name: {**g, "targets": sorted({_category_key(t) for t in g.get("targets", [])})}
            for name, g in groups.items()
        }
    return q


def compact_config(config: dict) -> dict:
    out = {k: v for k, v in config.items() if k in KEEP}
    if isinstance(out.get("text_config"), dict):
        out["text_config"] = compact_config(out["text_config"])
    if isinstance(out.get("vision_config"), dict):
        out["vision_config"] = {k: v for k, v in out["vision_config"].items() if k in VISION_KEEP}
    if isinstance(out.get("quantization_config"), dict):
        out["quantization_config"] = compact_quant(out["quantization_config"])
    return out


def build(fixtures: Path) -> dict:
    folder = fixtures / "model-configs"
    models: dict[str, dict] = {}
    for path in sorted(folder.glob("*.json")):
        if path.stem.endswith("__hf_quant_config"):
            continue
        repo_id = path.stem.replace("__", "/", 1)
        entry: dict = {"config": compact_config(json.loads(path.read_text())), "fixture": f"model-configs/{path.name}"}
        quant = path.with_name(path.stem + "__hf_quant_config.json")
        if quant.is_file():
            data = json.loads(quant.read_text())
            data["quantization"] = compact_quant(data.get("quantization", {}))
            entry["hf_quant_config"] = data
        if repo_id in ALIASES:
            entry["aliases"] = ALIASES[repo_id]
        if repo_id in NOTES:
            entry["note"] = NOTES[repo_id]
        if repo_id in WEIGHTS:
            entry["weights_bytes"] = WEIGHTS[repo_id]
            entry["weights_source"] = "published model.safetensors.index.json total_size"
        models[repo_id] = entry
    return {"generated_by": "bench/make_model_catalog.py", "models": models}


def main(argv: list[str]) -> int:
    fixtures = Path(argv[0]) if argv else REPO / "tests" / "fixtures"
    catalog = build(fixtures)
    OUT.write_text(json.dumps(catalog, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT} ({len(catalog['models'])} models, {OUT.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
