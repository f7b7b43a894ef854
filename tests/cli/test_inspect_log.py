"""`sparktui inspect-log`: the summary of every fixture log, readable and as JSON."""

from __future__ import annotations

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
    assert got == expected
    assert (failure or {}).get("kind") == failure_kind


def test_readable_output_explains_the_failure(fixtures, capsys):
    name = "vllm-logs/spark_v0.25.1_laguna-s-2.1-int4_kv-cache-too-small_fail.log"
    assert main(["inspect-log", str(fixtures / name)]) == 0
    out = capsys.readouterr().out
    assert "poolside/Laguna-S-2.1-INT4" in out
    assert "kv_too_small" in out and "--max-model-len 121840" in out
    assert "failed during kv cache" in out


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
