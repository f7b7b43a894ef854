"""Xiaomi MiMo-V2 (MiMoV2FlashForCausalLM): `hybrid_layer_pattern` marks each layer sliding-window
(1) or full (0), and the two kinds have their own geometry: sliding layers swa_num_key_value_heads ×
swa_head_dim (V swa_v_head_dim) over sliding_window_size tokens, full layers num_key_value_heads ×
head_dim (V v_head_dim). vllm/model_executor/models/mimo_v2.py MiMoV2FlashDecoderLayer.__init__
(is_compressed_softmax_layer); its MTP layers (mimo_v2_mtp.py) are sliding ones."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktui.core.modelspec.spec import FULL, SLIDING, LayerGroup


def is_mimo_v2(text: Mapping[str, Any]) -> bool:
    return isinstance(text.get("hybrid_layer_pattern"), list) and bool(text.get("swa_num_key_value_heads"))


def _group(text: Mapping[str, Any], prefix: str, kind: str, count: int, draft: bool = False) -> LayerGroup:
    dim = int(text[f"{prefix}head_dim"])
    window = int(text.get("sliding_window_size") or text["sliding_window"]) if kind == SLIDING else None
    return LayerGroup(
        kind,
        count,
        int(text[f"{prefix}num_key_value_heads"]),
        dim,
        int(text.get(f"{prefix}v_head_dim") or dim),
        sliding_window=window,
        draft=draft,
    )


def groups(text: Mapping[str, Any], n_layers: int) -> tuple[list[LayerGroup], list[LayerGroup]]:
    pattern = [int(p) for p in text["hybrid_layer_pattern"][:n_layers]]
    if len(pattern) < n_layers:
        raise ValueError(f"hybrid_layer_pattern (it lists {len(pattern)} layers, num_hidden_layers is {n_layers})")
    sliding = sum(1 for p in pattern if p == 1)
    main = [g for g in (_group(text, "", FULL, n_layers - sliding), _group(text, "swa_", SLIDING, sliding)) if g.count]
    n_mtp = int(text.get("num_nextn_predict_layers") or 0)
    mtp = [_group(text, "swa_", SLIDING, n_mtp, draft=True)] if n_mtp else []
    return main, mtp
