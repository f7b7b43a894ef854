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

FIXTURES = ROOT / "tests" / "fixtures"
PUBLISHED = FIXTURES / "speed" / "published.json"


@dataclass(frozen=True)
class Record:
    id: str
    model: str
    spec: ModelSpec
    context: int
    tok_s: float
    low: float
    high: float
    vllm: str | None
    speculative: dict[str, Any] | None
    source: str


def load(part: str) -> list[Record]:
    """'fit' or 'held_out'."""
    out = []
    for r in json.loads(PUBLISHED.read_text())[part]:
        cfg = json.loads((FIXTURES / "model-configs" / r["config"]).read_text())
        hq = json.loads((FIXTURES / "model-configs" / r["hf_quant"]).read_text()) if r.get("hf_quant") else None
        spec = spec_from_config(cfg, name=r["model"], source=str(PUBLISHED), hf_quant=hq)
        if r.get("mxfp4_layers"):
            spec = sp.with_mxfp4_layers(spec, r["mxfp4_layers"])
        low, high = r["range"]
        out.append(
            Record(
                r["id"],
                r["model"],
                spec,
                r["context"],
                r["tok_s"],
                low,
                high,
                r.get("vllm"),
                r.get("speculative"),
                r["source"],
            )
        )
    return out


def predict(record: Record, costs: dict[str, float] | None = None) -> sp.SpeedEstimate:
    saved = dict(sp.LAYER_COST_S)
    try:
        if costs is not None:
            sp.LAYER_COST_S.update(costs)
        return sp.estimate(record.spec, sp.GB10, context=record.context, kv_bytes=sp.kv_bytes_for(record.spec, None))
    finally:
        sp.LAYER_COST_S.clear()
        sp.LAYER_COST_S.update(saved)
