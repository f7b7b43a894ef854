"""Which CUDA graphs vLLM captures: the candidate sizes, their rounding for speculative decoding,
the cudagraph_mode resolved for the attention backend, and how many graphs each mode makes (V1 and
the V2 model runner). Pure functions the version rules (core/vllm_rules.py) call."""

from __future__ import annotations

from functools import lru_cache

CUDAGRAPH_CANDIDATE_SIZES = (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))
CUDAGRAPH_CANDIDATE_SIZES_1024 = (*CUDAGRAPH_CANDIDATE_SIZES, *range(528, 1025, 16))  # gpt-oss goes to 1024


@lru_cache(maxsize=256)
def capture_sizes(largest: int, max_num_batched_tokens: int, add_max_tokens: bool) -> tuple[int, ...]:
    """vLLM's default capture sizes up to `largest` (VllmConfig._set_cudagraph_sizes)."""
    largest = min(largest, max_num_batched_tokens)
    sizes = [s for s in CUDAGRAPH_CANDIDATE_SIZES_1024 if s <= largest]
    if add_max_tokens and max_num_batched_tokens <= largest and max_num_batched_tokens not in sizes:
        sizes.append(max_num_batched_tokens)
    return tuple(sizes)


def rounded_sizes(sizes: tuple[int, ...], round_to: int, keep_if_none: bool = False) -> tuple[int, ...]:
    """Sizes rounded up to multiples of 1 + speculative tokens, none past the largest
    (CompilationConfig.adjust_cudagraph_sizes_for_spec_decode). When none is left: the sizes as
    they were (`keep_if_none`, 0.11), else 1 + speculative tokens alone if it fits (empty: vLLM
    refuses to start)."""
    if round_to <= 1 or not sizes:
        return sizes
    top = sizes[-1]
    rounded = tuple(sorted({r for r in (-(-s // round_to) * round_to for s in sizes) if r <= top}))
    if rounded:
        return rounded
    if keep_if_none:
        return sizes
    return (round_to,) if round_to <= top else ()


FULL_DECODE_MODES = ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", "FULL")


def resolve_cudagraph_mode(requested: str | None, num_spec: int, single_token_decode: bool) -> str:
    """The cudagraph_mode vLLM settles on: an attention backend whose FULL graphs take one token
    per request (FlashInfer without TRT-LLM attention, as on GB10) cannot serve speculative
    decoding's uniform batches, and vLLM falls back to PIECEWISE
    (GPUModelRunner._check_and_update_cudagraph_mode; 0.25: resolve_cudagraph_mode_and_sizes)."""
    mode = requested or "FULL_AND_PIECEWISE"
    if num_spec and single_token_decode and mode in FULL_DECODE_MODES:
        return "PIECEWISE"
    return mode


@lru_cache(maxsize=256)
def graph_counts_v2(sizes: tuple[int, ...], max_num_seqs: int, num_spec: int, mode: str) -> tuple[int, int]:
    """(PIECEWISE, FULL) graphs the V2 model runner captures: its sizes are not rounded for
    speculative decoding; each FULL decode graph takes a size rounded up to whole requests of
    1 + speculative tokens, up to max_num_seqs of them (vllm/v1/worker/gpu/cudagraph_utils.py:
    CudaGraphManager._init_candidates)."""
    if mode == "NONE" or not sizes:
        return 0, 0
    mixed = len(sizes) if mode in ("FULL_AND_PIECEWISE", "PIECEWISE", "FULL") else 0
    if mode in ("PIECEWISE", "FULL"):
        return (mixed, 0) if mode == "PIECEWISE" else (0, mixed)
    q = 1 + num_spec
    decode = {r for r in (-(-s // q) * q for s in sizes) if r <= min(max_num_seqs * q, sizes[-1])}
    return mixed, len(decode)


@lru_cache(maxsize=256)
def graph_counts(sizes: tuple[int, ...], max_num_seqs: int, num_spec: int, mode: str) -> tuple[int, int]:
    """(PIECEWISE, FULL) graphs vLLM captures for these sizes under the resolved mode: FULL decode
    graphs only for uniform decode batches, from 1 + speculative tokens up to max_num_seqs × that
    (CudagraphDispatcher.initialize_cudagraph_keys)."""
    if mode == "NONE":
        return 0, 0
    if mode == "PIECEWISE":
        return len(sizes), 0
    if mode == "FULL":
        return 0, len(sizes)
    query_len = 1 + num_spec
    full = sum(1 for s in sizes if query_len <= s <= max_num_seqs * query_len)
    return (0, full) if mode == "FULL_DECODE_ONLY" else (len(sizes), full)
