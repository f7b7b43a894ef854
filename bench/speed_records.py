"""The published DGX Spark speeds of tests/fixtures/speed/published.json, loaded as model specs
(bench/fit_speed.py fits on the `fit` set; bench/speed_accuracy.py checks on the `held_out` set)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparktui.core import speed as sp  # noqa: E402
from sparktui.core.modelspec import ModelSpec, spec_from_config  # noqa: E402
from sparktui.core.speculation import Speculation  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
PUBLISHED = FIXTURES / "speed" / "published.json"


@dataclass(frozen=True)
class Record:
    id: str
    model: str
    spec: ModelSpec
    context: int
    users: int
    tok_s: float  # per user
    low: float
    high: float
    vllm: str | None
    series: str | None  # the vLLM release line ("0.19"), None when the source does not say
    speculative: dict[str, Any] | str | None  # None: plain decode; "unknown": the source does not say
    source: str  # the source's key in published.json "sources"
    url: str
    kv_cache_dtype: str | None = None  # --kv-cache-dtype where the source gives it (None: auto)
    prefill: dict[str, int] | None = None  # a prefill figure: {"tok_s", "prompt", "max_num_batched_tokens"}

    @property
    def speculation_known(self) -> bool:
        return self.speculative is None or isinstance(self.speculative, dict)

    def draft(self) -> sp.DraftYield | None:
        """The speculative settings as the speed model takes them (its own acceptance, not the
        source's: the source's measured acceptance is printed beside, never fed in)."""
        if not isinstance(self.speculative, dict):
            return None
        method = self.speculative["method"]
        tokens = int(self.speculative["num_speculative_tokens"])
        return sp.draft_yield(Speculation(method=method, num_tokens=tokens, method_given=True), self.spec)


def _spec(r: dict[str, Any]) -> ModelSpec:
    cfg = json.loads((FIXTURES / "model-configs" / r["config"]).read_text())
    hq = json.loads((FIXTURES / "model-configs" / r["hf_quant"]).read_text()) if r.get("hf_quant") else None
    if r.get("bf16"):  # the base model, whose architecture config is at hand only inside a quantized checkpoint's
        cfg = {key: value for key, value in cfg.items() if key != "quantization_config"}
        hq = None
    if r.get("unquantized"):  # layers the source says the checkpoint keeps in bf16, where the layout is a stand-in
        cfg, hq = _unquantized(cfg, hq, r["unquantized"])
    quant = r.get("quant")
    if quant and "quantization" in quant:  # an hf_quant_config.json written out
        hq = quant
    elif quant:  # config.json's own quantization_config
        cfg = {**cfg, "quantization_config": quant}
    spec = spec_from_config(cfg, name=r["model"], source=str(PUBLISHED), hf_quant=hq)
    if r.get("mxfp4_layers"):
        spec = sp.with_mxfp4_layers(spec, r["mxfp4_layers"])
    return spec


def _unquantized(cfg: dict[str, Any], hq: dict[str, Any] | None, parts: list[str]) -> tuple[dict[str, Any], Any]:
    """The stand-in layout with the modules whose names hold one of `parts` unquantized: dropped from
    config.json's compressed-tensors groups (which vLLM reads first) and from hf_quant_config.json's
    MIXED_PRECISION map, so each reads at the checkpoint's own dtype."""

    def named(name: str) -> bool:
        return any(part in name for part in parts)

    dropped = 0

    def without(q: dict[str, Any]) -> dict[str, Any]:
        nonlocal dropped
        q = dict(q)
        if isinstance(q.get("quantized_layers"), dict):  # ModelOpt MIXED_PRECISION
            kept = {name: v for name, v in q["quantized_layers"].items() if not named(name)}
            dropped += len(q["quantized_layers"]) - len(kept)
            q["quantized_layers"] = kept
        if isinstance(q.get("config_groups"), dict):  # compressed-tensors groups that name their modules
            groups = {}
            for key, group in q["config_groups"].items():
                targets = [t for t in group.get("targets", []) if not named(t)]
                dropped += len(group.get("targets", [])) - len(targets)
                groups[key] = {**group, "targets": targets}
            q["config_groups"] = groups
        return q

    if isinstance(cfg.get("quantization_config"), dict):
        cfg = {**cfg, "quantization_config": without(cfg["quantization_config"])}
    if hq and isinstance(hq.get("quantization"), dict):
        hq = {**hq, "quantization": without(hq["quantization"])}
    if not dropped:
        raise ValueError(f"no quantized module is named by {parts}")
    return cfg, hq


PARTS = ("fit", "held_out", "post_freeze", "unseen")
UNSEEN = FIXTURES / "speed" / "unseen.json"


def load(part: str) -> list[Record]:
    """'fit', 'held_out', 'post_freeze' (held out too: collected after the model was frozen, by the
    rule in published.json's post_freeze_rule; its sources are in post_freeze_sources), or 'unseen'
    (a fourth held-out set in unseen.json, collected by the rule committed there before any of its
    figures was looked at)."""
    if part not in PARTS:
        raise ValueError(f"{part!r}: not one of {', '.join(PARTS)}")
    if part == "unseen":
        data = json.loads(UNSEEN.read_text())
        sources, rows = data["sources"], data["records"]
    else:
        data = json.loads(PUBLISHED.read_text())
        sources, rows = {**data["sources"], **data.get("post_freeze_sources", {})}, data.get(part, [])
    out = []
    for r in rows:
        low, high = r["range"]
        out.append(
            Record(
                r["id"], r["model"], _spec(r), r["context"], r.get("users", 1), r["tok_s"], low, high,
                r.get("vllm"), r.get("series"), r.get("speculative"), r["source"],
                sources[r["source"]]["url"], r.get("kv_cache_dtype"), r.get("prefill"),
            )
        )  # fmt: skip
    return out


# A GB10's device DRAM read rate, measured by a saturating read kernel: 231-234 GB/s against the spec's 273
# (antirez/ds4 issue #773, 2026-08-10, CUDA 13.0). Not the scoring roofline (the rule reads the spec's
# 273 GB/s and the stated speculative settings): printed so that a figure no plain decode of the record's layout
# reaches on a real box is named.
MEASURED_READ_GBS = 234.0


def scored(record: Record, est: sp.SpeedEstimate) -> bool:
    """The issue's rule: a record counts when it lies below its plain-decode roofline or its speculative
    settings are known (stated off, or method and tokens given); only a one-user figure above the roofline
    whose drafting is "unknown" is left out."""
    return record.speculation_known or record.users != 1 or not sp.above_roofline(record.low, est)


def measured_read_share(record: Record, est: sp.SpeedEstimate) -> float | None:
    """A one-user figure claimed or assumed to be plain decode, as a share of its roofline at a GB10's measured
    read rate (above 1: not plain decode of this layout); None for speculative or multi-user records."""
    if record.users != 1 or isinstance(record.speculative, dict):
        return None
    return record.low / (est.roofline_tok_s * MEASURED_READ_GBS * sp.GB / sp.GB10.bandwidth)


def predict(record: Record, costs: dict[str, float] | None = None) -> sp.SpeedEstimate:
    """core/speed.py's estimate for the record's model, context, users, speculative settings and
    vLLM release line (`costs`, given, replace the per-layer costs: bench/fit_speed.py)."""
    return sp.estimate(
        record.spec, sp.GB10, context=record.context, users=(record.users,),
        kv_bytes=sp.kv_bytes_for(record.spec, record.kv_cache_dtype), speculation=record.draft(),
        vllm_version=record.series, costs=costs,
    )  # fmt: skip


def per_user(record: Record, est: sp.SpeedEstimate) -> float:
    row = est.for_users(record.users)
    return row.per_user_tok_s if row else est.decode_tok_s


def prefill_tok_s(record: Record, costs: dict[str, float] | None = None) -> float:
    """core/speed.py's prefill tok/s for the record's prefill figure (prompt tokens / TTFT's prefill)."""
    assert record.prefill is not None
    est = sp.estimate(
        record.spec, sp.GB10, context=record.prefill["prompt"], prompt_tokens=record.prefill["prompt"],
        kv_bytes=sp.kv_bytes_for(record.spec, record.kv_cache_dtype), vllm_version=record.series, costs=costs,
        max_num_batched_tokens=record.prefill.get("max_num_batched_tokens", 2048),
    )  # fmt: skip
    return est.prefill_tok_s
