"""Speculative decoding drafters that bring KV layers and weights of their own.

- MTP (Qwen3.5/3.6 `mtp_num_hidden_layers`, DeepSeek / Nemotron-H `num_nextn_predict_layers`):
  layers inside the target's checkpoint; the target spec already lists them as `mtp_layers`.
- EAGLE / EAGLE3 / DFlash / a plain draft model: a separate checkpoint named by
  `--speculative-config '{"model": …}'`, read from its own config.json. Its attention layers join
  the target's KV cache (vLLM gives draft layers KV specs beside the target's) and its weights
  load beside the target's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sparktui.core.modelspec import laguna
from sparktui.core.modelspec.lookup import Fetcher, load_model_spec
from sparktui.core.modelspec.spec import FULL, SLIDING, LayerGroup, ModelSpec
from sparktui.core.speculation import NO_KV_METHODS, Speculation, parse_speculation
from sparktui.core.vllm_rules import VllmRules
from sparktui.errors import UserError


def drafter_kind(draft: ModelSpec) -> str:
    arch = draft.architecture.lower()
    if "dflash" in arch or "dflash" in draft.model_type.lower():
        return "dflash"
    if "eagle3" in arch:
        return "eagle3"
    if "eagle" in arch:
        return "eagle"
    return "draft model"


def drafter_weights(draft: ModelSpec, kind: str) -> tuple[int, str]:
    """(bytes, how) the drafter adds. A checkpoint's own size is exact. An estimate from its config
    leaves out what vLLM shares with the target (llm_base_proposer.py): EAGLE-family drafters use the
    target's embedding, and DFlash drafters its lm_head too."""
    if not draft.weights_source.startswith("estimated"):
        return draft.weights_bytes, draft.weights_source
    if kind not in ("eagle", "eagle3", "dflash"):
        return draft.weights_bytes, draft.weights_source
    counts = dict(draft.params_by_category)
    shared = counts.get("embed", 0) + (counts.get("lm_head", 0) if kind == "dflash" else 0)
    what = "embedding" + (" and lm_head" if kind == "dflash" else "")
    return max(0, draft.weights_bytes - shared * draft.dtype_bytes), (
        f"{draft.weights_source}, less the {what} shared with the target"
    )


def _head(draft: ModelSpec) -> int:
    """The drafter's attention head size (its widest layer group's)."""
    return max((g.head_size for g in draft.layers if g.count and g.head_size), default=0)


def with_drafter(target: ModelSpec, draft: ModelSpec, method: str) -> ModelSpec:
    """The target spec with a separate drafter's layers and weights as its draft part."""
    layers = tuple(replace(g, draft=True) for g in draft.layers if g.count)
    full_kv = ""
    if draft.architecture == laguna.DRAFTER and any(g.kind == SLIDING for g in layers):
        # DFlashLagunaModel clears its sliding layers' window on their attention ("DFlash inserts
        # verifier-context K/V at absolute cache slots"): each draft layer holds full KV
        layers = tuple(replace(g, kind=FULL, sliding_window=None) if g.kind == SLIDING else g for g in layers)
        full_kv = ", each full-attention KV (vLLM keeps the window for compute only)"
    kind = drafter_kind(draft) if method == "draft_model" else method
    weights, how = drafter_weights(draft, kind)
    note = (
        f"{kind} drafter {draft.name}: {sum(g.count for g in layers)} KV layer(s){full_kv} and "
        f"{weights / 2**30:.2f} GiB of weights ({how}) counted"
    )
    return replace(
        target,
        mtp_layers=layers,
        mtp_weights_bytes=weights,
        notes=(*target.notes, note),
        drafter=kind,
        aux_hidden_layers=draft.aux_hidden_layers,
        drafter_widths=(draft.hidden_size, draft.intermediate_size, draft.num_attention_heads * _head(draft)),
    )


def dflash_as_built(spec: ModelSpec, rules: VllmRules) -> tuple[ModelSpec, str | None]:
    """(the spec with a DFlash drafter's layers as this vLLM builds them, why it won't start or None).

    Before 0.25 vLLM ignores the drafter's layer_types: every draft layer is full attention. From
    0.25 sliding layers keep their window, and 0.25.x refuses a drafter that mixes both kinds
    (vllm_rules: dflash_layer_types)."""
    if spec.drafter != "dflash" or not spec.mtp_layers:
        return spec, None
    if rules.value("dflash_layer_types") == "absent":
        return spec, (
            f"vLLM {rules.version} has no DFlash speculative decoding (added in 0.20.0): it refuses "
            "--speculative-config with a DFlash drafter and does not start"
        )
    kinds = {g.kind for g in spec.mtp_layers if g.count}
    if SLIDING not in kinds:
        return spec, None
    if not rules.dflash_reads_layer_types:
        merged: dict[LayerGroup, int] = {}
        for g in spec.mtp_layers:
            full = replace(g, kind=FULL, sliding_window=None, count=0) if g.kind == SLIDING else replace(g, count=0)
            merged[full] = merged.get(full, 0) + g.count
        layers = tuple(replace(g, count=n) for g, n in merged.items())
        note = (
            f"vLLM {rules.version} builds every DFlash draft layer as full attention (its layer_types "
            "and sliding window are read from 0.25)"
        )
        return replace(spec, mtp_layers=layers, notes=(*spec.notes, note)), None
    if FULL in kinds and not rules.dflash_mixed_layers_start:
        return spec, (
            f"vLLM {rules.version} refuses a DFlash drafter that mixes sliding-window and full-attention "
            "layers (NotImplementedError in qwen3_dflash.py); use vLLM 0.26 or later (V2 model runner) "
            "or 0.20–0.24 (every draft layer full attention)"
        )
    return spec, None


def load_serving_spec(
    model: str,
    speculation: Speculation | str | Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    fetcher: Fetcher | None = None,
) -> ModelSpec:
    """The target's spec, with a separate drafter (EAGLE, EAGLE3, DFlash, draft model) attached
    when --speculative-config (a ServeConfig's `speculation`) names one."""
    target = load_model_spec(model, env, fetcher)
    spec = (
        speculation if isinstance(speculation, Speculation) or speculation is None else parse_speculation(speculation)
    )
    if spec is None or spec.mtp or spec.method in NO_KV_METHODS or not spec.model:
        return target
    try:
        draft = load_model_spec(spec.model, env, fetcher)
    except UserError as exc:
        raise UserError(f"--speculative-config model: {exc}") from None
    return with_drafter(target, draft, spec.method)
