"""Run under a real vLLM's Python (never sparktui's): size a KV cache with vLLM's own code.

Reads JSON cases on stdin (per-layer KV specs, block size, lengths, KV memory) and prints, for
each, what vLLM 0.32's v1/core/kv_cache_utils.get_kv_cache_configs makes of it: block count,
maximum concurrency, KV tokens, or the error it raises (with its estimated maximum length).
tests/core/test_fit_vs_vllm.py compares sparktui's fit engine with these answers.
"""

import json
import re
import sys

import torch
from vllm.config import CacheConfig, SchedulerConfig, VllmConfig
from vllm.v1.core import kv_cache_utils as kcu
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec, MLAAttentionSpec, SlidingWindowSpec

DTYPES = {1: torch.float8_e4m3fn, 2: torch.bfloat16, 4: torch.float32}


class _ModelConfig:
    def __init__(self, max_model_len):
        self.max_model_len = max_model_len
        self.original_max_model_len = max_model_len


def layer_spec(layer, block_size, kv_dtype, max_model_len):
    kind = layer["kind"]
    if kind == "full":
        return FullAttentionSpec(
            block_size=block_size, num_kv_heads=layer["heads"], head_size=layer["head_size"], dtype=kv_dtype
        )
    if kind == "sliding":
        return SlidingWindowSpec(
            block_size=block_size,
            num_kv_heads=layer["heads"],
            head_size=layer["head_size"],
            dtype=kv_dtype,
            sliding_window=layer["window"],
        )
    if kind == "mla":
        return MLAAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=layer["head_size"], dtype=kv_dtype)
    if kind == "mamba":
        return MambaSpec(
            block_size=layer["mamba_block_size"],
            shapes=tuple(tuple(s) for s in layer["shapes"]),
            dtypes=tuple(DTYPES[d] for d in layer["dtypes"]),
            page_size_padded=layer["padded"],
        )
    raise ValueError(kind)


def run(case):
    cache = CacheConfig(block_size=case["block_size"])
    cache.kv_cache_layout = "LBNHC"  # the CUDA default (FlashAttention / FlashInfer on GB10)
    scheduler = SchedulerConfig(
        max_num_batched_tokens=case["max_num_batched_tokens"],
        max_model_len=case["max_model_len"],
        is_encoder_decoder=False,
    )
    config = VllmConfig(cache_config=cache, scheduler_config=scheduler)
    config.scheduler_config.async_scheduling = True  # on by default on CUDA (the CPU platform turns it off)
    object.__setattr__(config, "model_config", _ModelConfig(case["max_model_len"]))
    config.cache_config.mamba_cache_mode = case["mamba_cache_mode"]
    kv_dtype = DTYPES[case["kv_bytes"]]
    specs, i = {}, 0
    for layer in case["layers"]:
        for _ in range(layer["count"]):
            specs[f"model.layers.{i}.attn"] = layer_spec(layer, case["block_size"], kv_dtype, case["max_model_len"])
            i += 1
    out = {"in_flight": config.max_in_flight_tokens}
    try:
        (kv_config,) = kcu.get_kv_cache_configs(config, [specs], [case["kv_memory"]])
    except ValueError as exc:
        message = str(exc)
        estimate = re.search(r"estimated maximum model length is (\d+)", message)
        out.update(error=message.split(".")[0], estimated_max_len=int(estimate.group(1)) if estimate else None)
        return out
    concurrency = kcu.get_max_concurrency_for_kv_cache_config(config, kv_config)
    out.update(
        blocks=kv_config.num_blocks,
        concurrency=concurrency,
        tokens=int(concurrency * case["max_model_len"]),
        groups=len(kv_config.kv_cache_groups),
    )
    return out


def main():
    cases = json.load(sys.stdin)
    json.dump([run(case) for case in cases], sys.stdout)


if __name__ == "__main__":
    main()
