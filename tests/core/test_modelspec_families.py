"""Architecture families beyond plain decoders: Nemotron-H (Mamba2) hybrids, Mistral params.json,
Gemma KV sharing, the model's own max-model-len limit, and separate drafters (EAGLE3, DFlash)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparktui.core.config import ServeConfig, parse_serve_command
from sparktui.core.fit import dgx_spark, fit, plan_kv
from sparktui.core.modelspec import (
    FULL,
    MAMBA,
    SLIDING,
    load_serving_spec,
    spec_from_config,
    spec_from_folder,
)
from sparktui.core.modelspec.weights import tensor_category
from sparktui.core.speed import footprint
from sparktui.errors import UserError

GiB = 1024**3

# NVIDIA-Nemotron-3-Super-120B-A12B's dimensions (88 blocks: 40 Mamba2, 40 LatentMoE, 8 attention;
# MTP "*E"), as public model-loading code checks them against the real checkpoint
# (tests/fixtures/model-configs/SOURCES.md). The block order here is a stand-in with those counts.
SUPER = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "num_hidden_layers": 88,
    "hybrid_override_pattern": "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEM*E" + "ME" * 8,
    "hidden_size": 4096,
    "vocab_size": 131072,
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "mamba_num_heads": 128,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "conv_kernel": 4,
    "n_groups": 8,
    "n_routed_experts": 512,
    "num_experts_per_tok": 22,
    "moe_latent_size": 1024,
    "moe_intermediate_size": 2688,
    "moe_shared_expert_intermediate_size": 5376,
    "n_shared_experts": 1,
    "num_nextn_predict_layers": 1,
    "mtp_hybrid_override_pattern": "*E",
    "max_position_embeddings": 262144,
    "torch_dtype": "bfloat16",
}
NVFP4 = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}


def test_the_stand_in_pattern_has_the_real_block_counts():
    pattern = SUPER["hybrid_override_pattern"]
    assert len(pattern) == 88
    assert (pattern.count("M"), pattern.count("E"), pattern.count("*")) == (40, 40, 8)


def test_nemotron_h_layers_mamba2_state_and_mtp_attention():
    spec = spec_from_config(SUPER, name="super", source="test")
    kinds = {g.kind: g.count for g in spec.layers}
    assert kinds == {MAMBA: 40, FULL: 8}  # E blocks hold no cache
    mamba = next(g for g in spec.layers if g.kind == MAMBA)
    # conv: (128×64 + 2×8×128) × 3 in bf16; ssm: 128 heads × 64 × 128 in float32 (vLLM's default)
    assert mamba.state_bytes(2) == (8192 + 2048) * 3 * 2 + 128 * 64 * 128 * 4
    assert mamba.ssm_dtype == "float32"
    # --mamba-ssm-cache-dtype bfloat16 halves the recurrent state
    assert mamba.state_bytes(2, ssm_dtype="bfloat16") == (8192 + 2048) * 3 * 2 + 128 * 64 * 128 * 2
    # TP=2 splits heads and conv channels
    assert mamba.state_bytes(2, tp=2) == (8192 + 2048) // 2 * 3 * 2 + 64 * 64 * 128 * 4
    assert spec.kv_bytes_per_token() == 8 * 2 * 128 * 2 * 2
    assert [(g.kind, g.count, g.draft) for g in spec.mtp_layers] == [(FULL, 1, True)]
    assert spec.max_len_limit == 262144


def test_nemotron_h_nvfp4_weights_are_about_the_checkpoint_not_817_gib():
    """The issue saw 817 GiB predicted for a ~75 GiB checkpoint: experts were counted on all 88
    blocks as gated triples in the hidden size; they live on 40 blocks as relu² pairs in the latent."""
    spec = spec_from_config(SUPER, name="super", source="test", hf_quant=NVFP4)
    assert 118e9 < spec.param_count < 124e9  # "120B"
    assert spec.quantization == "nvfp4"
    assert 60 * GiB < spec.weights_bytes < 80 * GiB
    assert spec.checkpoint_kv_cache_dtype == "fp8"


def test_nemotron_h_from_layers_block_type():
    blocks = {"M": "mamba", "E": "moe", "*": "attention"}
    listed = {k: v for k, v in SUPER.items() if k != "hybrid_override_pattern"}
    listed["layers_block_type"] = [blocks[c] for c in SUPER["hybrid_override_pattern"]]
    a = spec_from_config(SUPER, name="a", source="test")
    b = spec_from_config(listed, name="b", source="test")
    assert a.layers == b.layers and a.param_count == b.param_count


def test_nemotron_h_plan_pads_attention_pages_to_the_mamba_state():
    spec = spec_from_config(SUPER, name="super", source="test")
    plan = plan_kv(spec, 2)
    mamba_state = next(g for g in spec.layers if g.kind == MAMBA).state_bytes(2)
    attention_per_token = 2 * 128 * 2 * 2
    assert plan.block_size * attention_per_token >= mamba_state  # block grown to hold one state
    assert plan.block_size % 16 == 0


def test_bad_nemotron_pattern_is_named():
    with pytest.raises(UserError, match="hybrid_override_pattern"):
        spec_from_config({**SUPER, "hybrid_override_pattern": "MEX*" * 22}, name="x", source="test")


# --------------------------------------------------------------------------- Mistral params.json

# mistralai/Mistral-Small-3.1-24B-Instruct-2503 params.json dimensions (text part)
MISTRAL_PARAMS = {
    "dim": 5120,
    "n_layers": 40,
    "head_dim": 128,
    "hidden_dim": 32768,
    "n_heads": 32,
    "n_kv_heads": 8,
    "rope_theta": 1000000000.0,
    "norm_eps": 1e-05,
    "vocab_size": 131072,
    "max_position_embeddings": 131072,
}


def test_mistral_params_json_folder(tmp_path):
    folder = tmp_path / "mistral"
    folder.mkdir()
    (folder / "params.json").write_text(json.dumps(MISTRAL_PARAMS))
    spec = spec_from_folder(folder)
    assert {g.kind: g.count for g in spec.layers} == {FULL: 40}
    assert spec.kv_bytes_per_token() == 40 * 8 * 128 * 2 * 2
    assert spec.max_len_limit == 131072
    assert 22e9 < spec.param_count < 25e9
    assert "params.json" in spec.source


def test_mistral_sliding_window_list_becomes_layer_kinds(tmp_path):
    params = {**MISTRAL_PARAMS, "n_layers": 4, "sliding_window": [4096, None]}
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "params.json").write_text(json.dumps(params))
    spec = spec_from_folder(folder)
    assert {g.kind: g.count for g in spec.layers} == {SLIDING: 2, FULL: 2}


# --------------------------------------------------------------------------- Gemma KV sharing


def test_gemma_kv_shared_layers_hold_no_cache_of_their_own():
    text = {
        "model_type": "gemma3n_text",
        "num_hidden_layers": 30,
        "num_kv_shared_layers": 10,
        "hidden_size": 2048,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "sliding_window": 512,
        "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 6,
        "vocab_size": 262144,
    }
    spec = spec_from_config(text, name="g", source="test")
    assert sum(g.count for g in spec.layers) == 20
    assert {g.kind: g.count for g in spec.layers} == {SLIDING: 16, FULL: 4}


# --------------------------------------------------------------------------- max-model-len limit


def test_rope_scaling_factor_raises_the_limit_unless_already_scaled():
    base = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256, "max_position_embeddings": 32768}
    assert spec_from_config(base, name="a", source="t").max_len_limit == 32768
    dynamic = {**base, "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}
    assert spec_from_config(dynamic, name="b", source="t").max_len_limit == 131072
    yarn = {**base, "rope_scaling": {"type": "yarn", "factor": 4.0}}
    assert spec_from_config(yarn, name="c", source="t").max_len_limit == 32768  # already scaled
    smaller = {**base, "max_seq_len": 8192}
    spec = spec_from_config(smaller, name="d", source="t")
    assert (spec.max_len_limit, spec.max_len_key) == (8192, "max_seq_len")


def test_fit_refuses_a_max_model_len_beyond_the_models_limit():
    spec = spec_from_config(SUPER, name="super", source="test", hf_quant=NVFP4)
    over = fit(
        parse_serve_command("vllm serve super --max-model-len 300000 --gpu-memory-utilization 0.85"), spec, dgx_spark()
    )
    assert over.verdict == "wont_start"
    assert any("longer than the model's own limit" in r and "262,144" in r for r in over.reasons)
    assert any(s.changes.get("max_model_len") == 262144 for s in over.suggestions)
    at = fit(
        parse_serve_command("vllm serve super --max-model-len 262144 --gpu-memory-utilization 0.85"), spec, dgx_spark()
    )
    assert not any("model's own limit" in r for r in at.reasons)


# --------------------------------------------------------------------------- drafters

EAGLE3_DRAFT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "num_hidden_layers": 1,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
    "max_position_embeddings": 2048,
    "torch_dtype": "float16",
}


def _folder(tmp_path: Path, name: str, config: dict) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_eagle3_drafter_adds_its_layers_and_weights(tmp_path):
    draft = _folder(tmp_path, "eagle3", EAGLE3_DRAFT)
    spec_json = json.dumps({"method": "eagle3", "model": draft, "num_speculative_tokens": 3})
    target = load_serving_spec("meta-llama/Llama-3.1-8B-Instruct")
    spec = load_serving_spec("meta-llama/Llama-3.1-8B-Instruct", spec_json)
    assert spec.drafter == "eagle3"
    assert [(g.kind, g.count, g.num_kv_heads, g.draft) for g in spec.mtp_layers] == [(FULL, 1, 8, True)]
    assert spec.mtp_weights_bytes > 0.5 * GiB
    config = parse_serve_command(
        ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192", "--speculative-config", spec_json]
    )
    with_draft = fit(config, spec, dgx_spark())
    without = fit(config.replace(speculative_config=None), target, dgx_spark())
    assert with_draft.weights_bytes == without.weights_bytes + spec.mtp_weights_bytes
    assert with_draft.kv_bytes_per_token == without.kv_bytes_per_token * 33 // 32  # 32 + 1 draft layers
    assert any("eagle3 drafter" in n for n in with_draft.notes)


def test_drafter_that_cannot_be_found_is_named(tmp_path):
    spec_json = json.dumps({"method": "dflash", "model": str(tmp_path / "missing"), "num_speculative_tokens": 8})
    with pytest.raises(UserError, match="--speculative-config model"):
        load_serving_spec("meta-llama/Llama-3.1-8B-Instruct", spec_json)


def test_mtp_needs_no_separate_model():
    spec = load_serving_spec("Qwen/Qwen3.5-35B-A3B", '{"method": "mtp", "num_speculative_tokens": 2}')
    assert spec.drafter == "" and spec.mtp_layers


@pytest.mark.parametrize("bad", ['{"num_speculative_tokens": 0}', '{"num_speculative_tokens": "x"}', "[1]", "{no"])
def test_bad_speculative_config_is_refused(bad):
    with pytest.raises(UserError, match="--speculative-config"):
        load_serving_spec("Qwen/Qwen3.5-35B-A3B", bad)


# --------------------------------------------------------------------------- sparse configs


def test_a_sparse_gemma3_config_gets_transformers_defaults():
    """google/gemma-3-12b-it's text_config names only its sizes; vocab, head_dim, the 5:1 sliding
    pattern and tied embeddings come from Gemma3TextConfig's defaults, as vLLM reads them."""
    config = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "text_config": {
            "hidden_size": 3840,
            "intermediate_size": 15360,
            "model_type": "gemma3_text",
            "num_attention_heads": 16,
            "num_hidden_layers": 48,
            "num_key_value_heads": 8,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024,
        },
        "torch_dtype": "bfloat16",
    }
    spec = spec_from_config(config, name="g3", source="test")
    assert {(g.kind, g.count, g.head_size) for g in spec.layers} == {(SLIDING, 40, 256), (FULL, 8, 256)}
    assert spec.vocab_size == 262208
    assert dict(spec.params_by_category)["lm_head"] == 0  # tied
    assert spec.max_len_limit == 131072  # Gemma 3's length is already scaled: no rope factor
    untied = spec_from_config(
        {**config, "text_config": {**config["text_config"], "tie_word_embeddings": False}}, name="u", source="t"
    )
    assert dict(untied.params_by_category)["lm_head"] == 262208 * 3840


# --------------------------------------------------------------------------- DeepSeek V3.2 indexer


def test_deepseek_v32_indexer_cache_rides_beside_the_mla_latent(fixtures):
    config = json.loads((fixtures / "model-configs" / "deepseek-ai__DeepSeek-V3.json").read_text())
    v32 = {**config, "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64}
    spec = spec_from_config(v32, name="v32", source="test")
    indexer = [g for g in spec.layers if g.elem_bytes]
    assert [(g.count, g.head_size, g.elem_bytes) for g in indexer] == [(61, 128 + 4, 1)]
    # uint8 whatever the KV dtype: 61 × 576 × 2 B latent + 61 × 132 B indexer keys per token
    assert spec.kv_bytes_per_token() == 61 * 576 * 2 + 61 * 132
    assert spec.kv_bytes_per_token(kv_bytes=1) == 61 * 576 + 61 * 132
    base = spec_from_config(config, name="v3", source="test")
    assert spec.param_count == base.param_count  # no second copy of the attention weights
    plan = plan_kv(spec, 2)
    assert len(plan.groups) == 1 and plan.bytes_per_block == 16 * (61 * 576 * 2 + 61 * 132)
    skipping = spec_from_config({**v32, "index_topk_freq": 4}, name="s", source="test")
    assert [g.count for g in skipping.layers if g.elem_bytes] == [16]  # layers 0, 1, 5, 9 … 57 (offset 2)


def test_an_estimated_eagle3_drafter_shares_the_targets_embedding(tmp_path):
    draft = load_serving_spec(
        "meta-llama/Llama-3.1-8B-Instruct",
        json.dumps({"method": "eagle3", "model": _folder(tmp_path, "e3", EAGLE3_DRAFT), "num_speculative_tokens": 3}),
    )
    own = spec_from_config(EAGLE3_DRAFT, name="e3", source="t")
    counts = dict(own.params_by_category)
    assert counts["lm_head"] == 32000 * 4096  # its own draft vocabulary
    assert draft.mtp_weights_bytes == own.weights_bytes - counts["embed"] * 2
    assert any("shared with the target" in n for n in draft.notes)


def test_dflash_drafter_layer_kinds_follow_vllms_rules():
    base = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "num_hidden_layers": 6,
        "hidden_size": 3072,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 248320,
        "sliding_window": 4096,
        "dflash_config": {"block_size": 16, "target_layer_ids": [1, 7, 14, 20, 26, 32]},
    }
    full = spec_from_config(base, name="d", source="t")
    assert {g.kind: g.count for g in full.layers} == {FULL: 6}  # no layer_types, no use_swa: full
    swa = spec_from_config(
        {**base, "dflash_config": {**base["dflash_config"], "use_swa": True, "swa_window_size": 2048}},
        name="s",
        source="t",
    )
    assert [(g.kind, g.count, g.sliding_window) for g in swa.layers] == [(SLIDING, 6, 2048)]
    mixed = spec_from_config({**base, "layer_types": ["sliding_attention", "full_attention"] * 3}, name="m", source="t")
    assert {g.kind: g.count for g in mixed.layers} == {SLIDING: 3, FULL: 3}


# --------------------------------------------------------------------------- tensor parallelism


def test_tensor_parallel_splits_weights_and_kv_per_rank():
    spec = load_serving_spec("meta-llama/Llama-3.1-70B-Instruct")
    one = fit(parse_serve_command("x --max-model-len 32768 --gpu-memory-utilization 0.8"), spec, dgx_spark())
    two = fit(parse_serve_command("x --max-model-len 32768 --gpu-memory-utilization 0.8 -tp 2"), spec, dgx_spark())
    rope = spec.rope_cache_bytes  # whole on each rank
    assert two.weights_bytes == (spec.weights_bytes - rope) // 2 + rope and one.weights_bytes == spec.weights_bytes
    assert two.kv_bytes_per_token * 2 == one.kv_bytes_per_token  # 8 KV heads: 4 per rank
    eight_heads_on_16 = fit(
        parse_serve_command("x --max-model-len 32768 --gpu-memory-utilization 0.8 -tp 16"), spec, dgx_spark()
    )
    assert eight_heads_on_16.kv_bytes_per_token == 80 * 1 * 128 * 2 * 2  # replicated: one head per rank
    mla = load_serving_spec("deepseek-ai/DeepSeek-V3")
    assert plan_kv(mla, 2, tp=2).kv_bytes_per_token == plan_kv(mla, 2).kv_bytes_per_token  # MLA latent not split


def test_real_nemotron_nvfp4_checkpoints_weigh_what_they_should(fixtures, tmp_path):
    from tests.core.test_modelspec import fixture_spec

    nano = fixture_spec(fixtures, "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4", tmp_path)
    # 6 of 23 Mamba layers and all 6 attention layers stay bf16 (exclude_modules names them)
    assert 17.5 * GiB < nano.weights_bytes < 18.5 * GiB  # vLLM loads the architecture in 18.03 GiB
    assert nano.checkpoint_kv_cache_dtype == "fp8"
    super_ = fixture_spec(fixtures, "nvidia__NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", tmp_path)
    # the published MIXED_PRECISION layout (FP8 Mamba and shared experts, bf16 attention and lm_head): 68.1 GiB
    # without the MTP layer; kubis.ai reads 69.5 GiB with it. All-NVFP4 (AIC's trimmed copy) was 64.0 GiB
    assert 67 * GiB < super_.weights_bytes < 69.5 * GiB
    assert {g.kind: g.count for g in super_.layers} == {MAMBA: 40, FULL: 8}


def test_an_exclusion_list_naming_single_layers_mixes_the_category():
    config = {**SUPER, "num_hidden_layers": 88}
    one_layer = {"quantization": {"quant_algo": "NVFP4", "exclude_modules": ["backbone.layers.0.mixer.in_proj"]}}
    every_layer = {"quantization": {"quant_algo": "NVFP4", "exclude_modules": ["backbone.layers.*.mixer.in_proj"]}}
    base = spec_from_config(config, name="a", source="t", hf_quant=NVFP4)
    one = spec_from_config(config, name="b", source="t", hf_quant=one_layer)
    every = spec_from_config(config, name="c", source="t", hf_quant=every_layer)
    mamba = dict(base.params_by_category)["mamba"]
    # only the in_proj is excluded, not the layer's out_proj: its share of the Mamba linear weights
    h, inner, conv_dim = 4096, 128 * 64, 128 * 64 + 2 * 8 * 128
    in_proj = h * (2 * inner + 2 * 8 * 128 + 128)
    share = in_proj / (in_proj + inner * h + conv_dim * 4)
    assert one.weights_bytes - base.weights_bytes == pytest.approx(mamba * share / 40 * (2 - 0.5625), rel=1e-6)
    assert every.weights_bytes - base.weights_bytes == pytest.approx(mamba * share * (2 - 0.5625), rel=1e-6)


# --- weights, each module weighed in the format its quantization config gives it (weight_format) ---

NANO = "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4"


def _fixture_json(fixtures: Path, stem: str) -> dict:
    return json.loads((fixtures / "model-configs" / f"{stem}.json").read_text())


def _mixed(layers: dict[str, str], exclude: list[str] | None = None) -> dict:
    q = {"quant_algo": "MIXED_PRECISION", "quantized_layers": {k: {"quant_algo": v} for k, v in layers.items()}}
    return {"quantization": {**q, "exclude_modules": exclude or []}}


def test_a_mixed_category_is_weighed_module_by_module():
    """Nemotron-3-Super's published layout (ModelOpt recipe super-nvfp4.yaml) puts only layers 1, 3
    and 5's latent projections in FP8; the other 37 stay bf16. Before, the whole category took the
    last format the map named."""
    blocks = SUPER["hybrid_override_pattern"]
    moe_layers = [i for i, c in enumerate(blocks) if c == "E"]
    layers = {f"backbone.layers.{i}.mixer.experts.0.up_proj": "NVFP4" for i in moe_layers}
    some = {**layers, **{f"backbone.layers.{i}.mixer.fc1_latent_proj": "FP8" for i in moe_layers[:3]}}
    some |= {f"backbone.layers.{i}.mixer.fc2_latent_proj": "FP8" for i in moe_layers[:3]}
    spec = spec_from_config(SUPER, name="s", source="t", hf_quant=_mixed(some))
    latent = dict(spec.params_by_category)["latent"]
    assert dict(spec.bytes_by_category)["latent"] == int(latent * (3 * 1 + 37 * 2) / 40)
    assert dict(spec.bytes_by_category)["experts"] == int(dict(spec.params_by_category)["experts"] * 0.5625)
    # modules the map does not name load unquantized: the attention and the Mamba projections
    assert dict(spec.bytes_by_category)["attn"] == 2 * dict(spec.params_by_category)["attn"]
    assert dict(spec.bytes_by_category)["mamba"] == 2 * dict(spec.params_by_category)["mamba"]


def test_excluding_one_projection_keeps_its_neighbours_quantized(fixtures):
    nano = _fixture_json(fixtures, NANO)
    hf = {"quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}}
    out_only = {
        "quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head", "backbone.layers.0.mixer.out_proj"]}
    }
    base = spec_from_config(nano, name="a", source="t", hf_quant=hf)
    one = spec_from_config(nano, name="b", source="t", hf_quant=out_only)
    h, inner = 2688, 64 * 64
    mamba_linear = dict(base.params_by_category)["mamba"]
    # the difference is layer 0's out_proj alone (inner × hidden), to within the Mamba norms' share
    assert one.weights_bytes - base.weights_bytes == pytest.approx(inner * h * (2 - 0.5625), rel=2e-3)
    assert one.weights_bytes - base.weights_bytes < mamba_linear / 23 * (2 - 0.5625) / 2


def test_gemma_weights_hold_one_rope_cache_per_distinct_rope(fixtures):
    # vLLM keeps a cos/sin cache of max_position × rotary width (bf16) per distinct rope, counted in
    # "Model loading took" (rotary_embedding/base.py; get_rope caches by its arguments). Gemma 4's
    # sliding layers rope head_dim 256; its full layers' "proportional" rope keeps the whole 512-wide
    # global head (gemma4_rope.py), where a default rope would keep head × partial_rotary_factor 0.25
    config = json.loads((fixtures / "model-configs" / "google__gemma-4-26B-A4B.json").read_text())
    text = config["text_config"]
    assert text["max_position_embeddings"] == 262_144
    assert text["rope_parameters"]["full_attention"]["rope_type"] == "proportional"
    proportional = spec_from_config(config, name="g4", source="fixture")
    text["rope_parameters"]["full_attention"]["rope_type"] = "default"
    default = spec_from_config(config, name="g4", source="fixture")
    assert proportional.weights_bytes - default.weights_bytes == 262_144 * (512 - 128) * 2
    # Gemma 3: the sliding layers' rope at rope_local_base_freq beside the global one, two caches of head_dim;
    # Gemma 2 has one rope for all its layers
    gemma3 = {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 1152,
        "intermediate_size": 6912, "num_attention_heads": 4, "num_key_value_heads": 1, "num_hidden_layers": 26,
        "head_dim": 256, "vocab_size": 262_144, "max_position_embeddings": 32_768, "sliding_window": 512,
        "rope_theta": 1_000_000, "rope_local_base_freq": 10_000, "torch_dtype": "bfloat16",
    }  # fmt: skip
    gemma2 = {**gemma3, "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2"}
    gemma2.pop("rope_local_base_freq")
    two = spec_from_config(gemma3, name="g3", source="test").weights_bytes
    one = spec_from_config(gemma2, name="g2", source="test").weights_bytes
    assert two - one == 32_768 * 256 * 2


def test_rope_caches_are_head_times_partial_rotary_factor_and_none_for_nemotron_h(fixtures):
    # get_rope's rotary_dim is head_size × partial_rotary_factor (rotary_embedding/__init__.py, read at
    # 0.13, 0.19.1, 0.21 and 0.32); Qwen3-Next keeps the factor at the top of its config (vLLM's
    # patch_rope_parameters moves it into rope_parameters): 0.25 of 256, not the whole head
    config = json.loads((fixtures / "model-configs" / "Qwen__Qwen3-Next-80B-A3B-Instruct.json").read_text())
    assert config["partial_rotary_factor"] == 0.25 and "mrope_section" not in json.dumps(config)
    partial = spec_from_config(config, name="q3n", source="fixture").weights_bytes
    whole = spec_from_config({**config, "partial_rotary_factor": 1.0}, name="q3n", source="fixture").weights_bytes
    assert whole - partial == 262_144 * (256 - 64) * 2
    # the same factor under an older name (rotary_pct) is read too
    pct = {k: v for k, v in config.items() if k != "partial_rotary_factor"} | {"rotary_pct": 0.25}
    assert spec_from_config(pct, name="q3n", source="fixture").weights_bytes == partial
    # vLLM's nemotron_h.py builds no rotary embedding at all: the positions change no weight
    nano = json.loads((fixtures / "model-configs" / "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4.json").read_text())
    short = {**nano, "max_position_embeddings": 4096}
    assert (
        spec_from_config(nano, name="n", source="f").weights_bytes
        == spec_from_config(short, name="n", source="f").weights_bytes
    )


def test_mrope_caches_four_times_the_positions_until_qwen3_5_keeps_one_at_0_32(fixtures):
    # MRotaryEmbedding caches max_position × 4 positions (mrope.py, every release to 0.31); 0.32's
    # Qwen3.5 / 3.6 and Qwen3-VL pass mrope_positions_factor(vllm_config): 1 without video pruning
    config = json.loads((fixtures / "model-configs" / "Qwen__Qwen3.6-35B-A3B.json").read_text())
    spec = spec_from_config(config, name="q36", source="fixture")
    assert spec.mrope_cache_bytes == 262_144 * 4 * 64 * 2
    m = dgx_spark()

    def weights(version: str, s=spec) -> int:
        config = ServeConfig(model="q36", max_model_len=8192, vllm_version=version)
        return fit(config, s, m).weights_bytes

    assert weights("0.31.0") - weights("0.32.0") == 262_144 * 3 * 64 * 2
    # a Qwen2-VL-style M-RoPE (model type outside those families) keeps × 4 at 0.32
    other = spec_from_config({**config, "text_config": {**config["text_config"], "model_type": "qwen2_vl_text"}},
                             name="q2vl", source="fixture")  # fmt: skip
    assert other.mrope_cache_bytes == 0 and weights("0.32.0", other) == weights("0.31.0", other)


def test_every_tensor_parallel_rank_holds_the_whole_rope_cache(fixtures):
    # the cos/sin cache is a buffer of the rotary module (rotary_embedding/base.py RotaryEmbedding.__init__
    # register_buffer, max_position × rotary_dim; get_rope never looks at the TP size): sharded weights
    # split across the ranks, the cache does not
    config = json.loads((fixtures / "model-configs" / "Qwen__Qwen3-Next-80B-A3B-Instruct.json").read_text())
    spec = spec_from_config(config, name="q3n", source="fixture")
    rope = 262_144 * 64 * 2  # max_position × head 256 × partial_rotary_factor 0.25, bf16
    assert spec.rope_cache_bytes == rope
    m = dgx_spark()

    def weights(tp: int, s=spec, version: str = "0.31.0") -> int:
        return fit(
            ServeConfig(model="q3n", max_model_len=8192, tensor_parallel_size=tp, vllm_version=version), s, m
        ).weights_bytes

    assert weights(1) == spec.weights_bytes  # one rank: everything, as before
    assert weights(2) == (spec.weights_bytes - rope) // 2 + rope
    assert weights(4) == (spec.weights_bytes - rope) // 4 + rope
    # Qwen3.6's M-RoPE cache at 0.32 (a quarter of the × 4 cache) is whole on each rank too
    q36 = spec_from_config(json.loads((fixtures / "model-configs" / "Qwen__Qwen3.6-35B-A3B.json").read_text()),
                           name="q36", source="fixture")  # fmt: skip
    kept = q36.rope_cache_bytes - q36.mrope_cache_bytes * 3 // 4
    assert weights(2, q36, "0.32.0") == (q36.weights_bytes - q36.rope_cache_bytes) // 2 + kept
    assert weights(1, q36, "0.32.0") == q36.weights_bytes - q36.mrope_cache_bytes * 3 // 4


def test_gemma4_k_eq_v_layers_hold_the_v_slot_vllm_allocates(fixtures):
    # vLLM's Gemma4Attention (gemma4.py, read in the 0.19.1, 0.20.0, 0.21.0 and 0.32.0 wheels) builds one
    # QKVParallelLinear with the layer's KV heads for every layer and loads k_proj into both the K and
    # the V slot of an attention_k_eq_v global layer: the V slot is allocated though the checkpoint has
    # no v_proj. vLLM 0.32's own build of Gemma-4-31B's text model on the meta device holds
    # 62,017,545,786 bytes of parameters and buffers (its rope caches included)
    config = json.loads((fixtures / "model-configs" / "nvidia__Gemma-4-31B-IT-NVFP4.json").read_text())
    config.pop("quantization_config")
    text = config["text_config"]
    assert text["attention_k_eq_v"] and text["layer_types"].count("full_attention") == 10
    shared = spec_from_config(config, name="g4", source="fixture")
    vision = dict(shared.params_by_category)["vision"] * 2
    assert shared.weights_bytes - vision == pytest.approx(62_017_545_786, rel=1e-4)
    # the other side: a checkpoint with its own v_proj in those layers loads into the same qkv_proj
    text["attention_k_eq_v"] = False
    assert spec_from_config(config, name="g4", source="fixture").weights_bytes == shared.weights_bytes
    # weights read from a checkpoint's safetensors headers lack the slot too: it is added to them
    text["attention_k_eq_v"] = True
    read = spec_from_config(config, name="g4", source="fixture", weights=(10 * GiB, 0, "headers"))
    text["attention_k_eq_v"] = False
    plain = spec_from_config(config, name="g4", source="fixture", weights=(10 * GiB, 0, "headers"))
    assert read.weights_bytes - plain.weights_bytes == 10 * 5376 * 4 * 512 * 2


def test_gemma4_per_layer_embeddings_and_kv_shared_layers_are_weights(fixtures):
    # Gemma-4-E4B: vLLM's gemma4.py builds the per-layer embedding table (vocab_size_per_layer_input ×
    # layers × hidden_size_per_layer_input), the model's projection to it and each layer's gate and
    # projection back (Gemma4Model, Gemma4DecoderLayer: 0.19.1, 0.21.0, 0.32.0), and q_proj / o_proj in
    # the 18 layers that read an earlier layer's KV. vLLM 0.32's own build of its text model on the meta
    # device holds 15,127,354,108 bytes of parameters and buffers (its log on a dev build: 14.28 GiB)
    config = json.loads((fixtures / "model-configs" / "google__gemma-4-E4B-it.json").read_text())
    text = config["text_config"]
    assert (text["hidden_size_per_layer_input"], text["num_kv_shared_layers"]) == (256, 18)
    e4b = spec_from_config(config, name="e4b", source="fixture")
    vision = dict(e4b.params_by_category)["vision"] * 2
    assert e4b.weights_bytes - vision == pytest.approx(15_127_354_108, rel=1e-4)
    # the other side: without per-layer inputs the model has neither the table nor its projections
    text["hidden_size_per_layer_input"] = 0
    plain = spec_from_config(config, name="e4b", source="fixture")
    table, linear, norms = 262_144 * 42 * 256, 2560 * 42 * 256 * 3, 256 + 42 * 2560
    assert e4b.weights_bytes - plain.weights_bytes == (table + linear + norms) * 2
    assert "per_layer_embed" not in {c for c, n in plain.params_by_category if n}
    # decode reads the projections every step, the table one row per token (speed.footprint)
    assert footprint(e4b).dense_bytes - footprint(plain).dense_bytes == (linear + norms) * 2


def test_a_per_layer_embedding_table_is_not_read_whole_per_token():
    # decode gathers one row of it per token, as of the token embedding: a checkpoint's
    # embed_tokens_per_layer is not the (tied) embedding that doubles as the lm_head
    assert tensor_category("model.language_model.embed_tokens_per_layer.weight") == "per_layer_embed"
    assert tensor_category("model.language_model.embed_tokens.weight") == "embed"
