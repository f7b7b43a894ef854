"""`sparktui bench` against the stub vLLM that sparktui itself launched (state record, API key,
guard), and against the timed server; its JSON, its history, and its errors (exit 2)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from sparktui.core.profiles import load_profile
from sparktui.runtime.host import proc
from sparktui.runtime.records import state as st
from sparktui.runtime.server import client
from tests.support import BENCH_RUN_KEYS, REPO, free_port, wait_for
from tests.support.timed_server import running

pytestmark = pytest.mark.slow

SMALL = ["--prompt-tokens", "8", "--output-tokens", "8", "--requests-per-user", "2"]
SLOW = ["--prompt-tokens", "8", "--requests-per-user", "50"]


def sparktui(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def start(profile: Path, env: dict[str, str]) -> dict:
    out = sparktui("serve", str(profile), "--detach", env=env)
    assert out.returncode == 0, out.stderr
    port = load_profile(profile).serve.port
    return wait_for(
        lambda: (s := st.read_state(st.state_path(port))) and s.status == "running" and s.to_dict(),
        30,
        "the stub to be running",
    )


@pytest.fixture
def stub_server(make_profile, env):
    """A stub vLLM started by sparktui, with an API key in its profile; stopped afterwards."""
    profile = make_profile(serve_extra='api-key = "sk-bench-1"')
    state = start(profile, env)
    yield state
    for s in st.list_states():
        if s.alive:
            client.kill(s.port)
        if s.tree:
            proc.sweep_orphans(s.tree.as_proc_record())


def test_json_is_one_object_with_every_figure_for_the_server_sparktui_started(stub_server, env):
    out = sparktui("bench", "--json", "--users", "1,2", *SMALL, env=env)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)  # exactly one object: anything else would not parse
    assert set(report) >= {"server", "runs", "sweep"} and report["sweep"] is None
    server = report["server"]
    assert server["managed"] and server["port"] == stub_server["port"] and server["profile"] == stub_server["profile"]
    assert server["vllm_version"].startswith("0.32.0") and server["guard_armed"] is True
    assert server["api_key_sent"] and "sk-bench-1" not in out.stdout + out.stderr
    assert "--max-model-len" in server["flags"] and server["model_path"] == "/models/tiny"
    assert [run["users"] for run in report["runs"]] == [1, 2]
    for run in report["runs"]:
        assert set(run) >= BENCH_RUN_KEYS
        assert run["requests"] == run["users"] * 2 and run["errors"] == 0
        assert run["ttft_p50_s"] > 0 and run["decode_tok_s_per_user"] > 0 and run["aggregate_tok_s"] > 0
        assert run["min_mem_available_gib"] > 0
        assert run["peak_kv_usage"] is not None  # the stub's /metrics is a real vLLM capture
        assert run["joules_per_token"] != 0  # a number where NVML has power, else null: never 0

    history = sparktui("bench", "--history", "--json", env=env)
    records = json.loads(history.stdout)["history"]
    assert len(records) == 1 and records[0]["key"]["profile"] == stub_server["profile"]
    assert records[0]["key"]["vllm_version"].startswith("0.32.0") and records[0]["runs"][1]["users"] == 2
    listing = sparktui("bench", "--history", env=env)
    assert stub_server["profile"] in listing.stdout and "2 users:" in listing.stdout


def test_the_stub_streams_as_vllm_does(stub_server):
    """SSE `data: {json}` events with cumulative usage when asked, a usage-only chunk, `data: [DONE]`."""
    body = {
        "model": "/models/tiny",
        "prompt": "one two three",
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    headers = {"Authorization": "Bearer sk-bench-1"}
    url = f"http://127.0.0.1:{stub_server['port']}/v1/completions"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=10) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        events = [line for line in reply.iter_lines() if line]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert [c["usage"]["completion_tokens"] for c in chunks[:3]] == [1, 2, 3]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:3]] == [None, None, "length"]
    assert chunks[3]["choices"] == [] and chunks[3]["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 3,
        "total_tokens": 6,
    }


def test_a_server_stopped_mid_run_gives_the_partial_results_and_exit_2(make_profile, env):
    profile = make_profile(STUB_VLLM_TOKENS_PER_S="20")
    state = start(profile, env)
    log = Path(state["log_path"])
    bench = subprocess.Popen(
        [sys.executable, "-m", "sparktui", "bench", "--json", "--users", "1", "--output-tokens", "20", *SLOW],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # the warm-up and two measured requests have reached the server
        wait_for(lambda: log.read_text().count("POST /v1/completions") >= 3, 30, "measured requests")
        client.stop(state["port"])
        stdout, stderr = bench.communicate(timeout=60)
    finally:
        if bench.poll() is None:
            bench.send_signal(signal.SIGKILL)
    assert bench.returncode == 2, stderr
    assert "ended early" in stderr and "partial" in stderr and "Traceback" not in stderr
    report = json.loads(stdout)
    assert report["partial"] and report["runs"][0]["partial"] and report["runs"][0]["requests"] >= 1
    assert "stopped" in report["error"]


def test_ctrl_c_keeps_what_was_measured(make_profile, env):
    profile = make_profile(STUB_VLLM_TOKENS_PER_S="20")
    state = start(profile, env)
    log = Path(state["log_path"])
    bench = subprocess.Popen(
        [sys.executable, "-m", "sparktui", "bench", "--json", "--users", "1", "--output-tokens", "20", *SLOW],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: log.read_text().count("POST /v1/completions") >= 3, 30, "measured requests")
        bench.send_signal(signal.SIGINT)
        stdout, stderr = bench.communicate(timeout=60)
    finally:
        if bench.poll() is None:
            bench.send_signal(signal.SIGKILL)
        client.stop(state["port"])
    assert bench.returncode == 2 and "ended early: cancelled" in stderr and "Traceback" not in stderr
    report = json.loads(stdout)
    assert report["partial"] and report["error"] == "cancelled" and report["runs"][0]["requests"] >= 1
    history = json.loads(sparktui("bench", "--history", "--json", env=env).stdout)["history"]
    assert history[-1]["partial"] and history[-1]["error"] == "cancelled"


def test_a_disarmed_guard_is_refused(stub_server, env):
    client.set_guard(stub_server["port"], armed=False)
    out = sparktui("bench", *SMALL, env=env)
    assert out.returncode == 2 and "guard" in out.stderr and "disarmed" in out.stderr
    # how to arm it from the command line, not only the panel's key
    assert f"`sparktui set-guard --port {stub_server['port']} --arm`" in out.stderr


def test_an_unknown_model_is_exit_2(stub_server, env):
    out = sparktui("bench", "--model", "gpt-9", *SMALL, env=env)
    assert out.returncode == 2 and "--model gpt-9" in out.stderr and "/models/tiny" in out.stderr


def test_no_server_and_a_refused_port_are_exit_2(env):
    out = sparktui("bench", env=env)
    assert out.returncode == 2 and "no server is running" in out.stderr and "Traceback" not in out.stderr
    port = free_port()
    out = sparktui("bench", "--port", str(port), env=env)
    assert out.returncode == 2 and f"cannot connect to http://127.0.0.1:{port}" in out.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--users", "1,x"], "--users 1,x: expected positive whole numbers"),
        (["--users", "0"], "--users 0"),
        (["--output-tokens", "1"], "--output-tokens 1"),
        (["--sweep", "--target-tok-s", "10"], "--sweep needs both targets"),
        (["--target-ttft-s", "1"], "add --sweep"),
        (["--vllm-executable", "/usr/bin/vllm"], "--vllm-executable is for --vllm: add --vllm"),
        (["--depth", "0,x"], "--depth 0,x: expected token counts"),
        (["--depth", "0,4096", "--vllm"], "--vllm runs vllm bench serve's levels: drop --depth"),
        (["--vllm", "--sweep", "--target-tok-s", "1", "--target-ttft-s", "1"], "--vllm runs fixed levels"),
    ],
)
def test_bad_flags_are_named(env, args, message):
    out = sparktui("bench", *args, env=env)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_sweep_reports_the_most_users_meeting_both_targets(env):
    # two at a time: a third user waits a whole request (0.45 s) for a slot, so TTFT 0.1 s → 0.55 s
    with running(ttft=0.1, rate=20, max_running=2) as (url, _):
        port = url.rsplit(":", 1)[1]
        out = sparktui(
            "bench", "--port", port, "--sweep", "--target-tok-s", "10", "--target-ttft-s", "0.35", "--max-users", "4",
            *SMALL, env=env,
        )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "sweep: at most 2 users meet" in out.stdout and "3 users break it (ttft)" in out.stdout


def test_vllm_levels_print_the_servers_own_ttft_beside_the_clients(tmp_path, env):
    """`--vllm` against a server on a bare port: the text table has vLLM's server-side TTFT column
    and, with a `vllm` whose version is unknown, says its test request is in the server's count."""
    from tests.runtime.test_stub_vllm import Stub, healthy
    from tests.runtime.test_vllm_bench import FAKE_BENCH

    stub = Stub(tmp_path, STUB_VLLM_TTFT_S="0.05")
    try:
        wait_for(lambda: healthy(stub.port), what="/health 200")
        exe = tmp_path / "bin" / "vllm-bench"
        exe.write_text(FAKE_BENCH.format(python=sys.executable))
        exe.chmod(0o700)
        out = sparktui(
            "bench", "--port", str(stub.port), "--vllm", "--vllm-executable", str(exe), "--users", "1", *SMALL, env=env
        )
    finally:
        stub.cleanup()
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()[1:3]
    assert "server TTFT mean/med/p99 ms" in header
    mean, median, p99 = (float(x) for x in row.split()[2].split("/"))
    assert mean >= 50 and 0 < median <= p99
    assert "1 user: the server's figures include vllm bench serve's initial test request" in out.stdout


def test_history_says_1_user_not_1_users(isolated, capsys):
    # in the test's own state dir: it wrote its run into the real ~/.local/state history (and read back whatever was there)
    # `sparktui bench --history` printed "1 users: … tok/s each"
    from sparktui.cli import main
    from sparktui.runtime.bench.history import append_history
    from sparktui.runtime.bench.results import BenchSettings
    from sparktui.runtime.bench.run import run_bench
    from sparktui.runtime.bench.target import Target

    settings = BenchSettings(users=[1], prompt_tokens=8, output_tokens=4, requests_per_user=1)
    with running(ttft=0.05, rate=100) as (url, _):
        append_history(run_bench(Target(url, int(url.rsplit(":", 1)[1]), None, None, None), settings))
    assert main(["bench", "--history"]) == 0
    levels = capsys.readouterr().out.splitlines()[1]
    assert levels.startswith("    1 user: "), levels
