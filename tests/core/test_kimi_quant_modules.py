"""A quantized Kimi-Linear checkpoint's exclusions, matched against its own module names (modules._kimi): KDA
layers' self_attn.{q,k,v,b,f_a,f_b,g_a,g_b,o}_proj, MLA layers' q_proj / kv_a_proj_with_mqa / kv_b_proj /
o_proj, block_sparse_moe.experts and block_sparse_moe.shared_experts.*, layer 0's dense mlp.* (vLLM 0.32
vllm/models/kimi_k3/nvidia/model.py). Before, every layer was named as MLA, the experts as mlp.experts and
the shared experts not at all, so an exclusion naming them left them quantized."""

from __future__ import annotations

import json
from pathlib import Path

from sparktui.core.modelspec import spec_from_config
from sparktui.core.modelspec.build import layer_groups
from sparktui.core.modelspec.modules import linear_modules
from sparktui.core.modelspec.weight_format import ALGO_BYTES

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "model-configs"
NVFP4 = {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "group_size": 16}}}


def _config(ignore: list[str]) -> dict:
    config = json.loads((FIXTURES / "unseen" / "moonshotai__Kimi-Linear-48B-A3B-Instruct.json").read_text())
    config["quantization_config"] = {"quant_method": "compressed-tensors", "config_groups": NVFP4, "ignore": ignore}
    return config


def _bytes_per_param(ignore: list[str]) -> dict[str, float]:
    spec = spec_from_config(_config(ignore), name="kimi-nvfp4", source="test")
    stored, params = dict(spec.bytes_by_category), dict(spec.params_by_category)
    return {cat: stored[cat] / params[cat] for cat in ("linear_attn", "attn", "experts", "shared", "mlp")}


def test_the_modules_are_kimis_own_names_layer_by_layer():
    config = _config([])
    layers, _ = layer_groups(config)
    names = {m.name for m in linear_modules(config, config, layers)}
    kda = ("q_proj", "k_proj", "v_proj", "b_proj", "f_a_proj", "f_b_proj", "g_a_proj", "g_b_proj", "o_proj")
    assert {f"model.layers.0.self_attn.{n}" for n in kda} <= names  # layer 1 in kda_layers
    assert "model.layers.3.self_attn.kv_a_proj_with_mqa" in names  # layer 4: MLA
    assert "model.layers.3.self_attn.f_a_proj" not in names
    assert "model.layers.0.mlp.down_proj" in names and "model.layers.0.block_sparse_moe.experts" not in names
    assert "model.layers.1.block_sparse_moe.experts" in names
    assert "model.layers.1.block_sparse_moe.shared_experts.up_proj" in names
    assert not [n for n in names if ".mlp.experts" in n]


def test_attention_and_shared_experts_kept_in_bf16_by_the_ignore_list():
    """An llm-compressor-style NVFP4 recipe: every self_attn (KDA and MLA) and the shared experts excluded,
    the routed experts and layer 0's dense MLP quantized. Before: the KDA projections and shared experts were
    weighed as NVFP4 (0.5625 B a weight) though vLLM loads them in bf16."""
    nvfp4 = ALGO_BYTES["NVFP4"]
    got = _bytes_per_param(["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*"])
    assert abs(got["attn"] - 2) < 1e-9
    assert abs(got["linear_attn"] - 2) < 1e-9  # the 20 KDA layers' projections
    assert abs(got["shared"] - 2) < 1e-9
    assert abs(got["experts"] - nvfp4) < 1e-9 and abs(got["mlp"] - nvfp4) < 1e-9  # the other side


def test_routed_experts_excluded_by_their_block_sparse_moe_name():
    """Excluding the routed experts (vLLM's FusedMoE prefix model.layers.N.block_sparse_moe.experts) leaves
    them in bf16; the KDA projections, not excluded, stay NVFP4."""
    nvfp4 = ALGO_BYTES["NVFP4"]
    got = _bytes_per_param(["lm_head", r"re:.*block_sparse_moe\.experts.*"])
    assert abs(got["experts"] - 2) < 1e-9
    assert abs(got["linear_attn"] - nvfp4) < 1e-9 and abs(got["attn"] - nvfp4) < 1e-9


def _verdict(ignore: list[str], version: str):
    from sparktui.core.config import ServeConfig
    from sparktui.core.fit import dgx_spark, fit

    spec = spec_from_config(_config(ignore), name="kimi-nvfp4", source="test")
    result = fit(ServeConfig(model=spec.name, vllm_version=version, max_model_len=32768), spec, dgx_spark())
    return result.verdict, [r for r in result.reasons if "in_proj_qkvgfab" in r]


def test_an_ignore_list_that_splits_the_fused_kda_projection_wont_start_from_0_27():
    """vLLM 0.27 on loads q/k/v/b/f_a_proj as one in_proj_qkvgfab (packed_modules_mapping) and compressed-tensors'
    should_ignore_layer raises when its shards differ: keeping only the small b_proj and f_a_proj in bf16 is
    refused. Before: weighed module by module and 'fits'."""
    small = ["lm_head", r"re:.*self_attn\.(b_proj|f_a_proj)$"]
    for version in ("0.27.0", "0.32.0"):
        verdict, reasons = _verdict(small, version)
        assert verdict == "wont_start"
        (reason,) = reasons
        assert "b_proj, f_a_proj of model.layers.0.self_attn" in reason
        assert "vLLM requires all to use the same scheme" in reason
    # the other sides: 0.26 loads them apart; all five excluded together (or none) is one scheme
    assert _verdict(small, "0.26.0") == ("fits", [])
    assert _verdict(["lm_head", r"re:.*self_attn\.(q|k|v|b|f_a)_proj$"], "0.32.0") == ("fits", [])
    assert _verdict(["lm_head"], "0.32.0") == ("fits", [])
