"""`sparktui fit` with the models and command lines Spark owners use: a pasted recipe with every
flag, models fetched from a (loopback) Hub or refused offline, absurd input refused with exit 2."""

from __future__ import annotations

import json
import shlex

import pytest

from sparktui.cli import main
from tests.support.fake_hub import serve_fake_hub

# NVIDIA-Nemotron-3-Nano-30B-A3B's published dimensions (52 blocks: 23 Mamba2, 23 MoE, 6 attention)
NANO = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "num_hidden_layers": 52,
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "hidden_size": 2688,
    "intermediate_size": 1856,
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "mamba_num_heads": 64,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "n_routed_experts": 128,
    "num_experts_per_tok": 6,
    "moe_intermediate_size": 1856,
    "moe_shared_expert_intermediate_size": 3712,
    "n_shared_experts": 1,
    "vocab_size": 131072,
    "max_position_embeddings": 262144,
    "torch_dtype": "bfloat16",
}
HF_QUANT = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}

# A Spark recipe's command line as people paste it (flags from vLLM's Nemotron Nano recipe and
# DGX Spark guides): some modelled, the rest passed through.
RECIPE = (
    "vllm serve acme/Nemotron-Nano-NVFP4 --served-model-name model --host 0.0.0.0 --port 8000 "
    "--max-num-seqs 8 --tensor-parallel-size 1 --max-model-len 262144 --trust-remote-code "
    "--enable-auto-tool-choice --tool-call-parser qwen3_coder "
    "--reasoning-parser-plugin config/plugins/reasoning/nano_v3_reasoning_parser.py --reasoning-parser nano_v3 "
    "--kv-cache-dtype fp8 --mamba-ssm-cache-dtype float32 --gpu-memory-utilization 0.8 "
    "--max-num-batched-tokens 8192 --enable-prefix-caching --load-format fastsafetensors "
    '--attention-backend FLASHINFER --async-scheduling --compilation-config \'{"cudagraph_mode": "PIECEWISE"}\' '
    "--distributed-executor-backend mp"
)
MODELLED = ("max_model_len", "kv_cache_dtype")
NOT_MODELLED = (
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "--reasoning-parser-plugin",
    "--reasoning-parser",
    "--load-format",
    "--distributed-executor-backend",
)


@pytest.fixture
def hub(monkeypatch):
    with serve_fake_hub() as server:
        server.add("acme/Nemotron-Nano-NVFP4", "config.json", json.dumps(NANO).encode())
        server.add("acme/Nemotron-Nano-NVFP4", "hf_quant_config.json", json.dumps(HF_QUANT).encode())
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_HUB_OFFLINE")
        yield server


def test_a_pasted_spark_recipe_reads_what_it_models_and_lists_the_rest(capsys, hub):
    code = main(["fit", "--json", "--", *shlex.split(RECIPE)])
    out, err = capsys.readouterr()
    assert err == "" and code in (0, 1)
    d = json.loads(out)
    assert d["model"] == "acme/Nemotron-Nano-NVFP4"
    assert d["max_model_len"] == 262144
    assert d["kv_cache_dtype"] == "fp8"
    assert any("Mamba2 layers" in w and "float32" in w for w in d["kv_working"])
    note = next(n for n in d["notes"] if n.startswith("not modelled"))
    for flag in NOT_MODELLED:
        assert flag in note, flag
    for flag in (
        "--max-model-len",
        "--kv-cache-dtype",
        "--mamba-ssm-cache-dtype",
        "--max-num-seqs",
        "--async-scheduling",
        "--attention-backend",  # read for the CUDA-graph estimate
        "--compilation-config",
    ):
        assert flag not in note, flag
    # config and quant config only: nothing else was asked of the Hub beyond small files
    assert all(not r[1].endswith(".safetensors") or r[2] for r in hub.requests)


def test_offline_flag_asks_the_hub_nothing(capsys, hub):
    code = main(["fit", "--offline", "--model", "acme/Nemotron-Nano-NVFP4"])
    _, err = capsys.readouterr()
    assert code == 2 and hub.requests == []
    assert "offline" in err and "acme/Nemotron-Nano-NVFP4" in err


def test_mamba_ssm_cache_dtype_changes_the_fit(capsys, hub):
    def tokens(dtype: str) -> int:
        main(["fit", "--json", "--", *shlex.split(RECIPE.replace("float32", dtype))])
        return int(json.loads(capsys.readouterr()[0])["kv_cache_tokens"])

    assert tokens("bfloat16") > tokens("float32")


def test_max_model_len_over_the_models_limit(capsys, hub):
    code = main(["fit", "--json", "--", *shlex.split(RECIPE.replace("262144", "524288"))])
    d = json.loads(capsys.readouterr()[0])
    assert code == 1 and d["verdict"] == "wont_start"
    assert any("model's own limit" in r for r in d["reasons"])


@pytest.mark.parametrize(
    "config",
    [
        {**NANO, "num_hidden_layers": 10**12},
        {**NANO, "hidden_size": -1},
        {**NANO, "vocab_size": "many"},
    ],
)
def test_absurd_configs_exit_2_with_the_field_named(capsys, tmp_path, config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    code = main(["fit", "--model", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 2 and "expected" in err and "Traceback" not in err


def test_a_300_character_model_name_exits_2(capsys):
    assert main(["fit", "--model", "m" * 300]) == 2
    assert "Traceback" not in capsys.readouterr()[1]


@pytest.mark.parametrize(
    "flags",
    [["-tp", "1000000000"], ["--max-model-len", "-5"], ["--speculative-config", '{"num_speculative_tokens": 10000}']],
)
def test_absurd_flags_exit_2(capsys, flags):
    assert main(["fit", "--model", "Qwen/Qwen3-32B", *flags]) == 2
    err = capsys.readouterr()[1]
    assert "expected" in err and "Traceback" not in err


def test_the_working_shows_the_mamba_ssm_dtype_in_use(capsys, hub):
    main(["fit", "--json", "--", *shlex.split(RECIPE.replace("float32", "float16"))])
    working = json.loads(capsys.readouterr()[0])["kv_working"]
    assert any("Mamba2 layers" in w and "in float16" in w for w in working)


def test_a_pasted_command_with_an_environment_prefix(capsys, hub):
    recipe = "VLLM_USE_FLASHINFER_MOE_FP4=1 HF_TOKEN=hf_secret " + RECIPE.replace("262144", "524288")
    code = main(["fit", "--json", "--", *shlex.split(recipe)])
    d = json.loads(capsys.readouterr()[0])
    assert code == 1 and any("model's own limit" in r for r in d["reasons"])
    env_note = next(n for n in d["notes"] if n.startswith("environment not modelled"))
    assert "VLLM_USE_FLASHINFER_MOE_FP4" in env_note and "HF_TOKEN" in env_note
    assert "hf_secret" not in json.dumps(d)  # names only, never values
    allowed = main(["fit", "--json", "--", *shlex.split("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 " + recipe)])
    d = json.loads(capsys.readouterr()[0])
    assert not any("model's own limit" in r for r in d["reasons"]) and allowed in (0, 1)
    assert any("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in n for n in d["notes"])


def test_a_pasted_docker_run_gives_its_e_environment_as_a_prefix_does(capsys, hub):
    # NVIDIA's Nemotron playbook: `docker run … -e VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 … vllm/vllm-openai … --model`
    words = shlex.split(RECIPE.replace("262144", "524288"))
    line = [
        "docker", "run", "--rm", "--gpus", "all", "-e", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1", "--env=HF_TOKEN=hf_secret",
        "-e", "HF_HOME", "vllm/vllm-openai:cu130-nightly", "--model", *words[2:],
    ]  # fmt: skip
    code = main(["fit", "--json", "--", *line])
    d = json.loads(capsys.readouterr()[0])
    assert not any("model's own limit" in r for r in d["reasons"]) and code in (0, 1)
    assert any("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in n for n in d["notes"])
    assert "hf_secret" not in json.dumps(d) and any("HF_TOKEN" in n for n in d["notes"])
