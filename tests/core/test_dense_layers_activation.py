"""An MoE model's layers with a dense MLP of intermediate_size instead of experts peak on their own in vLLM's
profile pass: before the first MoE layer without the MoE workspace (vLLM's WorkspaceManager takes it at the
first fused-MoE call), after it beside the workspace. bench/activation_oracle.py at vLLM 0.32 (Qwen3-30B-A3B
with mlp_only_layers [1] and [0], DeepSeek-V3) measures what these tests ask, to the byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparktui.core.fit_settings import activation_parts, moe_workspace_per_token
from sparktui.core.modelspec import spec_from_config
from sparktui.core.modelspec.moe import dense_layers

TOKENS = 2048


def config(fixtures: Path, stem: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((fixtures / "model-configs" / f"{stem}.json").read_text())
    return data


def forward(text: dict[str, Any]) -> int:
    return activation_parts(spec_from_config(text, name="m", source="test"), TOKENS, 256, 1, "v2")[0]


def test_which_layers_are_dense_as_vllm_picks_them(fixtures):
    deepseek = config(fixtures, "deepseek-ai__DeepSeek-V3")
    assert dense_layers(deepseek, 61) == (3, 0)  # first_k_dense_replace
    # DeepseekV2DecoderLayer: MoE where i >= first_k_dense_replace and i % moe_layer_freq == 0
    assert dense_layers({**deepseek, "moe_layer_freq": 2}, 61) == (4, 28)
    qwen = config(fixtures, "Qwen__Qwen3-30B-A3B")
    assert dense_layers(qwen, 48) == (0, 0)
    assert dense_layers({**qwen, "mlp_only_layers": [0]}, 48) == (1, 0)
    assert dense_layers({**qwen, "mlp_only_layers": [1, 5]}, 48) == (0, 2)
    assert dense_layers(config(fixtures, "meta-llama__Meta-Llama-3.1-8B"), 32) == (0, 0)  # no experts
    mimo = config(fixtures, "unseen/XiaomiMiMo__MiMo-V2-Flash")  # moe_layer_freq: one flag per layer
    assert dense_layers(mimo, len(mimo["moe_layer_freq"])) == (1, 0)


def test_a_dense_layer_after_an_moe_layer_peaks_beside_the_workspace(fixtures):
    qwen = config(fixtures, "Qwen__Qwen3-30B-A3B")
    spec = spec_from_config(qwen, name="q", source="test")
    moe_only = forward(qwen)
    assert moe_only == 232_783_872  # the oracle's 0.217 GiB: attention stage + workspace
    later = forward({**qwen, "mlp_only_layers": [1]})
    # layer 1's dense MLP (gate_up 2 x 6144, its output 6144, 5 hidden-size tensors) beside the workspace
    assert later == 251_658_240 == TOKENS * (2 * (5 * 2048 + 3 * 6144) + moe_workspace_per_token(spec, 1))
    # the same layer first: it runs before the workspace exists, and the MoE layers' peak stays the larger
    assert forward({**qwen, "mlp_only_layers": [0]}) == moe_only


def test_deepseek_s_three_dense_layers_run_before_the_workspace(fixtures):
    """DeepSeek-V3's dense layers (intermediate 18,432) stay below its MoE layers' peak with the workspace:
    the oracle's 0.746 GiB at eight layers, unchanged."""
    assert forward(config(fixtures, "deepseek-ai__DeepSeek-V3")) == 801_374_208


def test_the_weights_count_the_dense_layers_moe_layer_freq_gives(fixtures):
    """MiMo-V2-Flash's moe_layer_freq flags layer 0 dense (mimo_v2.py is_moe_layer): 47 MoE layers and one
    dense MLP of 16,384, 309.7 B parameters, the "309B total" of its model card (read as 48 MoE layers: 315.9 B)."""
    mimo = spec_from_config(config(fixtures, "unseen/XiaomiMiMo__MiMo-V2-Flash"), name="m", source="test")
    assert (mimo.moe_layers, mimo.mlp_layers) == (47, 1)
    assert 309e9 <= mimo.param_count < 310e9
    # DeepSeek-style moe_layer_freq 2: of 61 layers, MoE at 4, 6, …, 60 (first_k_dense_replace 3)
    deepseek = config(fixtures, "deepseek-ai__DeepSeek-V3")
    spec = spec_from_config({**deepseek, "moe_layer_freq": 2}, name="d", source="test")
    assert (spec.moe_layers, spec.mlp_layers) == (29, 32)
