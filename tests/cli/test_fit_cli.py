"""`sparktui fit`: profiles, flags, pasted commands, JSON, exit codes, and the seed's decision table."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sparktui.cli import main
from tests.support import FIT_JSON_KEYS

GiB = 1024**3


def run_fit(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["fit", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def fit_json(capsys, *argv: str) -> tuple[int, dict]:
    code, out, err = run_fit(capsys, "--json", *argv)
    assert err == ""
    return code, json.loads(out)


def test_table_shows_budget_verdict_reasons_suggestions_and_the_kv_working(capsys):
    code, out, _ = run_fit(capsys, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "32768")
    assert code == 0
    for text in (
        "requested (0.9 × total)",
        "− weights",
        "= KV cache",
        "left for the OS",
        "verdict    FITS",
        "suggestions",
        "32 full-attention layers × 8 KV heads × 128 head_dim × 2 B × 2 (K,V) = 131,072 B/token",
        "maximum concurrency",
    ):
        assert text in out, text


def test_json_has_the_contract_keys(capsys):
    code, d = fit_json(capsys, "--model", "openai/gpt-oss-120b", "--gpu-memory-utilization", "0.85")
    assert code == 0
    assert d["verdict"] == "fits"
    assert d.keys() >= FIT_JSON_KEYS
    # each suggestion: its text and the flags it sets ({} for advice), as JSON objects
    assert all(set(s) == {"text", "set"} for s in d["suggestions"])
    sets = {s["text"]: s["set"] for s in d["suggestions"] if s["set"]}
    assert [flag for change in sets.values() for flag in change] == ["--gpu-memory-utilization", "--kv-cache-dtype"]
    for text, change in sets.items():
        ((flag, value),) = change.items()
        assert text.startswith(("smallest " + flag, flag)) and f"{value}" in text
    assert (
        d["budget"]["requested"]
        == d["budget"]["weights"]
        + d["budget"]["activation_peak"]
        + d["budget"]["non_torch"]
        + d["budget"]["cuda_graphs"]
        + d["budget"]["kv_cache"]
    )


def test_pasted_vllm_serve_line(capsys):
    code, d = fit_json(
        capsys,
        "--",
        "vllm",
        "serve",
        "Qwen/Qwen3-32B",
        "--max-model-len",
        "16384",
        "--kv-cache-dtype",
        "fp8",
        "--gpu-memory-utilization",
        "0.8",
    )
    assert code == 0
    assert d["model"] == "Qwen/Qwen3-32B" and d["max_model_len"] == 16384
    assert d["kv_bytes_per_token"] == 64 * 8 * 128 * 2


def test_a_pasted_line_quoted_whole_is_read_as_a_shell_reads_it(capsys):
    # the shell's own `&&` and `>` must be quoted on the command line: the whole line was taken for a model name
    line = "source venv/bin/activate && nohup vllm serve Qwen/Qwen3-32B --max-model-len 8192 > vllm.log 2>&1 &"
    code, d = fit_json(capsys, "--", line)
    assert code in (0, 1) and d["model"] == "Qwen/Qwen3-32B" and d["max_model_len"] == 8192


def test_a_pasted_command_without_the_utilization_is_fitted_at_the_default_of_its_vllm(capsys):
    # vllm/config/cache.py CacheConfig.gpu_memory_utilization: 0.9 to 0.19.1, 0.92 from 0.20.0
    line = ["--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"]
    fits = {}
    for version in ("0.19.1", "0.20.0"):
        _, d = fit_json(capsys, "--vllm-version", version, *line)
        fits[version] = d
        utilization = d["budget"]["requested"] / d["budget"]["total"]
        assert utilization == pytest.approx(0.9 if version == "0.19.1" else 0.92, abs=1e-9)
        assert d["left_to_vllm"] == [
            f"utilization --gpu-memory-utilization not in the command: vLLM {version} takes "
            f"{0.9 if version == '0.19.1' else 0.92:g} (0.9 before vLLM 0.20, 0.92 from 0.20: "
            "vllm/config/cache.py CacheConfig); a launch by sparktui passes 0.9"
        ]
    # on a Spark 0.92 is above the unified-memory line: what `vllm serve` does there from 0.20
    assert fits["0.19.1"]["verdict"] == "fits" and fits["0.20.0"]["verdict"] == "unsafe"
    # no version known: the newest rules (0.92); the text says where the figure came from
    code, out, _ = run_fit(capsys, *line)
    assert code == 1 and "requested (0.92 × total)" in out and "(the newest known) takes 0.92" in out
    # given in the command, or before `--`: as given
    _, given = fit_json(capsys, "--vllm-version", "0.20.0", *line, "--gpu-memory-utilization", "0.9")
    _, before = fit_json(capsys, "--vllm-version", "0.20.0", "--gpu-memory-utilization", "0.9", *line)
    for d in (given, before):
        assert d["budget"]["requested"] == fits["0.19.1"]["budget"]["requested"] and "left_to_vllm" not in d
    # sparktui's own configuration (a profile, --model) is what sparktui launches: it passes 0.9
    code, out, _ = run_fit(capsys, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192")
    assert "requested (0.9 × total)" in out and "not in the command" not in out


def test_profile_with_flag_and_model_overrides(capsys):
    _, base = fit_json(capsys, "70b-dense-single-user")
    assert base["model"] == "nvidia/Llama-3.1-70B-Instruct-FP8" and base["max_model_len"] == 32768
    _, longer = fit_json(capsys, "70b-dense-single-user", "--max-model-len", "65536")
    assert longer["max_model_len"] == 65536 and longer["budget"]["requested"] == base["budget"]["requested"]
    _, other = fit_json(capsys, "70b-dense-single-user", "--model", "nvidia/Qwen3-32B-NVFP4")
    assert other["model"] == "nvidia/Qwen3-32B-NVFP4" and other["max_model_len"] == 32768


def test_exit_1_for_unsafe_and_wont_start(capsys):
    code, d = fit_json(capsys, "--model", "nvidia/Qwen3-30B-A3B-NVFP4", "--gpu-memory-utilization", "0.95")
    assert (code, d["verdict"]) == (1, "unsafe")
    code, d = fit_json(capsys, "--model", "nvidia/Qwen3-30B-A3B-NVFP4", "--mem-available", "60")
    assert (code, d["verdict"]) == (1, "wont_start")
    assert d["budget"]["mem_available"] == 60 * GiB


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--dtype", "float32"], "float32; weights 122.07 GiB"),
        (["--quantization", "fp8"], "bfloat16, fp8 (online); weights 31.97 GiB"),
    ],
)
def test_the_model_line_says_the_precision_the_weights_were_counted_in(capsys, flags, said):
    # --dtype float32 doubled the weights (61.03 -> 122.07 GiB) while the line still said bfloat16
    main(["fit", "--model", "Qwen/Qwen3-32B", "--machine", "dgx-spark", *flags])
    model_line = capsys.readouterr().out.splitlines()[1]
    assert model_line.startswith("model      64 layers, ") and said in model_line, model_line


def test_the_text_names_each_verdict_as_the_panel_and_the_readme_do(capsys):
    # the text said "WONT START" where the fit panel and the README say "won't start"
    assert main(["fit", "--model", "nvidia/Qwen3-30B-A3B-NVFP4", "--mem-available", "60"]) == 1
    assert "\nverdict    WON'T START\n" in capsys.readouterr().out


def test_explicit_machine_size(capsys):
    code, d = fit_json(
        capsys, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--machine", "24", "--max-model-len", "8192"
    )
    assert code == 0 and d["budget"]["total"] == 24 * GiB and "os_left" not in d["budget"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "acme/unknown"], "unknown model 'acme/unknown'"),
        (["--model", "Qwen/Qwen3-32B", "--max-model-len", "lots"], "--max-model-len: got lots"),
        (["--model", "Qwen/Qwen3-32B", "--machine", "toaster"], "--machine: got 'toaster'"),
        (["--model", "Qwen/Qwen3-32B", "--mem-available", "x"], "--mem-available: got 'x'"),
        (["no-such-profile"], "no-such-profile"),
        ([], "no model"),
        (["70b-dense-single-user", "--", "vllm", "serve", "x"], "not both"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run_fit(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("sparktui: ") and err.count("\n") == 1
    assert message in err


@pytest.mark.slow  # starts a process
def test_bad_input_has_no_traceback_from_the_real_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "sparktui", "fit", "--model", "acme/unknown"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_list_models(capsys):
    code, out, _ = run_fit(capsys, "--list-models")
    assert code == 0 and "openai/gpt-oss-120b" in out.splitlines()


@pytest.mark.slow  # starts a process
def test_fit_does_not_load_textual():
    code = (
        "import sys; from sparktui.cli import main; main(['fit', '--model', 'Qwen/Qwen3-32B', '--json']); "
        "assert 'textual' not in sys.modules, 'textual loaded'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------------------------- the seed's decision table

# The seed page's decision table: five scenarios, shipped as profiles. With the real configs every
# one fits with FP16 (bf16) KV as well as FP8; FP8 roughly doubles the KV tokens. What FP8 changes is
# the 70B at its full 128K context, which the seed's rule of thumb would rule out altogether.
DECISION_TABLE = {
    "35b-moe-single-user-long-context": ("fits", "fits"),
    "35b-moe-5-users-8k": ("fits", "fits"),
    "70b-dense-single-user": ("fits", "fits"),
    "70b-dense-5-users": ("fits", "fits"),
    "120b-moe-single-user": ("fits", "fits"),
}


@pytest.mark.parametrize("profile", sorted(DECISION_TABLE))
def test_decision_table_fp16_vs_fp8_kv(capsys, profile):
    want16, want8 = DECISION_TABLE[profile]
    code16, fp16 = fit_json(capsys, profile, "--kv-cache-dtype", "bfloat16")
    code8, fp8 = fit_json(capsys, profile, "--kv-cache-dtype", "fp8")
    assert (fp16["verdict"], fp8["verdict"]) == (want16, want8)
    assert code16 == code8 == 0
    assert fp8["kv_bytes_per_token"] * 2 == fp16["kv_bytes_per_token"]
    # more tokens: on a DGX Spark an fp8 KV cache runs on FlashInfer, whose FULL CUDA
    # graphs cost one 394 MiB workspace per attention KV-cache group (vllm_rules gb10_fp8_attention_backend,
    # fit.cudagraph_estimate), not a constant fitted on a model with seven such groups
    # (a hybrid's Mamba state does not halve, so its gain is smaller)
    assert fp8["kv_cache_tokens"] > (1.3 if "moe" in profile else 1.8) * fp16["kv_cache_tokens"]
    extra = fp8["budget"]["cuda_graphs"] - fp16["budget"]["cuda_graphs"]
    assert 0.1 * 1024**3 < extra < 1024**3
    assert fp8["kv_cache_bytes"] > fp16["kv_cache_bytes"] - 1024**3
    # the profile's own concurrency target is met
    seqs = {"35b-moe-5-users-8k": 5, "70b-dense-5-users": 5}.get(profile, 1)
    assert fp16["max_concurrency"] >= seqs


def test_70b_full_context_needs_fp8_kv(capsys):
    code16, fp16 = fit_json(
        capsys, "70b-dense-single-user", "--max-model-len", "131072", "--kv-cache-dtype", "bfloat16"
    )
    code8, fp8 = fit_json(capsys, "70b-dense-single-user", "--max-model-len", "131072", "--kv-cache-dtype", "fp8")
    assert (fp16["verdict"], code16) == ("wont_start", 1)
    assert (fp8["verdict"], code8) == ("fits", 0)
    (fix,) = [s for s in fp16["suggestions"] if s["text"].startswith("--kv-cache-dtype fp8 fixes it")]
    assert fix["set"] == {"--kv-cache-dtype": "fp8"}


def test_seed_table_rule_of_thumb_would_reject_70b_five_users(capsys):
    """By the seed's table (5.2 GB of KV per 4K tokens for a 70B) five 8K users need 52 GB of FP16
    KV, more than the ~28 GiB this profile leaves; the real config needs 12.5 GiB."""
    _, d = fit_json(capsys, "70b-dense-5-users", "--kv-cache-dtype", "bfloat16")
    seed_need = 5 * 2 * 5.2e9
    real_need = 5 * 8192 * d["kv_bytes_per_token"]
    assert real_need == 12.5 * GiB
    assert real_need < d["kv_cache_bytes"] < seed_need


def test_a_profile_with_a_cluster_is_fitted_per_node(capsys, tmp_path):
    profile = tmp_path / "two-sparks.toml"
    profile.write_text(
        '[serve]\nmodel = "meta-llama/Llama-3.3-70B-Instruct"\ntensor-parallel-size = 2\nmax-model-len = 32768\n'
        'gpu-memory-utilization = 0.85\n[cluster]\nnodes = ["spark-a", "spark-b"]\nbackend = "ray"\n'
    )
    code, d = fit_json(capsys, "--offline", str(profile))
    assert code == 0 and d["cluster"]["verdict"] == "fits"
    head, worker = d["cluster"]["nodes"]
    assert (head["host"], head["role"], worker["host"], worker["role"]) == ("spark-a", "head", "spark-b", "worker")
    assert head["extra_bytes"] > 0 == worker["extra_bytes"] and head["kv_cache_tokens"] == worker["kv_cache_tokens"]
    assert head["weights_bytes"] == d["weights_bytes"]  # the single-node figures are a rank's already
    code, out, _ = run_fit(capsys, "--offline", str(profile))
    assert "cluster    fits: one rank per node" in out and "head   spark-a" in out


def test_a_pasted_docker_run_is_fitted_at_its_image_tags_vllm(capsys):
    # vLLM's recipes: the vllm/vllm-openai image's entrypoint is `vllm serve`, so its flags follow the image
    code, data = fit_json(
        capsys, "--offline", "--", "docker", "run", "--gpus", "all", "-e", "HF_TOKEN=hf_notprinted", "--ipc=host",
        "vllm/vllm-openai:v0.17.0-cu130", "Qwen/Qwen3-32B", "--tensor_parallel_size", "2", "--max-model-len", "32k",
    )  # fmt: skip
    assert code in (0, 1)
    assert (data["vllm_version"], data["vllm_version_source"]) == ("0.17.0", "image tag vllm/vllm-openai:v0.17.0-cu130")
    assert data["max_model_len"] == 32000
    _, one_rank = fit_json(capsys, "--offline", "--vllm-version", "0.17", "--", "vllm", "serve", "Qwen/Qwen3-32B")
    assert data["weights_bytes"] < 0.55 * one_rank["weights_bytes"]  # each of the 2 ranks holds half
    assert "hf_notprinted" not in json.dumps(data)


def test_a_cluster_planned_on_a_larger_spark_plans_its_worker_as_the_smaller(capsys, tmp_path, monkeypatch):
    """On a 121.69 GiB Spark the head takes its own total; the worker, not read, may be a 119.63 GiB
    Spark: it is planned there, and the text and --json say that its total limits every rank's KV."""
    from sparktui.commands import fit as fit_command

    reading = tmp_path / "meminfo"
    reading.write_text("MemTotal:       127600748 kB\nMemFree:        90000000 kB\nMemAvailable:   110000000 kB\n")
    monkeypatch.setattr(fit_command, "MEMINFO", reading)
    profile = tmp_path / "two-sparks.toml"
    profile.write_text(
        '[serve]\nmodel = "meta-llama/Llama-3.3-70B-Instruct"\ntensor-parallel-size = 2\nmax-model-len = 32768\n'
        'gpu-memory-utilization = 0.85\n[cluster]\nnodes = ["spark-a", "spark-b"]\nbackend = "ray"\n'
    )
    _, d = fit_json(capsys, "--offline", str(profile))
    head, worker = d["cluster"]["nodes"]
    assert head["cuda_total"]["assumed"] == head["cuda_total"]["high"] == 127600748 * 1024
    assert (worker["cuda_total"]["assumed"], worker["cuda_total"]["high"]) == (int(119.63 * GiB), int(121.69 * GiB))
    assert worker["kv_cache_tokens"] < head["kv_cache_tokens"]
    limit = d["cluster"]["limited_by"]
    assert (limit["host"], limit["role"], limit["total_read"]) == ("spark-b", "worker", False)
    assert d["cluster"]["kv_cache_tokens"] == worker["kv_cache_tokens"]
    _, out, _ = run_fit(capsys, "--offline", str(profile))
    assert f"KV cache {worker['kv_cache_tokens']:,} tokens per rank, set by worker spark-b (119.63 GiB planned" in out
    assert f"KV {head['kv_cache_tokens']:,} tokens (vLLM holds it to {worker['kv_cache_tokens']:,})" in out
