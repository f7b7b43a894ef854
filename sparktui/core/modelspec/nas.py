"""NVIDIA's NAS-pruned Llamas (DeciLMForCausalLM, model_type nemotron-nas: Llama-3.3-Nemotron-Super-49B,
Llama-3.1-Nemotron-Nano-8B / Ultra-253B): each layer's `block_configs` entry says whether it has
attention at all (attention.no_op) and with how many KV heads (num_attention_heads //
attention.n_heads_in_group), and whether it has an MLP (ffn.no_op) and how wide (ffn.ffn_mult →
_ffn_mult_to_intermediate_size, else ffn.intermediate_size). The top-level num_key_value_heads and
intermediate_size are null. vllm/model_executor/models/nemotron_nas.py DeciLMDecoderLayer.__init__
(the same from 0.13 to 0.32); a layer without attention holds no KV cache."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktui.core.modelspec.spec import FULL, LayerGroup


def is_nemotron_nas(text: Mapping[str, Any]) -> bool:
    blocks = text.get("block_configs")
    return isinstance(blocks, list) and bool(blocks)


def _blocks(text: Mapping[str, Any], n_layers: int) -> list[Mapping[str, Any]]:
    blocks = list(text["block_configs"])
    if len(blocks) < n_layers or not all(isinstance(b, Mapping) for b in blocks[:n_layers]):
        raise ValueError(f"block_configs (expected an object per layer, num_hidden_layers is {n_layers})")
    return blocks[:n_layers]


def _part(block: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    part = block.get(name)
    return part if isinstance(part, Mapping) else {}


def per_layer(text: Mapping[str, Any], n_layers: int) -> list[tuple[int, int]]:
    """(KV heads, MLP width) of each layer, 0 where that part is a no-op."""
    heads = int(text["num_attention_heads"])
    h = int(text.get("hidden_size") or 0)
    out = []
    for block in _blocks(text, n_layers):
        attention, ffn = _part(block, "attention"), _part(block, "ffn")
        kv_heads = 0 if attention.get("no_op") else heads // int(attention["n_heads_in_group"])
        if ffn.get("no_op"):
            width = 0
        elif ffn.get("ffn_mult") is not None:
            size = int(2 * float(ffn["ffn_mult"]) * h / 3)
            width = -(-size // 256) * 256  # _find_multiple(size, 256)
        else:
            width = int(ffn["intermediate_size"])
        out.append((kv_heads, width))
    return out


def groups(text: Mapping[str, Any], n_layers: int, head_dim: int) -> tuple[list[LayerGroup], list[LayerGroup]]:
    counts: dict[int, int] = {}
    for kv_heads, _ in per_layer(text, n_layers):
        if kv_heads:
            counts[kv_heads] = counts.get(kv_heads, 0) + 1
    return [LayerGroup(FULL, n, kv, head_dim, head_dim) for kv, n in counts.items()], []


def intermediate_sizes(text: Mapping[str, Any], n_layers: int) -> list[int]:
    """Each MLP's width (layers whose ffn is a no-op have none)."""
    return [width for _, width in per_layer(text, n_layers) if width]


def mlp_params(text: Mapping[str, Any], n_layers: int) -> int:
    """gate, up and down projections of every layer's MLP (LlamaMLP)."""
    h = int(text.get("hidden_size") or 0)
    return sum(3 * h * size for size in intermediate_sizes(text, n_layers))
