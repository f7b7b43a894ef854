"""The benchmark's figures against a server whose timing is known (tests/support/timed_server.py),
and what it does with bad input: no server, a refused key, an unknown model, a server that dies."""

from __future__ import annotations

import threading
import time

import pytest

from sparktui.errors import UserError
from sparktui.runtime.bench import watcher
from sparktui.runtime.bench.figures import percentile
from sparktui.runtime.bench.history import append_history, previous_run, read_history
from sparktui.runtime.bench.limits import validate
from sparktui.runtime.bench.results import BenchProgress, BenchReport, BenchSettings, SweepTargets
from sparktui.runtime.bench.run import run_bench
from sparktui.runtime.bench.sweep import ladder_of
from sparktui.runtime.bench.target import Target, recorded_flags
from sparktui.runtime.host.memory import read_gpu
from tests.support import BENCH_RUN_KEYS, VLLM_BENCH_NAMES, free_port, wait_for
from tests.support.timed_server import running

pytestmark = pytest.mark.slow

TTFT, RATE, OUTPUT, PER_USER = 1.0, 20.0, 24, 3
WITHIN = 0.05
# The client's own event loop woke this much late: its timestamps then say how loaded this
# machine was (2 cores shared by many), not how the server streams. Such a run is repeated.
STARVED_S = 0.05


def target(url: str, key: str | None = None) -> Target:
    return Target(url, int(url.rsplit(":", 1)[1]), key, None, None)


def close(measured: float | None, truth: float) -> bool:
    return measured is not None and abs(measured - truth) <= WITHIN * truth


def unstarved(url: str, settings: BenchSettings, attempts: int = 3) -> BenchReport:
    lags = []
    for _ in range(attempts):
        report = run_bench(target(url), settings)
        lags.append([r.client_lag_max_s for r in report.runs])
        if all(r.client_lag_max_s is not None and r.client_lag_max_s < STARVED_S for r in report.runs):
            return report
    pytest.fail(f"this machine starved the benchmark's client on every attempt (loop lag, s: {lags})")


def test_figures_match_a_server_of_known_timing_at_1_and_4_users():
    settings = BenchSettings(users=[1, 4], prompt_tokens=32, output_tokens=OUTPUT, requests_per_user=PER_USER)
    with running(ttft=TTFT, rate=RATE, kv_slots=16) as (url, _):
        report = unstarved(url, settings)
    assert not report.partial and report.error is None
    request_s = TTFT + (OUTPUT - 1) / RATE  # first token, then one every 1/RATE
    for level, users in zip(report.runs, (1, 4), strict=True):
        truth_aggregate = users * PER_USER * OUTPUT / (PER_USER * request_s)
        assert level.users == users and level.requests == users * PER_USER and level.errors == 0
        assert close(level.ttft_p50_s, TTFT), (users, level.ttft_p50_s)
        assert close(level.decode_tok_s_per_user, RATE), (users, level.decode_tok_s_per_user)
        assert close(level.aggregate_tok_s, truth_aggregate), (users, level.aggregate_tok_s, truth_aggregate)
        assert close(level.itl_p50_s, 1 / RATE), (users, level.itl_p50_s)
        assert level.output_tokens == users * PER_USER * OUTPUT
        assert level.prompt_tokens_mean == 32  # the warm-up sized the prompts by the server's count
        assert level.peak_kv_usage == users / 16  # the server's /metrics: running / kv slots
        assert level.min_mem_available_gib is not None and level.min_mem_available_gib > 0
        assert level.client_cpu_s_per_request is not None and level.client_cpu_s_per_request > 0
    assert report.server.model == "timed-model" and report.server.vllm_version == "timed-1.0"
    assert report.server.managed is False and report.server.guard_armed is None


def test_a_client_whose_own_event_loop_stalls_still_stamps_each_token_when_it_came():
    """Each finished request blocks the client's event loop 0.3 s (as a starved process would be):
    the tokens of the other users' streams arrive meanwhile, and keep the time they came."""

    def stall(progress: BenchProgress) -> None:
        if progress.result is None:
            time.sleep(0.3)

    settings = BenchSettings(users=[4], prompt_tokens=8, output_tokens=OUTPUT, requests_per_user=2)
    with running(ttft=TTFT, rate=RATE) as (url, _):
        level = run_bench(target(url), settings, progress=stall).runs[0]
    assert level.errors == 0 and level.output_tokens == 4 * 2 * OUTPUT
    assert close(level.ttft_p50_s, TTFT), level.ttft_p50_s
    assert close(level.ttft_p95_s, TTFT), level.ttft_p95_s
    assert close(level.decode_tok_s_per_user, RATE), level.decode_tok_s_per_user
    assert close(level.itl_p50_s, 1 / RATE), level.itl_p50_s


def test_the_json_carries_vllm_bench_serve_names_with_its_definitions():
    """Chunks of 2 tokens: vLLM's ITL is the gap between chunks (2/RATE), its TPOT per token."""
    settings = BenchSettings(users=[2], prompt_tokens=8, output_tokens=OUTPUT, requests_per_user=2)
    with running(ttft=TTFT, rate=RATE, tokens_per_chunk=2) as (url, _):
        report = run_bench(target(url), settings)
    (run,) = report.public()["runs"]
    assert run.keys() >= VLLM_BENCH_NAMES | BENCH_RUN_KEYS, VLLM_BENCH_NAMES - run.keys()
    first = TTFT + 1 / RATE  # the first chunk goes when its second token is due
    request_s = first + (OUTPUT - 2) / RATE
    assert run["completed"] == 4 and run["failed"] == 0 and run["max_concurrency"] == 2
    assert run["total_output_tokens"] == 4 * OUTPUT and run["total_input_tokens"] == 4 * 8
    assert close(run["median_ttft_ms"] / 1000, first) and close(run["mean_ttft_ms"] / 1000, first)
    assert close(run["mean_tpot_ms"] / 1000, (OUTPUT - 2) / RATE / (OUTPUT - 1))
    assert close(run["median_itl_ms"] / 1000, 2 / RATE) and close(run["itl_p50_s"], 1 / RATE)
    assert close(run["mean_e2el_ms"] / 1000, request_s)
    assert close(run["request_throughput"], 2 / request_s)
    assert close(run["output_throughput"], run["aggregate_tok_s"])
    assert run["p99_ttft_ms"] >= run["median_ttft_ms"] and run["std_ttft_ms"] >= 0


def test_chunks_carrying_several_tokens_count_every_token():
    settings = BenchSettings(users=[2], prompt_tokens=8, output_tokens=OUTPUT, requests_per_user=1, api="chat")
    with running(ttft=TTFT, rate=RATE, tokens_per_chunk=4) as (url, _):
        level = unstarved(url, settings).runs[0]
    assert level.output_tokens == 2 * OUTPUT
    # chunks of 4: the first arrives when its 4th token is due; decode is still RATE per second
    assert close(level.ttft_p50_s, TTFT + 3 / RATE)
    assert close(level.decode_tok_s_per_user, RATE)
    assert close(level.itl_p50_s, 1 / RATE)


def test_power_is_null_where_nvml_reports_none_never_zero():
    settings = BenchSettings(users=[1], prompt_tokens=8, output_tokens=4, requests_per_user=1)
    with running(ttft=0.05, rate=100) as (url, _):
        level = run_bench(target(url), settings).runs[0]
    gpu = read_gpu(processes=False)
    if gpu.available and any(g.power_w is not None for g in gpu.gpus):
        assert level.joules_per_token is not None and level.joules_per_token > 0
    else:
        assert level.joules_per_token is None and level.mean_power_w is None


def test_joules_per_token_integrate_the_power_nvml_reports(monkeypatch):
    monkeypatch.setattr(watcher, "gpu_power_w", lambda: 100.0)  # a GPU drawing a steady 100 W
    settings = BenchSettings(users=[2], prompt_tokens=8, output_tokens=20, requests_per_user=1)
    with running(ttft=0.2, rate=20) as (url, _):
        level = run_bench(target(url), settings).runs[0]
    assert level.mean_power_w == pytest.approx(100.0)
    assert level.joules_per_token == pytest.approx(100.0 * level.wall_s / level.output_tokens)


def test_the_api_key_is_sent_and_a_missing_one_is_explained():
    settings = BenchSettings(users=[1], prompt_tokens=8, output_tokens=4, requests_per_user=1)
    with running(ttft=0.05, rate=100, api_key="s3cret") as (url, _):
        report = run_bench(target(url, "s3cret"), settings)
        assert report.runs[0].errors == 0 and report.server.api_key_sent
        assert "s3cret" not in report.model_dump_json()
        with pytest.raises(UserError, match="API key"):
            run_bench(target(url), settings)


def test_an_unknown_model_is_a_clear_error():
    settings = BenchSettings(users=[1], prompt_tokens=8, output_tokens=4, model="no-such-model")
    with (
        running(ttft=0.05, rate=100) as (url, _),
        pytest.raises(UserError, match=r"--model no-such-model.*timed-model"),
    ):
        run_bench(target(url), settings)


def test_a_refused_connection_is_a_clear_error():
    with pytest.raises(UserError, match=r"cannot connect to http://127.0.0.1:\d+: nothing is listening"):
        run_bench(target(f"http://127.0.0.1:{free_port()}"), BenchSettings())


def test_a_prompt_longer_than_the_model_allows_names_the_flags():
    settings = BenchSettings(users=[1], prompt_tokens=4000, output_tokens=200)
    with running(ttft=0.05, rate=100) as (url, _), pytest.raises(UserError, match=r"--prompt-tokens 4000.*4096"):
        run_bench(target(url), settings)


def test_a_server_that_dies_mid_run_leaves_a_partial_result():
    settings = BenchSettings(users=[1, 2], prompt_tokens=8, output_tokens=10, requests_per_user=3)
    # the warm-up is request 1, the 1-user level 2..4, the 2-user level 5 and 6, then it dies mid-stream in 7
    with running(ttft=0.05, rate=100, exit_after_requests=6) as (url, _):
        report = run_bench(target(url), settings)
    assert report.partial and "stopped answering" in (report.error or "")
    assert [r.users for r in report.runs] == [1, 2]
    assert not report.runs[0].partial and report.runs[0].requests == 3
    assert report.runs[1].partial and report.runs[1].requests >= 1


def test_cancel_stops_the_run_and_keeps_what_it_measured():
    cancel = threading.Event()
    seen: list[BenchProgress] = []

    def progress(p: BenchProgress) -> None:
        seen.append(p)
        cancel.set()  # after the first request

    settings = BenchSettings(users=[1], prompt_tokens=8, output_tokens=8, requests_per_user=20)
    with running(ttft=0.05, rate=100) as (url, _):
        report = run_bench(target(url), settings, progress=progress, cancel=cancel)
    assert report.partial and report.error == "cancelled"
    assert 1 <= report.runs[0].requests < 20 and report.runs[0].partial
    assert seen[0].done == 1 and seen[0].total == 20


def test_sweep_finds_the_most_users_that_meet_both_targets():
    # wide margins (truth: TTFT 0.05 s, RATE tok/s): a loaded machine must not move the verdicts
    settings = BenchSettings(prompt_tokens=8, output_tokens=10, requests_per_user=1)
    targets = SweepTargets(tok_s=RATE * 0.5, ttft_s=0.5, max_users=4)
    with running(ttft=0.05, rate=RATE) as (url, _):
        report = run_bench(target(url), settings, sweep=targets)
    assert report.sweep is not None
    assert report.sweep.best_users == 4 and report.sweep.broke_at is None
    assert report.sweep.tried == [1, 2, 4] and [r.users for r in report.runs] == [1, 2, 4]
    with running(ttft=0.05, rate=RATE) as (url, _):
        too_fast = SweepTargets(tok_s=RATE * 2, ttft_s=1.0, max_users=4)
        report = run_bench(target(url), settings, sweep=too_fast)
    assert report.sweep is not None and report.sweep.best_users is None
    assert report.sweep.broke_at == 1 and report.sweep.broken_by == ["tok_s"]


def test_sweep_bisects_below_the_level_that_broke():
    # Three requests at a time, like --max-num-seqs 3: a fourth user waits a whole request (0.55 s)
    # for a slot, so TTFT (0.1 s, then 0.65 s) breaks at 4 users; the ladder 1, 2, 4 breaks at 4
    # and bisecting tries 3.
    settings = BenchSettings(prompt_tokens=8, output_tokens=10, requests_per_user=1)
    targets = SweepTargets(tok_s=RATE * 0.5, ttft_s=0.35, max_users=8)
    with running(ttft=0.1, rate=RATE, max_running=3) as (url, _):
        report = run_bench(target(url), settings, sweep=targets)
    assert report.sweep is not None
    assert report.sweep.tried == [1, 2, 3, 4]
    assert report.sweep.best_users == 3 and report.sweep.broke_at == 4 and report.sweep.broken_by == ["ttft"]
    assert [r.users for r in report.runs] == [1, 2, 3, 4]
    assert ladder_of(SweepTargets(tok_s=1, ttft_s=1, max_users=20)) == [1, 2, 4, 8, 16, 20]


def test_history_appends_one_line_per_run_and_reads_back(tmp_path):
    path = tmp_path / "history.jsonl"
    settings = BenchSettings(users=[1], prompt_tokens=8, output_tokens=4, requests_per_user=1)
    with running(ttft=0.05, rate=100) as (url, _):
        first = run_bench(target(url), settings)
        second = run_bench(target(url), settings)
    append_history(first, path)
    path.open("a").write("not json\n")  # a damaged line is skipped, not fatal
    append_history(second, path)
    records = read_history(path)
    assert [r.recorded_at for r in records] == [first.finished_at, second.finished_at]
    assert records[0].key.model == "timed-model" and records[0].runs[0].users == 1
    assert previous_run(records, None, before=second.finished_at) == records[0]
    assert previous_run(records, "other-profile") is None


def test_flags_drop_the_executable_the_model_any_key_and_where_it_listens():
    argv = ["/v/bin/vllm", "serve", "/models/x", "--max-model-len", "512", "--api-key", "k", "--api-key=k2", "-tp", "2"]
    argv += ["--host", "127.0.0.1", "--port=8001"]
    assert recorded_flags(argv) == ["--max-model-len", "512", "-tp", "2"]


def test_percentile_interpolates_like_numpy():
    assert percentile([], 0.5) is None
    assert percentile([3.0], 0.95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile(list(map(float, range(101))), 0.95) == pytest.approx(95.0)


def test_progress_reports_each_request(tmp_path):
    seen: list[BenchProgress] = []
    settings = BenchSettings(users=[2], prompt_tokens=8, output_tokens=4, requests_per_user=2)
    with running(ttft=0.05, rate=100) as (url, _):
        run_bench(target(url), settings, progress=seen.append)
    wait_for(lambda: len(seen) == 5, 1, "five progress reports")
    assert [p.done for p in seen[:4]] == [1, 2, 3, 4] and seen[-1].result is not None


def test_depth_mode_reports_prompt_processing_and_generation_at_each_depth():
    """The timed server answers `ttft` after any prompt and counts a word a token: at depth d the
    prompt is d + 32 tokens, so pp = (d + 32) / TTFT, and tg is its decode rate."""
    settings = BenchSettings(prompt_tokens=32, output_tokens=OUTPUT, requests_per_user=2, depths=[0, 200])
    with running(ttft=TTFT, rate=RATE) as (url, _):
        report = run_bench(target(url), settings)
    assert [r.depth for r in report.runs] == [0, 200] and all(r.users == 1 for r in report.runs)
    for level, depth in zip(report.runs, (0, 200), strict=True):
        assert level.prompt_tokens_mean == depth + 32 and level.errors == 0
        assert close(level.pp_tok_s, (depth + 32) / TTFT), (depth, level.pp_tok_s)
        assert close(level.tg_tok_s, RATE), (depth, level.tg_tok_s)


def test_a_depth_past_the_model_length_names_the_flags():
    settings = BenchSettings(prompt_tokens=32, output_tokens=OUTPUT, depths=[0, 5000])
    with (
        running(ttft=0.05, rate=100) as (url, _),
        pytest.raises(UserError, match="--depth 5000 \\+ --prompt-tokens 32"),
    ):
        run_bench(target(url), settings)
    with pytest.raises(UserError, match="--depth 1,-1: expected token counts"):
        validate(BenchSettings(depths=[1, -1]))
