"""`sparktui fit --calibrate-from LOG`: vLLM's own figures from a start-up, kept for this box and used
by the next fit of the same key; a changed flag sends its term back to the model."""

from __future__ import annotations

import json
import os
import stat

import pytest

from sparktui.cli import main
from tests.core.test_fit import load_bench
from tests.support import FIXTURES

GiB = 1024**3
LOG = FIXTURES / "vllm-logs" / "spark_vdev-g25ab073ef_gemma-3-27b-it_fp8kv_success.log"
LOGGED_KV = 41.66  # "Available KV cache memory: 41.66 GiB"


@pytest.fixture
def gemma(tmp_path):
    """google/gemma-3-27b-it's published config in a local folder, as the log's server had it."""
    folder = tmp_path / "gemma-3-27b-it"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(load_bench().GEMMA3_27B))
    return folder


def flags(folder, *more: str) -> list[str]:
    return [
        "--model", str(folder), "--max-model-len", "131072", "--gpu-memory-utilization", "0.85",
        "--kv-cache-dtype", "fp8", "--max-num-batched-tokens", "4096", "--machine", "dgx-spark", *more,
    ]  # fmt: skip


def fit_json(capsys, *argv: str) -> dict:
    code = main(["fit", "--json", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_a_calibrated_fit_is_within_half_a_percent_of_the_logged_kv_memory(capsys, isolated, gemma):
    predicted = fit_json(capsys, *flags(gemma))
    assert set(predicted["kv_memory_source"].values()) == {"predicted"}
    calibrated = fit_json(capsys, *flags(gemma, "--calibrate-from", str(LOG)))
    assert abs(calibrated["kv_cache_bytes"] / GiB - LOGGED_KV) / LOGGED_KV < 0.005
    assert set(calibrated["kv_memory_source"].values()) == {"calibrated"}
    assert "calibrated from a log" in calibrated["calibration"][0]
    # kept for this box (0600): the next fit of the same flags uses it without being told
    store = isolated / "state" / "calibrations.json"
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o600
    again = fit_json(capsys, *flags(gemma))
    assert again["kv_cache_bytes"] == calibrated["kv_cache_bytes"]
    assert set(again["kv_memory_source"].values()) == {"calibrated"}


def test_a_changed_flag_sends_its_terms_back_to_the_model_and_says_what_changed(capsys, isolated, gemma):
    fit_json(capsys, *flags(gemma, "--calibrate-from", str(LOG)))
    changed = fit_json(capsys, *flags(gemma, "--max-num-seqs", "64"))
    source = changed["kv_memory_source"]
    assert source["weights"] == "calibrated"  # --max-num-seqs does not change the weights
    assert source["cuda_graphs"] == "predicted" and source["activation_peak"] == "predicted"
    assert any("max_num_seqs 256 → 64" in line for line in changed["calibration"])
    # and the text says the same
    code = main(["fit", *flags(gemma, "--max-num-seqs", "64")])
    out = capsys.readouterr().out
    assert code == 0 and "calibrated from a log" in out and "max_num_seqs 256 → 64" in out


def test_a_log_without_the_figures_is_a_clear_error(capsys, isolated, gemma, tmp_path):
    bad = tmp_path / "not-a-start-up.log"
    bad.write_text("INFO hello\n")
    assert main(["fit", *flags(gemma, "--calibrate-from", str(bad))]) == 2
    err = capsys.readouterr().err
    assert "Model loading took" in err and "Available KV cache memory" in err and "Traceback" not in err
    assert main(["fit", *flags(gemma, "--calibrate-from", str(tmp_path / "missing.log"))]) == 2
    assert "cannot read" in capsys.readouterr().err
    # a log of another utilization than these flags
    assert main(["fit", *flags(gemma, "--gpu-memory-utilization", "0.8", "--calibrate-from", str(LOG))]) == 2
    assert "--gpu-memory-utilization 0.85" in capsys.readouterr().err


def test_the_panel_fits_with_the_same_calibration_and_says_which_terms_were_measured(capsys, isolated, gemma):
    from sparktui.core.config import parse_serve_command
    from sparktui.core.machine import dgx_spark
    from sparktui.core.modelspec import spec_from_folder
    from sparktui.ui.backend import Backend

    cli = fit_json(capsys, *flags(gemma, "--calibrate-from", str(LOG)))
    config = parse_serve_command(
        [str(gemma), "--max-model-len", "131072", "--gpu-memory-utilization", "0.85", "--kv-cache-dtype", "fp8",
         "--max-num-batched-tokens", "4096"]
    )  # fmt: skip
    view = Backend().fit(config, spec_from_folder(gemma, name=str(gemma)), dgx_spark(), None)
    assert view.kv_cache_bytes == cli["kv_cache_bytes"]
    assert any(
        "calibrated from a log" in r and "weights, activation peak + non-torch, CUDA graphs" in r for r in view.reasons
    )


def test_the_table_says_per_row_which_terms_were_calibrated_and_which_predicted(capsys, isolated, gemma):
    assert main(["fit", *flags(gemma)]) == 0
    predicted = capsys.readouterr().out
    assert "− weights" in predicted and predicted.split("− weights", 1)[1].split("\n", 1)[0].endswith("predicted")
    assert main(["fit", *flags(gemma, "--max-num-seqs", "64", "--calibrate-from", str(LOG))]) == 0
    assert main(["fit", *flags(gemma)]) == 0  # the log ran at vLLM's 256 sequences: those terms are back to the model
    rows = {
        line.split("  ")[1].strip(): line for line in capsys.readouterr().out.splitlines() if line.startswith("  − ")
    }
    assert rows["− weights"].endswith("calibrated")
    assert rows["− CUDA graphs (estimate)"].endswith("predicted")


def test_a_pasted_command_calibrated_from_an_older_log_takes_that_vllm_utilization_default(capsys, isolated, tmp_path):
    # the log was written by vLLM 0.13.0, run without the flag: its default there is 0.9 (0.92 only
    # from 0.20), so the same pasted command is fitted at 0.9, not at the newest rules' 0.92
    log = FIXTURES / "vllm-logs" / "discrete_v0.13.0_qwen2.5-14b-instruct-awq_A5000_success.log"
    folder = tmp_path / "Qwen2.5-14B-Instruct-AWQ"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(load_bench().QWEN25_14B_AWQ))
    line = ["vllm", "serve", str(folder), "--dtype", "half", "--max-model-len", "8192", "--quantization", "awq"]
    d = fit_json(capsys, "--machine", "24", "--calibrate-from", str(log), "--", *line)
    assert d["vllm_version"] == "0.13.0" and d["vllm_version_source"] == f"the log {log}"
    assert d["budget"]["requested"] / d["budget"]["total"] == pytest.approx(0.9, abs=1e-9)
    assert d["left_to_vllm"][0].startswith("utilization --gpu-memory-utilization not in the command: vLLM 0.13.0 takes")


def test_a_version_given_beside_the_log_still_reads_the_log_once(capsys, isolated, gemma):
    # --vllm-version used to skip the only reading of the log, so the fit then died with an AttributeError
    d = fit_json(capsys, *flags(gemma, "--vllm-version", "0.21.0", "--calibrate-from", str(LOG)))
    assert d["vllm_version"] == "0.21.0" and d["vllm_version_source"] == "--vllm-version"
    assert set(d["kv_memory_source"].values()) == {"calibrated"}
    assert abs(d["kv_cache_bytes"] / GiB - LOGGED_KV) / LOGGED_KV < 0.005


def test_a_file_that_is_not_text_is_refused_as_inspect_log_refuses_it(capsys, isolated, gemma, tmp_path):
    # read within inspect-log's bounds and checks: a binary file (or /dev/zero, which has no end) is not a log
    blob = tmp_path / "weights.bin"
    blob.write_bytes(b"Model loading took 1.0 GiB and 2.0 seconds\n\0\0\0\xff\xfe" * 100)
    assert main(["fit", *flags(gemma, "--calibrate-from", str(blob))]) == 2
    err = capsys.readouterr().err
    assert "--calibrate-from" in err and "is not a text log (a NUL byte at offset" in err and "Traceback" not in err


TP2_LOG = FIXTURES / "vllm-logs" / "discrete_v0.10.2_qwen3-next-80b-a3b-instruct_tp2-H200_success.log"
TP2_LINE = ["--", "vllm", "serve", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--tensor-parallel-size", "2"]


def test_a_tp2_log_calibrates_its_own_release_to_the_token(capsys, isolated):
    # vLLM 0.10.2 on two H200s: "GPU KV cache size: 973,760 tokens", "14.77x" for 262,144 tokens
    d = fit_json(capsys, "--offline", "--machine", "139.81", "--vllm-version", "0.10.2", "--calibrate-from",
                 str(TP2_LOG), *TP2_LINE)  # fmt: skip
    assert d["kv_cache_tokens"] == 973_760 and set(d["kv_memory_source"].values()) == {"calibrated"}


def test_a_calibrated_fit_on_unified_memory_shows_how_far_the_next_launch_can_move(capsys, isolated, gemma):
    """One launch's non-torch figure is the whole machine's MemAvailable and does not repeat: the same flags
    launched again on that Spark (tests/fixtures/vllm-repeats, another build) got 44.61 GiB, not 41.66. The
    calibrated figure stays the log's; its range holds that launch (vllm_measured UMA_RELAUNCH)."""
    d = fit_json(capsys, *flags(gemma, "--calibrate-from", str(LOG)))
    assert abs(d["kv_cache_bytes"] / GiB - LOGGED_KV) / LOGGED_KV < 0.005
    low, high = d["kv_cache_bytes_low"] / GiB, d["kv_cache_bytes_high"] / GiB
    assert low < LOGGED_KV < 44.61 <= high
    assert abs((high - low) - 2 * 3.70) < 0.01
    assert any("launches of one configuration have moved by up to 3.7 GiB" in line for line in d["kv_memory_working"])


def test_a_calibrated_fit_on_a_gpu_of_its_own_stays_exact(capsys, isolated):
    """The other side: a discrete GPU's free memory is the GPU's own (cudaMemGetInfo), no host's
    MemAvailable, and no repeated launches say it moves: the calibrated KV memory is one figure."""
    d = fit_json(capsys, "--offline", "--machine", "139.81", "--vllm-version", "0.10.2", "--calibrate-from",
                 str(TP2_LOG), *TP2_LINE)  # fmt: skip
    assert d["kv_memory_source"]["non_torch"] == "calibrated"
    assert d["kv_cache_bytes_low"] == d["kv_cache_bytes"] == d["kv_cache_bytes_high"]


def test_a_log_of_another_release_than_the_fit_is_refused(capsys, isolated):
    # the calibration would be kept under 0.21 while 0.10.2 measured it (no graph estimate then)
    assert main(["fit", "--offline", "--machine", "139.81", "--vllm-version", "0.21", "--calibrate-from",
                 str(TP2_LOG), *TP2_LINE]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "was written by vLLM 0.10.2, but --vllm-version says 0.21" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("line", "damaged", "said"),
    [
        (
            "Available KV cache memory: 41.66 GiB",
            "Available KV cache memory: 41.6.6 GiB",
            "a memory figure of 41.6.6 GiB",
        ),
        ("Model loading took 51.54 GiB", "Model loading took 41.6.6 GiB", "a memory figure of 41.6.6 GiB"),
        ("'gpu_memory_utilization': 0.85", "'gpu_memory_utilization': 0.8.5", "a --gpu-memory-utilization of 0.8.5"),
        (
            "'gpu_memory_utilization': 0.85",
            "'gpu_memory_utilization': " + "9" * 400,
            "a --gpu-memory-utilization of 999999999999999999999999… (400 characters)",
        ),
        # words with no number in the figure's place read as no such line: "no 'Available KV cache memory' line"
        ("Available KV cache memory: 41.66 GiB", "Available KV cache memory: x GiB", "a memory figure of x GiB"),
        (
            "Model loading took 51.54 GiB memory and 332",
            "Model loading took 51.54 GiB memory and 3x2",
            "a figure of 3x2.206681",
        ),
        ("(112.04/119.63 GiB)", "(x/0 GiB)", "a memory figure of x GiB"),
        ("(112.04/119.63 GiB)", "(41.6/0 GiB)", "a device total of 0 GiB"),
    ],
    ids=[
        "kv-two-dots",
        "weights-two-dots",
        "utilization-two-dots",
        "utilization-400-digits",
        "kv-x",
        "seconds-3x2",
        "free-x-of-0",
        "total-0",
    ],
)
def test_a_log_figure_no_vllm_prints_is_exit_2_naming_its_line(capsys, isolated, gemma, tmp_path, line, damaged, said):
    # the patterns take digits and dots: "41.6.6" was a ValueError traceback (float), 400 digits of
    # utilization an infinite share of the pool; the refusal names the line as grep -n counts it (the
    # log's progress bars' carriage returns kept), as it does a token count's
    text = LOG.read_bytes().decode()
    assert text.count(line) == 1
    number = text[: text.index(line)].count("\n") + 1
    log = tmp_path / "damaged.log"
    log.write_bytes(text.replace(line, damaged).encode())
    assert main(["fit", *flags(gemma), "--calibrate-from", str(log)]) == 2
    err = capsys.readouterr().err
    assert f"--calibrate-from {log}: line {number}: {said}, which no vLLM prints; give the log vLLM wrote" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("line", "damaged", "said"),
    [
        (
            "GPU KV cache size: 884,276 tokens",
            "GPU KV cache size: " + "1234" * 100 + " tokens",
            "line 850: a KV cache size of 123412341234123412341234… (400 characters) tokens",
        ),
        (
            "Maximum concurrency for 131,072 tokens per request: 6.75x",
            "Maximum concurrency for 131,072 tokens per request: " + "9" * 300 + "x",
            "line 851: a maximum concurrency of 999999999999999999999999… (300 characters)x",
        ),
    ],
    ids=["kv-size-400-digits", "concurrency-300-digits"],
)
def test_a_token_count_no_vllm_prints_is_exit_2_naming_its_line(capsys, isolated, gemma, tmp_path, line, damaged, said):
    # a 400-digit KV cache size was read past: the damaged log calibrated the fit all the same
    text = LOG.read_bytes().decode()  # its progress bars' carriage returns kept: lines as grep -n counts them
    assert line in text.split("\n")[int(said.split()[1].rstrip(":")) - 1]
    log = tmp_path / "damaged.log"
    log.write_bytes(text.replace(line, damaged).encode())
    assert main(["fit", *flags(gemma), "--calibrate-from", str(log)]) == 2
    err = capsys.readouterr().err
    assert f"--calibrate-from {log}: {said}, which no vLLM prints" in err, err
    assert "Traceback" not in err


def test_a_launch_recorded_on_a_spark_is_found_by_the_next_fit_and_panel_fit_on_it(
    capsys, isolated, gemma, monkeypatch
):
    """A dgx-spark profile on a Spark takes its own total (121.69 GiB here, not the 119.63 planned for
    elsewhere): the launch's record, `sparktui fit` and the panel must key it by that same machine."""
    from types import SimpleNamespace

    from sparktui.commands import fit as fit_command
    from sparktui.core.config import ServeConfig
    from sparktui.core.modelspec import load_model_spec
    from sparktui.runtime.calibrations import record_launch
    from tests.support.app import SampleBackend

    kb = 127_600_748  # a Spark of the larger kind (tests/fixtures/machines/SOURCES.md)
    text = f"MemTotal:       {kb} kB\nMemFree:        90000000 kB\nMemAvailable:   110000000 kB\n"
    reading = isolated / "meminfo"
    reading.write_text(text)
    monkeypatch.setattr(fit_command, "MEMINFO", reading)
    serve = ServeConfig(
        model=str(gemma), max_model_len=131072, gpu_memory_utilization=0.85, kv_cache_dtype="fp8",
        max_num_batched_tokens=4096,
    )  # fmt: skip
    kept = record_launch(SimpleNamespace(machine="dgx-spark"), serve, LOG.read_text(), str(LOG), kb * 1024, 110 * GiB)
    assert kept.machine == "dgx-spark 121.69 GiB"
    d = fit_json(capsys, *flags(gemma))
    assert set(d["kv_memory_source"].values()) == {"measured"}, d["calibration"]
    assert "this Spark: 121.7 GiB" in d["cuda_total"]["basis"]

    class OnThisSpark(SampleBackend):
        def meminfo(self) -> str:
            return text

    backend = OnThisSpark()
    machine = backend.machine("dgx-spark")
    assert machine.label("dgx-spark") == "DGX Spark, this Spark: 121.7 GiB"
    view = backend.fit(serve, load_model_spec(str(gemma)), machine, None)
    assert set(view.term_sources.values()) == {"measured"}, view.term_sources
