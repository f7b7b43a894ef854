"""`sparktui advise`: a family's variants from the catalog and the local cache, text and JSON."""

from __future__ import annotations

import json
import shutil

import pytest

from sparktui.cli import main


def test_json_lists_each_variant_with_fit_speed_and_longest_context(capsys, isolated):
    code = main(["advise", "Qwen3.5-122B-A10B", "--context", "32768", "--users", "4", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    models = [v["model"] for v in out["variants"]]
    assert models == ["nvidia/Qwen3.5-122B-A10B-NVFP4", "Qwen/Qwen3.5-122B-A10B"]
    best = out["variants"][0]
    assert best["fits"] and best["predicted_decode_tok_s_per_user"] > 0 and best["predicted_ttft_s"] > 0
    assert best["longest_context_for_users"] >= 32768 and best["max_concurrency"] >= 4
    assert {f["flag"] for f in best["flags"]} >= {"--reasoning-parser", "--tool-call-parser"}


def test_text_table_and_the_command_to_run(capsys, isolated):
    assert main(["advise", "llama-3.1-70b", "--sort", "context"]) == 0
    out = capsys.readouterr().out
    assert "nvidia/Llama-3.1-70B-Instruct-FP8" in out and "meta-llama/Meta-Llama-3.1-70B" in out
    assert "sparktui fit -- vllm serve nvidia/Llama-3.1-70B-Instruct-FP8 --max-model-len" in out
    assert "--tool-call-parser llama3_json" in out


def test_local_checkpoints_are_variants_too(capsys, isolated, monkeypatch, fixtures, tmp_path):
    # a model in the local Hugging Face cache, under a name the catalog does not have
    hub = tmp_path / "hub"
    snap = hub / "models--someone--Qwen3-32B-AWQ" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    config = json.loads((fixtures / "model-configs" / "Qwen__Qwen3-32B.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128}
    (snap / "config.json").write_text(json.dumps(config))
    (hub / "models--someone--Qwen3-32B-AWQ" / "refs").mkdir()
    (hub / "models--someone--Qwen3-32B-AWQ" / "refs" / "main").write_text("abc")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    main(["advise", "qwen3-32b", "--json"])
    variants = {v["model"]: v for v in json.loads(capsys.readouterr().out)["variants"]}
    assert {"someone/Qwen3-32B-AWQ", "Qwen/Qwen3-32B", "nvidia/Qwen3-32B-NVFP4"} <= set(variants)
    assert "awq" in variants["someone/Qwen3-32B-AWQ"]["format"]
    shutil.rmtree(hub)


def test_unknown_family_and_bad_numbers_are_user_errors(capsys, isolated):
    assert main(["advise", "no-such-model-family-xyz"]) == 2
    assert "no model of the family" in capsys.readouterr().err
    assert main(["advise", "qwen3.5", "--users", "0"]) == 2
    assert "--users" in capsys.readouterr().err


def test_advise_gemma_lists_no_drafter_to_run_and_no_qwen_parsers(capsys):
    from sparktui.cli import main

    code = main(["advise", "gemma-4-26B-A4B"])
    out = capsys.readouterr().out
    assert code == 0
    run = out[out.index("run 1") :]
    assert "DFlash" not in run and "qwen3" not in run and "hermes" not in run
    assert "an option: speculative decoding with z-lab/gemma-4-26B-A4B-it-DFlash" in out
    table = out[: out.index("longest ctx: the longest")]
    rows = [line for line in table.splitlines() if line[:4].strip().rstrip(".").isdigit()]
    assert rows
    assert not any("DFlash" in row for row in rows)


def test_the_help_states_the_utilization_advise_assumes(capsys):
    import re

    from sparktui.core.config import ServeConfig

    with pytest.raises(SystemExit):
        main(["advise", "--help"])
    said = re.search(r"claim \(default ([0-9.]+)", " ".join(capsys.readouterr().out.split()))
    # advisor._config leaves the field unset: sparktui's own launch value, not vLLM's 0.92
    assert said is not None and float(said.group(1)) == ServeConfig(model="m").gpu_memory_utilization


def speeds(capsys, argv: list[str]) -> list[float]:
    assert main(["advise", "llama-3.1-8b", "--machine", "dgx-spark", "--json", *argv]) == 0
    return [v["predicted_decode_tok_s_per_user"] for v in json.loads(capsys.readouterr().out)["variants"]]


def test_the_bandwidth_in_the_environment_is_read_as_fit_and_the_panel_read_it(capsys, isolated, monkeypatch):
    # `fit` and the panel's advice took SPARKTUI_BANDWIDTH_GBS as --bandwidth; `advise` ignored it
    given = speeds(capsys, ["--bandwidth", "100"])
    monkeypatch.setenv("SPARKTUI_BANDWIDTH_GBS", "100")
    assert speeds(capsys, []) == given
    assert speeds(capsys, ["--bandwidth", "273"]) != given  # the flag still wins


def test_a_bad_bandwidth_in_the_environment_is_named_by_advise_and_the_panel(capsys, isolated, monkeypatch):
    # the panel's advice silently predicted at the Spark's bandwidth
    from sparktui.core.config import parse_serve_command
    from sparktui.errors import UserError
    from sparktui.ui.backend import Backend

    monkeypatch.setenv("SPARKTUI_BANDWIDTH_GBS", "fast")
    assert main(["advise", "llama-3.1-8b"]) == 2
    assert "SPARKTUI_BANDWIDTH_GBS: got 'fast'" in capsys.readouterr().err
    backend = Backend()
    config = parse_serve_command(["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"])
    with pytest.raises(UserError, match="SPARKTUI_BANDWIDTH_GBS: got 'fast'"):
        backend.advise(config, backend.machine("dgx-spark"))
