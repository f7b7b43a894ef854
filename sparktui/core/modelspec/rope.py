"""The rotary cos/sin caches vLLM keeps beside the weights ("Model loading took" counts them): one per
distinct rope (get_rope caches by its arguments: layers/rotary_embedding/__init__.py), each
positions × rotary width in the model dtype (rotary_embedding/base.py RotaryEmbeddingBase.__init__)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktui.core.modelspec import gemma

# Models whose attention has no rotary embedding in vLLM (models/nemotron_h.py builds none: its
# attention layers take no positions)
NO_ROPE_MODEL_TYPES = frozenset({"nemotron_h"})
# M-RoPE caches max_position × 4 positions (rotary_embedding/mrope.py MRotaryEmbedding: "We enlarge
# max_position_embeddings to 4 times"), every release to 0.31
MROPE_POSITIONS = 4
# Families whose 0.32 code builds M-RoPE with mrope_positions_factor(vllm_config) (models/qwen3_vl.py:
# 1 unless video pruning is on; qwen3_5.py, qwen3_vl_moe.py call it too): vllm_rules mrope_cache_positions
MROPE_FACTOR_MODEL_TYPES = ("qwen3_5", "qwen3_vl")


def _rope_dict(text: Mapping[str, Any]) -> Mapping[str, Any]:
    rope = text.get("rope_parameters") or text.get("rope_scaling")
    return rope if isinstance(rope, Mapping) else {}


def rotary_width(text: Mapping[str, Any], head: int) -> int:
    """get_rope's rotary_dim: head × partial_rotary_factor, the factor from rope_parameters or the config
    itself under any of the names vLLM reads (transformers_utils/config.py patch_rope_parameters:
    partial_rotary_factor, rotary_pct, rotary_emb_fraction); rope_dim where the rope names one."""
    rope = _rope_dict(text)
    if rope.get("rope_dim"):
        return int(rope["rope_dim"])
    factor = rope.get("partial_rotary_factor")
    for name in ("partial_rotary_factor", "rotary_pct", "rotary_emb_fraction"):
        if factor is None:
            factor = text.get(name)
    return int(head * float(factor or 1.0))


def rope_cache_elements(text: Mapping[str, Any], max_pos: int) -> tuple[int, int]:
    """(every cache's elements, the M-RoPE share of them that 0.32 keeps a quarter of) for one model:
    - Gemma 3 / 4: one cache per distinct rope (gemma.rope_cache_dims);
    - MLA (DeepSeek): qk_rope_head_dim wide;
    - Nemotron-H: none;
    - others head_dim × partial_rotary_factor (Qwen3-Next, Qwen3.5 / 3.6: 0.25), at max_position × 4
      positions for an M-RoPE (rope_parameters' mrope_section: Qwen3.5 / 3.6, Qwen-VL)."""
    model_type = str(text.get("model_type") or "")
    if model_type in NO_ROPE_MODEL_TYPES:
        return 0, 0
    dims = gemma.rope_cache_dims(text)
    if dims:
        return max_pos * sum(dims), 0
    if text.get("qk_rope_head_dim"):
        return max_pos * int(text["qk_rope_head_dim"]), 0
    head = int(text.get("head_dim") or 0) or (
        int(text.get("hidden_size") or 0) // max(1, int(text.get("num_attention_heads") or 1))
    )
    width = rotary_width(text, head)
    if "mrope_section" not in _rope_dict(text):
        return max_pos * width, 0
    elements = max_pos * MROPE_POSITIONS * width
    return elements, elements if model_type.startswith(MROPE_FACTOR_MODEL_TYPES) else 0
