"""Cases bench/fuzz_inputs.py found: each gave a traceback or a hang before its fix; now bad input
is exit 2 with a message naming the file or flag (or is skipped where the rest of the file is good)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest

from sparktui.paths import bench_history_path
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
