"""Kimi-Linear's forward peak in vLLM's profile pass (fit_settings.kda_profile_values_per_token): its KDA
layers hold their projections only, the KDA core being skipped without metadata (vLLM 0.32
kimi_gdn_linear_attn.py KimiGatedDeltaNetAttention._forward returns first)."""

from __future__ import annotations

import json
from pathlib import Path

from sparktui.core.fit_settings import activation_parts, forward_values_per_token, moe_workspace_per_token
from sparktui.core.modelspec import MAMBA, spec_from_config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "model-configs"
# bench/activation_oracle.py on vLLM 0.32's own Kimi-Linear code (meta device, fake tensors, 4 layers deep:
# KDA, KDA + MoE, KDA + MoE, MLA + MoE), 256 sequences: the forward peak at 2,048 and 8,192 tokens, at o_proj
# of a KDA layer after the first MoE layer has taken the fused-MoE workspace
ORACLE_FORWARD = {2048: 299_499_520, 8192: 1_197_998_080}


def _kimi():
    config = json.loads((FIXTURES / "unseen" / "moonshotai__Kimi-Linear-48B-A3B-Instruct.json").read_text())
    return spec_from_config(config, name="moonshotai/Kimi-Linear-48B-A3B-Instruct", source="test")


def test_kda_layers_hold_their_projections_beside_five_hidden_tensors():
    """5 × 2,304 hidden-size values + in_proj_qkvgfab (3 × 4,096 + 32 betas + 128 f_a) + f_b, g_b and
    core_attn_out (4,096 each). Before: None (the Mamba fallback, 6 × hidden + 2 × the shared expert)."""
    spec = _kimi()
    assert forward_values_per_token(spec) == 5 * 2304 + 3 * 4096 + 32 + 128 + 3 * 4096
    # tensor parallel: the heads' parts split, f_a's output replicated on every rank
    assert forward_values_per_token(spec, tp=2) == 5 * 2304 + 3 * 2048 + 16 + 128 + 3 * 2048
    # the other side: a Gated-DeltaNet hybrid (Qwen3.5) is not read this way (its prefill term is its own)
    qwen = json.loads((FIXTURES / "Qwen__Qwen3.5-35B-A3B.json").read_text())
    qwen_spec = spec_from_config(qwen, name="Qwen/Qwen3.5-35B-A3B", source="test")
    assert any(g.kind == MAMBA and g.state_kind == "gdn" for g in qwen_spec.layers)
    assert forward_values_per_token(qwen_spec) is None


def test_the_fits_forward_peak_is_the_oracles():
    spec = _kimi()
    for tokens, measured in ORACLE_FORWARD.items():
        forward, _ = activation_parts(spec, tokens, 256, runner="v2")
        assert forward == measured
        assert forward == tokens * (2 * forward_values_per_token(spec) + moe_workspace_per_token(spec))
