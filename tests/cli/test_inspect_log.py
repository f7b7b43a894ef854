"""`sparktui inspect-log`: the summary of every fixture log, readable and as JSON."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from sparktui.cli import main
from tests.core.test_vllm_log import EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_json_matches_the_hand_checked_table(fixtures, name, capsys):
    assert main(["inspect-log", str(fixtures / name), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    expected, failure_kind = EXPECTED[name]
    failure = got.pop("failure")
    phase, reached, launches = got.pop("phase"), got.pop("reached"), got.pop("launches")
    assert got == expected
    assert (failure or {}).get("kind") == failure_kind
    assert (phase == "failed") == (failure_kind is not None) and (phase == "ready") == expected["ready"]
    assert reached != "failed" and launches in (0, 1)  # an excerpt may start after the launch line


def test_json_has_the_phase_and_launches_the_text_shows(fixtures, tmp_path, capsys):
    # --json left out the phase ("failed during kv cache") and the launch count the text shows
    name = "vllm-logs/spark_v0.25.1_laguna-s-2.1-int4_kv-cache-too-small_fail.log"
    assert main(["inspect-log", str(fixtures / name), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["phase"] == "failed" and got["reached"] == "kv_cache" and got["launches"] == 1
    twice = tmp_path / "twice.log"
    twice.write_bytes((fixtures / name).read_bytes() * 2)
    assert main(["inspect-log", str(twice)]) == 0
    assert "launches         2 in this file" in capsys.readouterr().out
    assert main(["inspect-log", str(twice), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["launches"] == 2


def test_readable_output_explains_the_failure(fixtures, capsys):
    name = "vllm-logs/spark_v0.25.1_laguna-s-2.1-int4_kv-cache-too-small_fail.log"
    assert main(["inspect-log", str(fixtures / name)]) == 0
    out = capsys.readouterr().out
    assert "poolside/Laguna-S-2.1-INT4" in out
    assert "kv_too_small" in out and "--max-model-len 121840" in out
    assert "failed during kv cache" in out


@pytest.mark.slow  # starts a process
def test_reads_standard_input_like_a_file(fixtures, capsys):
    # a log full of progress bars redrawn with carriage returns
    path = fixtures / "vllm-logs" / "discrete_v0.13.0_qwen2.5-14b-instruct-awq_A5000_success.log"
    out = subprocess.run(
        [sys.executable, "-m", "sparktui", "inspect-log", "-", "--json"], input=path.read_bytes(), capture_output=True
    )
    assert out.returncode == 0, out.stderr
    main(["inspect-log", str(path), "--json"])
    assert json.loads(out.stdout) == json.loads(capsys.readouterr().out)
    assert json.loads(out.stdout)["kv_cache_tokens"] == 56736


@pytest.mark.slow  # starts a process
def test_missing_file_is_a_user_error_naming_it(tmp_path):
    missing = tmp_path / "no-such.log"
    out = subprocess.run(
        [sys.executable, "-m", "sparktui", "inspect-log", str(missing)], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert str(missing) in out.stderr and "No such file" in out.stderr


def test_directory_is_a_user_error(tmp_path, capsys):
    assert main(["inspect-log", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and err.startswith("sparktui: ")


def _inspect(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparktui", "inspect-log", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow  # starts a process
def test_empty_log_is_a_clear_user_error(tmp_path):
    empty = tmp_path / "vllm.log"
    empty.write_bytes(b"")
    out = _inspect(str(empty))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert str(empty) in out.stderr and "is empty" in out.stderr
    assert "OOM" not in out.stdout + out.stderr
    blank = tmp_path / "blank.log"
    blank.write_text("\n  \n\n")
    out = _inspect(str(blank))
    assert out.returncode == 2 and "blank" in out.stderr


@pytest.mark.slow  # starts a process
def test_binary_file_is_refused_not_summarised(tmp_path):
    blob = tmp_path / "model.safetensors"
    blob.write_bytes(bytes(range(256)) * 64)
    out = _inspect(str(blob))
    assert out.returncode == 2 and "not a text log" in out.stderr and str(blob) in out.stderr


@pytest.mark.slow
def test_a_device_that_never_ends_is_read_within_bounds():
    out = _inspect("/dev/urandom", timeout=30)
    assert out.returncode == 2 and "not a text log" in out.stderr


@pytest.mark.slow
def test_an_endless_pipe_is_cut_with_a_note(monkeypatch, capsys):
    # `yes | sparktui inspect-log -`: never ends by itself; the bound ends it, and says so
    from sparktui.commands import inspect_log

    monkeypatch.setattr(inspect_log, "MAX_LINES", 20_000)  # the real bound, 4M lines, takes ~20 s here
    yes = subprocess.Popen(["yes", "INFO 01-01 00:00:00 [x.py:1] still going"], stdout=subprocess.PIPE)
    try:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(yes.stdout))
        assert main(["inspect-log", "-", "--json"]) == 0
    finally:
        yes.kill()
        yes.wait()
    out, err = capsys.readouterr()
    assert "read only the first 20,000 lines" in err
    assert json.loads(out)["failure"]["kind"] == "log_ended"


def test_prefixed_log_through_the_cli(fixtures, tmp_path, capsys):
    src = fixtures / "vllm-logs" / "spark_v0.25.1_laguna-s-2.1-nvfp4-dflash_success.log"
    compose = tmp_path / "compose.log"
    compose.write_text("".join(f"vllm-1  | {line}" for line in src.read_text().splitlines(keepends=True)))
    assert main(["inspect-log", str(compose), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["kv_cache_tokens"] == 94135 and got["version"] == "0.25.1" and got["ready"] is True


def test_readable_output_for_a_log_that_ends_mid_start(fixtures, capsys):
    name = "vllm-logs/spark_v0.25.1_laguna-s-2.1-nvfp4_host-oom-killed_truncated.log"
    assert main(["inspect-log", str(fixtures / name)]) == 0
    out = capsys.readouterr().out
    assert "log_ended" in out and "The log ends during profiling with no error" in out
    assert "killed" not in out.split("fix", 1)[0]  # the diagnosis does not claim a kill it cannot see


def test_cuda_oom_advice_does_not_send_you_back_to_inspect_log(tmp_path, capsys):
    from tests.core.test_vllm_log import ACCELERATOR_OOM

    log = tmp_path / "oom.log"
    log.write_text("\n".join(ACCELERATOR_OOM) + "\n")
    assert main(["inspect-log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "cuda_oom" in out and "inspect-log" not in out


def _damaged(fixtures, tmp_path, kv: str, concurrency: str = "54.44"):
    """The gpt-oss start-up with its KV memory and concurrency figures replaced (a damaged or edited log)."""
    name = "vllm-logs/spark_v0.13.0-nv26.01_gpt-oss-20b-mxfp4-derivative_success.log"
    text = (fixtures / name).read_text()
    assert "Available KV cache memory: 12.94 GiB" in text and "per request: 54.44x" in text
    text = text.replace("Available KV cache memory: 12.94 GiB", f"Available KV cache memory: {kv} GiB")
    path = tmp_path / "damaged.log"
    path.write_text(text.replace("per request: 54.44x", f"per request: {concurrency}x"))
    return path


def _strict(text: str):
    """JSON as the standard has it: Infinity and NaN are not JSON."""

    def refuse(constant: str):
        raise AssertionError(f"{constant} in the JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    ("kv", "concurrency"),
    [("-" + "9" * 400, "54.44"), ("9" * 400, "9" * 400), ("1.2.3", "54.44")],
    ids=["minus-400-digits", "400-digits", "two-dots"],
)
def test_a_figure_no_vllm_prints_is_said_not_shown_as_infinite(fixtures, tmp_path, capsys, kv, concurrency):
    # a 400-digit figure made "KV cache memory  -inf GiB" (float overflow) and "-Infinity" in --json;
    # "1.2.3" (what the patterns' digits-and-dots take) was a ValueError traceback
    path = _damaged(fixtures, tmp_path, kv, concurrency)
    assert main(["inspect-log", str(path)]) == 0
    out = capsys.readouterr().out
    assert "inf" not in out.lower().replace("info", "")
    (row,) = [line for line in out.splitlines() if line.startswith("KV cache memory")]
    assert "not read: the log says" in row and "a number no vLLM prints" in row
    assert "phase            ready" in out and "KV cache size    282,624 tokens" in out
    assert main(["inspect-log", str(path), "--json"]) == 0
    got = _strict(capsys.readouterr().out)
    assert got["available_kv_gib"] is None and got["kv_cache_tokens"] == 282624
    assert set(got["unreadable"]) == {"available_kv_gib"} | ({"max_concurrency"} if concurrency != "54.44" else set())
    assert got["max_concurrency"] == (54.44 if concurrency == "54.44" else None)


def test_a_log_whose_figures_read_has_no_unreadable_key(fixtures, tmp_path, capsys):
    assert main(["inspect-log", str(_damaged(fixtures, tmp_path, "12.94")), "--json"]) == 0
    got = _strict(capsys.readouterr().out)
    assert "unreadable" not in got and got["available_kv_gib"] == 12.94


@pytest.mark.parametrize(
    "figures",
    ["0/0", "1.2.3/15.99", "13.58/0", "9" * 400 + "/" + "9" * 400],
    ids=["zeros", "two-dots", "zero-total", "400-digits"],
)
def test_a_free_memory_refusal_with_figures_no_vllm_prints_is_still_named(fixtures, tmp_path, capsys, figures):
    # "(13.58/0 GiB)" was a ZeroDivisionError, "(1.2.3/…)" a ValueError, 400 digits a ValueError (floor of NaN)
    name = "vllm-logs/discrete_v0.10.2_llava-1.5-7b-awq_16GB-GPU_free-memory-less-than-desired_fail.log"
    text = (fixtures / name).read_text()
    assert "Free memory on device (13.58/15.99 GiB)" in text
    path = tmp_path / "damaged.log"
    path.write_text(text.replace("(13.58/15.99 GiB)", f"({figures} GiB)"))
    assert main(["inspect-log", str(path), "--json"]) == 0
    failure = _strict(capsys.readouterr().out)["failure"]
    assert failure["kind"] == "free_memory" and "lower --gpu-memory-utilization" in failure["hint"]


def test_a_kv_cache_size_no_vllm_prints_is_said_not_shown(fixtures, tmp_path, capsys):
    # a 400-digit "GPU KV cache size" was taken as the log's KV tokens, printed with 400 digits and commas
    path = _damaged(fixtures, tmp_path, "12.94")
    digits = "1234" * 100
    path.write_text(
        path.read_text().replace("GPU KV cache size: 282,624 tokens", f"GPU KV cache size: {digits} tokens")
    )
    assert main(["inspect-log", str(path)]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("KV cache size")]
    assert row.endswith("not read: the log says '123412341234123412341234… (400 characters)', a number no vLLM prints")
    assert main(["inspect-log", str(path), "--json"]) == 0
    got = _strict(capsys.readouterr().out)
    assert got["kv_cache_tokens"] is None and set(got["unreadable"]) == {"kv_cache_tokens"}
    assert got["max_concurrency"] == 54.44  # the line after it still reads
