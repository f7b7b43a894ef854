"""Sanity bounds for the numbers a model config may hold, checked before any arithmetic.

A config with 10^12 layers, a negative hidden size or a string where a count belongs would
otherwise exhaust memory, overflow, or run for minutes. Every bound is far above any real
model (the largest today have ~200 layers, hidden 16k, vocab 260k, 10M positions).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sparktui.errors import UserError

# key → (smallest, largest) accepted value; 0 is accepted where a config may leave a part out.
BOUNDS: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, 10_000),
    "n_layers": (1, 10_000),
    "hidden_size": (1, 1 << 20),
    "dim": (1, 1 << 20),
    "intermediate_size": (0, 1 << 22),
    "hidden_dim": (0, 1 << 22),
    "moe_intermediate_size": (0, 1 << 22),
    "shared_expert_intermediate_size": (0, 1 << 22),
    "moe_shared_expert_intermediate_size": (0, 1 << 22),
    "moe_latent_size": (0, 1 << 20),
    "num_attention_heads": (1, 1 << 16),  # a model that names its heads has at least one
    "n_heads": (1, 1 << 16),  # a model that names its heads has at least one
    "num_key_value_heads": (1, 1 << 16),  # a model that names its heads has at least one
    "n_kv_heads": (1, 1 << 16),  # a model that names its heads has at least one
    "num_global_key_value_heads": (0, 1 << 16),
    "head_dim": (0, 1 << 16),
    "global_head_dim": (0, 1 << 16),
    "kv_channels": (0, 1 << 16),
    "vocab_size": (0, 1 << 27),
    "max_position_embeddings": (0, 1 << 34),
    "max_seq_len": (0, 1 << 34),
    "seq_length": (0, 1 << 34),
    "model_max_length": (0, 1 << 34),
    "max_sequence_length": (0, 1 << 34),
    "sliding_window": (0, 1 << 34),
    "sliding_window_pattern": (0, 10_000),
    "full_attention_interval": (0, 10_000),
    "num_experts": (0, 1 << 16),
    "num_local_experts": (0, 1 << 16),
    "n_routed_experts": (0, 1 << 16),
    "num_experts_per_tok": (0, 1 << 16),
    "n_shared_experts": (0, 1 << 10),
    "first_k_dense_replace": (0, 10_000),
    "kv_lora_rank": (0, 1 << 16),
    "q_lora_rank": (0, 1 << 16),
    "qk_rope_head_dim": (0, 1 << 16),
    "qk_nope_head_dim": (0, 1 << 16),
    "v_head_dim": (0, 1 << 16),
    "num_nextn_predict_layers": (0, 1_000),
    "mtp_num_hidden_layers": (0, 1_000),
    "linear_num_key_heads": (0, 1 << 16),
    "linear_num_value_heads": (0, 1 << 16),
    "linear_key_head_dim": (0, 1 << 16),
    "linear_value_head_dim": (0, 1 << 16),
    "linear_conv_kernel_dim": (0, 1_024),
    "mamba_num_heads": (0, 1 << 16),
    "mamba_head_dim": (0, 1 << 16),
    "ssm_state_size": (0, 1 << 16),
    "n_groups": (0, 1 << 16),
    "conv_kernel": (0, 1_024),
    "depth": (0, 10_000),
    "patch_size": (0, 1 << 16),
    "spatial_merge_size": (0, 1 << 10),
    "out_hidden_size": (0, 1 << 20),
    "in_channels": (0, 1 << 10),
    "temporal_patch_size": (0, 1 << 10),
}
LIST_KEYS = ("layer_types", "mlp_only_layers", "layers_block_type", "architectures")
MAX_LIST = 10_000
MAX_PATTERN = 10_000  # characters of hybrid_override_pattern


def _bad(source: str, where: str, value: Any, expected: str) -> UserError:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return UserError(
        f"{source}: {where} is {shown}; expected {expected}. Fix that field of the model's config "
        f"(or point --model at a model whose config.json is intact)"
    )


def check_numbers(config: Mapping[str, Any], source: str, prefix: str = "") -> None:
    """Refuse, with the field named, any known count that is not a whole number within bounds."""
    for key, (low, high) in BOUNDS.items():
        if key not in config or config[key] is None:
            continue
        value = config[key]
        where = f"{prefix}{key}"
        if key == "intermediate_size" and isinstance(value, list) and 0 < len(value) <= MAX_LIST:
            value = max(value, key=lambda v: v if isinstance(v, (int, float)) and not isinstance(v, bool) else -1)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(source, where, value, f"a whole number from {low:,} to {high:,}")
        if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
            raise _bad(source, where, value, f"a whole number from {low:,} to {high:,}")
        if not low <= value <= high:
            raise _bad(source, where, value, f"a whole number from {low:,} to {high:,}")
    for key in LIST_KEYS:
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or len(value) > MAX_LIST:
            raise _bad(source, f"{prefix}{key}", value, f"a list of at most {MAX_LIST:,} entries")
    pattern = config.get("hybrid_override_pattern")
    if pattern is not None and (not isinstance(pattern, str) or len(pattern) > MAX_PATTERN):
        raise _bad(source, f"{prefix}hybrid_override_pattern", pattern, "a string of M, *, E and - per layer")
    for key in ("text_config", "llm_config", "language_config", "vision_config"):
        sub = config.get(key)
        if isinstance(sub, Mapping):
            check_numbers(sub, source, f"{prefix}{key}.")


def check_total_size(value: Any, where: str) -> int:
    """A safetensors index's metadata.total_size: a whole number of bytes up to 1 PiB."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 50:
        raise UserError(
            f"{where}: metadata.total_size is {value!r}; expected the checkpoint's size in bytes "
            "(a whole number, at most 1 PiB). The index is damaged: download it again"
        )
    return value


MAX_MODEL_NAME = 4096  # a path; a Hugging Face repo id is at most 96 characters a part


def check_model_name(model: str) -> None:
    if len(model) > MAX_MODEL_NAME or "\0" in model:
        raise UserError(
            f"model name {model[:40]!r}… is {len(model)} characters long; expected a folder path, "
            "a Hugging Face repo id (owner/name, at most 96 characters each) or a catalog name"
        )
    if "/" in model and not model.startswith(("/", "./", "../", "~")) and model.count("/") == 1:
        owner, name = model.split("/")
        if len(owner) > 96 or len(name) > 96:
            raise UserError(
                f"model {model[:40]!r}…: a Hugging Face repo id has at most 96 characters in each of "
                f"owner and name (got {len(owner)} and {len(name)}); check the --model value"
            )
