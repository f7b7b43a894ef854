"""vLLM's /metrics (Prometheus text) → a snapshot, and the figures the panel shows.

Parsing is prometheus_client's own text parser. Derived figures: KV-cache usage %, running and
waiting requests, prompt and generation tokens/s (from two snapshots' counters, as Prometheus's
rate() treats a counter reset), and TTFT p50/p95 from the histogram buckets, interpolated the way
Prometheus's histogram_quantile() does. Pure: the caller fetches the text and says when.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # new name first; 0..1
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
TTFT = "vllm:time_to_first_token_seconds"


class MetricsError(ValueError):
    """The text is not Prometheus exposition format."""


@dataclass(frozen=True)
class MetricsSnapshot:
    """Samples by sample name ("vllm:prompt_tokens_total", "…_bucket"), each a tuple of (labels, value)."""

    time: float  # when it was taken (the caller's clock, e.g. time.monotonic())
    samples: Mapping[str, tuple[tuple[Mapping[str, str], float], ...]] = field(repr=False)

    def has(self, name: str) -> bool:
        return name in self.samples

    def total(self, name: str) -> float | None:
        """Sum over every label set (several engines add up); None when absent."""
        rows = self.samples.get(name)
        if not rows:
            return None
        return math.fsum(value for _, value in rows)

    def mean(self, name: str) -> float | None:
        rows = self.samples.get(name)
        if not rows:
            return None
        return math.fsum(value for _, value in rows) / len(rows)

    def buckets(self, histogram: str) -> list[tuple[float, float]]:
        """(upper bound, cumulative count) of a histogram, summed over label sets, sorted by bound."""
        by_le: dict[float, float] = {}
        for labels, value in self.samples.get(histogram + "_bucket", ()):
            le = float(labels["le"])
            by_le[le] = by_le.get(le, 0.0) + value
        return sorted(by_le.items())


def parse_metrics(text: str, time: float, prefix: str = "vllm:") -> MetricsSnapshot:
    """Parse /metrics text. Only metrics whose name starts with `prefix` are kept ("" keeps all).

    Raises MetricsError when the text is not Prometheus text format.
    """
    if prefix:
        # drop the rest before parsing: python_*/process_*/http_* are most of the text
        keep = []
        for line in text.splitlines():
            if line.startswith(prefix) or (line.startswith("# ") and line[7:].startswith(prefix)):
                keep.append(line)
        text = "\n".join(keep) + "\n"
    samples: dict[str, list[Any]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((sample.labels, float(sample.value)))
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsError(f"not Prometheus text format: {exc}") from None
    return MetricsSnapshot(time, {name: tuple(rows) for name, rows in samples.items()})


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus's histogram_quantile over (upper bound, cumulative count) pairs, +Inf last.

    None when there are no observations (Prometheus returns NaN).
    """
    if not buckets or not math.isinf(buckets[-1][0]):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    observations = buckets[-1][1]
    if observations <= 0 or len(buckets) < 2:
        return None
    rank = q * observations
    b = next(i for i, (_, count) in enumerate(buckets) if count >= rank)
    if b == len(buckets) - 1:
        return buckets[-2][0]  # in the +Inf bucket: the highest finite bound
    if b == 0 and buckets[0][0] <= 0:
        return buckets[0][0]
    start, end, count = 0.0, buckets[b][0], buckets[b][1]
    if b > 0:
        start = buckets[b - 1][0]
        count -= buckets[b - 1][1]
        rank -= buckets[b - 1][1]
    return start + (end - start) * (rank / count)


def counter_rate(earlier: float | None, later: float | None, seconds: float) -> float | None:
    """Per-second increase; a counter that went down was reset (vLLM restarted) and counts from 0."""
    if earlier is None or later is None or seconds <= 0:
        return None
    increase = later - earlier if later >= earlier else later
    return increase / seconds


@dataclass(frozen=True)
class VllmStats:
    kv_cache_usage_pct: float | None
    running: float | None
    waiting: float | None
    prompt_tokens_per_s: float | None
    generation_tokens_per_s: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    ttft_window: str  # "interval" (since the previous snapshot) or "lifetime"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kv_cache_usage_pct": self.kv_cache_usage_pct,
            "running": self.running,
            "waiting": self.waiting,
            "prompt_tokens_per_s": self.prompt_tokens_per_s,
            "generation_tokens_per_s": self.generation_tokens_per_s,
            "ttft_p50_s": self.ttft_p50_s,
            "ttft_p95_s": self.ttft_p95_s,
            "ttft_window": self.ttft_window,
        }


def kv_cache_usage_pct(snapshot: MetricsSnapshot) -> float | None:
    for name in KV_USAGE:
        usage = snapshot.mean(name)
        if usage is not None:
            return usage * 100.0
    return None


def ttft_buckets(
    current: MetricsSnapshot, previous: MetricsSnapshot | None = None
) -> tuple[list[tuple[float, float]], str]:
    """TTFT buckets since `previous` when it saw fewer requests, else over the server's lifetime."""
    now = current.buckets(TTFT)
    if previous is not None:
        before = dict(previous.buckets(TTFT))
        delta = [(le, count - before.get(le, 0.0)) for le, count in now]
        if delta and delta[-1][1] > 0 and all(d >= 0 for _, d in delta):
            return delta, "interval"
    return now, "lifetime"


def derive(current: MetricsSnapshot, previous: MetricsSnapshot | None = None) -> VllmStats:
    """The panel's figures from one snapshot (rates need the previous one)."""
    seconds = current.time - previous.time if previous is not None else 0.0

    def rate(name: str) -> float | None:
        if previous is None:
            return None
        return counter_rate(previous.total(name), current.total(name), seconds)

    buckets, window = ttft_buckets(current, previous)
    return VllmStats(
        kv_cache_usage_pct=kv_cache_usage_pct(current),
        running=current.total(RUNNING),
        waiting=current.total(WAITING),
        prompt_tokens_per_s=rate(PROMPT_TOKENS),
        generation_tokens_per_s=rate(GENERATION_TOKENS),
        ttft_p50_s=histogram_quantile(0.50, buckets),
        ttft_p95_s=histogram_quantile(0.95, buckets),
        ttft_window=window,
    )


@dataclass(frozen=True)
class ServerTtft:
    """vLLM's own TTFT over a window: what its histogram vllm:time_to_first_token_seconds gained
    between two snapshots. vLLM observes it in the API server from the request's arrival there to
    the iteration that hands out its first token (v1/metrics/stats.py IterationStats
    update_from_output, 0.32), so the HTTP hops and the client's own loop are not in it. The mean
    is exact (_sum / _count); the percentiles are interpolated within vLLM's buckets, as
    Prometheus's histogram_quantile() does, so they are only as fine as the buckets."""

    requests: int  # first tokens the server handed out in the window (other clients' too)
    mean_s: float | None
    median_s: float | None
    p99_s: float | None
    window: str  # "interval" (between the snapshots) or "lifetime" (the server restarted between them)

    def to_ms(self) -> dict[str, Any]:
        """The figures under `vllm bench serve`'s names, prefixed server_ (ms)."""

        def ms(v: float | None) -> float | None:
            return None if v is None else round(v * 1000, 3)

        return {
            "server_ttft_requests": self.requests,
            "server_mean_ttft_ms": ms(self.mean_s),
            "server_median_ttft_ms": ms(self.median_s),
            "server_p99_ttft_ms": ms(self.p99_s),
            "server_ttft_window": self.window,
        }


def server_ttft(before: MetricsSnapshot | None, after: MetricsSnapshot) -> ServerTtft | None:
    """The server's TTFT between `before` and `after` (None when it exposes no TTFT histogram).
    A count that went down means vLLM restarted: the window is then its lifetime since."""
    count_after, sum_after = after.total(TTFT + "_count"), after.total(TTFT + "_sum")
    if count_after is None or sum_after is None:
        return None
    buckets, window = ttft_buckets(after, before)
    count, total = count_after, sum_after
    if window == "interval" and before is not None:
        count -= before.total(TTFT + "_count") or 0.0
        total -= before.total(TTFT + "_sum") or 0.0
    elif before is not None and (before.total(TTFT + "_count") or 0.0) == count_after:
        # nothing new (ttft_buckets falls back to the lifetime when the window is empty)
        return ServerTtft(0, None, None, None, "interval")
    n = round(count)
    if n <= 0:
        return ServerTtft(0, None, None, None, window)
    return ServerTtft(n, total / count, histogram_quantile(0.50, buckets), histogram_quantile(0.99, buckets), window)
