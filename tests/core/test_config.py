"""The flag table, ServeConfig validation, argv rendering and parsing a pasted `vllm serve` line."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sparktui.core import config as cfg
from sparktui.core.config import FLAGS, ServeConfig, flag_by_field, flag_by_name, parse_serve_command
from sparktui.core.flag import CATEGORIES
from sparktui.errors import UserError

MODEL = "Qwen/Qwen3-30B-A3B"

# One bad value per flag, of the kind a person types by mistake.
BAD = {
    "model": "",
    "served_model_name": "   ",
    "host": "",
    "port": 70000,
    "api_key": "",
    "gpu_memory_utilization": 1.5,
    "max_model_len": "lots",
    "max_num_seqs": 0,
    "max_num_batched_tokens": "12q",
    "kv_cache_dtype": "fp7",
    "mamba_ssm_cache_dtype": "fp4",
    "vllm_version": "0.9.2",
    "kv_cache_memory_bytes": 0,
    "block_size": -16,
    "swap_space": -1,
    "quantization": "",
    "dtype": "fp8",
    "enable_prefix_caching": "sometimes",
    "enforce_eager": "maybe",
    "tensor_parallel_size": 0,
    "trust_remote_code": 2,
    "speculative_config": "{not json",
    "enable_lora": "perhaps",
    "attention_backend": "",
    "compilation_config": "{not json",
    "attention_config": "[1]",
    "load_format": "",
    "async_scheduling": "often",
    "language_model_only": "mostly",
    "limit_mm_per_prompt": "image=0",
    "mxfp4_layers": "moe,attn",
}

# A valid, non-default value per flag (the api key is left out: it never reaches argv).
GOOD = {
    "served_model_name": "qwen",
    "host": "0.0.0.0",
    "port": 8001,
    "gpu_memory_utilization": 0.85,
    "max_model_len": 32768,
    "max_num_seqs": 5,
    "max_num_batched_tokens": 8192,
    "kv_cache_dtype": "fp8",
    "mamba_ssm_cache_dtype": "float32",
    "vllm_version": "0.25.1",
    "kv_cache_memory_bytes": 40 * 1024**3,
    "block_size": 32,
    "swap_space": 4.0,
    "quantization": "fp8",
    "dtype": "bfloat16",
    "enable_prefix_caching": False,
    "enforce_eager": True,
    "tensor_parallel_size": 2,
    "trust_remote_code": True,
    "speculative_config": '{"method":"ngram","num_speculative_tokens":3}',
    "enable_lora": True,
    "attention_backend": "FLASHINFER",
    "compilation_config": '{"cudagraph_mode":"PIECEWISE"}',
    "attention_config": '{"flash_attn_version":3}',
    "load_format": "safetensors",
    "async_scheduling": False,
    "language_model_only": True,
    "limit_mm_per_prompt": '{"image":0}',
    "mxfp4_layers": "moe,qkv,o,lm_head",
}


def test_table_is_complete_and_matches_serveconfig():
    fields = set(ServeConfig.FIELDS) - {"extra_args"}
    assert {f.field for f in FLAGS} == fields
    assert set(BAD) == fields and set(GOOD) == fields - {"model", "api_key"}
    for flag in FLAGS:
        if not flag.positional:
            assert getattr(ServeConfig, flag.field) == flag.field_default, flag.name
            assert getattr(ServeConfig(model=MODEL), flag.field) == flag.field_default, flag.name
        assert flag.positional or re.fullmatch(r"--[a-z0-9]+(-[a-z0-9]+)*", flag.name), flag.name
        assert flag.category in CATEGORIES
        assert flag.help and len(flag.help.splitlines()) == 1
    assert len({f.name for f in FLAGS}) == len(FLAGS)


def test_contract_defaults():
    c = ServeConfig(model=MODEL)
    assert (c.host, c.port, c.gpu_memory_utilization, c.kv_cache_dtype, c.dtype) == (
        "127.0.0.1",
        8000,
        0.9,
        "auto",
        "auto",
    )
    assert c.max_model_len is None and c.enable_prefix_caching is None and c.api_key is None
    assert (c.enforce_eager, c.trust_remote_code, c.enable_lora, c.tensor_parallel_size) == (False, False, False, 1)
    assert c.extra_args == []


def test_lookups():
    assert flag_by_name("--gpu-memory-utilization").field == "gpu_memory_utilization"
    assert flag_by_name("-tp").field == "tensor_parallel_size"
    assert flag_by_name("-q").field == "quantization"
    assert flag_by_name("max-model-len").field == "max_model_len"
    assert flag_by_name("--no-such-flag") is None
    assert flag_by_field("kv_cache_dtype").name == "--kv-cache-dtype"
    assert cfg.flag_by_key("enable-prefix-caching").negatable
    assert cfg.close_matches("--gpu-memory-utilisation") == ["--gpu-memory-utilization"]
    assert {f.field for c in CATEGORIES for f in cfg.flags_in(c)} == {f.field for f in FLAGS}
    with pytest.raises(KeyError):
        flag_by_field("nope")


@pytest.mark.parametrize("field", sorted(BAD))
def test_every_bad_value_names_the_flag_and_what_is_allowed(field):
    flag = flag_by_field(field)
    values = {"model": MODEL, field: BAD[field]}
    with pytest.raises(UserError) as err:
        ServeConfig(**values)
    message = str(err.value)
    assert message.startswith(f"{flag.name}: got "), message
    assert "expected" in message
    assert "validation error" not in message.lower() and "pydantic" not in message.lower()


def test_error_message_shape():
    with pytest.raises(UserError, match=r"^--gpu-memory-utilization: got 1\.5; expected a number > 0 and ≤ 1$"):
        ServeConfig(model=MODEL, gpu_memory_utilization=1.5)
    with pytest.raises(UserError, match=r"^--gpu-memory-utilization: got 0; expected a number > 0"):
        ServeConfig(model=MODEL, gpu_memory_utilization=0)
    with pytest.raises(UserError, match=r"--dtype: got fp8; expected one of auto, half, float16"):
        ServeConfig(model=MODEL, dtype="fp8")
    with pytest.raises(UserError, match=r"^model: missing"):
        ServeConfig()
    with pytest.raises(UserError, match=r"gpu_memory_utilisation: not a setting.*--gpu-memory-utilization"):
        ServeConfig(model=MODEL, gpu_memory_utilisation=0.8)


def test_assignment_and_replace_are_validated():
    c = ServeConfig(model=MODEL)
    with pytest.raises(UserError, match=r"^--port: got 0"):
        c.port = 0
    assert c.port == 8000
    c.max_model_len = "8K"
    assert c.max_model_len == 8192
    d = c.replace(kv_cache_dtype="fp8")
    assert d.kv_cache_dtype == "fp8" and c.kv_cache_dtype == "auto"
    with pytest.raises(UserError, match=r"^--kv-cache-dtype"):
        c.replace(kv_cache_dtype="fp3")


def test_types_coerce_from_text_as_vllm_does():
    c = ServeConfig(
        model=MODEL,
        port="8080",
        gpu_memory_utilization="0.8",
        max_model_len="32k",
        max_num_batched_tokens="2K",
        kv_cache_memory_bytes="64M",
        enforce_eager="true",
        enable_prefix_caching="false",
        speculative_config={"method": "ngram", "num_speculative_tokens": 3},
        swap_space="4",
    )
    assert c.port == 8080 and c.gpu_memory_utilization == 0.8
    assert c.max_model_len == 32000  # lower-case k is decimal in vLLM
    assert c.max_num_batched_tokens == 2048  # upper-case K is binary
    assert c.kv_cache_memory_bytes == 64 * 1024**2
    assert c.enforce_eager is True and c.enable_prefix_caching is False
    assert c.speculative_config == '{"method":"ngram","num_speculative_tokens":3}'
    assert c.swap_space == 4.0
    for auto in ("auto", "-1", -1, "AUTO"):
        assert ServeConfig(model=MODEL, max_model_len=auto).max_model_len == -1
    with pytest.raises(UserError, match=r"^--max-model-len: got -2"):
        ServeConfig(model=MODEL, max_model_len=-2)
    with pytest.raises(UserError, match=r"^--max-num-seqs: got 2.5"):
        ServeConfig(model=MODEL, max_num_seqs=2.5)
    with pytest.raises(UserError, match=r"^--port: got True"):
        ServeConfig(model=MODEL, port=True)
    with pytest.raises(UserError, match=r"^--swap-space: got inf"):
        ServeConfig(model=MODEL, swap_space="inf")
    # quantization accepts methods beyond the listed suggestions; kv-cache-dtype does not
    assert ServeConfig(model=MODEL, quantization="some_new_method").quantization == "some_new_method"


def test_default_argv_always_binds_localhost_and_caps_utilization():
    argv = ServeConfig(model=MODEL).to_argv()
    assert argv == [MODEL, "--gpu-memory-utilization", "0.9", "--host", "127.0.0.1"]
    # vLLM's own default (0.92) must still be passed, or sparktui's default would apply on re-read
    assert "--gpu-memory-utilization" in ServeConfig(model=MODEL, gpu_memory_utilization=0.92).to_argv()


def test_argv_booleans_as_vllm_takes_them():
    assert "--enforce-eager" in ServeConfig(model=MODEL, enforce_eager=True).to_argv()
    assert "--enforce-eager" not in ServeConfig(model=MODEL, enforce_eager=False).to_argv()
    on = ServeConfig(model=MODEL, enable_prefix_caching=True).to_argv()
    off = ServeConfig(model=MODEL, enable_prefix_caching=False).to_argv()
    unset = ServeConfig(model=MODEL).to_argv()
    assert "--enable-prefix-caching" in on and "--no-enable-prefix-caching" in off
    assert not any("prefix-caching" in a for a in unset)


def test_argv_order_is_stable_and_extra_args_come_last():
    c = ServeConfig(model=MODEL, **GOOD, extra_args=["--disable-log-requests", "--seed", "7"])
    argv = c.to_argv()
    assert argv[0] == MODEL and argv[-3:] == ["--disable-log-requests", "--seed", "7"]
    rendered = [f for f in FLAGS if f.field in GOOD and not f.local]
    positions = [argv.index(f.name) if f.name in argv else argv.index(f.negative) for f in rendered]
    assert positions == sorted(positions)
    assert argv == ServeConfig(model=MODEL, **dict(reversed(list(GOOD.items()))), extra_args=c.extra_args).to_argv()


def test_vllm_version_is_sparktuis_own_never_on_vllms_command_line():
    c = parse_serve_command(f"vllm serve {MODEL} --vllm-version 0.25 --max-model-len 8k")
    assert c.vllm_version == "0.25.0" and "--vllm-version" not in c.to_argv()
    assert c.to_toml_values()["vllm-version"] == "0.25.0"  # kept in the profile
    with pytest.raises(UserError, match=r"--vllm-version: got 0\.9; expected a vLLM version"):
        ServeConfig(model=MODEL, vllm_version="0.9")


def test_api_key_only_in_env_never_argv_or_repr():
    c = parse_serve_command(f"vllm serve {MODEL} --api-key s3cret-key --port 8001")
    assert c.api_key == "s3cret-key"
    assert "s3cret-key" not in " ".join(c.to_argv()) and "--api-key" not in c.to_argv()
    assert c.to_env() == {"VLLM_API_KEY": "s3cret-key"}
    assert "s3cret-key" not in repr(c) and "s3cret-key" not in str(c)
    assert ServeConfig(model=MODEL).to_env() == {}
    assert parse_serve_command(f"VLLM_API_KEY=k2 vllm serve {MODEL}").to_env() == {"VLLM_API_KEY": "k2"}


ROUND_TRIPS = [
    {},
    {k: v for k, v in GOOD.items() if k != "vllm_version"},  # sparktui's own: not in the argv
    {"max_model_len": -1, "enable_prefix_caching": True},
    {"gpu_memory_utilization": 0.92, "served_model_name": "a b", "extra_args": ["--seed", "1", "--x=y"]},
    {"port": 8000, "dtype": "auto", "kv_cache_dtype": "auto", "enforce_eager": False},
]


@pytest.mark.parametrize("values", ROUND_TRIPS)
def test_round_trip(values):
    config = ServeConfig(model=MODEL, **values)
    assert parse_serve_command(config.to_argv()) == config
    assert parse_serve_command(["vllm", "serve", *config.to_argv()]) == config
    import shlex

    assert parse_serve_command("vllm serve " + shlex.join(config.to_argv())) == config


def test_parse_a_pasted_multiline_command():
    text = """vllm serve nvidia/Llama-3.1-70B-Instruct-FP8 \\
      --gpu-memory-utilization=0.85 \\
      --max-model-len 32K --max-num-seqs 5 \\
      --kv-cache-dtype fp8 --no-enable-prefix-caching -tp 1 \\
      --speculative-config '{"method": "ngram", "num_speculative_tokens": 3}' \\
      --served-model-name llama70 llama \\
      --enforce-eager"""
    c = parse_serve_command(text)
    assert c.model == "nvidia/Llama-3.1-70B-Instruct-FP8"
    assert c.gpu_memory_utilization == 0.85 and c.max_model_len == 32768 and c.max_num_seqs == 5
    assert c.kv_cache_dtype == "fp8" and c.enable_prefix_caching is False and c.enforce_eager
    assert c.speculative_config == '{"method": "ngram", "num_speculative_tokens": 3}'
    assert c.served_model_name == "llama70 llama"
    assert c.extra_args == [] and c.unknown_flags == []


@pytest.mark.parametrize(
    "line",
    [
        f"python -m vllm.entrypoints.openai.api_server --model {MODEL} --port 9000",
        f"python3 -m vllm.entrypoints.openai.api_server --port 9000 --model={MODEL}",
        f"/opt/venv/bin/vllm serve {MODEL} --port 9000",
        f"{MODEL} --port 9000",
        f"vllm serve --port 9000 {MODEL}",
    ],
)
def test_parse_launcher_forms(line):
    c = parse_serve_command(line)
    assert (c.model, c.port) == (MODEL, 9000)


def test_unknown_flags_are_kept_in_order_with_their_values():
    c = parse_serve_command(
        f"vllm serve {MODEL} --disable-log-requests --seed 42 --max-model-len 4096 "
        "--hf-overrides.rope_theta=1e6 --override-generation-config '{\"temperature\": 0.6}' "
        "--rope-scaling a b --kv-transfer-config=x --swap-space 4"
    )
    assert c.extra_args == [
        "--disable-log-requests",
        "--seed", "42",
        "--hf-overrides.rope_theta=1e6",
        "--override-generation-config", '{"temperature": 0.6}',
        "--rope-scaling", "a", "b",
        "--kv-transfer-config=x",
    ]  # fmt: skip
    assert c.unknown_flags == [
        "--disable-log-requests", "--seed", "--hf-overrides.rope_theta",
        "--override-generation-config", "--rope-scaling", "--kv-transfer-config",
    ]  # fmt: skip
    assert c.max_model_len == 4096 and c.swap_space == 4.0
    assert c.to_argv()[-len(c.extra_args) :] == c.extra_args
    # an unknown flag before a negative value keeps the value
    assert parse_serve_command(f"{MODEL} --some-offset -3").extra_args == ["--some-offset", "-3"]


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        (f"vllm serve {MODEL} --gpu-memory-utilization 1.2", r"^--gpu-memory-utilization: got 1\.2; expected"),
        (f"vllm serve {MODEL} --max-model-len", r"^--max-model-len: missing its value"),
        (f"vllm serve {MODEL} --port --host x", r"^--port: missing its value"),
        (f"vllm serve {MODEL} --enforce-eager=true", r"^--enforce-eager: takes no value.*--no-enforce-eager"),
        (f"vllm serve {MODEL} other-model", r"unexpected argument 'other-model'"),
        ("vllm serve --port 8000", r"no model"),
        ("vllm bench --model x", r"expected `vllm serve"),
        (f"vllm serve {MODEL} --api-key 'unterminated", r"cannot read the pasted command"),
        (f"HF_TOKEN=x vllm serve {MODEL}", r"HF_TOKEN=x: .*\[env\]"),
        (f"vllm serve {MODEL} -tp zero", r"^--tensor-parallel-size: got zero"),
        (
            f"vllm serve {MODEL} --max-model-len $MAX_LEN",
            r"^--max-model-len: got \$MAX_LEN; .*shell variable.*its value",
        ),
        (f"vllm serve {MODEL} --api-key sk-one sk-two", r"^--api-key: more than one value; .*give one$"),
    ],
)
def test_parse_errors_name_the_flag(line, pattern):
    with pytest.raises(UserError, match=pattern):
        parse_serve_command(line)


def test_unknown_flag_before_the_model_gets_a_hint():
    with pytest.raises(UserError, match=r"no model.*follows --disable-log-requests.*put the model first"):
        parse_serve_command(f"vllm serve --disable-log-requests {MODEL}")


def test_flags_on_top_of_a_base_config():
    base = ServeConfig(model=MODEL, max_model_len=32768, enforce_eager=True, extra_args=["--seed", "1"])
    c = parse_serve_command(["--max-model-len", "8k", "--no-enforce-eager", "--foo"], base=base)
    assert (c.model, c.max_model_len, c.enforce_eager) == (MODEL, 8000, False)
    assert c.extra_args == ["--seed", "1", "--foo"]
    assert base.max_model_len == 32768  # the base is not changed
    assert parse_serve_command(["other/model"], base=base).model == "other/model"


def test_last_occurrence_wins_like_argparse():
    c = parse_serve_command(f"{MODEL} --port 1 --port 2 --enforce-eager --no-enforce-eager")
    assert c.port == 2 and c.enforce_eager is False


def test_toml_values_are_the_non_defaults():
    c = ServeConfig(model=MODEL, gpu_memory_utilization=0.8, enforce_eager=True)
    assert c.to_toml_values() == {"model": MODEL, "gpu-memory-utilization": 0.8, "enforce-eager": True}


VLLM_SITE = Path.home() / ".cache/sparktui-ci/vllm-venv/lib/python3.11/site-packages/vllm"
# Where vLLM declares each field (the attribute name where it differs from ours).
VLLM_DECLARED = {
    "config/cache.py": {"gpu_memory_utilization": None, "kv_cache_dtype": "cache_dtype",
                        "kv_cache_memory_bytes": None, "enable_prefix_caching": None, "block_size": None},
    "config/model.py": {"dtype": None, "quantization": None, "enforce_eager": None,
                        "trust_remote_code": None, "max_model_len": None, "served_model_name": None},
    "config/parallel.py": {"tensor_parallel_size": None},
    "entrypoints/launchers/cli_args.py": {"host": None, "port": None, "api_key": None},
    "engine/arg_utils.py": {"enable_lora": None, "max_num_seqs": None, "max_num_batched_tokens": None,
                            "speculative_config": None},
}  # fmt: skip


@pytest.mark.skipif(not VLLM_SITE.is_dir(), reason="the vLLM 0.32 source is not installed here")
def test_defaults_match_the_vllm_source():
    """Read each field's default straight from vLLM's source (never importing vLLM)."""
    checked = 0
    for rel, fields in VLLM_DECLARED.items():
        text = (VLLM_SITE / rel).read_text()
        for ours, theirs in fields.items():
            name = theirs or ours
            match = re.search(rf"^    {name}: [^=\n]+= (.+)$", text, re.M)
            assert match, f"{name} not found in {rel}"
            expr = match.group(1).split("#")[0].strip()
            field_call = re.fullmatch(r"Field\(default=([^,)]+).*\)", expr)
            default = ast.literal_eval(field_call.group(1) if field_call else expr)
            assert flag_by_field(ours).default == default, f"{ours}: vLLM's default is {default!r}"
            checked += 1
    assert checked == 19
    # --swap-space is gone from vLLM 0.32: sparktui keeps it only for older versions, unset by default.
    assert "swap_space" not in (VLLM_SITE / "engine/arg_utils.py").read_text()
    assert flag_by_field("swap_space").field_default is None


def test_a_command_without_the_utilization_gets_the_default_of_the_vllm_that_runs_it():
    from sparktui.core.config import utilization_left_to_vllm

    bare = parse_serve_command("vllm serve org/m --max-model-len 8192")

    # sparktui's own launch still passes its 0.9 (vLLM's default is 0.92 from 0.20, 0.9 before)
    def passed(c: ServeConfig) -> str:
        argv = c.to_argv()
        return argv[argv.index("--gpu-memory-utilization") + 1]

    assert bare.gpu_memory_utilization == 0.9 and passed(bare) == "0.9"
    assert passed(ServeConfig(model="m", gpu_memory_utilization=0.92)) == "0.92"
    # run as it is, the command gets the default of the vLLM that runs it
    old, new, unknown = (utilization_left_to_vllm(bare, v) for v in ("0.19.1", "0.20.0", None))
    assert old is not None and old[0] == 0.9 and "vLLM 0.19.1 takes 0.9" in old[1]
    assert new is not None and new[0] == 0.92 and "vLLM 0.20.0 takes 0.92" in new[1]
    assert unknown is not None and unknown[0] == 0.92 and "the newest known" in unknown[1]
    pinned = parse_serve_command("vllm serve org/m --vllm-version 0.19.1")
    assert utilization_left_to_vllm(pinned) is not None and utilization_left_to_vllm(pinned)[0] == 0.9
    # a command that gives it (or a --config file that does) keeps its own
    assert (
        utilization_left_to_vllm(parse_serve_command("vllm serve org/m --gpu-memory-utilization 0.9"), "0.32.0") is None
    )
    assert utilization_left_to_vllm(parse_serve_command(["org/m", "--gpu-memory-utilization=0.7"])) is None


def test_a_copy_keeps_its_own_record_of_what_was_set():
    import copy

    original = ServeConfig(model=MODEL)
    for duplicate in (copy.copy(original), copy.deepcopy(original), original.model_copy()):
        duplicate.gpu_memory_utilization = 0.8
        assert duplicate == original.replace(gpu_memory_utilization=0.8)
        assert "gpu_memory_utilization" in duplicate.model_fields_set
    assert original.model_fields_set == {"model"} and original.gpu_memory_utilization == 0.9
    assert cfg.utilization_left_to_vllm(original) is not None  # still "left to vLLM"
