"""The spellings of a flag `vllm serve` accepts (vLLM 0.32.0 FlexibleArgumentParser.parse_args): sparktui
reads the flags it models in each of them, and passes the rest through as written."""

from __future__ import annotations

import json

import pytest

from sparktui.core.config import ServeConfig, parse_serve_command
from sparktui.core.vllm_argv import dashed, dotted_value, expand_prefix, serve_options
from sparktui.errors import UserError

MODEL = "Qwen/Qwen3-8B"


def test_underscores_read_as_dashes_in_the_name_only():
    c = parse_serve_command(
        f"vllm serve {MODEL} --tensor_parallel_size 2 --load_format=mistral --trust_remote_code "
        "--no_enable_prefix_caching --max_num_seqs 4 --tokenizer_mode mistral"
    )
    assert (c.tensor_parallel_size, c.load_format, c.trust_remote_code) == (2, "mistral", True)
    assert (c.enable_prefix_caching, c.max_num_seqs) == (False, 4)
    assert c.extra_args == ["--tokenizer_mode", "mistral"]  # not modelled: as written, vLLM reads it
    assert dashed("--limit_mm_per_prompt.max_items") == "--limit-mm-per-prompt.max_items"
    assert dashed("-q") == "-q"


def test_dotted_keys_build_the_json_flag():
    c = parse_serve_command(
        f"vllm serve {MODEL} --speculative-config.method mtp --speculative_config.num_speculative_tokens=3 "
        "--limit-mm-per-prompt.video 0 --limit-mm-per-prompt.image=2 -cc.cudagraph_mode FULL_DECODE_ONLY "
        "-cc.cudagraph_capture_sizes+ 1,2,4 -cc.pass_config.fuse_norm_quant true"
    )
    assert json.loads(c.speculative_config) == {"method": "mtp", "num_speculative_tokens": 3}
    assert c.speculation is not None and (c.speculation.method, c.speculation.num_tokens) == ("mtp", 3)
    assert json.loads(c.limit_mm_per_prompt) == {"video": 0, "image": 2}
    assert json.loads(c.compilation_config) == {
        "cudagraph_mode": "FULL_DECODE_ONLY",
        "cudagraph_capture_sizes": ["1", "2", "4"],  # '+': the comma-separated words, as vLLM builds the list
        "pass_config": {"fuse_norm_quant": True},
    }
    assert c.extra_args == []
    assert "--speculative-config" in c.to_argv()


def test_dotted_keys_replace_the_json_form_wherever_it_stands():
    # vLLM appends the gathered object after every other argument, so argparse's last value is it
    spec = '\'{"method": "ngram", "num_speculative_tokens": 3}\''
    for line in (
        f"{MODEL} --speculative-config {spec} --speculative-config.prompt_lookup_max 4",
        f"{MODEL} --speculative-config.prompt_lookup_max 4 --speculative-config {spec}",
    ):
        assert json.loads(parse_serve_command(line).speculative_config) == {"prompt_lookup_max": 4}


def test_dotted_values_are_json_then_a_size_then_text():
    assert [dotted_value(v) for v in ("3", "true", "1.5", "8k", "8K", "1.5K", "FULL", '{"a": 1}')] == [
        3, True, 1.5, 8000, 8192, "1.5K", "FULL", {"a": 1},
    ]  # fmt: skip


def test_dotted_keys_of_flags_sparktui_does_not_model_pass_through_as_written():
    c = parse_serve_command(f"{MODEL} --kv_transfer_config.kv_role kv_both --kernel-config.x=1 --port 9")
    assert c.extra_args == ["--kv_transfer_config.kv_role", "kv_both", "--kernel-config.x=1"]
    assert c.port == 9


def test_a_dotted_key_without_its_value_names_it():
    with pytest.raises(UserError, match=r"^--speculative-config\.method: missing its value"):
        parse_serve_command(f"{MODEL} --speculative-config.method")


def test_a_unique_prefix_is_the_flag_as_argparse_reads_it():
    c = parse_serve_command(f"vllm serve {MODEL} --tensor-parallel 4 --max-model 8192 --gpu-memory-util=0.8")
    assert (c.tensor_parallel_size, c.max_model_len, c.gpu_memory_utilization) == (4, 8192, 0.8)
    assert c.extra_args == []
    # several options start with it: vLLM stops (ambiguous option), so it goes to vLLM as written
    assert expand_prefix("--max-num") is None
    assert parse_serve_command(f"{MODEL} --max-num 4").extra_args == ["--max-num", "4"]
    # a whole option is itself, even where it starts another (--model, --model-impl)
    assert expand_prefix("--model") is None and expand_prefix("--tensor-parallel") == "--tensor-parallel-size"


def test_the_option_list_holds_every_modelled_flag():
    from sparktui.core.config import FLAGS

    upstream = {f.name for f in FLAGS if not f.positional and not f.local} - {"--swap-space", "--mxfp4-layers"}
    assert upstream <= set(serve_options())  # --swap-space left vLLM in 0.32; --mxfp4-layers is eugr's build


def test_a_profiles_extra_args_are_read_the_same_way():
    c = ServeConfig(
        model=MODEL,
        extra_args=["--tensor_parallel_size", "2", "--speculative-config.method", "ngram", "--seed", "1"],
    )
    assert c.tensor_parallel_size == 2 and json.loads(c.speculative_config) == {"method": "ngram"}
    assert c.extra_args == ["--seed", "1"]


def test_the_attention_configs_backend_is_the_backend_the_fit_counts():
    # eugr's README runs GLM-4.7 with --attention-config.backend flashinfer: vLLM 0.32's create_engine_config
    # puts --attention-backend into attention_config.backend, so either names the backend
    import pathlib

    from sparktui.core.fit import dgx_spark
    from sparktui.core.fit_settings import settings_from
    from sparktui.core.modelspec import spec_from_config

    spec = spec_from_config(
        json.loads(pathlib.Path("tests/fixtures/model-configs/Qwen__Qwen3-32B.json").read_text()),
        name="qwen3-32b",
        source="fixture",
    )
    for line in (
        f"vllm serve {MODEL} --attention-config.backend flashinfer",
        f'vllm serve {MODEL} --attention-config \'{{"backend": "FLASHINFER"}}\'',
        f"vllm serve {MODEL} --attention-backend FLASHINFER",
    ):
        config = parse_serve_command(line)
        assert config.chosen_attention_backend.lower() == "flashinfer"
        assert settings_from(config, spec, dgx_spark()).attention_backend == "flashinfer"
    both = f"{MODEL} --attention-backend FLASHINFER --attention-config.backend TRITON_ATTN"
    with pytest.raises(UserError, match=r"--attention-backend and --attention-config's backend.*mutually exclusive"):
        parse_serve_command(both)
    kept = parse_serve_command(f"{MODEL} --attention-config.flash_attn_version 3")
    assert kept.chosen_attention_backend is None and "--attention-config" in kept.to_argv()


def test_the_spec_shorthands_of_vllm_032_are_keys_of_the_speculative_config():
    c = parse_serve_command(f"vllm serve {MODEL} --spec-method mtp --spec_tokens=3")
    assert json.loads(c.speculative_config) == {"method": "mtp", "num_speculative_tokens": 3}
    assert c.speculation is not None and (c.speculation.method, c.speculation.num_tokens) == ("mtp", 3)
    assert c.extra_args == [] and "--speculative-config" in c.to_argv()
    drafted = parse_serve_command(
        f"{MODEL} --speculative-config.method eagle3 --spec-model org/drafter --spec-tokens 2"
    )
    assert json.loads(drafted.speculative_config) == {
        "method": "eagle3",
        "model": "org/drafter",
        "num_speculative_tokens": 2,
    }
    from_profile = ServeConfig(model=MODEL, extra_args=["--spec-method", "ngram", "--spec-tokens", "4"])
    assert json.loads(from_profile.speculative_config) == {"method": "ngram", "num_speculative_tokens": 4}


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        (
            f"""{MODEL} --spec-method mtp --speculative-config '{{"method": "ngram"}}'""",
            r"^--spec-method and --speculative-config's method: .*mutually exclusive",
        ),
        (f"{MODEL} --spec-tokens three", r"^--spec-tokens: got three; expected a whole number"),
        (f"{MODEL} --spec-method", r"^--spec-method: missing its value"),
    ],
)
def test_a_bad_spec_shorthand_names_it(line, pattern):
    with pytest.raises(UserError, match=pattern):
        parse_serve_command(line)


def test_the_cudagraph_shorthands_are_keys_of_the_compilation_config_the_fit_reads():
    # an eugr recipe posted in NVIDIA's forum ("PSA: State of FP4/NVFP4 Support for DGX Spark in VLLM"):
    # --max-cudagraph-capture-size sets compilation_config.max_cudagraph_capture_size in vLLM 0.32
    import pathlib

    from sparktui.core.fit import dgx_spark
    from sparktui.core.fit_settings import settings_from
    from sparktui.core.modelspec import spec_from_config

    line = (
        "vllm serve chankhavu/Nemotron-Cascade-2-30B-A3B-NVFP4 --kv-cache-dtype fp8 --trust-remote-code "
        "--gpu-memory-utilization 0.80 --max-num-seqs 512 --enable-prefix-caching --max-cudagraph-capture-size 512 "
        "--mamba-ssm-cache-dtype float32 --reasoning-parser nemotron_v3 --tool-call-parser qwen3_coder "
        "--enable-auto-tool-choice --port 8000 --host 0.0.0.0 --max-model-len 262144 --load-format fastsafetensors 2>&1"
    )
    c = parse_serve_command(line)
    assert json.loads(c.compilation_config) == {"max_cudagraph_capture_size": 512}
    assert c.extra_args == [
        "--reasoning-parser",
        "nemotron_v3",
        "--tool-call-parser",
        "qwen3_coder",
        "--enable-auto-tool-choice",
    ]
    spec = spec_from_config(
        json.loads(pathlib.Path("tests/fixtures/model-configs/Qwen__Qwen3-32B.json").read_text()), name="q", source="f"
    )
    sized = parse_serve_command(f"{MODEL} --cudagraph-capture-sizes 1 2 4 8 --port 9")
    assert (sized.port, json.loads(sized.compilation_config)) == (9, {"cudagraph_capture_sizes": [1, 2, 4, 8]})
    s = settings_from(sized, spec, dgx_spark())
    assert s.capture_sizes == (1, 2, 4, 8)
    assert settings_from(c, spec, dgx_spark()).max_capture_size == 512
    with pytest.raises(UserError, match=r"^--max-cudagraph-capture-size and --compilation-config's .*exclusive"):
        parse_serve_command(f"{MODEL} -cc.max_cudagraph_capture_size 64 --max-cudagraph-capture-size 512")
