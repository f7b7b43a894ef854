"""poolside's Laguna with its DFlash drafter (vllm/model_executor/models/laguna.py, laguna_dflash.py),
at Laguna-S-2.1's geometry (tests/support/architecture_configs.py: not the checkpoints' own files)."""

from __future__ import annotations

import json
from pathlib import Path

from sparktui.core.config import ServeConfig
from sparktui.core.fit import dgx_spark, fit
from sparktui.core.modelspec import spec_from_config, with_drafter
from sparktui.core.modelspec.drafters import dflash_as_built
from sparktui.core.modelspec.spec import FULL, SLIDING
from sparktui.core.vllm_rules import rules_for
from tests.support.architecture_configs import LAGUNA_S_2_1, LAGUNA_S_2_1_DFLASH

GiB = 2**30
SPEC = '{"method": "dflash", "model": "poolside/Laguna-S-2.1-DFlash-INT4", "num_speculative_tokens": 15}'


def _laguna_with_drafter():
    target = spec_from_config(LAGUNA_S_2_1, name="laguna", source="test")
    draft = spec_from_config(LAGUNA_S_2_1_DFLASH, name="laguna-dflash", source="test")
    return with_drafter(target, draft, "dflash")


def test_a_laguna_dflash_drafters_sliding_layers_hold_full_kv_where_other_dflash_drafters_keep_the_window(
    fixtures: Path,
):
    """DFlashLagunaModel clears each sliding layer's window on its attention (DFlash writes the verifier's
    context K/V at absolute slots), so all 6 draft layers are full-attention KV; a z-lab DFlash drafter's
    sliding layers keep their window from vLLM 0.25 (qwen3_dflash.py)."""
    spec, refused = dflash_as_built(_laguna_with_drafter(), rules_for("0.25.1"))
    assert refused is None
    assert [(g.kind, g.count, g.sliding_window) for g in spec.mtp_layers] == [(FULL, 6, None)]
    assert {(g.kind, g.count) for g in spec.layers} == {(FULL, 12), (SLIDING, 36)}
    config = json.loads((fixtures / "model-configs" / "z-lab__gemma-4-26B-A4B-it-DFlash.json").read_text())
    gemma = spec_from_config(json.loads((fixtures / "model-configs" / "google__gemma-4-26B-A4B.json").read_text()),
                             name="gemma", source="test")  # fmt: skip
    other, _ = dflash_as_built(with_drafter(gemma, spec_from_config(config, name="d", source="t"), "dflash"),
                               rules_for("0.25.1"))  # fmt: skip
    assert SLIDING in {g.kind for g in other.mtp_layers}


def test_one_262144_token_request_needs_the_kv_vllm_0_25_1_refused_the_int4_start_up_for():
    """tests/fixtures/vllm-logs/spark_v0.25.1_laguna-s-2.1-int4_kv-cache-too-small_fail.log: "To serve at
    least one request with the model's max seq len (262144), (18.35 GiB KV cache is needed": 12 full target
    layers and the drafter's 6 at full length, 36 sliding ones at their window."""
    config = ServeConfig(model="inline", vllm_version="0.25.1", max_model_len=262144, gpu_memory_utilization=0.89,
                         max_num_seqs=32, speculative_config=SPEC)  # fmt: skip
    result = fit(config, _laguna_with_drafter(), dgx_spark())
    assert round(result.kv_bytes_per_request / GiB, 2) == 18.35
    assert result.verdict == "wont_start"
