"""The flags and checkpoints vLLM refuses at start-up whatever the memory: an unknown speculative
method, a KV cache dtype the attention cannot keep, a quantization or state dtype it raises on.
Each is vLLM's own reason with the fix (core.vllm_rules holds the per-version rules)."""

from __future__ import annotations

from sparktui.core.fit_settings import FitSettings
from sparktui.core.machine import Machine
from sparktui.core.modelspec import MAMBA, MLA, ModelSpec
from sparktui.core.speculation import Speculation
from sparktui.core.vllm_rules import VllmRules


def startup_refusals(
    spec: ModelSpec,
    s: FitSettings,
    machine: Machine,
    speculation: Speculation | None,
    drafter_refusal: str | None,
    lmo_refusal: str | None,
) -> list[str]:
    """Every reason vLLM will not start these flags on this model, in the order it meets them.
    `drafter_refusal` / `lmo_refusal`: what building the drafter and --language-model-only said."""
    kda = any(g.kind == MAMBA and g.state_kind == "kda" for g in spec.layers)
    found = (
        _speculative_refusal(speculation, s.rules) or drafter_refusal,
        lmo_refusal,
        _kv_dtype_refusal(spec, s, machine),
        s.rules.modelopt_refusal(spec.modelopt_algo),
        s.rules.kda_split_refusal(spec.kda_split_shards),
        s.rules.mamba_ssm_dtype_refusal((s.mamba_ssm_dtype or "auto").lower(), kda=kda),
    )
    return [r for r in found if r]


def _speculative_refusal(speculation: Speculation | None, rules: VllmRules) -> str | None:
    """Why vLLM refuses this --speculative-config: a "method" this vLLM does not know (only one
    given explicitly), or no drafter at all."""
    if speculation is None:
        return None
    if speculation.method_given:
        unknown = rules.speculative_method_refusal(speculation.method)
        if unknown:
            return unknown
    return speculation.refusal


def _kv_dtype_refusal(spec: ModelSpec, s: FitSettings, machine: Machine) -> str | None:
    """Why vLLM will not start with this --kv-cache-dtype (vllm_rules: KV_CACHE_DTYPES, nvfp4_kv_backend).
    A unified-memory machine is a GB10 (SM121)."""
    name = s.kv_cache_dtype.lower()
    if spec.compress_ratios and name != "auto" and not name.startswith("fp8"):
        # models/deepseek_v4/attention.py _resolve_dsv4_kv_cache_dtype: the default attention
        # classes (FlashMLA, FlashInfer SM120) keep the fp8_ds_mla layout and raise on anything else
        return (
            f"--kv-cache-dtype {name}: vLLM 0.32's DeepSeek V4 attention keeps its KV cache as fp8_ds_mla "
            "and refuses other dtypes ('DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache'); "
            "use --kv-cache-dtype fp8 or auto"
        )
    layers = (*spec.layers, *(spec.mtp_layers if s.mtp else ()))
    return s.rules.kv_cache_dtype_refusal(
        s.kv_cache_dtype.lower(),
        gb10=machine.unified,
        mla=any(g.kind == MLA for g in layers),
        sparse_mla=any(g.kind == MLA and g.elem_bytes for g in layers),
    )
