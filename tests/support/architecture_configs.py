"""Configs of architectures people serve on a DGX Spark whose checkpoints' own config.json was not found
as a byte copy (tests/fixtures/model-configs/SOURCES.md), written in the fields their transformers config
classes define, at a released model's geometry:
- the two Mamba2-field hybrids: Falcon-H1-0.5B (36 layers, hidden 1024, 8 heads / 2 KV of 64, 24 Mamba
  heads of 64, state 128: transformers' FalconH1 model page) and Granite-4.0-H-Small's attention and Mamba
  widths (hidden 4096, 32 heads / 8 KV, state 128, conv 4, expand 2: its config.json as quoted with its
  fields) over 40 layers with an attention layer every tenth;
- dense and MoE decoders, from their model cards' figures: Gemma-3-27B (62 layers, a global layer every
  sixth by sliding_window_pattern 6, window 1024), Mistral-Small-3.x-24B (under Mistral3's vision wrapper),
  Phi-4, Seed-OSS-36B, GLM-4.5-Air (MoE, one MTP layer), OLMo-3-32B (sliding / full layer_types).
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
GEMMA_3_27B = {
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 62,
        "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "sliding_window": 1024,
        "sliding_window_pattern": 6, "query_pre_attn_scalar": 168, "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "max_position_embeddings": 131072, "vocab_size": 262208,
    },
    "vision_config": {
        "model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
        "num_attention_heads": 16, "num_hidden_layers": 27, "image_size": 896, "patch_size": 14,
    },
}  # fmt: skip
MISTRAL_SMALL_3 = {
    "architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3", "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "mistral", "hidden_size": 5120, "intermediate_size": 32768, "num_hidden_layers": 40,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "sliding_window": None,
        "max_position_embeddings": 131072, "rope_theta": 1000000000.0, "vocab_size": 131072,
    },
    "vision_config": {
        "model_type": "pixtral", "hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 16,
        "num_hidden_layers": 24, "image_size": 1540, "patch_size": 14, "head_dim": 64,
    },
    "spatial_merge_size": 2, "image_token_index": 10,
}  # fmt: skip
PHI_4 = {
    "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 5120, "intermediate_size": 17920,
    "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 10, "max_position_embeddings": 16384,
    "original_max_position_embeddings": 16384, "rope_theta": 250000, "vocab_size": 100352, "sliding_window": None,
    "torch_dtype": "bfloat16",
}  # fmt: skip
SEED_OSS_36B = {
    "architectures": ["SeedOssForCausalLM"], "model_type": "seed_oss", "hidden_size": 5120,
    "intermediate_size": 27648, "num_hidden_layers": 64, "num_attention_heads": 80, "num_key_value_heads": 8,
    "head_dim": 128, "max_position_embeddings": 524288, "rope_theta": 10000000.0, "vocab_size": 155136,
    "attention_bias": True, "torch_dtype": "bfloat16",
}  # fmt: skip
GLM_4_5_AIR = {
    "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "hidden_size": 4096,
    "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 46,
    "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128, "partial_rotary_factor": 0.5,
    "n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
    "num_nextn_predict_layers": 1, "n_group": 1, "topk_group": 1, "norm_topk_prob": True,
    "routed_scaling_factor": 1.0, "attention_bias": True, "use_qk_norm": False, "max_position_embeddings": 131072,
    "rope_theta": 1000000, "vocab_size": 151552, "torch_dtype": "bfloat16",
}  # fmt: skip
OLMO_3_32B = {
    "architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3", "hidden_size": 5120, "intermediate_size": 27648,
    "num_hidden_layers": 64, "num_attention_heads": 40, "num_key_value_heads": 8, "sliding_window": 4096,
    "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 16, "max_position_embeddings": 65536,
    "rope_theta": 500000, "vocab_size": 100278, "torch_dtype": "bfloat16",
}  # fmt: skip
CONFIGS: dict[str, dict[str, Any]] = {
    "granite-4.0-h": GRANITE_4_H,
    "falcon-h1": FALCON_H1,
    "gemma-3-27b": GEMMA_3_27B,
    "mistral-small-3": MISTRAL_SMALL_3,
    "phi-4": PHI_4,
    "seed-oss-36b": SEED_OSS_36B,
    "glm-4.5-air": GLM_4_5_AIR,
    "olmo-3-32b": OLMO_3_32B,
}
