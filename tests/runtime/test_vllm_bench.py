"""`sparktui bench --vllm`: which `vllm` runs `vllm bench serve`, and with what (the run itself is
checked against the real CPU build in tests/e2e/test_bench_real_vllm.py)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from sparktui.errors import UserError
from sparktui.runtime.bench import vllm_driver
from sparktui.runtime.bench.results import BenchSettings
from sparktui.runtime.bench.target import Target


def target(state: dict | None, key: str | None = None) -> Target:
    return Target("http://127.0.0.1:9", 9, key, None, state)


def test_a_server_in_a_container_is_refused_with_what_to_run_instead():
    state = {"argv": ["/usr/bin/docker", "run", "--rm", "img", "vllm", "serve", "m"], "model": "m"}
    with pytest.raises(UserError, match="docker exec <container> vllm bench serve"):
        vllm_driver.plan(target(state), None, None)


def test_the_argv_asks_for_each_level_as_sparktui_runs_it_and_never_carries_the_key(tmp_path: Path):
    exe = tmp_path / "vllm"
    exe.write_text("#!/bin/sh\n")
    os.chmod(exe, 0o700)
    settings = BenchSettings(users=[4], prompt_tokens=100, output_tokens=50, requests_per_user=3, api="chat")
    plan = vllm_driver.VllmBenchPlan(str(exe), "served", "/models/m")
    argv = vllm_driver.argv_for(plan, target(None, key="secret"), settings, 4, tmp_path)
    pairs = dict(itertools.pairwise(argv))
    assert argv[:3] == [str(exe), "bench", "serve"]
    assert pairs["--backend"] == "openai-chat" and pairs["--endpoint"] == "/v1/chat/completions"
    assert pairs["--max-concurrency"] == "4" and pairs["--num-prompts"] == "12"
    assert pairs["--random-input-len"] == "100" and pairs["--random-output-len"] == "50" and "--ignore-eos" in argv
    assert pairs["--model"] == "served" and pairs["--tokenizer"] == "/models/m"
    assert "secret" not in " ".join(argv)
