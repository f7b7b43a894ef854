"""Gemma 2 / 3 / 4: interleaved sliding-window and global layers, Gemma 4's own geometry for its
global layers (global_head_dim, num_global_key_value_heads, attention_k_eq_v), and KV sharing
(the last num_kv_shared_layers layers reuse earlier layers' KV and hold none of their own;
vllm/model_executor/models/gemma4.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktui.core.modelspec.spec import FULL, LayerGroup


def global_group(text: Mapping[str, Any], kv_heads: int, head_dim: int) -> LayerGroup | None:
    """Gemma 4's global layers, when they have a geometry of their own."""
    if not text.get("global_head_dim"):
        return None
    heads = int(text.get("num_global_key_value_heads") or kv_heads)
    dim = int(text["global_head_dim"])
    return LayerGroup(FULL, 0, heads, dim, dim)


def rope_cache_dims(text: Mapping[str, Any]) -> list[int] | None:
    """The rotary width of each cos/sin cache vLLM keeps for a Gemma 3 / 4 model, one per distinct
    rope (get_rope caches by its arguments: rotary_embedding/__init__.py), each max_position ×
    width in the model dtype (rotary_embedding/base.py RotaryEmbeddingBase.__init__); None for
    other models (one cache of head_dim).
    - Gemma 3 (gemma3.py Gemma3Attention): the sliding layers' default rope at rope_local_base_freq
      and the global layers' own (rope_theta, its linear scaling): two caches of head_dim.
    - Gemma 4 (gemma4.py Gemma4Attention): each layer type's rope_parameters at that type's head
      size (global_head_dim for full attention); a "proportional" rope keeps the whole head in its
      cache (rotary_embedding/gemma4_rope.py Gemma4RotaryEmbedding), others head × partial_rotary_factor."""
    model_type = str(text.get("model_type") or "")
    head = int(text.get("head_dim") or 0)
    if not head:
        return None
    if model_type.startswith("gemma3"):
        return [head, head]
    if not model_type.startswith("gemma4"):
        return None
    rope = text.get("rope_parameters")
    types = sorted({str(t) for t in text.get("layer_types") or []})
    if not isinstance(rope, Mapping) or not types or not all(isinstance(rope.get(t), Mapping) for t in types):
        return None
    ropes = set()
    for kind in types:
        rp = rope[kind]
        size = int(text.get("global_head_dim") or head) if kind == "full_attention" else head
        factor = float(rp.get("partial_rotary_factor") or 1.0)
        width = size if rp.get("rope_type") == "proportional" else int(size * factor)
        ropes.add((width, size, str(rp.get("rope_type")), str(rp.get("rope_theta")), factor))
    return [r[0] for r in sorted(ropes)]


def kv_shared_layers(text: Mapping[str, Any]) -> int:
    return int(text.get("num_kv_shared_layers") or 0)


def kv_shared_attention_params(text: Mapping[str, Any]) -> int:
    """q_proj and o_proj of the layers that read an earlier layer's KV: they hold no cache, so the
    layer groups leave them out, but vLLM builds both (gemma4.py Gemma4Attention: q_proj alone in 0.32;
    0.19.1-0.21 still build the whole qkv_proj there, k and v not counted here)."""
    shared = kv_shared_layers(text)
    n = int(text.get("num_hidden_layers") or 0)
    kinds = text.get("layer_types")
    if not shared or not isinstance(kinds, list) or len(kinds) < n:
        return 0
    h, heads = int(text.get("hidden_size") or 0), int(text.get("num_attention_heads") or 0)
    head, wide = int(text.get("head_dim") or 0), int(text.get("global_head_dim") or text.get("head_dim") or 0)
    return sum(2 * h * heads * (wide if kind == "full_attention" else head) for kind in kinds[n - shared : n])


def per_layer_embedding_params(text: Mapping[str, Any]) -> tuple[int, int, int]:
    """Gemma 4's per-layer embeddings (hidden_size_per_layer_input: E2B, E4B) as gemma4.py builds them
    (0.19.1, 0.21.0, 0.32.0): (the table, vocab_size_per_layer_input × layers × that width; the linear
    parts, Gemma4Model's per_layer_model_projection from the hidden state to every layer's slice and
    each Gemma4DecoderLayer's per_layer_input_gate and per_layer_projection; their norms). vLLM 0.32's own
    build of Gemma-4-E4B's text model holds 2,818.57 M table and 82.58 M linear parameters."""
    width = int(text.get("hidden_size_per_layer_input") or 0)
    if not width:
        return 0, 0, 0
    n, h = int(text.get("num_hidden_layers") or 0), int(text.get("hidden_size") or 0)
    vocab = int(text.get("vocab_size_per_layer_input") or text.get("vocab_size") or 0)
    return vocab * n * width, h * n * width + n * 2 * h * width, width + n * h


def k_eq_v(text: Mapping[str, Any]) -> bool:
    """Global layers ship k_proj only (vLLM loads it into both K and V: the cache is unchanged)."""
    return bool(text.get("attention_k_eq_v"))


def v_slot_params(text: Mapping[str, Any], layers: list[LayerGroup]) -> int:
    """The V slot vLLM allocates in each k_eq_v global layer though the checkpoint has no v_proj for
    it: gemma4.py Gemma4Attention builds one QKVParallelLinear with the layer's KV heads for every
    layer and copies k_proj into both slots as it loads (0.19.1, 0.20.0, 0.21.0, 0.32.0 wheels). vLLM
    0.32's own build on the meta device: Gemma-4-31B 57.758 GiB of parameters and buffers, 0.205 of
    them these slots."""
    if not (k_eq_v(text) and text.get("global_head_dim")):
        return 0
    h = int(text.get("hidden_size") or 0)
    return sum(g.count * h * g.num_kv_heads * g.head_size for g in layers if g.kind == FULL and not g.draft)


def pattern_kinds(text: Mapping[str, Any], n_layers: int) -> list[str] | None:
    """Gemma 2/3 without layer_types: every `sliding_window_pattern`-th layer is global."""
    pattern = text.get("sliding_window_pattern")
    if pattern and text.get("sliding_window"):
        return ["full_attention" if (i + 1) % int(pattern) == 0 else "sliding_attention" for i in range(n_layers)]
    if str(text.get("model_type") or "").startswith("gemma2") and text.get("sliding_window"):
        return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)]
    return None
