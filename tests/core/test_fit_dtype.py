"""--dtype: the precision vLLM serves weights, activations and the KV cache in (modelspec/dtype.py)."""

from __future__ import annotations

import json
import re

import pytest

from sparktui.core.config import ServeConfig
from sparktui.core.fit import fit, fit_to_kv_memory, machine_from_name
from sparktui.core.modelspec import load_model_spec, spec_from_config
from sparktui.core.modelspec.dtype import served_dtype
from tests.support import FIXTURES

CPU = FIXTURES / "vllm-cpu"


def _tokens(log: str) -> int:
    m = re.search(r"KV cache size: ([\d,]+) tokens", (CPU / log).read_text())
    assert m
    return int(m.group(1).replace(",", ""))


@pytest.mark.parametrize(
    ("dtype", "log"), [("auto", "startup_final_eager.log"), ("float32", "startup_float32_eager.log")]
)
def test_kv_tokens_follow_dtype_as_real_vllm_counted_them(dtype, log):
    # Both logs: a real vLLM 0.32 serving the same tiny bf16 Llama with --kv-cache-memory-bytes 64M;
    # --dtype float32 doubles every KV element, so half the tokens (65,536, not 131,072).
    spec = spec_from_config(json.loads((CPU / "tiny-llama-config.json").read_text()), name="tiny", source="fixture")
    config = ServeConfig(model="tiny", max_model_len=512, dtype=dtype, kv_cache_memory_bytes=64 * 2**20)
    _, tokens, _ = fit_to_kv_memory(spec, config, 64 * 2**20, machine_from_name(16))
    assert tokens == _tokens(log)
    assert fit(config, spec, machine_from_name(16)).kv_cache_tokens == _tokens(log)


def test_float32_doubles_unquantized_weights_and_kv_bytes_half_keeps_them():
    spec = load_model_spec("meta-llama/Meta-Llama-3.1-8B")
    m = machine_from_name(80)
    base = fit(ServeConfig(model=spec.name, max_model_len=8192), spec, m)
    wide = fit(ServeConfig(model=spec.name, max_model_len=8192, dtype="float32"), spec, m)
    half = fit(ServeConfig(model=spec.name, max_model_len=8192, dtype="float16"), spec, m)
    assert wide.kv_bytes_per_token == 2 * base.kv_bytes_per_token
    assert wide.weights_bytes == pytest.approx(2 * base.weights_bytes, rel=0.01)
    assert (half.weights_bytes, half.kv_bytes_per_token) == (base.weights_bytes, base.kv_bytes_per_token)
    assert "--dtype float32" in served_dtype(spec, "float32").weights_source


def test_the_rope_cache_is_built_in_the_served_dtype():
    # vLLM builds the model under set_default_torch_dtype(--dtype) (model_loader/base_loader.py), and
    # get_rope's cos/sin cache takes torch.get_default_dtype(): float32 doubles it, float16 keeps it
    spec = load_model_spec("meta-llama/Meta-Llama-3.1-8B")
    assert spec.rope_cache_bytes == 131_072 * 128 * 2
    wide, half = served_dtype(spec, "float32"), served_dtype(spec, "float16")
    assert wide.rope_cache_bytes == 2 * spec.rope_cache_bytes and half.rope_cache_bytes == spec.rope_cache_bytes
    # every byte of this unquantized bf16 model, rope cache included, doubles
    assert wide.weights_bytes == 2 * spec.weights_bytes and half.weights_bytes == spec.weights_bytes
    q36 = served_dtype(load_model_spec("Qwen/Qwen3.6-35B-A3B"), "float32")
    assert q36.mrope_cache_bytes == 262_144 * 4 * 64 * 4


def test_float32_leaves_packed_weights_packed():
    # NVFP4 linear layers stay 4-bit whatever --dtype says; only the embedding / head / norms widen
    spec = load_model_spec("nvidia/Qwen3-32B-NVFP4")
    wide = served_dtype(spec, "float32")
    cats, base = dict(wide.bytes_by_category), dict(spec.bytes_by_category)
    assert cats["attn"] == base["attn"] and cats["mlp"] == base["mlp"]
    assert cats["embed"] == 2 * base["embed"]
    assert spec.weights_bytes < wide.weights_bytes < 1.5 * spec.weights_bytes
