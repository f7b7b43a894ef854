"""Model specs from real configs: layer kinds, KV bytes per token, weight bytes, lookup, errors."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from sparktui.core.modelspec import (
    FULL,
    MAMBA,
    MLA,
    SLIDING,
    catalog_names,
    load_model_spec,
    spec_from_catalog,
    spec_from_config,
    spec_from_folder,
)
from sparktui.errors import UserError

GiB = 1024**3


def fixture_spec(fixtures: Path, stem: str, tmp_path: Path):
    """A spec read the way a user's model folder is read: config.json (+ hf_quant_config.json)."""
    folder = tmp_path / stem
    folder.mkdir(parents=True)
    configs = fixtures / "model-configs"
    shutil.copy(configs / f"{stem}.json", folder / "config.json")
    quant = configs / f"{stem}__hf_quant_config.json"
    if quant.exists():
        shutil.copy(quant, folder / "hf_quant_config.json")
    return spec_from_folder(folder)


def kinds(spec) -> dict[str, int]:
    out: dict[str, int] = {}
    for g in spec.layers:
        out[g.kind] = out.get(g.kind, 0) + g.count
    return out


# --------------------------------------------------------------------------- the KV formula


def test_gqa_70b_is_320_kib_per_token_as_the_seed_formula_says(fixtures, tmp_path):
    spec = fixture_spec(fixtures, "meta-llama__Llama-3.3-70B-Instruct", tmp_path)
    # 80 layers × 8 KV heads × 128 head_dim × 2 bytes × 2 (K and V)
    assert spec.kv_bytes_per_token() == 80 * 8 * 128 * 2 * 2 == 320 * 1024
    assert spec.kv_bytes_per_token(kv_bytes=1) == 160 * 1024  # fp8 KV: 1 byte
    assert 4096 * spec.kv_bytes_per_token() == 1.25 * GiB


def test_the_seed_table_disagrees_with_its_own_formula(fixtures, tmp_path):
    """The seed page's table gives 5.2 GB of KV for a 4K context on a 70B model; its own formula
    with the real GQA config gives 1.25 GiB: the table assumed about four times the KV heads."""
    spec = fixture_spec(fixtures, "meta-llama__Llama-3.3-70B-Instruct", tmp_path)
    seed_table_4k = 5.2e9
    ours_4k = 4096 * spec.kv_bytes_per_token()
    assert ours_4k == 1_342_177_280
    assert 3.8 < seed_table_4k / ours_4k < 4.0  # ≈ 32 KV heads instead of 8
    per_token_in_table = seed_table_4k / 4096
    assert round(per_token_in_table / (80 * 128 * 2 * 2)) == 31  # heads the table implies


def test_head_dim_comes_from_the_config_not_hidden_over_heads(fixtures, tmp_path):
    spec = fixture_spec(fixtures, "Qwen__Qwen3-32B", tmp_path)
    assert 5120 // 64 == 80  # what a blind derivation would use
    (group,) = spec.layers
    assert group.head_size == 128
    assert spec.kv_bytes_per_token() == 64 * 8 * 128 * 2 * 2

    gpt = fixture_spec(fixtures, "openai__gpt-oss-120b", tmp_path)
    assert {g.head_size for g in gpt.layers} == {64}  # hidden 2880 / 64 heads would be 45


# --------------------------------------------------------------------------- every layer kind


def test_full_attention_only(fixtures, tmp_path):
    spec = fixture_spec(fixtures, "meta-llama__Meta-Llama-3.1-8B", tmp_path)
    assert kinds(spec) == {FULL: 32}
    assert spec.kv_bytes_per_token() == 131072  # 128 KiB, as vllm-cases c01 derives


def test_sliding_window_per_layer_pattern_gpt_oss(fixtures, tmp_path):
    spec = fixture_spec(fixtures, "openai__gpt-oss-120b", tmp_path)
    assert kinds(spec) == {SLIDING: 18, FULL: 18}
    (sliding,) = [g for g in spec.layers if g.kind == SLIDING]
    assert sliding.sliding_window == 128 and sliding.num_kv_heads == 8


def test_sliding_window_with_own_global_geometry_gemma4(fixtures, tmp_path):
    spec = fixture_spec(fixtures, "google__gemma-4-26B-A4B", tmp_path)
    assert kinds(spec) == {SLIDING: 25, FULL: 5}
    full = next(g for g in spec.layers if g.kind == FULL)
    sliding = next(g for g in spec.layers if g.kind == SLIDING)
    assert (full.num_kv_heads, full.head_size) == (2, 512)  # num_global_key_value_heads, global_head_dim
    assert (sliding.num_kv_heads, sliding.head_size, sliding.sliding_window) == (8, 256, 1024)


def test_sliding_and_full_layers_with_their_own_heads_and_a_narrower_v_mimo_v2(fixtures, tmp_path):
    """MiMo-V2-Flash (outside the catalog): hybrid_layer_pattern marks the sliding layers, which have
    swa_num_key_value_heads × swa_head_dim (V swa_v_head_dim); the full ones num_key_value_heads ×
    head_dim (V v_head_dim), as vLLM's mimo_v2.py builds them. Read as a plain sliding model, every
    layer was sliding with 4 heads of 192 for K and V."""
    spec = fixture_spec(fixtures, "unseen/XiaomiMiMo__MiMo-V2-Flash", tmp_path)
    assert kinds(spec) == {SLIDING: 39, FULL: 9}
    full = next(g for g in spec.layers if g.kind == FULL)
    sliding = next(g for g in spec.layers if g.kind == SLIDING)
    assert (full.num_kv_heads, full.head_size, full.head_size_v) == (4, 192, 128)
    assert (sliding.num_kv_heads, sliding.head_size, sliding.head_size_v, sliding.sliding_window) == (8, 192, 128, 128)
    assert spec.kv_bytes_per_token() == (9 * 4 + 39 * 8) * (192 + 128) * 2


def test_nas_pruned_llama_layers_from_block_configs(fixtures, tmp_path):
    """Llama-3.3-Nemotron-Super-49B (DeciLM, outside the catalog): num_key_value_heads and
    intermediate_size are null; each block_configs entry gives its layer's attention (none when
    attention.no_op, else num_attention_heads // n_heads_in_group KV heads) and MLP width (ffn_mult →
    int(2 × ffn_mult × hidden / 3) rounded up to 256), as vLLM's nemotron_nas.py builds them. Read as a
    Llama, it was 80 layers × 64 KV heads (13× the KV per token) and no MLP weights (44 GiB of 93)."""
    spec = fixture_spec(fixtures, "unseen/nvidia__Llama-3_3-Nemotron-Super-49B-v1", tmp_path)
    assert [(g.kind, g.count, g.num_kv_heads, g.head_size) for g in spec.layers] == [(FULL, 49, 8, 128)]
    assert spec.kv_bytes_per_token() == 49 * 8 * 128 * 2 * 2
    assert spec.intermediate_size == 28672  # the widest MLP (ffn_mult 5.25 over hidden 8192)
    assert 49e9 < spec.param_count < 50.5e9  # the "49B" of its name (read as a Llama: 23.6 B)


def test_an_architecture_not_checked_against_vllm_is_said(fixtures, tmp_path):
    """Step-3.7-Flash (no vLLM up to 0.32 knows it): read as a generic decoder, and the fit says so,
    naming the architecture; a checked one (Qwen3, outside the catalog too) has no such note."""
    step = fixture_spec(fixtures, "unseen/stepfun-ai__Step-3.7-Flash", tmp_path)
    assert [
        n for n in step.notes if n.startswith("Step3p7FlashForCausalLM: this architecture's layers are not checked")
    ]
    assert kinds(step) == {FULL: 12, SLIDING: 33}  # what it can still say: the layers its config lists
    qwen = fixture_spec(fixtures, "unseen/Qwen__Qwen3-8B", tmp_path)
    assert not [n for n in qwen.notes if "not checked" in n]
    # the popular decoders checked on configs in their own fields (tests/support/architecture_configs.py)
    from tests.support.architecture_configs import CONFIGS

    for name, config in CONFIGS.items():
        spec = spec_from_config(config, name=name, source="test")
        assert not [n for n in spec.notes if "not checked" in n], name


def test_mamba2_fields_of_granite_4_h_and_falcon_h1():
    """Granite-4.0-H lists 'mamba' layers in layer_types with mamba_n_heads / mamba_d_head /
    mamba_d_state (before: refused, "missing linear_num_key_heads"); Falcon-H1 runs attention and a
    Mamba2 mixer in every layer (before: read as attention only, no state). The Mamba2 state as vLLM's
    MambaStateShapeCalculator.mamba2_state_shape sizes it over mamba_d_ssm, else mamba_expand × hidden."""
    from tests.support.architecture_configs import FALCON_H1, GRANITE_4_H

    granite = spec_from_config(GRANITE_4_H, name="granite", source="test")
    assert kinds(granite) == {MAMBA: 36, FULL: 4}
    (state,) = [g for g in granite.layers if g.kind == MAMBA]
    assert (state.conv_dim, state.value_heads, state.head_v, state.head_k) == (2 * 4096 + 2 * 128, 128, 64, 128)
    assert state.state_bytes(2) == (3 * 8448 + 128 * 64 * 128) * 2  # conv + SSM state, in bf16
    falcon = spec_from_config(FALCON_H1, name="falcon", source="test")
    assert kinds(falcon) == {FULL: 36, MAMBA: 36}
    (state,) = [g for g in falcon.layers if g.kind == MAMBA]
    assert state.conv_dim == 1536 + 2 * 128  # mamba_d_ssm
    assert falcon.kv_bytes_per_token() == 36 * 2 * 64 * 2 * 2
    # linear layers with neither Gated-DeltaNet nor Mamba2 fields: refused, saying what is missing
    bare = {**GRANITE_4_H, "mamba_n_heads": None}
    with pytest.raises(UserError, match=r"granitemoehybrid: layer_types lists linear or Mamba layers.*not modelled"):
        spec_from_config(bare, name="bare", source="test")


def test_falcon_h1_without_mamba_d_ssm_takes_its_config_class_default():
    """vLLM reads a Falcon-H1 config through transformers' FalconH1Config, whose mamba_d_ssm is 1024 when the
    key is absent; only an explicit null means mamba_expand × hidden_size (falcon_h1.py). Before: an absent
    key was read as 2 × 1024 = 2048 wide (conv 2304 against vLLM's 1280). tests/core/test_fit_vs_vllm.py asks
    vLLM 0.32 about both."""
    from tests.support.architecture_configs import FALCON_H1

    def conv_dim(config):
        (state,) = [g for g in spec_from_config(config, name="falcon", source="test").layers if g.kind == MAMBA]
        return state.conv_dim

    absent = {k: v for k, v in FALCON_H1.items() if k != "mamba_d_ssm"} | {"mamba_n_heads": 16}
    assert conv_dim(absent) == 1024 + 2 * 128
    assert conv_dim({**FALCON_H1, "mamba_d_ssm": None, "mamba_n_heads": 32}) == 2 * 1024 + 2 * 128
    assert conv_dim(FALCON_H1) == 1536 + 2 * 128


def test_qwen2_sliding_window_is_off_unless_use_sliding_window(fixtures, tmp_path):
    spec = fixture_spec(fixtures, "Qwen__Qwen2.5-7B", tmp_path)
    assert kinds(spec) == {FULL: 28}


def test_mla_holds_one_latent_per_token(fixtures, tmp_path):
    spec = fixture_spec(fixtures, "deepseek-ai__DeepSeek-V3", tmp_path)
    assert kinds(spec) == {MLA: 61}
    (mla,) = spec.layers
    assert mla.head_size == 512 + 64 and mla.head_size_v == 0  # kv_lora_rank + qk_rope_head_dim
    assert spec.kv_bytes_per_token() == 61 * 576 * 2
    assert [(g.kind, g.count, g.draft) for g in spec.mtp_layers] == [(MLA, 1, True)]  # num_nextn_predict_layers


def test_linear_attention_from_layer_types(fixtures, tmp_path):
    spec = fixture_spec(fixtures, "Qwen__Qwen3.5-35B-A3B", tmp_path)  # text_config nesting
    assert kinds(spec) == {MAMBA: 30, FULL: 10}
    mamba = next(g for g in spec.layers if g.kind == MAMBA)
    # conv state (16×128×2 + 32×128) × 3 in bf16 + recurrent 32×128×128 in float32 (mamba_ssm_dtype)
    assert mamba.state_bytes(2) == 8192 * 3 * 2 + 32 * 128 * 128 * 4
    assert mamba.kv_bytes_per_token(2) == 0  # a fixed state per sequence, not per token
    assert spec.kv_bytes_per_token() == 10 * 2 * 256 * 2 * 2
    assert [(g.kind, g.count) for g in spec.mtp_layers] == [(FULL, 1)]  # mtp_num_hidden_layers


def test_linear_attention_from_full_attention_interval(fixtures, tmp_path):
    spec = fixture_spec(fixtures, "Qwen__Qwen3-Next-80B-A3B-Thinking", tmp_path)  # no layer_types key
    assert kinds(spec) == {MAMBA: 36, FULL: 12}
    mamba = next(g for g in spec.layers if g.kind == MAMBA)
    assert mamba.ssm_dtype is None  # no mamba_ssm_dtype: the model dtype
    assert mamba.state_bytes(2) == 8192 * 3 * 2 + 32 * 128 * 128 * 2


def test_catalog_is_generated_from_the_fixtures(fixtures, tmp_path):
    """The packaged catalog must say what the fixture configs say (regenerate with
    bench/make_model_catalog.py when they change)."""
    stems = [p.stem for p in (fixtures / "model-configs").glob("*.json") if "__hf_quant_config" not in p.stem]
    assert len(catalog_names()) == len(stems)
    for stem in stems:
        from_folder = fixture_spec(fixtures, stem, tmp_path)
        from_catalog = spec_from_catalog(stem.replace("__", "/", 1))
        assert from_catalog is not None, stem
        assert from_catalog.layers == from_folder.layers, stem
        assert from_catalog.param_count == from_folder.param_count, stem
        assert from_catalog.quantization == from_folder.quantization, stem
        assert from_catalog.checkpoint_kv_cache_dtype == from_folder.checkpoint_kv_cache_dtype, stem
        assert from_catalog.remote_code == from_folder.remote_code, stem  # auto_map: --trust-remote-code


# --------------------------------------------------------------------------- weights


def test_unquantized_weights_from_parameter_count_match_the_published_total(fixtures, tmp_path):
    spec = fixture_spec(fixtures, "meta-llama__Meta-Llama-3.1-8B", tmp_path)
    assert spec.weights_source.startswith("estimated")
    rope_cache = 131072 * 128 * 2
    assert spec.weights_bytes - rope_cache == 16_060_522_496  # model.safetensors.index.json total_size
    spec70 = fixture_spec(fixtures, "meta-llama__Llama-3.3-70B-Instruct", tmp_path)
    assert abs(spec70.weights_bytes - rope_cache - 141_107_412_992) < 0.001 * 141_107_412_992


@pytest.mark.parametrize(
    ("stem", "quant", "low_gib", "high_gib"),
    [
        ("nvidia__Llama-3.1-70B-Instruct-FP8", "fp8", 66, 69),  # ~1 byte/param, embeddings in bf16
        ("nvidia__Qwen3-30B-A3B-NVFP4", "nvfp4", 15.5, 18),  # 4-bit + fp8 scale per 16
        ("nvidia__Qwen3.5-122B-A10B-NVFP4", "nvfp4", 66, 80),
        ("nvidia__Qwen3.6-35B-A3B-NVFP4", "mixed", 18, 23),  # FP8 attention, NVFP4 experts
        ("LDCC__Qwen2.5-72B-Instruct-ko-AWQ", "awq int4", 37, 41),  # int4 + fp16 scales per 128
        ("openai__gpt-oss-20b", "mxfp4", 13, 14.5),  # MXFP4 experts, bf16 attention
    ],
)
def test_quantized_weights(fixtures, tmp_path, stem, quant, low_gib, high_gib):
    spec = fixture_spec(fixtures, stem, tmp_path)
    assert spec.quantization.startswith(quant)
    assert low_gib * GiB < spec.weights_bytes < high_gib * GiB
    plain = spec.param_count * 2
    assert spec.weights_bytes < 0.6 * plain


def test_checkpoint_kv_cache_quantization_is_read(fixtures, tmp_path):
    assert fixture_spec(fixtures, "nvidia__Qwen3-32B-NVFP4", tmp_path).checkpoint_kv_cache_dtype == "fp8"
    assert fixture_spec(fixtures, "Qwen__Qwen3-32B", tmp_path).checkpoint_kv_cache_dtype is None


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> int:
    sizes = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:  # the data as a hole: only the header is ever read
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)
    return offset


def test_exact_weight_bytes_from_safetensors_headers(fixtures, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(fixtures / "model-configs" / "Qwen__Qwen3.5-35B-A3B.json", folder / "config.json")
    main = write_safetensors(
        folder / "model-00001-of-00002.safetensors", {"model.layers.0.mlp.up_proj.weight": ("BF16", [64, 32])}
    )
    second = write_safetensors(
        folder / "model-00002-of-00002.safetensors",
        {"model.embed_tokens.weight": ("BF16", [100, 32]), "mtp.layers.0.mlp.up_proj.weight": ("BF16", [10, 10])},
    )
    spec = spec_from_folder(folder)
    rope_cache = 262144 * 256 * 2
    assert spec.weights_bytes - rope_cache == main + second - 200  # MTP tensors counted apart
    assert spec.mtp_weights_bytes == 200
    assert "safetensors headers (2 files)" in spec.weights_source


def test_per_layer_bytes_are_read_from_the_safetensors_dtypes(fixtures, tmp_path):
    """A checkpoint whose config says nothing of quantization but stores its MLP as packed 4-bit
    (U8, two weights a byte, with F8_E4M3 scales per 16) and its attention in BF16: each category's
    bytes are what the headers store, and the speed estimate reads those."""
    from sparktui.core import speed as sp

    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(fixtures / "model-configs" / "meta-llama__Meta-Llama-3.1-8B.json", folder / "config.json")
    plain = spec_from_folder(folder)  # no shards: bytes from the config, all bf16
    mlp = 3 * 4096 * 14336  # gate, up, down per layer
    tensors = {}
    for i in range(32):
        p = f"model.layers.{i}.mlp."
        for proj in ("gate_proj", "up_proj", "down_proj"):
            tensors[p + proj + ".weight"] = ("U8", [14336, 2048] if proj != "down_proj" else [4096, 7168])
            tensors[p + proj + ".weight_scale"] = ("F8_E4M3", [14336, 256] if proj != "down_proj" else [4096, 896])
        tensors[f"model.layers.{i}.self_attn.q_proj.weight"] = ("BF16", [4096, 4096])
    write_safetensors(folder / "model.safetensors", tensors)
    spec = spec_from_folder(folder)
    stored = dict(spec.bytes_by_category)
    assert stored["mlp"] == 32 * mlp * (0.5 + 1 / 16)  # 4-bit + an fp8 scale per 16 weights
    assert stored["attn"] == 32 * 4096 * 4096 * 2
    assert dict(plain.bytes_by_category)["mlp"] == 32 * mlp * 2
    assert any("safetensors headers" in n and "mlp F8_E4M3+U8" in n for n in spec.notes)
    saved = (dict(plain.bytes_by_category)["mlp"] - stored["mlp"]) + (
        dict(plain.bytes_by_category)["attn"] - stored["attn"]
    )
    before = sp.estimate(plain, sp.GB10).weight_bytes_per_token
    assert before - sp.estimate(spec, sp.GB10).weight_bytes_per_token == pytest.approx(saved)


def test_weight_bytes_from_the_index_when_no_shards(fixtures, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(fixtures / "model-configs" / "meta-llama__Meta-Llama-3.1-8B.json", folder / "config.json")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 16060522496}}))
    spec = spec_from_folder(folder)
    assert spec.weights_bytes == 16060522496 + 131072 * 128 * 2
    assert "index" in spec.weights_source


def test_not_a_safetensors_file(fixtures, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(fixtures / "model-configs" / "meta-llama__Meta-Llama-3.1-8B.json", folder / "config.json")
    (folder / "model.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(UserError, match="not a safetensors file"):
        spec_from_folder(folder)


# --------------------------------------------------------------------------- lookup and errors


def test_repo_id_from_the_local_hugging_face_cache(fixtures, tmp_path):
    hub = tmp_path / "hf" / "hub" / "models--acme--tiny" / "snapshots" / "abc123"
    hub.mkdir(parents=True)
    shutil.copy(fixtures / "model-configs" / "Qwen__Qwen3-32B.json", hub / "config.json")
    refs = tmp_path / "hf" / "hub" / "models--acme--tiny" / "refs"
    refs.mkdir()
    (refs / "main").write_text("abc123")
    spec = load_model_spec("acme/tiny", env={"HF_HOME": str(tmp_path / "hf"), "HOME": str(tmp_path)})
    assert spec.name == "acme/tiny"
    assert "Hugging Face cache" in spec.source and "abc123" in spec.source
    assert spec.kv_bytes_per_token() == 262144


def test_catalog_by_repo_id_alias_and_short_name():
    assert load_model_spec("meta-llama/Llama-3.1-8B-Instruct").name == "meta-llama/Meta-Llama-3.1-8B"
    assert load_model_spec("gpt-oss-120b").name == "openai/gpt-oss-120b"
    assert load_model_spec("openai/GPT-OSS-120B").source == "built-in catalog"


def test_spec_is_cached():
    assert load_model_spec("Qwen/Qwen3-32B") is load_model_spec("Qwen/Qwen3-32B")


def test_unknown_model_says_where_it_looked_and_how_to_fix(tmp_path):
    with pytest.raises(UserError) as info:
        load_model_spec("acme/no-such-model", env={"HF_HUB_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)})
    msg = str(info.value)
    assert "'acme/no-such-model'" in msg
    assert str(tmp_path / "cache") in msg  # where it looked
    assert "catalog" in msg and "folder" in msg and "huggingface-cli download acme/no-such-model" in msg


def test_missing_folder_and_bad_config(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_model_spec(str(tmp_path / "nowhere"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match=r"has neither config\.json nor params\.json"):
        load_model_spec(str(empty))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text('{"model_type": "vit"}')
    with pytest.raises(UserError, match="num_hidden_layers"):
        load_model_spec(str(bad))
    (bad / "config.json").write_text("{not json")
    with pytest.raises(UserError, match=r"config.json: not valid JSON"):
        spec_from_folder(bad)


def test_config_without_head_dim_or_heads_is_refused():
    with pytest.raises(UserError, match="head_dim"):
        spec_from_config({"num_hidden_layers": 2, "hidden_size": 64}, name="x", source="test")
