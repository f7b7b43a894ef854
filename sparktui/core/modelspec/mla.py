"""Multi-head latent attention (DeepSeek V2/V3/R1, Kimi K2, GLM-4.5-style MLA): one latent of
kv_lora_rank + qk_rope_head_dim per token per layer, shared by every head (not split by TP).
DeepSeek V3.2's sparse-attention indexer keeps its own small per-token key cache beside it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktui.core.modelspec.spec import MLA, LayerGroup
from sparktui.core.record import record


def is_mla(text: Mapping[str, Any]) -> bool:
    return bool(text.get("kv_lora_rank"))


@record
class MlaDims:
    """An MLA layer's sizes, read once from config.json (vLLM's defaults where a key is missing)."""

    hidden: int
    heads: int
    q_rank: int  # 0: no q LoRA (q_proj straight from the hidden state)
    nope: int
    rope: int
    v_dim: int
    kv_rank: int

    @classmethod
    def of(cls, text: Mapping[str, Any]) -> MlaDims:
        return cls(
            hidden=int(text.get("hidden_size") or 0),
            heads=int(text.get("num_attention_heads") or 0),
            q_rank=int(text.get("q_lora_rank") or 0),
            nope=int(text.get("qk_nope_head_dim") or 128),
            rope=int(text.get("qk_rope_head_dim") or 64),
            v_dim=int(text.get("v_head_dim") or 128),
            kv_rank=int(text["kv_lora_rank"]),
        )

    def projections(self) -> list[tuple[str, int]]:
        """Each attention projection's name (as the checkpoint names it) and parameters."""
        h, heads, q_rank = self.hidden, self.heads, self.q_rank
        qk = self.nope + self.rope
        q = [("q_a_proj", h * q_rank), ("q_b_proj", q_rank * heads * qk)] if q_rank else [("q_proj", h * heads * qk)]
        return [
            *q,
            ("kv_a_proj_with_mqa", h * (self.kv_rank + self.rope)),
            ("kv_b_proj", self.kv_rank * heads * (self.nope + self.v_dim)),
            ("o_proj", heads * self.v_dim * h),
        ]


INDEXER_QUANT_BLOCK = 128  # vllm/model_executor/models/deepseek_v2.py Indexer.quant_block_size


def indexer_layers(text: Mapping[str, Any], n_layers: int) -> int:
    """Layers with a sparse-attention indexer (DeepSeek V3.2: `index_topk`), as
    DeepseekV2MLAAttention decides: every layer unless index_topk_freq / _pattern skip some."""
    if not text.get("index_topk"):
        return 0
    pattern = text.get("index_topk_pattern")
    if isinstance(pattern, (list, str)) and pattern:
        return sum(1 for i in range(n_layers) if i >= len(pattern) or pattern[i] != "S")
    freq = int(text.get("index_topk_freq") or 1)
    raw_offset = text.get("index_skip_topk_offset")
    offset = 2 if raw_offset is None else int(raw_offset)
    return sum(1 for i in range(n_layers) if max(i - offset + 1, 0) % freq == 0)


def groups(text: Mapping[str, Any], n_layers: int) -> tuple[list[LayerGroup], list[LayerGroup]]:
    latent = int(text["kv_lora_rank"]) + int(text.get("qk_rope_head_dim") or 0)
    main = [LayerGroup(MLA, n_layers, 1, latent, 0)]
    n_mtp = int(text.get("num_nextn_predict_layers") or 0)
    mtp = [LayerGroup(MLA, n_mtp, 1, latent, 0, draft=True)] if n_mtp else []
    n_index = indexer_layers(text, n_layers)
    if n_index:
        # DeepseekV32IndexerCache: uint8 keys of index_head_dim + 4 bytes of scale per 128
        dim = int(text.get("index_head_dim") or 128)
        size = dim + dim // INDEXER_QUANT_BLOCK * 4
        main.append(LayerGroup(MLA, n_index, 1, size, 0, elem_bytes=1))
        if n_mtp:  # MTP layers always build a full indexer
            mtp.append(LayerGroup(MLA, n_mtp, 1, size, 0, draft=True, elem_bytes=1))
    return main, mtp


def activation_widths(text: Mapping[str, Any]) -> tuple[int, int]:
    """Values per token MLAAttention.forward (vLLM 0.32 model_executor/layers/mla.py) holds when o_proj
    runs, beside the hidden-size tensors: q (q_b_proj's or q_proj's output, heads × (nope + rope)) and
    the attention output (heads × v_head_dim), both split across TP; and, replicated,
    fused_qkv_a_proj's output (q_lora_rank + kv_lora_rank + rope; kv_a_proj_with_mqa's without a q
    LoRA), the normed q latent and kv_a_layernorm's output. On a GB10 the rope runs in place
    (DeepseekScalingRotaryEmbedding takes FlashInfer's kernel eager, Inductor fuses forward_native when
    compiled), so it adds nothing. bench/activation_oracle.py measures the same set on vLLM's code."""
    d = MlaDims.of(text)
    latent = (d.q_rank + d.kv_rank + d.rope) + d.q_rank + d.kv_rank
    return d.heads * (d.nope + d.rope + d.v_dim), latent


def params_per_layer(text: Mapping[str, Any]) -> int:
    return sum(n for _, n in MlaDims.of(text).projections())


def indexer_note(text: Mapping[str, Any]) -> str | None:
    if text.get("index_topk"):
        return (
            "sparse-attention indexer (DeepSeek V3.2): its uint8 key cache is counted; vLLM may store "
            "the MLA latent as fp8_ds_mla (656 B/token) with an fp8 KV cache, which is not modelled"
        )
    return None
