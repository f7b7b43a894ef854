"""What transformers fills in when a config.json leaves a key out.

Some published configs are sparse: google/gemma-3-*-it's text_config names only its sizes and
relies on Gemma3TextConfig's defaults (vocab, heads, head_dim, the 5:1 sliding pattern, tied
embeddings). vLLM reads the config through transformers, so these defaults are what it sizes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktui.core.modelspec import laguna

# model_type → defaults of its transformers config class (transformers/models/*/configuration_*.py)
MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": {"tie_word_embeddings": True, "head_dim": 256, "max_position_embeddings": 8192},
    "gemma2": {
        "tie_word_embeddings": True,
        "head_dim": 256,
        "vocab_size": 256000,
        "max_position_embeddings": 8192,
        "sliding_window": 4096,
        "final_logit_softcapping": 30.0,
    },
    "gemma3_text": {
        "tie_word_embeddings": True,
        "vocab_size": 262208,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131072,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
    },
    "gemma3n_text": {"tie_word_embeddings": True},
    "gemma4_text": {"tie_word_embeddings": True},
    "gemma4_unified_text": {"tie_word_embeddings": True},
    # LagunaConfig: per-head output gating, a 512-wide shared expert
    "laguna": {"gating": True, "shared_expert_intermediate_size": 512},
}


def with_defaults(text: Mapping[str, Any]) -> Mapping[str, Any]:
    """The text config with its class defaults under the keys it leaves out."""
    defaults = MODEL_TYPE_DEFAULTS.get(str(text.get("model_type") or ""))
    if not defaults:
        return text
    return laguna.with_layout({**defaults, **{k: v for k, v in text.items() if v is not None or k not in defaults}})
