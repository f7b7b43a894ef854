"""`--dtype`: the precision vLLM serves a model in, for its weights, activations and KV cache.

vLLM resolves the flag in vllm/config/model.py `_get_and_verify_dtype` (0.10–0.33): "auto" is the
checkpoint's own dtype, except that a float32 checkpoint is served in the platform's first
supported dtype (`_resolve_auto_dtype`: bfloat16 on CUDA); "half"/"float16", "bfloat16" and
"float"/"float32" are taken as given (`_STR_DTYPE_TO_TORCH_DTYPE`), upcasting included. The
KV cache's "auto" is the model dtype (vllm/utils/torch_utils.py `kv_cache_dtype_str_to_dtype`),
so --dtype float32 doubles a bf16 model's KV bytes per token as well as its unquantized weights.
Quantized linear layers keep their packed format whatever --dtype says.
"""

from __future__ import annotations

from dataclasses import replace

from sparktui.core.modelspec.spec import DTYPE_BYTES, ModelSpec

_NAMES = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32", "float32": "float32"}


def served_dtype(spec: ModelSpec, dtype: str | None) -> ModelSpec:
    """The spec as vLLM loads it with `--dtype dtype` (None / "auto": as the checkpoint says)."""
    name = _NAMES.get((dtype or "auto").lower())
    if name is None or name == spec.dtype:
        return spec
    old, new = spec.dtype_bytes, DTYPE_BYTES[name]
    params = dict(spec.params_by_category)
    stored = dict(spec.bytes_by_category)
    delta = 0
    for cat, n in params.items():
        if n and stored.get(cat) == n * old:  # held in the model dtype, not a quantized format
            stored[cat] = n * new
            delta += n * (new - old)
    # the rope caches are built in the served dtype too (the model is built under set_default_torch_dtype:
    # model_loader/base_loader.py load_model; get_rope's dtype is torch.get_default_dtype())
    rope = spec.rope_cache_bytes * new // old
    delta += rope - spec.rope_cache_bytes
    return replace(
        spec,
        dtype=name,
        weights_bytes=spec.weights_bytes + delta,
        rope_cache_bytes=rope,
        mrope_cache_bytes=spec.mrope_cache_bytes * new // old,
        bytes_by_category=tuple(sorted(stored.items())),
        mtp_weights_bytes=spec.mtp_weights_bytes * new // old,
        weights_source=f"{spec.weights_source}; served in {name} (--dtype {dtype}, the checkpoint is {spec.dtype})",
    )


__all__ = ["served_dtype"]
