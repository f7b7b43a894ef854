"""sparktui's per-layer KV reading against vLLM's own, built on the meta device
(tests/support/vllm_layer_oracle.py runs in the vLLM venv). Used by bench/vllm_layer_oracle.py and
tests/core/test_fit_vs_vllm.py."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from sparktui.core.modelspec import DTYPE_BYTES, FULL, MAMBA, MLA, SLIDING, spec_from_config
from tests.support import FIXTURES

LAYER_ORACLE = Path(__file__).with_name("vllm_layer_oracle.py")
MARK = "SPARKTUI-LAYER-ORACLE "
ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}  # a Mamba state's dtype as vLLM names it
KINDS = {
    "FullAttentionSpec": FULL,
    "SlidingWindowSpec": SLIDING,
    "MLAAttentionSpec": MLA,
    "MambaSpec": MAMBA,
    # Llama 4's chunked-local layers: a config with attention_chunk_size turns the hybrid KV cache
    # manager off unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 (config/vllm.py
    # VllmConfig.__post_init__, 0.13 to 0.32), and then kv_cache_utils.unify_hybrid_kv_cache_specs
    # plans them as full attention: the fit reads them as full
    "ChunkedLocalAttentionSpec": FULL,
}


def fixture_config(name: str) -> dict[str, Any]:
    """A model's config.json from tests/fixtures/model-configs (owner__name.json)."""
    data: dict[str, Any] = json.loads((FIXTURES / "model-configs" / f"{name}.json").read_text())
    return data


def ours(name: str, config: dict[str, Any]) -> Counter[tuple[Any, ...]]:
    """sparktui's layers as (kind, heads, head_size, window, state dims, V head size) → count (draft
    layers left out)."""
    spec = spec_from_config(config, name=name, source="fixture")
    out: Counter[tuple[Any, ...]] = Counter()
    for g in spec.layers:
        if not g.count or g.elem_bytes:  # DeepSeek V3.2's indexer cache is not an attention layer's spec
            continue
        if g.kind == MAMBA:
            dims = (tuple(sorted((g.conv_dim, g.conv_kernel - 1))), tuple(sorted((g.value_heads, g.head_v, g.head_k))))
            # element sizes of the conv and SSM states: the model dtype's, the SSM's own where the model sets one
            sizes = (spec.dtype_bytes, DTYPE_BYTES.get(g.ssm_dtype or "", spec.dtype_bytes))
            out[(MAMBA, 0, 0, None, dims, sizes)] += g.count
        else:
            heads = 1 if g.kind == MLA else g.num_kv_heads
            v = None if g.kind == MLA else g.head_size_v  # MLA: one latent, no separate V
            out[(g.kind, heads, g.head_size, g.sliding_window if g.kind == SLIDING else None, None, v)] += g.count
    return out


def theirs(layers: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """vLLM's answer in the same shape."""
    out: Counter[tuple[Any, ...]] = Counter()
    for layer in layers:
        kind = KINDS.get(layer["kind"], layer["kind"])
        if kind == MAMBA:
            conv, ssm = layer["shapes"][0], layer["shapes"][1]
            sizes = tuple(ELEMENT_BYTES[d] for d in layer.get("dtypes", ())[:2]) or None
            out[(MAMBA, 0, 0, None, (tuple(sorted(conv)), tuple(sorted(ssm))), sizes)] += layer["count"]
        else:
            window = layer.get("window") if kind == SLIDING else None
            v = None if kind == MLA else layer.get("head_size_v") or layer.get("head_size")
            out[(kind, layer.get("heads"), layer.get("head_size"), window, None, v)] += layer["count"]
    return out


def ask_layers(
    python: Path, names: list[str], timeout: float = 900, configs: dict[str, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """vLLM's layers for fixture configs by name (`configs`: configs given by name instead)."""
    request = [{"name": n, "config": (configs or {}).get(n) or fixture_config(n)} for n in names]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [str(python), str(LAYER_ORACLE)], input=json.dumps(request), capture_output=True, text=True,
        timeout=timeout, env=env,
    )  # fmt: skip
    marked = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not marked:
        raise RuntimeError(f"{python}: the layer oracle failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    answer: list[dict[str, Any]] = json.loads(marked[-1][len(MARK) :])
    return answer
