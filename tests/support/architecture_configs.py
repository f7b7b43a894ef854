"""Configs of architectures people serve on a DGX Spark whose checkpoints' own config.json was not found
as a copy (tests/fixtures/model-configs/SOURCES.md), written in the fields their transformers config
classes define, at a released model's geometry:
- the two Mamba2-field hybrids: Falcon-H1-0.5B (36 layers, hidden 1024, 8 heads / 2 KV of 64, 24 Mamba
  heads of 64, state 128: transformers' FalconH1 model page) and Granite-4.0-H-Small's attention and Mamba
  widths (hidden 4096, 32 heads / 8 KV, state 128, conv 4, expand 2: its config.json as quoted with its
  fields) over 40 layers with an attention layer every tenth;
- dense decoders, from their model cards' figures: Seed-OSS-36B and OLMo-3-32B (sliding / full layer_types);
- poolside's Laguna-S-2.1 (118B, 48 layers): its geometry as public re-implementations write it
  (hidden 3072; 12 full-attention layers of 48 query heads, every fourth from layer 0, and 36 sliding
  layers of 72, window 512; 8 KV heads of 128; layer 0 dense at 12288, then 256 experts of 1024, top 10,
  a 1024 shared expert; per-head gating; vocab 100352), in LagunaConfig's fields; and its DFlash drafter
  (poolside/Laguna-S-2.1-DFlash, DFlashLagunaForCausalLM) as a public write-up of its model card lists it:
  6 sliding layers (window 512) of 72 query heads and 8 KV heads of 128, a 12288 dense FFN, 1.11 B
  parameters, the target's vocab, captures after target layers 2, 11, 20, 30, 39, 48 (as vLLM 0.25.1's
  log of it prints: "Using auxiliary layers from speculative config").
Gemma 3, Mistral-Small-3.x, Phi-4 and GLM-4.5-Air were written here too until real copies of their
config.json were found: they are in tests/fixtures/model-configs/unseen now.
Not checkpoints' own files: vLLM 0.32 builds each on the meta device (tests/core/test_fit_vs_vllm.py) and
judges the fit's reading of its architecture's fields, not the exact model."""

from __future__ import annotations

from typing import Any

GRANITE_4_H = {
    "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "hidden_size": 4096,
    "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 768,
    "shared_intermediate_size": 1536, "num_local_experts": 72, "num_experts_per_tok": 10,
    "layer_types": (["mamba"] * 9 + ["attention"]) * 4, "mamba_n_heads": 128, "mamba_d_head": 64,
    "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 256,
    "mamba_conv_bias": True, "mamba_proj_bias": False, "position_embedding_type": "nope",
    "max_position_embeddings": 131072, "vocab_size": 100352, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}  # fmt: skip
FALCON_H1 = {
    "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "hidden_size": 1024,
    "num_hidden_layers": 36, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
    "intermediate_size": 2048, "mamba_n_heads": 24, "mamba_d_head": 64, "mamba_d_state": 128,
    "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_d_ssm": 1536, "mamba_chunk_size": 128,
    "mamba_conv_bias": True, "mamba_proj_bias": False, "mamba_rms_norm": False, "mamba_use_mlp": True,
    "max_position_embeddings": 16384, "vocab_size": 32784, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}  # fmt: skip
SEED_OSS_36B = {
    "architectures": ["SeedOssForCausalLM"], "model_type": "seed_oss", "hidden_size": 5120,
    "intermediate_size": 27648, "num_hidden_layers": 64, "num_attention_heads": 80, "num_key_value_heads": 8,
    "head_dim": 128, "max_position_embeddings": 524288, "rope_theta": 10000000.0, "vocab_size": 155136,
    "attention_bias": True, "torch_dtype": "bfloat16",
}  # fmt: skip
OLMO_3_32B = {
    "architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3", "hidden_size": 5120, "intermediate_size": 27648,
    "num_hidden_layers": 64, "num_attention_heads": 40, "num_key_value_heads": 8, "sliding_window": 4096,
    "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 16, "max_position_embeddings": 65536,
    "rope_theta": 500000, "vocab_size": 100278, "torch_dtype": "bfloat16",
}  # fmt: skip
_LAGUNA_TYPES = ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(48)]
LAGUNA_S_2_1 = {
    "architectures": ["LagunaForCausalLM"], "model_type": "laguna", "hidden_size": 3072,
    "intermediate_size": 12288, "num_hidden_layers": 48, "num_attention_heads": 48,
    "num_attention_heads_per_layer": [48 if t == "full_attention" else 72 for t in _LAGUNA_TYPES],
    "num_key_value_heads": 8, "head_dim": 128, "layer_types": _LAGUNA_TYPES, "sliding_window": 512,
    "mlp_layer_types": ["dense"] + ["sparse"] * 47, "mlp_only_layers": [0], "num_experts": 256,
    "num_experts_per_tok": 10, "moe_intermediate_size": 1024, "shared_expert_intermediate_size": 1024,
    "norm_topk_prob": True, "moe_routed_scaling_factor": 2.5, "gating": "per-head", "attention_bias": False,
    "rms_norm_eps": 1e-6, "max_position_embeddings": 1048576, "vocab_size": 100352,
    "rope_parameters": {
        "full_attention": {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 128.0,
                           "original_max_position_embeddings": 8192, "beta_slow": 1.0, "beta_fast": 32.0,
                           "partial_rotary_factor": 0.5},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
    },
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}  # fmt: skip
LAGUNA_S_2_1_DFLASH = {
    "architectures": ["DFlashLagunaForCausalLM"], "model_type": "laguna", "hidden_size": 3072,
    "intermediate_size": 12288, "num_hidden_layers": 6, "num_attention_heads": 72,
    "num_attention_heads_per_layer": [72] * 6, "num_key_value_heads": 8, "head_dim": 128,
    "layer_types": ["sliding_attention"] * 6, "sliding_window": 512, "mlp_layer_types": ["dense"] * 6,
    "num_experts": 0, "gating": "per-head", "vocab_size": 100352, "draft_vocab_size": 100352, "block_size": 16,
    "dflash_config": {"mask_token_id": 12, "target_layer_ids": [1, 10, 19, 29, 38, 47]},
    "max_position_embeddings": 1048576, "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16",
}  # fmt: skip
CONFIGS: dict[str, dict[str, Any]] = {
    "granite-4.0-h": GRANITE_4_H,
    "falcon-h1": FALCON_H1,
    "seed-oss-36b": SEED_OSS_36B,
    "olmo-3-32b": OLMO_3_32B,
    "laguna-s-2.1": LAGUNA_S_2_1,
}
