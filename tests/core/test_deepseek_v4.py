"""DeepSeek V4's weights from its real config (deepseek-ai/DeepSeek-V4-Flash-0731, byte-identical to
the published file: tests/fixtures/model-configs/SOURCES.md), as vLLM 0.32 builds the model."""

from __future__ import annotations

import json

import pytest

from sparktui.core.config import ServeConfig
from sparktui.core.fit import dgx_spark, fit
from sparktui.core.modelspec import spec_from_config
from sparktui.core.modelspec.weight_format import weight_formats

STEM = "deepseek-ai__DeepSeek-V4-Flash-0731"
CHECKPOINT_BYTES = 166_878_536_440  # its model.safetensors.index.json total_size (SOURCES.md)


@pytest.fixture
def config(fixtures):
    return json.loads((fixtures / "model-configs" / f"{STEM}.json").read_text())


def test_the_flash_model_has_its_published_284_billion_parameters(config):
    spec = spec_from_config(config, name="v4", source="t")
    assert spec.param_count == pytest.approx(284e9, rel=0.005)  # the model card: 284B total, 13B active


def test_its_weights_are_mxfp4_experts_and_fp8_blocks_within_the_checkpoint(config):
    """The checkpoint also holds three DSpark drafter stages (mtp.0–2), which a plain launch leaves
    unloaded: the main model is a little under its total_size, never above it (272 GiB before)."""
    spec = spec_from_config(config, name="v4", source="t")
    assert 0.9 * CHECKPOINT_BYTES < spec.weights_bytes < CHECKPOINT_BYTES
    experts = dict(spec.params_by_category)["experts"]
    assert dict(spec.bytes_by_category)["experts"] == int(experts * (0.5 + 1 / 32))


def test_expert_dtype_fp8_keeps_the_experts_in_fp8_blocks(config):
    assert weight_formats(config).format_of("layers.3.ffn.experts") == "MXFP4"
    base = {**config, "expert_dtype": "fp8"}
    assert weight_formats(base).format_of("layers.3.ffn.experts") == "FP8"
    assert weight_formats(base).format_of("layers.3.attn.wq_b") == "FP8"
    spec = spec_from_config(base, name="v4-base", source="t")
    assert dict(spec.bytes_by_category)["experts"] == dict(spec.params_by_category)["experts"]


def test_two_sparks_hold_half_the_weights_each(config):
    spec = spec_from_config(config, name="v4", source="t")
    result = fit(ServeConfig(model="v4", tensor_parallel_size=2, max_model_len=65536), spec, dgx_spark())
    assert result.budget["weights"] == spec.weights_bytes // 2
    assert 70 * 2**30 < result.budget["weights"] < 75 * 2**30
