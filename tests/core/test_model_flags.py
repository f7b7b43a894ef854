"""Flags a model's family needs: proposed with a reason, applied only when accepted."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from sparktui.core.config import ServeConfig
from sparktui.core.model_flags import suggest_flags
from sparktui.core.modelspec import load_model_spec, spec_from_catalog

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "model-configs"


def flags_of(model, **config):
    spec = load_model_spec(model)
    return {f.flag: f for f in suggest_flags(spec, ServeConfig(model=model, **config))}


@pytest.mark.parametrize(
    "model, reasoning, tools",
    [
        ("nvidia/Qwen3.5-122B-A10B-NVFP4", "qwen3", "qwen3_coder"),
        ("Qwen/Qwen3-32B", "qwen3", "hermes"),
        ("Qwen/Qwen3-Next-80B-A3B-Thinking", "qwen3", "hermes"),
        ("Qwen/Qwen3-Next-80B-A3B-Instruct", None, "hermes"),  # does not think
        ("openai/gpt-oss-20b", "openai_gptoss", "openai"),
        ("deepseek-ai/DeepSeek-R1", "deepseek_r1", None),
        ("meta-llama/Llama-3.3-70B-Instruct", None, "llama3_json"),
        ("mistralai/Mixtral-8x7B-v0.1", None, "mistral"),
    ],
)
def test_parsers_by_family(model, reasoning, tools):
    flags = flags_of(model, max_model_len=4096)
    assert (flags["--reasoning-parser"].value if "--reasoning-parser" in flags else None) == reasoning
    assert (flags["--tool-call-parser"].value if "--tool-call-parser" in flags else None) == tools
    assert ("--enable-auto-tool-choice" in flags) == (tools is not None)
    assert all(f.why for f in flags.values())


def test_flags_already_given_are_not_proposed_again():
    flags = flags_of(
        "Qwen/Qwen3-32B", max_model_len=4096, extra_args=["--reasoning-parser", "deepseek_r1", "--tool-call-parser=x"]
    )
    assert "--reasoning-parser" not in flags and "--tool-call-parser" not in flags


def test_the_models_own_context_limit():
    spec = load_model_spec("Qwen/Qwen3-32B")
    limit = spec.max_len_limit or spec.max_position_embeddings
    unset = {f.flag: f for f in suggest_flags(spec, ServeConfig(model="Qwen/Qwen3-32B"))}
    assert unset["--max-model-len"].value == str(limit)
    too_long = {f.flag: f for f in suggest_flags(spec, ServeConfig(model="m", max_model_len=limit * 4))}
    assert "refuses" in too_long["--max-model-len"].why
    within = {f.flag for f in suggest_flags(spec, ServeConfig(model="m", max_model_len=limit // 2))}
    assert "--max-model-len" not in within


def test_fp8_kv_only_where_the_checkpoint_carries_scales():
    # vLLM 0.13 serves a ModelOpt checkpoint's KV in the model dtype unless told: the flag halves it
    old = flags_of("nvidia/Qwen3-32B-NVFP4", max_model_len=4096, vllm_version="0.13.0")
    assert old["--kv-cache-dtype"].value == "fp8"
    assert "--kv-cache-dtype" not in flags_of("Qwen/Qwen3-32B", max_model_len=4096)
    assert "--kv-cache-dtype" not in flags_of("nvidia/Qwen3-32B-NVFP4", max_model_len=4096, kv_cache_dtype="bfloat16")


def test_no_fp8_kv_suggestion_where_auto_already_takes_the_checkpoints_fp8():
    # from vLLM 0.14 --kv-cache-dtype auto follows the ModelOpt config's kv_cache_quant_algo (FP8):
    # the KV cache is already fp8, so "fp8 halves the KV cache" would be false
    for version in ("0.14.0", "0.20.1", None):
        assert "--kv-cache-dtype" not in flags_of("nvidia/Qwen3-32B-NVFP4", max_model_len=4096, vllm_version=version)


def test_trust_remote_code_when_the_config_maps_its_own_classes():
    spec = load_model_spec("Qwen/Qwen3-32B")
    assert "--trust-remote-code" not in {f.flag for f in suggest_flags(spec, None)}
    remote = replace(spec, remote_code=True, config_model_type="acme_lm")
    (flag,) = [f for f in suggest_flags(remote, ServeConfig(model="m")) if f.flag == "--trust-remote-code"]
    assert "auto_map" in flag.why and "acme_lm" in flag.why and "as you" in flag.why
    assert not [f for f in suggest_flags(remote, ServeConfig(model="m", trust_remote_code=True)) if f.flag == flag.flag]


def nemotron_h_folder(folder, **changes):
    """A folder holding the real config.json of an NVIDIA Nemotron-H checkpoint (it carries auto_map)."""
    config = json.loads((FIXTURES / "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4.json").read_text())
    assert config["model_type"] == "nemotron_h" and config["auto_map"]
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    return str(folder)


@pytest.mark.parametrize("version", [None, "0.19.1", "0.21.0", "0.32.0"])
def test_no_trust_remote_code_where_vllm_reads_the_config_itself(tmp_path, version):
    # vLLM's get_config loaded this config with trust_remote_code=False at 0.19.1, 0.21.0 and
    # 0.32.0 (transformers' NemotronHConfig): the flag would only run the repo's code for nothing
    assert "--trust-remote-code" not in flags_of(nemotron_h_folder(tmp_path), vllm_version=version)


def test_trust_remote_code_where_that_vllm_refused_the_model_type(tmp_path):
    # vLLM 0.13.0 (transformers 4.57.6) refused nemotron_h without the flag
    flag = flags_of(nemotron_h_folder(tmp_path), vllm_version="0.13.0")["--trust-remote-code"]
    assert "nemotron_h" in flag.why and "0.13.0" in flag.why


@pytest.mark.parametrize("version", [None, "0.13.0", "0.32.0"])
def test_trust_remote_code_for_an_unknown_model_type_with_auto_map(tmp_path, version):
    # a model_type neither transformers nor vLLM knows: vLLM refuses to load it without the flag
    folder = nemotron_h_folder(tmp_path, model_type="acme_hybrid")
    assert "acme_hybrid" in flags_of(folder, vllm_version=version)["--trust-remote-code"].why


@pytest.mark.parametrize(
    "name, model_type",
    [("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4", "nemotron_h"), ("deepseek-ai/DeepSeek-V3", "deepseek_v3")],
)
def test_a_catalog_name_keeps_its_auto_map(name, model_type):
    # the built-in catalog once dropped auto_map: by catalog name the flag was never suggested,
    # though vLLM 0.10.2 refuses both types without it (vllm_native_configs)
    spec = spec_from_catalog(name)
    assert spec is not None and spec.remote_code and spec.config_model_type == model_type
    flags = {f.flag: f for f in suggest_flags(spec, ServeConfig(model=name, vllm_version="0.10.2"))}
    assert model_type in flags["--trust-remote-code"].why
    newest = {f.flag for f in suggest_flags(spec, ServeConfig(model=name, vllm_version="0.32.0"))}
    assert "--trust-remote-code" not in newest


def test_a_suggestion_changes_the_config_only_when_applied():
    config = ServeConfig(model="Qwen/Qwen3-32B")
    flags = {f.flag: f for f in suggest_flags(load_model_spec("Qwen/Qwen3-32B"), config)}
    assert config.extra_args == [] and config.max_model_len is None  # nothing silently set
    applied = flags["--reasoning-parser"].apply(config)
    assert applied.extra_args == ["--reasoning-parser", "qwen3"]
    assert flags["--reasoning-parser"].apply(applied).extra_args == applied.extra_args  # once only
    assert flags["--max-model-len"].apply(config).max_model_len == int(flags["--max-model-len"].value)
