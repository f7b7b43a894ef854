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


def test_the_ready_check_is_skipped_only_where_vllm_bench_serve_can_skip_it(tmp_path: Path):
    """0.11.0's benchmark() guards its initial test request with `ready_check_timeout_sec > 0`;
    0.10.2 always sends it (and fails at once with 0), so it must not be given 0 there."""
    settings = BenchSettings(users=[1], prompt_tokens=8, output_tokens=8, requests_per_user=1)
    for version, skips in (("0.10.2", False), ("0.11.0", True), ("0.32.0", True), (None, False)):
        assert vllm_driver.skips_ready_check(version) is skips
        plan = vllm_driver.VllmBenchPlan("/venv/bin/vllm", "served", "/models/m", version)
        argv = vllm_driver.argv_for(plan, target(None), settings, 1, tmp_path)
        assert (dict(itertools.pairwise(argv)).get("--ready-check-timeout-sec") == "0") is skips, version


# Stands in for `vllm bench serve` where the server is the stub: it sends what vLLM's load generator
# sends (its initial test request unless --ready-check-timeout-sec 0, then the prompts at the given
# concurrency, streamed) and writes the result file's names; the figures under test are the server's.
FAKE_BENCH = """#!{python}
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
import httpx
a = dict(zip(sys.argv, sys.argv[1:]))
url = a["--base-url"] + a["--endpoint"]
def one(_):
    body = {{"model": a["--model"], "prompt": "w " * int(a["--random-input-len"]), "stream": True,
            "max_tokens": int(a["--random-output-len"]), "ignore_eos": True}}
    start = time.monotonic()
    first = None
    with httpx.stream("POST", url, json=body, timeout=60) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: {{") and first is None:
                first = time.monotonic() - start
    return first
if a.get("--ready-check-timeout-sec") != "0":
    one(0)
n = int(a["--num-prompts"])
with ThreadPoolExecutor(int(a["--max-concurrency"])) as pool:
    ttfts = list(pool.map(one, range(n)))
out = {{"completed": n, "failed": 0, "max_concurrency": int(a["--max-concurrency"]),
        "mean_ttft_ms": 1000 * sum(ttfts) / n}}
with open(a["--result-dir"] + "/" + a["--result-filename"], "w") as f:
    json.dump(out, f)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("version", "test_request"), [("0.32.0", False), ("0.10.2", True)])
def test_each_level_carries_the_servers_own_ttft_over_that_level_alone(tmp_path, version, test_request):
    import sys

    from tests.runtime.test_stub_vllm import Stub, healthy
    from tests.support import wait_for

    stub = Stub(tmp_path, STUB_VLLM_TTFT_S="0.2", STUB_VLLM_TOKENS_PER_S="400")
    try:
        wait_for(lambda: healthy(stub.port), what="/health 200")
        exe = tmp_path / "vllm"
        exe.write_text(FAKE_BENCH.format(python=sys.executable))
        os.chmod(exe, 0o700)
        served = Target(f"http://127.0.0.1:{stub.port}", stub.port, None, None, None)
        plan = vllm_driver.VllmBenchPlan(str(exe), "/models/tiny", "/models/tiny", version)
        settings = BenchSettings(users=[2], prompt_tokens=8, output_tokens=4, requests_per_user=3)
        row = vllm_driver.run_level(plan, served, settings, 2)
    finally:
        stub.cleanup()
    # the window is this level's: the server's lifetime count (the capture it replays has 2) is not in
    # it, and vLLM's initial test request is there only where it cannot be skipped
    assert row["server_ttft_window"] == "interval" and row["server_ttft_test_request"] is test_request
    assert row["server_ttft_requests"] == 6 + test_request
    # the server's interval lies inside the client's: it starts later and ends sooner
    assert 200 <= row["server_mean_ttft_ms"] <= row["mean_ttft_ms"]
    # the percentiles are interpolated inside vLLM's buckets: 0.2 s lies in (0.1, 0.25]
    assert 100 <= row["server_median_ttft_ms"] <= row["server_p99_ttft_ms"]


@pytest.mark.slow
def test_a_server_whose_metrics_do_not_answer_leaves_the_server_figures_empty(tmp_path: Path):
    import sys

    exe = tmp_path / "vllm"
    exe.write_text(
        f"#!{sys.executable}\nimport json, sys\na = dict(zip(sys.argv, sys.argv[1:]))\n"
        'json.dump({"completed": 1, "failed": 0}, open(a["--result-dir"] + "/" + a["--result-filename"], "w"))\n'
    )
    os.chmod(exe, 0o700)
    plan = vllm_driver.VllmBenchPlan(str(exe), "m", "m", "0.32.0")
    # nothing listens on port 9: /metrics does not answer, the level's own figures still come back
    row = vllm_driver.run_level(plan, target(None), BenchSettings(users=[1], requests_per_user=1), 1)
    assert row["completed"] == 1
    assert all(row[k] is None for k in vllm_driver.SERVER_TTFT_KEYS)
