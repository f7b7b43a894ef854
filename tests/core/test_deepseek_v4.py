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
    # the rope caches are whole on each rank (ModelSpec.rope_cache_bytes)
    assert result.budget["weights"] == (spec.weights_bytes - spec.rope_cache_bytes) // 2 + spec.rope_cache_bytes
    assert 70 * 2**30 < result.budget["weights"] < 75 * 2**30


# The TP=2 start-up of nvidia/DeepSeek-V4-Flash-0731-NVFP4 on two Sparks (SOURCES.md): block 256,
# fp8 KV, 2,048 batched tokens, 1,000,000-token context, DSpark drafter (three layers, the config's
# compress_ratios 43–45), 5.93 GiB of KV memory per rank → "GPU KV cache size: 1,135,251 tokens", 1.14x.
LOGGED_KV_GIB = 5.93
LOGGED_TOKENS = 1_135_251


def _v4_plan(config):
    from dataclasses import replace

    from sparktui.core.kv_plan import plan_kv
    from sparktui.core.vllm_rules import rules_for

    spec = spec_from_config(config, name="v4", source="t")
    # the DSpark drafter has three layers (models/deepseek_v4/nvidia/dspark.py: n_mtp_layers or 3)
    spec = replace(spec, mtp_layers=(replace(spec.layers[0], count=3),))
    return plan_kv(spec, 1, block_size=256, tp=2, max_num_batched_tokens=2048, mtp=True, rules=rules_for("0.32.0"))


def test_the_real_two_spark_start_up_tokens_follow_from_its_kv_memory(config):
    """vLLM 0.32's own planner, given these layers' specs, makes 6,353 blocks of 1,002,240 B and
    5,597 blocks per 1M-token request: 1,135,072 tokens (the logged 5.93 GiB is rounded to 0.01)."""
    plan = _v4_plan(config)
    blocks, tokens, concurrency = plan.capacity(int(LOGGED_KV_GIB * 2**30), 1_000_000)
    assert (plan.bytes_per_block, blocks, plan.blocks_per_request(1_000_000)) == (1_002_240, 6_353, 5_597)
    assert tokens == pytest.approx(LOGGED_TOKENS, rel=0.01)
    assert round(concurrency, 2) == 1.14


def test_the_packed_groups_are_vllms(config):
    """kv_cache_utils._get_packed_kv_cache_groups on the 46 layers: the sliding-window latents split
    in two groups of 23 (_approximate_gcd of 46, 21, 20 from 21 up is 23), the compressed latents
    and indexer keys one group, each compressor-state kind one group."""
    plan = _v4_plan(config)
    assert [(g.kind, g.layers, g.groups, g.page_bytes, g.block_size, g.window) for g in plan.groups] == [
        ("sliding", 23, 2, 861_120, 64, 128),
        ("mla", 62, 1, 1_002_240, 256, None),
        ("sliding", 42, 1, 870_912, 4, 8),
        ("sliding", 20, 1, 656_640, 8, 128),
    ]


def test_the_cache_is_whole_on_every_rank_and_does_not_shrink_with_tp(config):
    from sparktui.core.kv_plan import plan_kv

    spec = spec_from_config(config, name="v4", source="t")
    one = plan_kv(spec, 1, block_size=256, tp=1, max_num_batched_tokens=2048)
    two = plan_kv(spec, 1, block_size=256, tp=2, max_num_batched_tokens=2048)
    assert one.groups == two.groups
    assert one.bytes_per_block == two.bytes_per_block == 1_002_240


def test_without_block_size_the_plan_takes_vllms_256_token_blocks(config):
    from sparktui.core.kv_plan import plan_kv

    spec = spec_from_config(config, name="v4", source="t")
    assert plan_kv(spec, 1).groups == plan_kv(spec, 1, block_size=256).groups
    assert plan_kv(spec, 1).block_size == 256  # what vLLM takes and logs, not the 4-token compressor-state blocks


def test_every_token_costs_the_compressed_latents_and_indexer_keys(config):
    """1,002,240 B per 256-token block: 21 × 64 ratio-4 latents (37,440 B a page), 20 × 2 ratio-128
    latents (1,728 B) and 21 × 64 indexer keys (8,640 B); the sliding and state groups are bounded."""
    from sparktui.core.kv_plan import plan_kv

    assert plan_kv(spec_from_config(config, name="v4", source="t"), 1).kv_bytes_per_token == 1_002_240 // 256


@pytest.mark.parametrize("block_size", [16, 128, 384])
def test_a_block_size_the_v4_backends_cannot_take_is_a_clear_error(config, block_size):
    from sparktui.core.kv_plan import plan_kv
    from sparktui.errors import UserError

    spec = spec_from_config(config, name="v4", source="t")
    with pytest.raises(UserError, match=rf"--block-size {block_size}: .*blocks of 256 tokens"):
        plan_kv(spec, 1, block_size=block_size)
    assert plan_kv(spec, 1, block_size=512).bytes_per_block > 0


@pytest.mark.parametrize("speculative", [None, '{"method": "dspark", "num_speculative_tokens": 5}'])
def test_the_fit_given_the_start_ups_kv_memory_logs_its_tokens(config, speculative):
    """The whole fit path (flags → settings → plan) with the start-up's own flags: 1,135,072 tokens,
    within 0.02% of the logged 1,135,251 (31,333,333 before, the layers read as 128-token windows).
    DSpark's 3 drafter layers add sliding and state pages, not a wider block: the same figure."""
    from sparktui.core.fit import fit_to_kv_memory
    from sparktui.core.vllm_rules import rules_for

    flags = {"tensor_parallel_size": 2, "max_model_len": 1_000_000, "block_size": 256, "kv_cache_dtype": "fp8"}
    flags |= {"max_num_batched_tokens": 2048, "max_num_seqs": 2, "enable_prefix_caching": True}
    if speculative:
        flags["speculative_config"] = speculative
    spec = spec_from_config(config, name="v4", source="t")
    got = fit_to_kv_memory(
        spec, ServeConfig(model="v4", **flags), int(LOGGED_KV_GIB * 2**30), rules=rules_for("0.32.0")
    )
    assert got[:2] == (6_353, 1_135_072)
    assert got[1] == pytest.approx(LOGGED_TOKENS, rel=0.001)


@pytest.mark.parametrize(("kv_cache_dtype", "refused"), [("bfloat16", True), ("auto", False), ("fp8", False)])
def test_a_16_bit_kv_cache_is_a_wont_start_as_vllm_refuses_it(config, kv_cache_dtype, refused):
    """attention.py _resolve_dsv4_kv_cache_dtype: auto and fp8* become fp8_ds_mla, the rest raise."""
    spec = spec_from_config(config, name="v4", source="t")
    flags = {"tensor_parallel_size": 2, "max_model_len": 65536, "kv_cache_dtype": kv_cache_dtype}
    result = fit(ServeConfig(model="v4", **flags), spec, dgx_spark())
    said = [r for r in result.reasons if "fp8_ds_mla" in r]
    assert bool(said) == refused
    if refused:
        assert result.verdict == "wont_start"
        assert said[0].startswith("--kv-cache-dtype bfloat16: ")


@pytest.mark.parametrize(("version", "approximate"), [("0.32.0", False), ("0.33.0", True), ("0.31.1", True)])
def test_the_plan_says_it_is_approximate_for_a_vllm_other_than_0_32(config, version, approximate):
    from sparktui.core.kv_plan import plan_kv
    from sparktui.core.vllm_rules import rules_for

    plan = plan_kv(spec_from_config(config, name="v4", source="t"), 1, rules=rules_for(version))
    said = [line for line in plan.working if line.startswith(f"approximate for vLLM {version}")]
    assert bool(said) == approximate
