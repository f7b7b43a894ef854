"""The multimodal encoder's share of vLLM's profile pass, against what real start-ups logged
("Encoder cache will be initialized with a budget of B tokens, and profiled with N <modality> items")."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from sparktui.core.config import ServeConfig
from sparktui.core.fit import dgx_spark, fit
from sparktui.core.fit_settings import encoder_term, settings_from
from sparktui.core.modelspec import spec_from_config

GEMMA4 = "google__gemma-4-26B-A4B"
QWEN36 = "Qwen__Qwen3.6-35B-A3B"
# google/gemma-3-27b-it's published config.json (sparse: the rest are transformers' defaults), as
# bench/fit_accuracy.py holds it
GEMMA3_27B = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "mm_tokens_per_image": 256,
    "text_config": {
        "head_dim": 128,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "model_type": "gemma3_text",
        "num_attention_heads": 32,
        "num_hidden_layers": 62,
        "num_key_value_heads": 16,
        "query_pre_attn_scalar": 168,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
    },
    "torch_dtype": "bfloat16",
    "vision_config": {
        "hidden_size": 1152,
        "image_size": 896,
        "intermediate_size": 4304,
        "model_type": "siglip_vision_model",
        "num_attention_heads": 16,
        "num_hidden_layers": 27,
        "patch_size": 14,
        "vision_use_head": False,
    },
}

# log, model config, the flags it ran with (its non-default args; vLLM's defaults otherwise)
LOGGED = [
    (
        "spark_v0.20.0_gemma-4-26b-a4b-it_bf16_success.log",
        GEMMA4,
        {"max_model_len": 8192, "max_num_batched_tokens": 4096},
    ),
    (
        "spark_v0.20.0_gemma-4-26b-a4b-it-qat-unquantized_success.log",
        GEMMA4,
        {"max_model_len": 8192, "max_num_batched_tokens": 4096},
    ),
    (
        "spark_v0.20.1_gemma-4-26b-a4b-nvfp4-dflash_success.log",
        GEMMA4,
        {"max_model_len": 262144, "max_num_batched_tokens": 32768, "max_num_seqs": 64},
    ),
    (
        "spark_v0.20.0_qwen3.6-35b-a3b-nvfp4-redhat_fp8kv_excerpt.log",
        QWEN36,
        {"max_model_len": 65536, "max_num_batched_tokens": 8192, "max_num_seqs": 1},
    ),
    (
        "spark_v0.22.0_qwen3.6-35b-a3b-prismaquant-mtp3_excerpt.log",
        QWEN36,
        {"max_model_len": 200000, "max_num_batched_tokens": 32768, "max_num_seqs": 64},
    ),
    (
        "spark_vdev-g101584af0_qwen3.6-35b-a3b-nvfp4-dflash_success.log",
        QWEN36,
        {"max_model_len": 262144, "max_num_batched_tokens": 65536, "max_num_seqs": 128},
    ),
    (
        "spark_vdev-g6804e1b81_qwen3.6-35b-a3b-nvfp4-dflash_success.log",
        QWEN36,
        {"max_model_len": 262144, "max_num_batched_tokens": 65536, "max_num_seqs": 128},
    ),
    (
        "spark_vdev-g25ab073ef_gemma-3-27b-it_fp8kv_success.log",
        GEMMA3_27B,
        {"max_model_len": 131072, "max_num_batched_tokens": 4096},
    ),
]
LINE = re.compile(r"budget of (\d+) tokens, and profiled with (\d+) (\w+) items")


def _spec(fixtures: Path, config: str | dict):
    if isinstance(config, dict):
        return spec_from_config(config, name="inline", source="test")
    data = json.loads((fixtures / "model-configs" / f"{config}.json").read_text())
    return spec_from_config(data, name=config, source="test")


@pytest.mark.parametrize(
    ("log", "config", "flags"), LOGGED, ids=[row[0].split("_")[2] + row[0][5:12] for row in LOGGED]
)
def test_the_encoder_profile_is_what_vllm_logged(fixtures, log, config, flags):
    logged = LINE.search((fixtures / "vllm-logs" / log).read_text(errors="replace"))
    assert logged, log
    spec = _spec(fixtures, config)
    s = settings_from(ServeConfig(model="m", **flags), spec, dgx_spark())
    profile = encoder_term(spec, s)
    assert profile is not None
    assert (profile.budget, profile.items, profile.modality) == (
        int(logged.group(1)),
        int(logged.group(2)),
        logged.group(3),
    )


def test_its_outputs_stay_through_the_dummy_forward(fixtures):
    """The encoder cache holds the dummy items' outputs while the language model's dummy forward and
    the sampler run: 4 images × 16,384 tokens × 2,048 × 2 bytes on Qwen3.6 at 65,536 batched tokens."""
    spec = _spec(fixtures, QWEN36)
    config = ServeConfig(model="m", max_model_len=262144, max_num_batched_tokens=65536, max_num_seqs=128)
    with_encoder = fit(config, spec, dgx_spark())
    without = fit(config, replace(spec, encoder=None), dgx_spark())
    kept = 4 * 16384 * 2048 * 2
    assert with_encoder.budget["activation_peak"] - without.budget["activation_peak"] == kept
    assert any("encoder profile: 4 image items of 16,384 tokens" in line for line in with_encoder.memory_working)


def test_the_language_model_alone_profiles_no_encoder(fixtures):
    spec = _spec(fixtures, QWEN36)
    config = ServeConfig(model="m", max_model_len=65536, max_num_batched_tokens=8192, language_model_only=True)
    assert not any("encoder profile" in line for line in fit(config, spec, dgx_spark()).memory_working)


def test_a_modality_limited_to_zero_profiles_the_next(fixtures):
    """Gemma 4 profiles a 32-frame video (2,496 tokens); with videos off, 280-token images."""
    spec = _spec(fixtures, GEMMA4)
    off = ServeConfig(model="m", max_model_len=8192, max_num_batched_tokens=4096, limit_mm_per_prompt='{"video": 0}')
    profile = encoder_term(spec, settings_from(off, spec, dgx_spark()))
    assert profile is not None and (profile.modality, profile.tokens_per_item, profile.items) == ("image", 280, 14)
    two = ServeConfig(model="m", max_model_len=8192, max_num_batched_tokens=4096, limit_mm_per_prompt='{"image": 2}')
    profile = encoder_term(spec, settings_from(two, spec, dgx_spark()))
    assert profile is not None and (profile.modality, profile.items) == ("video", 1)


def test_gemma3s_siglip_pass_holds_its_embeddings_the_layer_input_and_fp32_pixels(fixtures):
    """Gemma 3's SigLIP tower (models/siglip.py, the same 0.13 to 0.32): SiglipEncoder.forward keeps the
    input embeddings (hidden_states_pool) and each layer's input through the layer, which holds its
    residual and normed input beside fc1's output and the activation's: 4 hidden-size tensors and 2
    intermediates over every item's patches; the dummy batch's pixel values stay fp32 (the image
    processor's) beside them. The 27B log's torch peak (1.72 GiB) is that pass."""
    spec = _spec(fixtures, GEMMA3_27B)
    s = settings_from(ServeConfig(model="m", max_model_len=131072, max_num_batched_tokens=4096), spec, dgx_spark())
    profile = encoder_term(spec, s)
    assert profile is not None and profile.items == 16
    patches = 16 * (896 // 14) ** 2
    assert profile.forward == patches * (4 * 1152 + 2 * 4304) * 2 + 16 * 3 * 896 * 896 * 4
    log = (fixtures / "vllm-logs" / "spark_vdev-g25ab073ef_gemma-3-27b-it_fp8kv_success.log").read_text()
    peak = float(re.search(r"torch peak memory increase: ([\d.]+)GiB", log).group(1))
    assert abs(profile.forward / 2**30 - peak) / peak < 0.03  # 1.76 GiB against 1.72 (the fit's was 1.33)
    # Qwen3.5 / 3.6's vision blocks are not SigLIP: their estimate keeps the residual and its norm
    qwen = _spec(fixtures, QWEN36)
    q = settings_from(ServeConfig(model="m", max_model_len=65536, max_num_batched_tokens=8192), qwen, dgx_spark())
    vision = encoder_term(qwen, q)
    assert vision is not None and qwen.encoder is not None
    assert vision.forward == vision.items * qwen.encoder.patches_per_item * (2 * 1152 + 2 * 4304) * 2
