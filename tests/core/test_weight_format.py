"""Per-module weight formats from real checkpoints' quantization configs, by vLLM's rules
(vllm/model_executor/layers/quantization/modelopt.py, compressed_tensors/, fp8.py, auto_awq.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparktui.core.modelspec.weight_format import ALGO_BYTES, weight_formats


def _json(fixtures: Path, stem: str) -> dict:
    return json.loads((fixtures / "model-configs" / f"{stem}.json").read_text())


NANO = "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4"


def test_modelopt_exclude_modules_name_single_layers_and_the_rest_is_nvfp4(fixtures):
    f = weight_formats(_json(fixtures, NANO), _json(fixtures, f"{NANO}__hf_quant_config"))
    assert (f.method, f.algo, f.unquantized_dtype, f.source) == (
        "modelopt",
        "NVFP4",
        "bfloat16",
        "hf_quant_config.json",
    )
    # layer 4's Mamba projections and layer 5's attention are named; layer 14's and 40's are not
    assert f.format_of("backbone.layers.4.mixer.in_proj") is None
    assert f.format_of("backbone.layers.5.mixer.q_proj") is None
    assert f.format_of("backbone.layers.14.mixer.in_proj") == "NVFP4"
    assert f.format_of("backbone.layers.40.mixer.in_proj") == "NVFP4"
    assert f.format_of("backbone.layers.1.mixer.experts") == "NVFP4"
    assert f.is_excluded("lm_head") and not f.is_excluded("backbone.layers.1.mixer.experts")
    assert f.bytes_per_param("backbone.layers.4.mixer.in_proj") == 2.0
    assert f.bytes_per_param("backbone.layers.14.mixer.in_proj") == ALGO_BYTES["NVFP4"] == 0.5625


def test_modelopt_wildcards_match_as_fnmatch_and_as_substrings():
    hf = {"quantization": {"quant_algo": "NVFP4", "exclude_modules": ["backbone.layers.*.mixer.in_proj", "mtp*"]}}
    f = weight_formats({"torch_dtype": "float16"}, hf)
    assert f.format_of("backbone.layers.7.mixer.in_proj") is None
    assert f.format_of("backbone.layers.7.mixer.out_proj") == "NVFP4"
    assert f.format_of("mtp.layers.0.mixer.experts") is None
    assert f.bytes_per_param("mtp.layers.0.mixer.experts") == 2.0  # the checkpoint's own float16
    # a plain name excludes every module it is part of (vLLM's substring rule for older ModelOpt)
    g = weight_formats({}, {"quantization": {"quant_algo": "FP8", "exclude_modules": ["self_attn"]}})
    assert g.format_of("model.layers.3.self_attn.q_proj") is None
    assert g.format_of("model.layers.3.mlp.down_proj") == "FP8"


def test_config_json_modelopt_reads_ignore_and_wins_over_hf_quant_config(fixtures):
    stem = "nvidia__Qwen3.5-122B-A10B-NVFP4"
    f = weight_formats(_json(fixtures, stem), _json(fixtures, f"{stem}__hf_quant_config"))
    assert f.source == "config.json quantization_config"
    assert f.format_of("model.language_model.layers.0.linear_attn.in_proj_qkvz") is None
    assert f.format_of("model.language_model.layers.0.mlp.shared_expert.up_proj") is None
    assert f.format_of("model.language_model.layers.0.mlp.experts") == "NVFP4"
    assert f.format_of("lm_head") is None
    # config.json's flat modelopt format has no exclude_modules key: vLLM reads only `ignore` there
    flat = {"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}}
    assert weight_formats(flat).format_of("lm_head") == "NVFP4"
    hf_only = weight_formats({}, {"quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}})
    assert hf_only.format_of("lm_head") is None


def test_mixed_precision_takes_each_module_from_quantized_layers(fixtures):
    stem = "nvidia__Qwen3.6-35B-A3B-NVFP4"
    f = weight_formats(_json(fixtures, stem), _json(fixtures, f"{stem}__hf_quant_config"))
    assert f.method == "modelopt_mixed"
    assert f.format_of("model.language_model.layers.0.linear_attn.in_proj_qkv") == "FP8"
    assert f.format_of("model.language_model.layers.0.mlp.experts") == "W4A16_NVFP4"
    # a module quantized_layers does not name loads unquantized; the MTP head is ignored
    assert f.format_of("model.language_model.layers.0.mlp.gate") is None
    assert f.format_of("mtp.layers.0.mlp.experts") is None
    assert f.bytes_per_param("model.language_model.layers.0.linear_attn.in_proj_qkv") == 1.0


def test_an_experts_block_takes_the_format_of_its_per_expert_entries():
    hf = {
        "quantization": {
            "quant_algo": "MIXED_PRECISION",
            "quantized_layers": {
                "backbone.layers.1.mixer.experts.0.up_proj": {"quant_algo": "NVFP4", "group_size": 16},
                "backbone.layers.0.mixer.in_proj": {"quant_algo": "FP8"},
            },
        }
    }
    f = weight_formats({}, hf)
    assert f.format_of("backbone.layers.1.mixer.experts") == "NVFP4"
    assert f.format_of("backbone.layers.0.mixer.in_proj") == "FP8"
    assert f.format_of("backbone.layers.0.mixer.out_proj") is None


def test_compressed_tensors_ignore_matches_exactly_or_by_regex():
    q = {
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "group_size": 16}}},
        "ignore": ["lm_head", "re:.*self_attn.*", "model.layers.0.mlp"],
    }
    f = weight_formats({"quantization_config": q})
    assert f.format_of("model.layers.3.self_attn.o_proj") is None
    assert f.format_of("lm_head") is None
    assert f.format_of("model.layers.3.mlp.down_proj") == "NVFP4"
    # no substring rule here: a parent's name does not exclude its children
    assert f.format_of("model.layers.0.mlp.down_proj") == "NVFP4"


def test_compressed_tensors_groups_that_name_modules():
    q = {
        "quant_method": "compressed-tensors",
        "config_groups": {
            "fp8": {"targets": ["re:.*self_attn.*"], "weights": {"num_bits": 8, "type": "float"}},
            "fp4": {"targets": ["re:.*mlp.*"], "weights": {"num_bits": 4, "type": "float", "group_size": 16}},
        },
    }
    f = weight_formats({"quantization_config": q})
    assert f.format_of("model.layers.0.self_attn.q_proj") == "FP8"
    assert f.format_of("model.layers.0.mlp.up_proj") == "NVFP4"
    assert f.format_of("lm_head") is None


def test_fp8_ignored_layers_match_exactly_and_awq_by_substring():
    fp8 = weight_formats({"quantization_config": {"quant_method": "fp8", "ignored_layers": ["model.layers.0.mlp"]}})
    assert fp8.format_of("model.layers.0.mlp") is None
    assert fp8.format_of("model.layers.0.mlp.down_proj") == "FP8"
    awq = weight_formats(
        {
            "torch_dtype": "float16",
            "quantization_config": {
                "quant_method": "awq",
                "bits": 4,
                "group_size": 128,
                "modules_to_not_convert": ["visual"],
            },
        }
    )
    assert awq.format_of("model.visual.blocks.0.attn.qkv") is None
    assert awq.bytes_per_param("model.visual.blocks.0.attn.qkv") == 2.0
    assert awq.bytes_per_param("model.layers.0.mlp.down_proj") == pytest.approx(0.5 + 2.5 / 128)


def test_gpt_oss_mxfp4_quantizes_only_the_experts(fixtures):
    f = weight_formats(_json(fixtures, "openai__gpt-oss-20b"))
    assert f.format_of("model.layers.0.mlp.experts") == "MXFP4"
    assert f.format_of("model.layers.0.self_attn.q_proj") is None


def test_an_unquantized_checkpoint_loads_every_module_in_its_dtype(fixtures):
    f = weight_formats(_json(fixtures, "meta-llama__Meta-Llama-3.1-8B"))
    assert not f.quantized and f.format_of("model.layers.0.mlp.down_proj") is None
    assert f.bytes_per_param("model.layers.0.mlp.down_proj") == 2.0


def test_only_modelopt_quantizes_the_lm_head():
    modelopt = weight_formats({}, {"quantization": {"quant_algo": "NVFP4", "exclude_modules": []}})
    assert modelopt.format_of("lm_head") == "NVFP4"
    ct = {
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"}}},
    }
    assert weight_formats({"quantization_config": ct}).format_of("lm_head") is None
    assert weight_formats({"quantization_config": {"quant_method": "fp8"}}).format_of("lm_head") is None


def test_the_catalog_weighs_each_model_as_its_own_config_does(fixtures):
    """The built-in catalog keeps each quantization map whole: a map cut to one entry per category
    would name layer 0 and leave every other layer unquantized when weighed module by module."""
    from sparktui.core.modelspec import catalog, spec_from_catalog, spec_from_config

    checked = 0
    for repo_id, entry in catalog()["models"].items():
        if not entry.get("fixture") or entry.get("weights_bytes"):
            continue
        stem = entry["fixture"].removeprefix("model-configs/").removesuffix(".json")
        quant = fixtures / "model-configs" / f"{stem}__hf_quant_config.json"
        own = spec_from_config(
            _json(fixtures, stem),
            name=repo_id,
            source="fixture",
            hf_quant=json.loads(quant.read_text()) if quant.exists() else None,
        )
        assert spec_from_catalog(repo_id).weights_bytes == own.weights_bytes, repo_id
        checked += 1
    assert checked >= 20
