"""DeepSeek V4's weights, as vLLM 0.32 builds the model (vllm/models/deepseek_v4/attention.py
DeepseekV4Attention, DeepseekV4Indexer; compressor.py DeepseekCompressor; quant_config.py
DeepseekV4FP8Config). Its attention is not MLA's: per layer a fused q_a / kv projection
(hidden → q_lora_rank + head_dim), wq_b (q_lora_rank → heads × head_dim), and a grouped output
wo_a (heads × head_dim / o_groups → o_groups × o_lora_rank) and wo_b (→ hidden). A layer with
compress_ratio > 1 has a compressor (hidden → 2 × coff × head_dim, coff 2 for ratio 4) built without
quantization; a ratio-4 layer also an indexer (wq_b: q_lora_rank → index_heads × index_head_dim,
quantized; weights_proj hidden → index_heads and its own compressor at index_head_dim, not).
Experts are MXFP4 when the config's expert_dtype is fp4 (the default), FP8 blocks otherwise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def is_deepseek_v4(text: Mapping[str, Any]) -> bool:
    return str(text.get("model_type") or "").startswith("deepseek_v4")


def compress_ratios(text: Mapping[str, Any], n_layers: int) -> list[int]:
    ratios = [int(r or 0) for r in (text.get("compress_ratios") or [])][:n_layers]
    return ratios + [0] * (n_layers - len(ratios))


def attention_params(text: Mapping[str, Any], ratio: int) -> tuple[int, int]:
    """(quantized, unquantized) attention parameters of one layer with this compress ratio."""
    h = int(text.get("hidden_size") or 0)
    heads = int(text.get("num_attention_heads") or 0)
    hd = int(text.get("head_dim") or 512)
    q_rank = int(text.get("q_lora_rank") or 0)
    o_rank = int(text.get("o_lora_rank") or 0)
    groups = int(text.get("o_groups") or 1)
    quantized = h * (q_rank + hd) + q_rank * heads * hd + (heads * hd // groups) * groups * o_rank + groups * o_rank * h
    plain = 0
    if ratio > 1:
        coff = 2 if ratio == 4 else 1
        plain += h * 2 * coff * hd + ratio * coff * hd  # the compressor's projection and its position bias
    if ratio == 4:
        index_heads = int(text.get("index_n_heads") or 0)
        index_hd = int(text.get("index_head_dim") or 0)
        quantized += q_rank * index_heads * index_hd
        plain += h * index_heads + h * 2 * 2 * index_hd + 4 * 2 * index_hd  # weights_proj, its compressor
    return quantized, plain


def params(text: Mapping[str, Any], n_layers: int) -> dict[str, int]:
    """Parameters per weight category: attn (quantized), other (the compressors and the indexers'
    weights_proj, which vLLM builds with quant_config=None), experts, shared, router."""
    h = int(text.get("hidden_size") or 0)
    experts = int(text.get("n_routed_experts") or 0)
    inter = int(text.get("moe_intermediate_size") or 0)
    shared = int(text.get("n_shared_experts") or 0) * inter
    out = {"attn": 0, "other": 0, "experts": 0, "shared": 0, "router": 0}
    for ratio in compress_ratios(text, n_layers):
        quantized, plain = attention_params(text, ratio)
        out["attn"] += quantized
        out["other"] += plain
        out["experts"] += experts * 3 * h * inter
        out["shared"] += 3 * h * shared
        out["router"] += experts * h
    return out


# --------------------------------------------------------------------------- KV cache (vLLM 0.32)
# On a DGX Spark (SM12x) vLLM picks DeepseekV4FlashInferSM120Attention
# (models/deepseek_v4/nvidia/model.py _select_dsv4_attn_cls), whose use_fp8_ds_mla_layout is True:
# every latent row is fp8_ds_mla whatever --kv-cache-dtype says (attention.py
# _resolve_dsv4_kv_cache_dtype: auto and fp8 become fp8_ds_mla, anything else is refused).
LATENT_BYTES = 584  # 448 B NoPE + 128 B RoPE + 8 B scales per token (get_kv_cache_spec's state_content_bytes)
PAGE_ALIGN = 576  # fp8_ds_mla pages are padded to a multiple of 576 B (alignment=576)
# the compressed-attention and SWA backends' only kernel block and their preferred block size, which
# vLLM takes when --block-size is not given (models/deepseek_v4/nvidia/flashinfer_sparse.py
# get_supported_kernel_block_sizes, v1/attention/backends/mla/sparse_swa.py get_preferred_block_size)
KERNEL_BLOCK = 256
SWA_BLOCK = 64  # DeepseekV4SWACache(block_size=64) in sparse_swa.py
INDEX_QUANT_BLOCK = 128  # DeepseekV4Indexer.quant_block_size: one fp32 scale per 128 values


def _page(nbytes: int) -> int:
    return -(-nbytes // PAGE_ALIGN) * PAGE_ALIGN


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """kv_cache_utils._approximate_gcd: the chunk that pads the values least (ties: the larger)."""
    best, best_pad = lower_bound, -1
    for d in range(max(1, lower_bound), max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad < 0 or pad < best_pad or (pad == best_pad and d > best):
            best, best_pad = d, pad
    return best


def kv_dims(text: Mapping[str, Any]) -> tuple[int, int, int]:
    """(head_dim, index_head_dim, sliding_window) of the KV cache."""
    return (
        int(text.get("head_dim") or 512),
        int(text.get("index_head_dim") or 128),
        int(text.get("sliding_window") or 128),
    )


def kv_buckets(
    dims: tuple[int, int, int], ratios: list[int], block_size: int
) -> list[tuple[str, int, int, dict[int, int]]]:
    """The layers' KV specs as vLLM 0.32 declares them, bucketed by type as
    kv_cache_utils._get_packed_kv_cache_groups does: (kind, block size, window, {page bytes: layers}).
    Per layer: a sliding-window latent cache (DeepseekV4SWACache, 64-token blocks); with
    compress_ratio > 1 a compressed latent cache (DeepseekV4Attention.get_kv_cache_spec: one 584 B
    state per compress_ratio tokens, block_size tokens a block) and the compressor's fp32 state
    (compressor.py CompressorStateCache: 2 × coff × head_dim per token, blocks of 4 / 8 tokens, a
    window of coff × ratio); with ratio 4 also the indexer's key cache (index_head_dim fp8 + fp32
    scales per state, DeepseekV4IndexerCache) and its compressor's state. All MLA-like specs are one
    KV head with max_tp_shards=1: every tensor-parallel rank holds the whole cache."""
    hd, ihd, window = dims
    n4, n128 = ratios.count(4), ratios.count(128)
    if any(r not in (0, 1, 4, 128) for r in ratios):
        raise ValueError(f"compress_ratios other than 0, 1, 4 and 128 are not modelled: {sorted(set(ratios))}")
    buckets: list[tuple[str, int, int, dict[int, int]]] = [("sliding", SWA_BLOCK, window, {})]
    buckets[0][3][_page(SWA_BLOCK * LATENT_BYTES)] = len(ratios)
    latent: dict[int, int] = {}
    for page, n in (
        (_page(block_size // 4 * LATENT_BYTES), n4),
        (_page(block_size // 128 * LATENT_BYTES), n128),
        (_page(block_size // 4 * (ihd + ihd // INDEX_QUANT_BLOCK * 4)), n4),
    ):
        if n:
            latent[page] = latent.get(page, 0) + n
    if latent:
        buckets.append(("full", block_size, 0, latent))
    if n4:  # coff 2: the state of the main (head_dim) and the indexer's (index_head_dim) compressors
        buckets.append(("sliding", 4, 2 * 4, {_page(4 * 2 * 2 * hd * 4): n4}))
        buckets[-1][3][_page(4 * 2 * 2 * ihd * 4)] = buckets[-1][3].get(_page(4 * 2 * 2 * ihd * 4), 0) + n4
    if n128:  # coff 1
        buckets.append(("sliding", 8, 128, {_page(8 * 2 * hd * 4): n128}))
    return buckets


def kv_groups(buckets: list[tuple[str, int, int, dict[int, int]]]) -> list[tuple[str, int, int, int, int, int]]:
    """vLLM 0.32's packed groups (kv_cache_utils._get_packed_kv_cache_groups, block-outermost
    layout): (kind, layers in the widest group, groups, page bytes of the widest group, block size,
    window). Balanced buckets (as many layers of each page size) split into groups of the same
    number of pattern repeats, picked by _approximate_gcd; the others stay whole."""
    balanced = [len(set(pages.values())) == 1 for _, _, _, pages in buckets]
    floor = max(
        (max(p.values()) for (_, _, _, p), b in zip(buckets, balanced, strict=True) if b and len(p) > 1), default=0
    )
    repeats = (
        _approximate_gcd([max(p.values()) for (_, _, _, p), b in zip(buckets, balanced, strict=True) if b], floor)
        if floor
        else 0
    )

    def n_groups(pages: dict[int, int], bal: bool) -> int:
        return _cdiv(max(pages.values()), repeats) if bal and repeats else 1

    def widest(pages: dict[int, int], n: int) -> int:
        return sum(_cdiv(count, n) * page for page, count in pages.items())

    def is_state(kind: str) -> bool:  # a sliding bucket when nothing sets a repeat pattern
        return not repeats and kind == "sliding"

    anchor = max(
        widest(pages, sum(pages.values()) if is_state(kind) else n_groups(pages, bal))
        for (kind, _, _, pages), bal in zip(buckets, balanced, strict=True)
    )
    out = []
    for (kind, block, window, pages), bal in zip(buckets, balanced, strict=True):
        n = n_groups(pages, bal)
        if is_state(kind):
            n = max(n, _cdiv(sum(pages.values()), max(anchor // next(iter(pages)), 1)))
        layers = sum(_cdiv(count, n) for count in pages.values())
        out.append((kind, layers, n, widest(pages, n), block, window))
    return out
