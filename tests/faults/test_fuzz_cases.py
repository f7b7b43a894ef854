"""Cases bench/fuzz_inputs.py found: each gave a traceback or a hang before its fix; now bad input
is exit 2 with a message naming the file or flag (or is skipped where the rest of the file is good)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest

from sparktui.paths import bench_history_path, state_dir
from tests.support import REPO
from tests.support.faults import sparktui

pytestmark = pytest.mark.slow  # every test runs sparktui (or a bench script) as a process

TINY_CONFIG = REPO / "tests" / "fixtures" / "vllm-cpu" / "tiny-llama-config.json"
RECORD = {
    "schema_version": 1,
    "recorded_at": 1796167819.0,
    "key": {"profile": "p", "model": "m", "vllm_version": "0.32.0", "flags": []},
    "server": {"url": "http://127.0.0.1:8000", "port": 8000, "model": "m", "profile": "p", "managed": True},
    "settings": {"users": [1], "prompt_tokens": 8, "output_tokens": 4, "requests_per_user": 1},
    "runs": [],
}


def refused(out, *words: str) -> None:
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr and all(w in out.stderr for w in words), out.stderr


def test_the_activation_oracle_names_an_unknown_model(env):
    # bench/activation_oracle.py nosuchmodel was a FileNotFoundError from deep in fixture_config
    script = str(REPO / "bench" / "activation_oracle.py")
    out = subprocess.run([sys.executable, script, "nosuchmodel"], capture_output=True, text=True, timeout=60, env=env)
    refused(out, "unknown model 'nosuchmodel'", "tests/fixtures/model-configs", "meta-llama__Meta-Llama-3.1-8B")


def test_a_json_flag_nested_thousands_deep_is_refused_naming_the_flag(env):
    # fuzz json-flag: `--speculative-config '[[[…'` was a RecursionError out of json.loads
    out = sparktui("fit", "--offline", "--", "vllm", "serve", "x/y", "--speculative-config", "[" * 50_000, env=env)
    refused(out, "--speculative-config", "expected a JSON object", "(50,000 characters)")


def test_a_dotted_json_flag_nested_thousands_deep_is_refused_naming_it(env):
    # fuzz json-flag: `--speculative-config.method '[[[…'` was a RecursionError in vllm_argv.dotted_value
    out = sparktui(
        "fit", "--offline", "--", "vllm", "serve", "x/y", "--speculative-config.method", "[" * 50_000, env=env
    )
    refused(out, "--speculative-config.method", "nested a few levels deep")


def test_a_history_line_that_is_not_utf8_is_skipped_and_the_rest_listed(env):
    # fuzz bench-history: one damaged byte made `bench --history` a UnicodeDecodeError
    path = bench_history_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\xed\xa0\x80" + json.dumps(RECORD).encode() + b"\n" + json.dumps(RECORD).encode() + b"\n")
    out = sparktui("bench", "--history", "--json", env=env, timeout=30)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out
    assert len(json.loads(out.stdout)["history"]) == 1


def test_a_fifo_as_the_history_hangs_neither_fit_nor_bench(tmp_path, env):
    # fuzz bench-history: `fit` opened a FIFO there and waited for a writer forever
    path = bench_history_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_bytes(TINY_CONFIG.read_bytes())
    fit = sparktui("fit", "--offline", "--model", str(tmp_path / "m"), env=env, timeout=20)
    assert fit.returncode == 0 and str(path) in fit.stderr and "FIFO" in fit.stderr, fit
    refused(sparktui("bench", "--history", env=env, timeout=20), str(path), "FIFO")


@pytest.mark.parametrize("kind", ["fifo", "deep"])
def test_a_safetensors_file_that_is_a_fifo_or_deep_json_is_named(kind, tmp_path, env):
    # fuzz model-config: a FIFO as model.safetensors hung `fit --model` (open() waited for a writer);
    # a header of 100,000 '[' was a RecursionError
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_bytes(TINY_CONFIG.read_bytes())
    weights = tmp_path / "m" / "model.safetensors"
    if kind == "fifo":
        os.mkfifo(weights)
    else:
        weights.write_bytes(struct.pack("<Q", 100_000) + b"[" * 100_000)
    out = sparktui("fit", "--offline", "--model", str(tmp_path / "m"), env=env, timeout=20)
    refused(out, str(weights), "FIFO" if kind == "fifo" else "its header is not JSON")


def flight_folder():
    folder = state_dir() / "flight"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.parametrize("kind", ["fifo", "deep"])
def test_a_flight_header_that_is_a_fifo_or_deep_json_hangs_or_breaks_no_command(kind, env):
    # fuzz flight: every command's look for post-mortems (cli._may_have_postmortems) read
    # state/flight/*.json with read_text: a FIFO there hung `sparktui status`; '[[[…' was a RecursionError
    header = flight_folder() / "47001.json"
    if kind == "fifo":
        os.mkfifo(header)
    else:
        header.write_text("[" * 100_000)
    for command in ("status", "postmortem"):
        out = sparktui(command, env=env, timeout=20)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out


def test_a_flight_header_with_a_field_of_the_wrong_type_is_skipped(env):
    # fuzz flight: "started_at": null in a header from another boot was a TypeError in check_after_reboot
    header = {"port": 47002, "profile": "p", "model": "m", "boot_id": "another-boot", "started_at": None,
              "supervisor_pid": 1, "clean_stop": False}  # fmt: skip
    (flight_folder() / "47002.json").write_text(json.dumps(header))
    out = sparktui("postmortem", env=env, timeout=20)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out


def test_a_history_record_whose_runs_are_no_list_is_skipped_by_the_fit(tmp_path, env):
    # fuzz bench-history: {"runs": 7} made the fit's speed estimate a TypeError in bench_history._record_runs
    path = bench_history_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**RECORD, "runs": 7}) + "\n")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_bytes(TINY_CONFIG.read_bytes())
    out = sparktui("fit", "--offline", "--model", str(tmp_path / "m"), env=env, timeout=30)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out


def test_a_whole_number_past_64_bits_is_refused_naming_the_field(tmp_path, env):
    # fuzz profile, seed 2: max-num-batched-tokens = "9999…" (400 digits) passed the flag check and was an
    # OverflowError in the fit's arithmetic (int / GiB)
    profile = tmp_path / "p.toml"
    profile.write_text(f'[serve]\nmodel = "{tmp_path}/m"\nmax-num-batched-tokens = "{"9" * 400}"\n')
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_bytes(TINY_CONFIG.read_bytes())
    refused(sparktui("fit", str(profile), env=env, timeout=30), str(profile), "max-num-batched-tokens", "64-bit")
