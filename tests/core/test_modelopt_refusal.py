"""A ModelOpt MIXED_PRECISION checkpoint against the vLLM that serves it (vllm_rules
modelopt_mixed_precision): refused before 0.17, where no ModelOpt config takes a quant_algo per layer
(modelopt.py QUANT_ALGOS, ModelOptQuantConfigBase.from_config); loaded as modelopt_mixed from 0.17
when config.json carries the flat copy ModelOpt exports, refused when only hf_quant_config.json's
nested copy is there (model_arch_config_convertor.py _normalize_quantization_config)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparktui.core.config import ServeConfig
from sparktui.core.fit import dgx_spark, fit
from sparktui.core.modelspec import load_model_spec, spec_from_config
from sparktui.core.vllm_kv_dtypes import ModelOptAlgo, checkpoint_modelopt_algo

SUPER = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "model-configs"
STEM = "nvidia__NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"


def _verdict(spec, version: str):
    result = fit(ServeConfig(model=SUPER, vllm_version=version, max_model_len=32768), spec, dgx_spark())
    return result.verdict, [r for r in result.reasons if "MIXED_PRECISION" in r]


def _fixture() -> tuple[dict, dict]:
    config = json.loads((FIXTURES / f"{STEM}.json").read_text())
    hf_quant = json.loads((FIXTURES / f"{STEM}__hf_quant_config.json").read_text())
    return config, hf_quant


@pytest.mark.parametrize("version", ["0.10.0", "0.13.0", "0.16.0"])
def test_the_published_super_nvfp4_wont_start_before_vllm_0_17(version):
    verdict, reasons = _verdict(load_model_spec(SUPER), version)
    assert verdict == "wont_start"
    assert len(reasons) == 1
    assert f"vLLM {version} has no ModelOpt MIXED_PRECISION support" in reasons[0]
    assert "0.17" in reasons[0]


@pytest.mark.parametrize("version", ["0.17.0", "0.19.1", "0.21.0", "0.32.0"])
def test_the_published_super_nvfp4_is_not_refused_from_vllm_0_17(version):
    verdict, reasons = _verdict(load_model_spec(SUPER), version)
    assert reasons == []
    assert verdict != "wont_start"


@pytest.mark.parametrize("version", ["0.17.0", "0.32.0"])
def test_a_mixed_precision_map_only_in_hf_quant_config_json_is_refused(version):
    """vLLM's own run (0.19.1, 0.21.0, 0.32.0 venvs): with no quantization_config in config.json,
    get_config takes hf_quant_config.json and its nested quant_algo raises 'Unknown ModelOpt quant algo:
    MIXED_PRECISION'; config.json's flat copy loads as modelopt_mixed."""
    config, hf_quant = _fixture()
    del config["quantization_config"]
    only_file = spec_from_config(config, name=SUPER, source="test", hf_quant=hf_quant)
    verdict, reasons = _verdict(only_file, version)
    assert verdict == "wont_start"
    assert len(reasons) == 1 and "Unknown ModelOpt quant algo: MIXED_PRECISION" in reasons[0]
    assert "hf_quant_config.json" in reasons[0]


def test_where_vllm_reads_the_modelopt_algo_from():
    config, hf_quant = _fixture()
    assert checkpoint_modelopt_algo(config, hf_quant) == ModelOptAlgo("MIXED_PRECISION", "config.json", False)
    bare = {k: v for k, v in config.items() if k != "quantization_config"}
    assert checkpoint_modelopt_algo(bare, hf_quant) == ModelOptAlgo("MIXED_PRECISION", "hf_quant_config.json", True)
    assert checkpoint_modelopt_algo(bare, None) is None
    awq = {**bare, "quantization_config": {"quant_method": "awq", "bits": 4}}
    assert checkpoint_modelopt_algo(awq, hf_quant) is None  # config.json's copy wins, and it is not ModelOpt's


def test_a_single_algorithm_modelopt_checkpoint_is_not_refused_by_this_rule():
    """Nemotron-3-Nano NVFP4 (ModelOpt 0.29: hf_quant_config.json only, quant_algo NVFP4) loads at 0.13."""
    nano = load_model_spec("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4")
    assert nano.modelopt_algo == ModelOptAlgo("NVFP4", "hf_quant_config.json", True)
    result = fit(ServeConfig(model=nano.name, vllm_version="0.13.0", max_model_len=32768), nano, dgx_spark())
    assert not [r for r in result.reasons if "ModelOpt" in r]
