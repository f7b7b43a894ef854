"""Multimodal models served for text only (`vllm serve … --language-model-only`, vLLM 0.17+).

The flag sets every modality's limit to 0 (vllm/config/multimodal.py:
MultiModalConfig.get_limit_per_prompt), and a model that builds its vision / audio towers inside
`_mark_tower_model` (vllm/model_executor/models/interfaces.py: SupportsMultiModal; Gemma 3 and 4,
Qwen2.5-VL / Qwen3-VL / Qwen3.5 and most others) then leaves them out: their weights are never
loaded and no encoder is profiled. Older versions do not know the flag (vllm_rules:
language_model_only)."""

from __future__ import annotations

import json
from dataclasses import replace

from sparktui.core.modelspec.spec import ModelSpec
from sparktui.core.vllm_rules import VllmRules

FLAG = "--language-model-only"


LIMIT_FLAG = "--limit-mm-per-prompt"


def tower_modalities(spec: ModelSpec) -> frozenset[str]:
    """The modalities a model's vision tower serves (vLLM's _mark_tower_model calls)."""
    return frozenset({"image"}) if spec.model_type.startswith("gemma3") else frozenset({"image", "video"})


def zero_limit_towers(spec: ModelSpec, rules: VllmRules, limits: str) -> ModelSpec:
    """The spec as vLLM loads it with --limit-mm-per-prompt `limits` (JSON): from 0.15 a tower whose
    every modality is limited to 0 is left out, as with --language-model-only."""
    try:
        data = json.loads(limits)
    except (TypeError, ValueError):
        return spec
    if not isinstance(data, dict) or rules.value("mm_zero_limit_towers") != "skipped":
        return spec

    def count(value: object) -> object:
        return value.get("count") if isinstance(value, dict) else value

    if all(count(data.get(m)) == 0 for m in tower_modalities(spec)):
        return _without_towers(spec, f"{LIMIT_FLAG} 0 for {', '.join(sorted(tower_modalities(spec)))}")
    return spec


def _without_towers(spec: ModelSpec, why: str) -> ModelSpec:
    tower = dict(spec.bytes_by_category).get("vision", 0)
    if not spec.multimodal or not tower:
        return spec
    return replace(
        spec,
        weights_bytes=max(0, spec.weights_bytes - tower),
        weights_source=f"{spec.weights_source}, less the towers {why} skips",
        bytes_by_category=tuple((c, 0 if c == "vision" else n) for c, n in spec.bytes_by_category),
        encoder=None,
        notes=(*spec.notes, f"{why}: the vision tower ({tower / 2**30:.2f} GiB estimated) is not loaded"),
    )


def language_model_only(spec: ModelSpec, rules: VllmRules) -> tuple[ModelSpec, str | None]:
    """(the spec as vLLM loads it with --language-model-only, why vLLM won't start or None)."""
    if rules.value("language_model_only") == "absent":
        return spec, (
            f"vLLM {rules.version} does not know {FLAG} (added in 0.17.0) and exits on it; use "
            "--limit-mm-per-prompt with 0 for each modality, or vLLM 0.17 or later"
        )
    return _without_towers(spec, FLAG), None
