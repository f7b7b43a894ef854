"""`sparktui bench` against the real vLLM (CPU build 0.32.0, tiny Llama) that sparktui launched.

Same needs and fixtures as test_real_vllm.py (SPARKTUI_TEST_VLLM; a failure, not a skip, under
CI=true). About two minutes and 2 GB on a 2-core machine. Run with -s to see the figures.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_real_vllm import (  # noqa: F401  (pytest fixtures, used by name)
    SERVE_FLAGS,
    env,
    leftovers,
    profile,
    ready_state,
    run_dir,
    sparktui,
    tiny_model,
    vllm,
    workdir,
)
from tests.support import BENCH_RUN_KEYS, VLLM_BENCH_NAMES

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROMPT, OUTPUT, PER_USER = 64, 32, 2


def test_bench_at_1_and_2_users(profile, env, vllm, leftovers):  # noqa: F811
    port = int(re.search(r"port = (\d+)", profile.read_text()).group(1))
    argv, kw = sparktui("serve", str(profile), *SERVE_FLAGS, "--detach", env=env)
    started = subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)
    if started.returncode != 0:
        log = re.search(r"see (\S+\.log)", started.stderr)
        pytest.fail(started.stderr + (Path(log.group(1)).read_text()[-3000:] if log else ""))
    ready_state(port)
    try:
        bench = ["bench", "--json", "--users", "1,2", "--prompt-tokens", str(PROMPT), "--output-tokens", str(OUTPUT)]
        argv, kw = sparktui(*bench, "--requests-per-user", str(PER_USER), env=env)
        out = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kw)
        assert out.returncode == 0, out.stderr[-3000:]
        print(out.stdout)  # the figures, for whoever runs this with -s
        report = json.loads(out.stdout)
        server = report["server"]
        assert server["managed"] and server["port"] == port and server["vllm_version"].startswith("0.32.0")
        assert server["guard_armed"] is True and "--kv-cache-memory-bytes" in server["flags"]
        assert server["max_model_len"] == 512 and report["sweep"] is None and not report["partial"]
        assert [run["users"] for run in report["runs"]] == [1, 2]
        for run in report["runs"]:
            assert run.keys() >= BENCH_RUN_KEYS | VLLM_BENCH_NAMES, run
            assert run["requests"] == run["users"] * PER_USER and run["errors"] == 0
            # ignore_eos: real vLLM generates exactly the tokens asked for, and every one is counted
            assert run["output_tokens"] == run["users"] * PER_USER * OUTPUT
            # the warm-up sized the random-word prompts with vLLM's own tokenizer count
            assert abs(run["prompt_tokens_mean"] - PROMPT) <= 0.15 * PROMPT, run["prompt_tokens_mean"]
            # chunks the server wrote together arrive in one packet: their gap is 0 on the wire (vLLM's
            # own `vllm bench serve` also reads a median ITL of 0.0 ms from this tiny CPU model)
            assert 0 < run["ttft_p50_s"] <= run["ttft_p95_s"] and 0 <= run["itl_p50_s"] <= run["itl_p95_s"]
            assert run["itl_p95_s"] > 0
            assert run["decode_tok_s_per_user"] > 0 and run["aggregate_tok_s"] > 0
            # 96 tokens of a 64 MiB cache is well under 1%: read, but it may round to 0
            assert run["min_mem_available_gib"] > 0 and 0 <= run["peak_kv_usage"] <= 1
            assert run["joules_per_token"] is None or run["joules_per_token"] > 0  # null without NVML power

        # vLLM's own load generator, from the installation serving the model, at the same levels
        argv, kw = sparktui(*bench, "--requests-per-user", str(PER_USER), "--vllm", env=env)
        out = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kw)
        assert out.returncode == 0, out.stderr[-3000:]
        print(out.stdout)
        ours = {run["users"]: run for run in report["runs"]}
        theirs = json.loads(out.stdout)
        assert theirs["tool"] == "vllm bench serve" and theirs["executable"] == str(vllm)
        assert [run["users"] for run in theirs["runs"]] == [1, 2]
        for run in theirs["runs"]:
            # the same names, read from vLLM's own result file
            assert run.keys() >= VLLM_BENCH_NAMES and run["max_concurrency"] == run["users"]
            assert run["completed"] == run["users"] * PER_USER and run["failed"] == 0
            assert run["total_output_tokens"] == run["users"] * PER_USER * OUTPUT
            assert run["mean_ttft_ms"] > 0 and run["request_throughput"] > 0
            # vLLM's own TTFT histogram over this level alone: 0.32 skips the ready check's test
            # request, so the server counted exactly the level's requests; its interval (arrival in
            # vLLM → first token handed out) lies inside the client's
            assert run["server_ttft_window"] == "interval" and run["server_ttft_test_request"] is False
            assert run["server_ttft_requests"] == run["completed"]
            assert 0 < run["server_mean_ttft_ms"] <= run["mean_ttft_ms"]
            assert 0 < run["server_median_ttft_ms"] <= run["server_p99_ttft_ms"]
            mine = ours[run["users"]]
            print(
                f"{run['users']} users: TTFT median sparktui {mine['median_ttft_ms']:.1f} ms, vLLM {run['median_ttft_ms']:.1f} ms, "
                f"vLLM's server mean {run['server_mean_ttft_ms']:.1f} ms"
            )

        argv, kw = sparktui("bench", "--history", "--json", env=env)
        history = json.loads(subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw).stdout)
        (record,) = history["history"]
        assert record["key"]["vllm_version"].startswith("0.32.0") and record["key"]["model"] == server["model"]
    finally:
        argv, kw = sparktui("stop", "--port", str(port), env=env)
        subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)
