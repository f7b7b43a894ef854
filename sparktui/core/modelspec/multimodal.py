"""Multimodal models served for text only (`vllm serve … --language-model-only`, vLLM 0.17+).

The flag sets every modality's limit to 0 (vllm/config/multimodal.py:
MultiModalConfig.get_limit_per_prompt), and a model that builds its vision / audio towers inside
`_mark_tower_model` (vllm/model_executor/models/interfaces.py: SupportsMultiModal; Gemma 3 and 4,
Qwen2.5-VL / Qwen3-VL / Qwen3.5 and most others) then leaves them out: their weights are never
loaded and no encoder is profiled. Older versions do not know the flag (vllm_rules:
language_model_only)."""

from __future__ import annotations

from dataclasses import replace

from sparktui.core.modelspec.spec import ModelSpec
from sparktui.core.vllm_rules import VllmRules

FLAG = "--language-model-only"


def language_model_only(spec: ModelSpec, rules: VllmRules) -> tuple[ModelSpec, str | None]:
    """(the spec as vLLM loads it with --language-model-only, why vLLM won't start or None)."""
    if rules.value("language_model_only") == "absent":
        return spec, (
            f"vLLM {rules.version} does not know {FLAG} (added in 0.17.0) and exits on it; use "
            "--limit-mm-per-prompt with 0 for each modality, or vLLM 0.17 or later"
        )
    if not spec.multimodal:
        return spec, None
    tower = dict(spec.bytes_by_category).get("vision", 0)
    if not tower:
        return spec, None
    note = f"{FLAG}: the vision / audio towers ({tower / 2**30:.2f} GiB estimated) are not loaded"
    return (
        replace(
            spec,
            weights_bytes=max(0, spec.weights_bytes - tower),
            weights_source=f"{spec.weights_source}, less the towers {FLAG} skips",
            bytes_by_category=tuple((c, 0 if c == "vision" else n) for c, n in spec.bytes_by_category),
            notes=(*spec.notes, note),
        ),
        None,
    )
