"""`sparktui fit`'s speed section: the prediction in text and JSON, --bandwidth, and calibration
from `sparktui bench` history in the state dir."""

from __future__ import annotations

import json

from sparktui import paths
from sparktui.cli import main
from tests.core.test_speed import history_line


def fit_json(capsys, *argv: str) -> dict:
    main(["fit", "--json", *argv])
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


def test_json_has_the_predicted_speed(capsys, isolated):
    d = fit_json(capsys, "--model", "nvidia/Qwen3.5-122B-A10B-NVFP4", "--max-model-len", "32768")
    assert 10 < d["predicted_decode_tok_s"] < 21  # below the 21 tok/s roofline of its 12.8 GB per token
    assert 0 < d["predicted_ttft_s"] < 2
    speed = d["speed"]
    assert speed["decode_range"][0] < d["predicted_decode_tok_s"] < speed["decode_range"][1]
    assert speed["users"][0]["users"] == 1 and speed["assumes"]
    assert speed["calibration"] is None


def test_text_shows_the_speed_and_what_it_assumes(capsys, isolated):
    assert main(["fit", "--model", "openai/gpt-oss-120b", "--gpu-memory-utilization", "0.85"]) == 0
    out = capsys.readouterr().out
    assert "speed      predicted on DGX Spark (GB10)" in out
    assert "one user" in out and "TTFT" in out and "assumes: DGX Spark (GB10): 273 GB/s" in out


def test_a_gpu_known_by_size_has_no_speed_unless_given_a_bandwidth(capsys, isolated):
    d = fit_json(capsys, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--machine", "80")
    assert d["predicted_decode_tok_s"] is None and d["speed"] is None
    d = fit_json(capsys, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--machine", "80", "--bandwidth", "2000")
    # 16 GB of bf16 weights at 2 TB/s: a roofline of ~125 tok/s
    assert 80 < d["predicted_decode_tok_s"] < 125


def test_bad_bandwidth_is_a_user_error(capsys, isolated):
    assert main(["fit", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--bandwidth", "fast"]) == 2
    assert "--bandwidth" in capsys.readouterr().err


def test_bench_history_of_this_machine_calibrates_the_prediction(capsys, isolated):
    model = "meta-llama/Llama-3.1-8B-Instruct"
    args = ("--model", model, "--machine", "auto", "--bandwidth", "20")
    before = fit_json(capsys, *args)
    history = paths.bench_history_path()
    history.parent.mkdir(parents=True, exist_ok=True)
    # measured at half of what sparktui would predict for that run
    history.write_text(history_line(model=model, decode=before["predicted_decode_tok_s"] / 2) + "\n")
    after = fit_json(capsys, *args)
    assert after["speed"]["calibration"] and "measured / predicted" in after["speed"]["calibration"]
    assert after["predicted_decode_tok_s"] < before["predicted_decode_tok_s"] * 0.6
    (measured,) = after["speed"]["measured"]
    assert measured["users"] == 1 and measured["measured_tok_s"] < measured["predicted_tok_s"]
    main(["fit", *args])
    assert "bench: " in capsys.readouterr().out  # predicted against measured, in the text too


def test_the_bandwidth_can_come_from_the_environment(capsys, isolated, monkeypatch):
    monkeypatch.setenv("SPARKTUI_BANDWIDTH_GBS", "2000")
    d = fit_json(capsys, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--machine", "80")
    assert 80 < d["predicted_decode_tok_s"] < 125


def test_context_sets_the_tokens_each_user_holds_while_decoding(capsys, isolated):
    model = ["--model", "nvidia/Qwen3.5-122B-A10B-NVFP4", "--max-model-len", "131072"]
    short = fit_json(capsys, *model)["speed"]
    long = fit_json(capsys, *model, "--context", "131072")["speed"]
    assert short["context"] == 1024 and long["context"] == 131072
    # its 12 full-attention layers read 128× the KV; its 36 Gated DeltaNet layers a fixed state
    assert long["kv_bytes_per_token_read"] > 5 * short["kv_bytes_per_token_read"]
    assert long["decode_tok_s"] < short["decode_tok_s"]


def test_a_bad_context_names_the_flag(capsys, isolated):
    model = ["--model", "nvidia/Qwen3.5-122B-A10B-NVFP4", "--max-model-len", "32768"]
    assert main(["fit", *model, "--context", "lots"]) == 2
    assert "--context lots: expected a whole number" in capsys.readouterr().err
    assert main(["fit", *model, "--context", "65536"]) == 2
    assert "more than --max-model-len 32,768" in capsys.readouterr().err


def test_context_is_kept_when_bench_history_calibrates(capsys, isolated):
    # calibrated() reused its `context` name for each run's own context: with a bench history, the
    # estimate was made at the last run's context (256 + 128/2 tokens) whatever --context said
    model = "meta-llama/Llama-3.1-8B-Instruct"
    history = paths.bench_history_path()
    history.parent.mkdir(parents=True, exist_ok=True)
    history.write_text(history_line(model=model, decode=10.0) + "\n")
    args = ("--model", model, "--machine", "auto", "--bandwidth", "273", "--vllm-version", "0.32.0")
    for flags, context in (((), 1024), (("--context", "32768"), 32768)):
        speed = fit_json(capsys, *args, *flags)["speed"]
        assert speed["calibration"] and speed["context"] == context
