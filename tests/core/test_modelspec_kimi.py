"""Kimi-Linear (KimiLinearForCausalLM) read as vLLM 0.32 builds it: KDA layers with a fixed state per
sequence, MLA layers with one latent per token (modelspec/kimi.py), on moonshotai/Kimi-Linear-48B-A3B-Instruct's
real config.json (tests/fixtures/model-configs/unseen, SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparktui.core.modelspec import MAMBA, MLA, spec_from_config

STEM = "unseen/moonshotai__Kimi-Linear-48B-A3B-Instruct"
# the checkpoint's own tensors, summed in the public inspection report SOURCES.md cites
CHECKPOINT_PARAMS = 49_122_681_728


def kimi_config(fixtures: Path) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((fixtures / "model-configs" / f"{STEM}.json").read_text())
    return config


def kinds(spec) -> dict[str, int]:
    out: dict[str, int] = {}
    for g in spec.layers:
        out[g.kind] = out.get(g.kind, 0) + g.count
    return out


def test_kda_layers_hold_a_state_and_the_rest_are_mla(fixtures):
    """KimiDecoderLayer: layer i is KDA when i + 1 is in linear_attn_config.kda_layers (20 of 27), every other
    layer MLA (7: 4, 8, …, 24 and 27). Before: read as 27 MLA layers, 3.9× the KV per token and no state."""
    spec = spec_from_config(kimi_config(fixtures), name="kimi", source="test")
    assert kinds(spec) == {MAMBA: 20, MLA: 7}
    assert spec.kv_bytes_per_token() == 7 * (512 + 64) * 2  # the 7 MLA latents only
    (kda,) = [g for g in spec.layers if g.kind == MAMBA]
    # conv state of q, k, v (3 × 32 heads × 128) × (kernel 4 − 1) in bf16; recurrent 32 × 128 × 128 in float32
    assert kda.state_bytes(2) == 3 * 32 * 128 * 3 * 2 + 32 * 128 * 128 * 4
    # KimiGatedDeltaNetAttention.get_state_dtype passes no ssm dtype: float32 whatever the flag says
    # (tests/core/test_kda_ssm_cache_dtype.py)
    assert kda.state_bytes(2, ssm_dtype="bfloat16") == kda.state_bytes(2)
    assert not [n for n in spec.notes if "not checked" in n]


def test_which_layers_are_kda_follows_the_list(fixtures):
    """The other side: a layer number not in kda_layers (or past num_hidden_layers) is not KDA, and a config
    with no KDA layers listed is all MLA."""
    config = kimi_config(fixtures)
    fewer = {**config, "linear_attn_config": {**config["linear_attn_config"], "kda_layers": [1, 2, 3, 28, 40]}}
    assert kinds(spec_from_config(fewer, name="fewer", source="test")) == {MAMBA: 3, MLA: 24}
    none = {**config, "linear_attn_config": {**config["linear_attn_config"], "kda_layers": []}}
    assert kinds(spec_from_config(none, name="none", source="test")) == {MLA: 27}


def test_weights_count_kda_projections_and_shared_experts(fixtures):
    """KDA's q/k/v/o, low-rank f and g, beta, convs, A_log, dt_bias and o_norm; one shared expert per MoE
    layer from num_shared_experts (before: not read, and KDA layers weighed as MLA); the experts per token
    from num_experts_per_token. Within 10,240 parameters of the checkpoint's tensors: the 7 MLA
    kv_a_layernorms (512) and 26 routers' e_score_correction_bias (256) are the only ones not counted."""
    spec = spec_from_config(kimi_config(fixtures), name="kimi", source="test")
    assert CHECKPOINT_PARAMS - spec.param_count == 7 * 512 + 26 * 256
    assert dict(spec.params_by_category)["shared"] == 26 * 3 * 2304 * 1024
    assert spec.experts_per_token == 8


def test_vllm_reads_kimi_linears_config_without_remote_code():
    """vLLM ships its own KimiLinearConfig: get_config loads this config.json (auto_map and all) with
    trust_remote_code=False at every probed release from 0.13.0 (tests/core/test_remote_code_vs_vllm.py asks
    each venv), so --trust-remote-code is not suggested there; releases before the first probe keep it."""
    from sparktui.core.vllm_native_configs import needs_remote_code
    from sparktui.core.vllm_version import VllmVersion

    assert not needs_remote_code("kimi_linear", VllmVersion(0, 13, 0))
    assert needs_remote_code("kimi_linear", VllmVersion(0, 12, 0))


def test_kimi_linears_router_carries_the_balancing_bias(fixtures):
    """KimiMoE always builds gate.e_score_correction_bias (the checkpoint holds one per MoE layer), so a decode
    batch reads experts as uniform picks would (speed); a MoE config without that bias still does not."""
    spec = spec_from_config(kimi_config(fixtures), name="kimi", source="test")
    assert spec.balanced_router
    qwen = json.loads((fixtures / "model-configs" / "Qwen__Qwen3-30B-A3B.json").read_text())
    assert not spec_from_config(qwen, name="qwen", source="test").balanced_router
